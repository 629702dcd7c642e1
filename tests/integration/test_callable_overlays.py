"""Module and function overlays: Python callables autocast cannot see, cast
as configured without a code change (docs/overlays.md). Real torch and
torchvision on the CPU; results compared bit for bit with the fix a user
would write by hand."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torchvision

import castscope
import helpers

THIS_FILE = str(pathlib.Path(__file__).resolve())
REPO = pathlib.Path(__file__).resolve().parents[2]


def line_of(marker: str) -> int:
    return helpers.line_of(pathlib.Path(THIS_FILE), f"# {marker}")


def _overlay(tmp_path, name="overlay.json", **sections):
    path = tmp_path / name
    path.write_text(json.dumps({"castscope_policy": 1, **sections}, indent=2))
    return str(path)


@pytest.fixture
def mylib(tmp_path, monkeypatch):
    """A small user library, importable but not imported yet."""
    package = tmp_path / "mylib_pkg" / "mylib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "backend.py").write_text(textwrap.dedent("""\
        import torch

        def fru(a, b, scale=1.0):
            # natively under autocast: mm in lower precision, the rest as it comes
            return torch.mm(a, b) * scale + b.sum()

        def pair(a, b):
            return torch.mm(a, b), a + 1

        class Helper:
            def scaled(self, a, b):
                return torch.mm(a, b)

            @staticmethod
            def static_scaled(a, b):
                return torch.mm(a, b)

        def first_of(pair):
            return torch.mm(pair.x, pair.x)
        """))
    monkeypatch.syspath_prepend(str(tmp_path / "mylib_pkg"))
    yield "mylib.backend"
    for name in [m for m in sys.modules if m == "mylib" or m.startswith("mylib.")]:
        del sys.modules[name]


def _roi_inputs():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    image = torch.randn(1, 3, 16, 16)
    rois = torch.tensor([[0, 1.0, 1.0, 9.0, 9.0], [0, 4.0, 2.0, 14.0, 12.0]])
    return conv, image, rois


def test_roi_pool_module_overlay_runs_in_fp32_like_the_manual_fix(tmp_path):
    conv, image, rois = _roi_inputs()
    pool = torchvision.ops.RoIPool(output_size=3, spatial_scale=1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="same type as rois"):
        pool(conv(image), rois)  # natively: a bf16 activation meets fp32 boxes

    # The fix a user writes by hand.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = conv(image)
        with torch.autocast("cpu", enabled=False):
            manual = pool(features.float(), rois.float())
    manual.sum().backward()
    manual_grad = conv.weight.grad.clone()
    conv.weight.grad = None

    overlay = _overlay(tmp_path, modules={"torchvision.ops.RoIPool": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            features = conv(image)
            out = pool(features, rois)  # roi-pool-call
        out.sum().backward()
        casts = [c for c in agent.casts() if c["op"] == "module::torchvision.ops.RoIPool"]
    assert out.dtype == torch.float32
    assert torch.equal(out, manual)
    assert torch.equal(conv.weight.grad, manual_grad)
    assert [(c["arg_name"], c["src_dtype"], c["dst_dtype"], c["outcome"], c["role"], c["policy"]) for c in casts] == [
        ("input", "DTYPE_BFLOAT16", "DTYPE_FLOAT32", "CAST_OUTCOME_CAST", "ROLE_ACTIVATION", "CAST_POLICY_FP32"),
        ("rois", "DTYPE_FLOAT32", "DTYPE_FLOAT32", "CAST_OUTCOME_ALREADY_TARGET", "ROLE_INPUT", "CAST_POLICY_FP32")]
    for c in casts:
        assert (c["location"]["file"], c["location"]["line"]) == (THIS_FILE, line_of("roi-pool-call"))
    assert casts[0]["shape"] == ["1", "4", "16", "16"]  # int64 in proto JSON
    # Detached: the class is as it was.
    assert torchvision.ops.RoIPool.forward.__name__ == "forward"
    assert not hasattr(torchvision.ops.RoIPool.forward, "_castscope_overlay")


def test_module_overlay_output_back_to_the_input_dtype(tmp_path):
    conv, image, rois = _roi_inputs()
    pool = torchvision.ops.RoIPool(output_size=3, spatial_scale=1.0)
    overlay = _overlay(tmp_path, modules={"torchvision.ops.RoIPool": {"policy": "fp32", "output": "input_dtype"}})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            features = conv(image)
            out = pool(features, rois)
        casts = [c for c in agent.casts() if c["op"] == "module::torchvision.ops.RoIPool"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = conv(image)
        with torch.autocast("cpu", enabled=False):
            manual = pool(features.float(), rois).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, manual)
    assert [(c["arg_name"], c["dst_dtype"]) for c in casts][-1] == ("output", "DTYPE_BFLOAT16")


def test_module_overlay_outside_autocast_calls_straight_through(tmp_path):
    conv, image, rois = _roi_inputs()
    pool = torchvision.ops.RoIPool(output_size=3, spatial_scale=1.0)
    overlay = _overlay(tmp_path, modules={"torchvision.ops.RoIPool": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        out = pool(conv(image).double(), rois.double())
        casts = [c for c in agent.casts() if c["op"].startswith("module::")]
    assert out.dtype == torch.float64 and casts == []


def test_function_overlay_reproduces_apex_float_function(tmp_path, mylib):
    """apex.amp.float_function: the arguments cast to float32, the function
    run in float32. Registered before the module is imported: wrapped on import."""
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    overlay = _overlay(tmp_path, functions={"mylib.backend.fru": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        assert "mylib.backend" not in sys.modules
        import mylib.backend

        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = a.bfloat16()
            out = mylib.backend.fru(half, b, scale=2.0)  # fru-call
        casts = [c for c in agent.casts() if c["op"] == "function::mylib.backend.fru"]
        natively_wrapped = mylib.backend.fru
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", enabled=False):
            manual = mylib.backend.fru(half.float(), b.float(), scale=2.0)
        native = mylib.backend.fru(half, b, scale=2.0)
    assert out.dtype == torch.float32 and torch.equal(out, manual)
    assert native.dtype == torch.bfloat16  # what the overlay prevents: mm in bf16
    assert [(c["arg_name"], c["outcome"]) for c in casts] == [("a", "CAST_OUTCOME_CAST"),
                                                             ("b", "CAST_OUTCOME_ALREADY_TARGET")]
    assert {(c["location"]["file"], c["location"]["line"]) for c in casts} == {(THIS_FILE, line_of("fru-call"))}
    assert hasattr(natively_wrapped, "_castscope_overlay") and not hasattr(mylib.backend.fru, "_castscope_overlay")


def test_lower_precision_and_promote_function_overlays(tmp_path, mylib):
    import mylib.backend  # imported before attach: wrapped at attach

    a, b = torch.randn(8, 8), torch.randn(8, 8, dtype=torch.float64)
    overlay = _overlay(tmp_path, functions={"mylib.backend.fru": {"policy": "lower_precision_fp", "dtype": "float16"},
                                            "mylib.backend.pair": "promote"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = mylib.backend.fru(a, b.float())
            promoted = mylib.backend.pair(a.bfloat16(), b.float())
        casts = [c for c in agent.casts() if c["op"].startswith("function::")]
    with torch.autocast("cpu", enabled=False):
        assert torch.equal(low, mylib.backend.fru(a.half(), b.float().half()))
        assert all(torch.equal(x, y) for x, y in zip(promoted, mylib.backend.pair(a.bfloat16().float(), b.float())))
    assert low.dtype == torch.float16
    assert [(c["op"], c["arg_name"], c["dst_dtype"]) for c in casts] == [
        ("function::mylib.backend.fru", "a", "DTYPE_FLOAT16"), ("function::mylib.backend.fru", "b", "DTYPE_FLOAT16"),
        ("function::mylib.backend.pair", "a", "DTYPE_FLOAT32"), ("function::mylib.backend.pair", "b", "DTYPE_FLOAT32")]


def test_a_colon_names_an_attribute_of_an_attribute(tmp_path, mylib):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    overlay = _overlay(tmp_path, functions={"mylib.backend:Helper.scaled": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        import mylib.backend

        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = mylib.backend.Helper().scaled(a, b)
        casts = [c for c in agent.casts() if c["op"] == "function::mylib.backend:Helper.scaled"]
    assert out.dtype == torch.float32 and torch.equal(out, torch.mm(a, b))
    assert [c["arg_name"] for c in casts] == ["a", "b"]


def test_missing_attribute_when_imported_is_an_error_counted_and_skipped(tmp_path, mylib):
    overlay = _overlay(tmp_path, functions={"mylib.backend.fruu": "fp32", "mylib.backend.fru": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        import mylib.backend

        errors = agent.status()["overlay_errors"]
        assert hasattr(mylib.backend.fru, "_castscope_overlay")  # the good entry still applies
        stats = [e["stats"] for e in agent.events() if "stats" in e]
    assert len(errors) == 1
    assert errors[0].startswith(f'{overlay}:') and 'entry "mylib.backend.fruu"' in errors[0]
    assert "has no attribute 'fruu'" in errors[0] and "skipped" in errors[0]
    assert stats[-1]["overlay_errors"] == errors


def test_a_module_entry_that_is_not_a_module_class_is_an_error(tmp_path, mylib):
    overlay = _overlay(tmp_path, modules={"mylib.backend.fru": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        import mylib.backend  # noqa: F401

        errors = agent.status()["overlay_errors"]
    assert len(errors) == 1 and "is not an nn.Module class" in errors[0]


def test_unknown_module_is_refused_at_attach_with_file_line_and_entry(tmp_path):
    overlay = _overlay(tmp_path, modules={"torchvision.opz.RoIPool": "fp32"})
    with pytest.raises(castscope.AttachError) as refused:
        castscope.attach(overlays=[overlay], events_path=tmp_path / "events.jsonl")
    message = str(refused.value)
    assert f'{overlay}:4: entry "torchvision.opz.RoIPool"' in message and "no module" in message
    assert "torchvision.opz" not in sys.modules
    with torch.autocast("cpu", dtype=torch.bfloat16):  # native autocast untouched
        assert torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype == torch.bfloat16


def test_the_policy_hash_covers_callable_overlays(tmp_path):
    with castscope.attached(events_path=tmp_path / "a.jsonl") as agent:
        plain = agent.status()["policy_hash"]
    overlay = _overlay(tmp_path, modules={"torchvision.ops.RoIPool": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "b.jsonl") as agent:
        with_overlay = agent.status()["policy_hash"]
    assert plain != with_overlay


def test_castscope_run_refuses_an_unknown_module_before_the_job_starts(tmp_path):
    overlay = _overlay(tmp_path, functions={"mylib_that_is_not_there.fru": "fp32"})
    marker = tmp_path / "job-ran"
    job = tmp_path / "job.py"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    run = subprocess.run([str(REPO / ".venv/bin/castscope"), "run", "--overlay", overlay, "--out", str(tmp_path / "out"),
                          "--", sys.executable, str(job)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO / "agent/python")})
    assert run.returncode == 2, run.stderr
    assert "the job was not started" in run.stderr
    assert f'{overlay}:4: entry "mylib_that_is_not_there.fru"' in run.stderr
    assert not marker.exists()


def test_castscope_run_applies_a_module_overlay_without_a_code_change(tmp_path):
    """The job is the forum's case as written: RoIPool on a bf16 activation fails natively."""
    job = tmp_path / "roi_job.py"
    job.write_text(textwrap.dedent("""\
        import torch, torchvision
        conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        pool = torchvision.ops.RoIPool(output_size=3, spatial_scale=1.0)
        rois = torch.tensor([[0, 1.0, 1.0, 9.0, 9.0]])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = pool(conv(torch.randn(1, 3, 16, 16)), rois)
        print("dtype", out.dtype)
        """))
    env = {**os.environ, "PYTHONPATH": str(REPO / "agent/python")}
    native = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=300, env=env)
    assert native.returncode != 0 and "same type as rois" in native.stderr
    overlay = _overlay(tmp_path, modules={"torchvision.ops.RoIPool": "fp32"})
    out = tmp_path / "out"
    run = subprocess.run([str(REPO / ".venv/bin/castscope"), "run", "--overlay", overlay, "--out", str(out), "--",
                          sys.executable, str(job)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert "dtype torch.float32" in run.stdout
    casts = [json.loads(line)["cast"] for path in out.glob("events-*.jsonl") for line in path.read_text().splitlines()
             if '"cast"' in line]
    pool_casts = [c for c in casts if c["op"] == "module::torchvision.ops.RoIPool"]
    assert [(c["arg_name"], c["outcome"]) for c in pool_casts] == [("input", "CAST_OUTCOME_CAST"),
                                                                  ("rois", "CAST_OUTCOME_ALREADY_TARGET")]
    assert {(c["location"]["file"], c["location"]["line"]) for c in pool_casts} == {(str(job), 6)}


def test_policy_check_looks_up_the_overlays_modules(tmp_path):
    good = _overlay(tmp_path, "good.json", modules={"torchvision.ops.RoIPool": "fp32"})
    bad = _overlay(tmp_path, "bad.json", functions={"torchvisio.ops.roi_pool": "fp32"})
    assert castscope.policy_check(overlays=[good])["ok"]
    report = castscope.policy_check(overlays=[bad])
    assert not report["ok"]
    assert any(e.startswith(f'{bad}:4: entry "torchvisio.ops.roi_pool": no module "torchvisio.ops"')
               for e in report["errors"])
    assert [c["target"] for c in report["callable_overlays"]] == ["torchvisio.ops.roi_pool"]


def test_the_report_lists_overlay_errors(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("import torch, torchvision\nprint('ran')\n")
    overlay = _overlay(tmp_path, functions={"torchvision.ops.roi_pooll": "fp32"})
    out = tmp_path / "out"
    run = subprocess.run([str(REPO / ".venv/bin/castscope"), "run", "--overlay", overlay, "--out", str(out), "--",
                          sys.executable, str(job)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO / "agent/python")})
    assert run.returncode == 0, run.stderr
    expected = f'{overlay}:4: entry "torchvision.ops.roi_pooll": torchvision.ops has no attribute \'roi_pooll\''
    assert expected in run.stderr  # logged by the job
    assert "OVERLAY ERRORS: 1 module or function overlay entries skipped" in run.stderr  # the summary
    report = json.loads((out / "report.json").read_text())
    [agent] = report["run"]["agents"]
    assert len(agent["overlay_errors"]) == 1 and agent["overlay_errors"][0].startswith(expected)


def test_wrappers_never_break_a_call(tmp_path, mylib):
    """Namedtuples (PackedSequence...) are left as they are; tensors of a
    device without autocast go straight through; detach turns off a wrapper
    someone kept."""
    import collections

    overlay = _overlay(tmp_path, functions={"mylib.backend.first_of": "fp32", "mylib.backend.fru": "fp32"})
    Pair = collections.namedtuple("Pair", "x")
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl"):
        import mylib.backend

        kept = mylib.backend.fru
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = mylib.backend.first_of(Pair(torch.randn(4, 4)))
            assert out.dtype == torch.bfloat16  # the namedtuple's tensor was not cast: autocast's mm did its own
        meta = mylib.backend.fru(torch.empty(4, 4, device="meta"), torch.empty(4, 4, device="meta"))
        assert meta.device.type == "meta"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert kept(torch.randn(4, 4), torch.randn(4, 4)).dtype == torch.bfloat16  # detached: no overlay


def test_staticmethods_classes_and_duplicates(tmp_path, mylib):
    overlay = _overlay(tmp_path, functions={"mylib.backend:Helper.static_scaled": "fp32", "mylib.backend.Helper": "fp32",
                                            "mylib.backend.fru": "fp32", "mylib.backend:fru": "lower_precision_fp"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        import mylib.backend

        with torch.autocast("cpu", dtype=torch.bfloat16):
            a, b = torch.randn(4, 4), torch.randn(4, 4)
            assert mylib.backend.Helper.static_scaled(a, b).dtype == torch.float32
            assert mylib.backend.Helper().static_scaled(a, b).dtype == torch.float32
        errors = agent.status()["overlay_errors"]
    assert isinstance(mylib.backend.Helper.__dict__["static_scaled"], staticmethod)  # restored as it was
    assert len(errors) == 2
    assert any('entry "mylib.backend.Helper": mylib.backend.Helper is a class, not a function' in e for e in errors)
    assert any("the same callable is already wrapped by entry" in e for e in errors)


def test_castscope_run_wraps_a_module_that_imports_torch_beside_the_script(tmp_path):
    """castscope run attaches while the job's first import (which imports
    torch) is still running; the package sits beside the script."""
    job_dir = tmp_path / "job"
    (job_dir / "mylib3").mkdir(parents=True)
    (job_dir / "mylib3" / "__init__.py").write_text("")
    (job_dir / "mylib3" / "ops.py").write_text("import torch\n\ndef fru(a, b):\n    return torch.mm(a, b)\n")
    (job_dir / "train.py").write_text(textwrap.dedent("""\
        from mylib3.ops import fru
        import mylib3.ops
        import torch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = mylib3.ops.fru(torch.randn(4, 4), torch.randn(4, 4))
        print("dtype", out.dtype)
        """))
    overlay = _overlay(tmp_path, functions={"mylib3.ops.fru": "fp32"})
    out = tmp_path / "out"
    run = subprocess.run([str(REPO / ".venv/bin/castscope"), "run", "--overlay", overlay, "--out", str(out), "--",
                          sys.executable, str(job_dir / "train.py")], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO / "agent/python")})
    assert run.returncode == 0, run.stderr
    assert "dtype torch.float32" in run.stdout, run.stderr


def test_castscope_run_wraps_every_entry_of_a_big_overlay(tmp_path):
    """3000 functions of a module that imports torch beside the script: the
    entries (with their file and line, far over Linux's 128 KiB for one
    argument) reach the job's interpreter for the module look-up, and all of
    them wait for the import and are wrapped after it."""
    job_dir = tmp_path / "job"
    (job_dir / "biglib").mkdir(parents=True)
    (job_dir / "biglib" / "__init__.py").write_text("")
    count = 3000
    (job_dir / "biglib" / "ops.py").write_text(
        "import torch\n" + "".join(f"def f{i}(a):\n    return torch.mm(a, a)\n" for i in range(count)))
    (job_dir / "train.py").write_text(textwrap.dedent(f"""\
        import biglib.ops
        import torch
        wrapped = [i for i in range({count}) if hasattr(getattr(biglib.ops, f"f{{i}}"), "_castscope_overlay")]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = biglib.ops.f{count - 1}(torch.randn(4, 4))
        print("wrapped", len(wrapped), "dtype", out.dtype)
        """))
    overlay = _overlay(tmp_path, functions={f"biglib.ops.f{i}": "fp32" for i in range(count)})
    run = subprocess.run([str(REPO / ".venv/bin/castscope"), "run", "--no-probe", "--overlay", overlay, "--out",
                          str(tmp_path / "out"), "--", sys.executable, str(job_dir / "train.py")], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO / "agent/python")})
    assert run.returncode == 0, run.stderr
    assert f"wrapped {count} dtype torch.float32" in run.stdout, run.stderr
