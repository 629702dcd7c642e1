"""Attaching from outside: `castscope run` with LD_PRELOAD, on Python and C++ jobs."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from castscope.events import is_probe_record

REPO = pathlib.Path(__file__).resolve().parents[2]
CASTSCOPE = [sys.executable, "-m", "castscope"]
CPP_EXAMPLE = REPO / "build" / "examples" / "autocast_mm"


def run(tmp_path, *command, env=None, out="out"):
    result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp_path / out), "--", *command], capture_output=True,
                            text=True, timeout=600, env={**os.environ, **(env or {})})
    events = {}
    for path in sorted((tmp_path / out).glob("events-*.jsonl")):
        events[path.name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return result, events


def script(tmp_path, body, name="job.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_python_job_gets_locations_identity_and_exit_code(tmp_path):
    job = script(tmp_path, """
        import sys, torch
        model = torch.nn.Linear(4, 4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(torch.randn(2, 4))  # line 5
        sys.exit(5 if y.dtype == torch.bfloat16 else 1)
    """)
    result, events = run(tmp_path, sys.executable, job, env={"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert result.returncode == 5, result.stderr
    (lines,) = events.values()
    casts = [e["cast"] for e in lines if "cast" in e]
    assert {(c["location"]["file"], c["location"]["line"]) for c in casts} == {(job, 5)}
    stats = [e["stats"] for e in lines if "stats" in e][-1]
    assert (stats["rank"], stats["local_rank"], stats["world_size"]) == (1, 1, 2)
    assert stats["pid"] != os.getpid()
    assert "1 autocast ops (0 raised), 3 cast decisions" in result.stderr


def test_process_without_torch_is_untouched(tmp_path):
    result, events = run(tmp_path, sys.executable, "-c", "import json; print(json.dumps([1]))")
    assert result.returncode == 0 and result.stdout.strip() == "[1]"
    assert events == {}


def test_child_processes_each_record_their_own_events(tmp_path):
    child = script(tmp_path, """
        import torch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(torch.randn(2, 2), torch.randn(2, 2))
    """, name="child.py")
    parent = script(tmp_path, f"""
        import subprocess, sys, torch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(torch.randn(2, 2), torch.randn(2, 2))
        subprocess.run([sys.executable, {child!r}], check=True)
    """)
    result, events = run(tmp_path, sys.executable, parent)
    assert result.returncode == 0, result.stderr
    assert len(events) == 2
    pids = {[e["stats"] for e in lines if "stats" in e][-1]["pid"] for lines in events.values()}
    assert len(pids) == 2


def test_dataloader_fork_workers_do_not_break_the_job(tmp_path):
    job = script(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=16, num_workers=2,
                          multiprocessing_context="fork")
        model = torch.nn.Linear(8, 2)
        for x, y in data:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        print("done")
    """)
    result, events = run(tmp_path, sys.executable, job)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    (lines,) = events.values()  # forked workers record nothing and share nothing
    assert sum(1 for e in lines if "op" in e and e["op"]["op"] == "aten::linear" and not is_probe_record(e["op"])) == 4


def test_invalid_policy_refuses_to_start(tmp_path):
    overlay = tmp_path / "bad.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": "fp7"}}')
    marker = tmp_path / "ran"
    result = subprocess.run([*CASTSCOPE, "run", "--overlay", str(overlay), "--out", str(tmp_path / "out"), "--",
                             sys.executable, "-c", f"open({str(marker)!r}, 'w')"], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 2
    assert 'unknown policy "fp7"' in result.stderr and "the job was not started" in result.stderr
    assert not marker.exists()


def test_the_cli_checks_the_policy_without_importing_torch(tmp_path):
    """`castscope run` reads policies with the torch-free lint library: its own
    interpreter never imports torch (importing it costs seconds)."""
    overlay = tmp_path / "bad.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": "fp7"}}')
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "castscope", "run", "--overlay", str(overlay),
                             "--out", str(tmp_path / "out"), "--", sys.executable, "-c", "pass"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2 and 'unknown policy "fp7"' in result.stderr, result.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert "castscope._policy_lint" in imported
    assert "torch" not in imported


def test_a_refusal_that_needs_the_dispatcher_stops_the_job_at_import_torch(tmp_path):
    overlay = tmp_path / "redispatch.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {\n'
                       '  "aten::norm.Scalar": {"policy": "fp32_append_dtype", "redispatch": "aten::norm.NoSuchOne"}\n}}\n')
    marker = tmp_path / "ran"
    job = script(tmp_path, f"""
        import torch
        open({str(marker)!r}, "w").close()
    """)
    result = subprocess.run([*CASTSCOPE, "run", "--overlay", str(overlay), "--out", str(tmp_path / "out"), "--",
                             sys.executable, job], capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr
    assert "the job was not started" in result.stderr and "aten::norm.NoSuchOne does not exist" in result.stderr
    assert not marker.exists()


def test_a_launchers_python_children_only_warn_about_a_missing_overlay_module(tmp_path):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "functions": {"mylib_not_here.fru": "fp32"}}')
    job = script(tmp_path, """
        import torch
        print("job ran")
    """)
    result = subprocess.run([*CASTSCOPE, "run", "--overlay", str(overlay), "--out", str(tmp_path / "out"), "--",
                             "sh", "-c", f"{sys.executable} {job}"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "job ran" in result.stdout
    assert 'warning in pid' in result.stderr and 'no module "mylib_not_here"' in result.stderr


def test_agent_built_for_another_torch_refuses_to_start(tmp_path):
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '1.13.1'\n")
    marker = tmp_path / "ran"
    result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp_path / "out"), "--", sys.executable, "-c",
                             f"open({str(marker)!r}, 'w')"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(tmp_path / "fake")})
    assert result.returncode == 2, result.stderr
    assert "built against torch 2.14.1" in result.stderr and "imports torch 1.13.1" in result.stderr
    assert not marker.exists()


@pytest.mark.skipif(not CPP_EXAMPLE.exists(), reason="examples/cpp not built (scripts/setup.sh --tests builds it)")
def test_cpp_program_produces_events(tmp_path):
    result, events = run(tmp_path, str(CPP_EXAMPLE))
    assert result.returncode == 0 and "y BFloat16, loss Float" in result.stdout, result.stderr
    (lines,) = events.values()
    casts = [e["cast"] for e in lines if "cast" in e]
    assert {c["location"]["kind"] for c in casts} == {"KIND_NONE"}
    weights = [c["cache"] for c in casts if c["op"] == "aten::mm" and c["arg_name"] == "mat2"]
    assert weights == ["CACHE_OUTCOME_MISS", "CACHE_OUTCOME_HIT", "CACHE_OUTCOME_HIT"]


# CASTSCOPE_CONFIG is read first by the preload shim (C++ programs) and by
# castscope_boot (Python): both bound it as the agent does, so a deep text
# (60 000 levels fit in one variable) is refused by name, not recursed into.
@pytest.mark.parametrize("program", ["python", "cpp"])
def test_a_deep_configuration_is_refused_by_name(tmp_path, program):
    if program == "cpp" and not CPP_EXAMPLE.exists():
        pytest.skip("examples/cpp not built (scripts/setup.sh --tests builds it)")
    command = [str(CPP_EXAMPLE)] if program == "cpp" else [
        sys.executable, "-c", "import torch; print('y BFloat16, loss Float')"]
    env = {**os.environ, "LD_PRELOAD": str(REPO / "build" / "agent" / "libcastscope_preload.so"),
           "CASTSCOPE_CONFIG": '{"policy_files": ' + "[" * 60_000 + "]" * 60_000 + "}"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0 and "y BFloat16, loss Float" in result.stdout, result.stderr  # the job runs on
    assert "CASTSCOPE_CONFIG" in result.stderr and "nested deeper than 8 levels" in result.stderr, result.stderr
    assert "castscope not attached" in result.stderr or "not attached:" in result.stderr, result.stderr


def test_stacks_on_request(tmp_path):
    job = script(tmp_path, """
        import torch

        def inner():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return torch.mm(torch.randn(2, 2), torch.randn(2, 2))  # line 6

        def outer():
            return inner()  # line 9

        outer()  # line 11
    """)
    result = subprocess.run([*CASTSCOPE, "run", "--stacks", "--out", str(tmp_path / "out"), "--", sys.executable, job],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (path,) = (tmp_path / "out").glob("events-*.jsonl")
    casts = [json.loads(line)["cast"] for line in path.read_text().splitlines() if '"cast"' in line]
    location = casts[0]["location"]
    assert (location["file"], location["line"], location["function"]) == (job, 6, "inner")
    assert location["stack"][:3] == [f"{job}:6 inner", f"{job}:9 outer", f"{job}:11 <module>"]


def test_summary_survives_a_truncated_events_file(tmp_path):
    import castscope

    path = tmp_path / "events-1.jsonl"
    good = '{"op":{"op":"aten::mm"}}\n{"stats":{"pid":1,"events_dropped":"2","internal_errors":"0"}}\n'
    path.write_text(good + '{"cast":{"op":"aten::m')  # killed mid-line
    skipped = []
    summary = castscope.summarize(castscope.iter_events(path, skipped), skipped)
    assert "1 autocast ops" in summary and "dropped events: 2" in summary
    assert f"1 unreadable lines skipped (first: {path}:3)" in summary
    with pytest.raises(castscope.EventFileError, match=r"events-1\.jsonl:3: not a castscope event"):
        castscope.read_events(path)


def test_users_own_sitecustomize_still_runs(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    marker = tmp_path / "sitecustomize-ran"
    (mine / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    job = script(tmp_path, """
        import torch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(torch.randn(2, 2), torch.randn(2, 2))
    """)
    result, events = run(tmp_path, sys.executable, job, env={"PYTHONPATH": str(mine)})
    assert result.returncode == 0, result.stderr
    assert marker.exists()
    assert len(events) == 1


def test_plain_ld_preload_attaches_a_python_job(tmp_path):
    """Without the CLI: LD_PRELOAD plus CASTSCOPE_CONFIG is enough for Python too."""
    job = script(tmp_path, """
        import torch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(torch.randn(2, 2), torch.randn(2, 2))
    """)
    config = {"policy_files": [str(REPO / "policies" / "cpu.json")], "events_path": str(tmp_path / "ev-{pid}.jsonl")}
    env = {**os.environ, "LD_PRELOAD": str(REPO / "build" / "agent" / "libcastscope_preload.so"),
           "CASTSCOPE_CONFIG": json.dumps(config)}
    env.pop("PYTHONPATH", None)
    result = subprocess.run([sys.executable, job], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    (path,) = tmp_path.glob("ev-*.jsonl")
    casts = [json.loads(line)["cast"] for line in path.read_text().splitlines() if '"cast"' in line]
    assert [(c["op"], c["location"]["file"], c["location"]["line"]) for c in casts] == [("aten::mm", job, 4)] * 2


def test_an_agent_library_without_its_frame_reader_refuses_to_attach(tmp_path):
    # Every cast would be recorded at no line: a clear refusal instead. Asked
    # for no locations, it attaches as before.
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "libcastscope_agent.so").write_bytes((REPO / "build" / "agent" / "libcastscope_agent.so").read_bytes())
    job = script(tmp_path, f"""
        import castscope, torch
        try:
            with castscope.attached(events_path={str(tmp_path / "events.jsonl")!r}):
                pass
        except castscope.AttachError as e:
            print("refused:", e)
        with castscope.attached(events_path={str(tmp_path / "plain.jsonl")!r}, locations=False):
            torch.mm(torch.ones(2, 2), torch.ones(2, 2))
        print("attached without locations")
        """)
    result = subprocess.run([sys.executable, job], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "CASTSCOPE_AGENT_LIB": str(lone / "libcastscope_agent.so")})
    assert result.returncode == 0, result.stderr
    assert "refused: castscope: libcastscope_python.so (the Python frame reader) not found beside" in result.stdout
    assert str(lone) in result.stdout and "copy it from the same build" in result.stdout
    assert not (tmp_path / "events.jsonl").exists()
    assert "attached without locations" in result.stdout and (tmp_path / "plain.jsonl").exists()


def test_attaching_into_an_existing_events_file_says_so_and_reads_its_own(tmp_path):
    """A second attach with the same events_path appends (nothing of the first
    session is lost), says so, and its handle reads its own events only."""
    job = script(tmp_path, """
        import sys
        import torch
        import castscope

        def mms(n):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for _ in range(n):
                    torch.mm(torch.randn(4, 4), torch.randn(4, 4))

        with castscope.attached(events_path=sys.argv[1], probe=False, numerics=False) as agent:
            mms(1)
            first = len(agent.casts())
        with castscope.attached(events_path=sys.argv[1], probe=False, numerics=False) as agent:
            mms(2)
            second = len(agent.casts())
        print(first, second)
    """)
    events = tmp_path / "events.jsonl"
    result = subprocess.run([sys.executable, job, str(events)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "4"]
    assert f"castscope: {events} already holds" in result.stderr and "appended after them" in result.stderr
    assert sum('"cast"' in line for line in events.read_text().splitlines()) == 6
