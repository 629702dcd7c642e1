"""A refused policy names file, line and entry, and native autocast keeps working."""
import os
import re
import subprocess
import sys

import pytest
import torch

import castscope

BASE = '{\n  "castscope_policy": 1,\n  "device": "cpu",\n  "ops": {\n'

CASES = {
    "bad_json": (BASE + '    "aten::mm": "fp32",\n    "aten::bmm" "fp32"\n  }\n}\n', r"overlay\.json:6: not valid JSON"),
    "unknown_policy": (BASE + '    "aten::mm": "fp32",\n    "aten::bmm": "fp8"\n  }\n}\n',
                       r'overlay\.json:6: entry "aten::bmm": unknown policy "fp8"'),
    "unknown_dtype": (BASE + '    "mylib::op": {"policy": "lower_precision_fp", "dtype": "half"}\n  }\n}\n',
                      r'overlay\.json:5: entry "mylib::op": unknown dtype "half"'),
    "duplicate_entry": (BASE + '    "aten::mm": "fp32",\n    "aten::mm": "promote"\n  }\n}\n',
                        r'overlay\.json:6: entry "aten::mm": duplicate entry \(first at line 5\)'),
    # JSON reads "aten::m\u006d" as "aten::mm": the same entry twice.
    "duplicate_entry_escaped": (BASE + '    "aten::mm": "fp32",\n    "aten::m\\u006d": "promote"\n  }\n}\n',
                                r'overlay\.json:6: entry "aten::mm": duplicate entry \(first at line 5 as "aten::mm"; '
                                r'JSON reads "aten::m\\u006d" as the same key\)'),
    "duplicate_ops_object": ('{\n  "castscope_policy": 1,\n  "device": "cpu",\n  "ops": {"aten::mm": "fp32"},\n'
                             '  "ops": {"aten::bmm": "promote"}\n}\n',
                             r'overlay\.json:5: duplicate top-level key "ops" \(first at line 4\)'),
    "missing_redispatch_key": (BASE + '    "aten::norm.Scalar": "fp32_append_dtype"\n  }\n}\n',
                               r'overlay\.json:5: entry "aten::norm.Scalar": fp32_append_dtype needs "redispatch"'),
    "redispatch_overload_missing": (
        BASE + '    "aten::norm.Scalar": {"policy": "fp32_append_dtype", "redispatch": "aten::norm.no_such_overload"}\n  }\n}\n',
        r"overlay\.json:5: aten::norm\.Scalar: redispatch overload aten::norm\.no_such_overload does not exist"),
}


def _native_mm_kernel_is_torchs():
    dump = torch._C._dispatch_dump("aten::mm")
    line = next(l for l in dump.splitlines() if l.startswith("AutocastCPU"))
    return "autocast_mode.cpp" in line


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_with_location_and_native_autocast_still_works(tmp_path, case):
    text, expected = CASES[case]
    overlay = tmp_path / "overlay.json"
    overlay.write_text(text)
    with pytest.raises(castscope.AttachError) as refused:
        castscope.attach(overlays=[str(overlay)], events_path=tmp_path / "events.jsonl")
    message = str(refused.value)
    assert "native autocast keeps working" in message or "native autocast stays in place" in message
    assert re.search(expected, message), message

    assert _native_mm_kernel_is_torchs()
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = torch.mm(a, b)
    assert out.dtype == torch.bfloat16 and torch.equal(out, torch.mm(a.bfloat16(), b.bfloat16()))
    # A later, valid attach works: the refused one left nothing behind.
    with castscope.attached(events_path=tmp_path / "ok.jsonl"):
        assert not _native_mm_kernel_is_torchs()
    assert _native_mm_kernel_is_torchs()


def test_directory_as_overlay_is_named_a_directory(tmp_path):
    folder = tmp_path / "policies.json"
    folder.mkdir()
    with pytest.raises(castscope.AttachError, match=r"policies\.json: is a directory, not a policy file"):
        castscope.attach(overlays=[str(folder)])
    report = castscope.policy_check(overlays=[str(folder)])
    assert not report["ok"] and any("is a directory" in e for e in report["errors"]), report["errors"]


def _overlay_command(entry: str, overlay, tmp_path) -> list[str]:
    """The command that reads `overlay` through one entry point: `castscope policy
    check`, `castscope.attach()` (exit 1 with the error printed), or `castscope run`
    (whose job, never started if the overlay is refused, would write `started`)."""
    castscope_cli = [sys.executable, "-m", "castscope"]
    return {
        "policy_check": [*castscope_cli, "policy", "check", "--overlay", str(overlay)],
        "attach": [sys.executable, "-c", "import sys, torch, castscope\n"
                   "try:\n    castscope.attach(overlays=[sys.argv[1]])\n"
                   "except castscope.AttachError as e:\n    print(e)\n    sys.exit(1)\n", str(overlay)],
        "run": [*castscope_cli, "run", "--out", str(tmp_path / "out"), "--overlay", str(overlay), "--",
                sys.executable, "-c", "open('started', 'w')"],
    }[entry]


# A FIFO has no writer here: opening it for reading would wait forever, so
# each entry point runs in its own process (the timeout only keeps a
# regression from hanging the suite).
@pytest.mark.parametrize("entry", ["policy_check", "attach", "run"])
def test_fifo_as_overlay_is_refused_without_blocking(tmp_path, entry):
    fifo = tmp_path / "overlay.json"
    os.mkfifo(fifo)
    result = subprocess.run(_overlay_command(entry, fifo, tmp_path), capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == (2 if entry == "run" else 1), result.stdout + result.stderr
    assert f"{fifo}: is a FIFO, not a policy file" in result.stdout + result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "started").exists()


def _limit_memory():
    """8 GiB of address space (importing torch maps 3.2 GiB here): the old parser grew past it in seconds
    on the deep file below, where the machine would have let it take everything."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


# 200 000 nested arrays (400 KB) grew `castscope run` to 7.4 GB in 6 s with
# no word; under a memory limit it died with "std::bad_alloc" naming no file,
# and `castscope policy check` with a traceback. Every entry point refuses it
# at once, naming file, line and why; a file over the size limit likewise.
@pytest.mark.parametrize("entry", ["policy_check", "attach", "run"])
@pytest.mark.parametrize("shape", ["deep", "huge"])
def test_deep_or_huge_overlay_is_refused_naming_file_and_why(tmp_path, entry, shape):
    overlay = tmp_path / "overlay.json"
    if shape == "deep":
        overlay.write_text('{"castscope_policy": 1, "device": "cpu",\n"ops": ' + "[" * 200_000 + "]" * 200_000 + "}")
        expected = f"{overlay}:2: nested deeper than 32 levels of arrays and objects"
    else:
        overlay.write_text('{"castscope_policy": 1, "device": "cpu", "description": "' + "x" * (5 << 20) +
                           '", "ops": {}}')
        expected = f"{overlay}: is larger than 4 MiB; castscope reads policy files of at most that size"
    result = subprocess.run(_overlay_command(entry, overlay, tmp_path), capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, preexec_fn=_limit_memory)
    assert result.returncode == (2 if entry == "run" else 1), result.stdout + result.stderr
    assert expected in result.stdout + result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "bad_alloc" not in result.stderr, result.stderr
    assert not (tmp_path / "started").exists()


def test_unreadable_policy_file_is_refused(tmp_path):
    with pytest.raises(castscope.AttachError, match=r"nope\.json: cannot read the policy file"):
        castscope.attach(overlays=[str(tmp_path / "nope.json")])


def test_policy_check_reports_drift(tmp_path):
    stale = tmp_path / "stale.json"
    stale.write_text(BASE + '    "aten::mm": "lower_precision_fp",\n    "aten::cholesky": "fp32"\n  }\n}\n')
    report = castscope.policy_check(policy_files=[str(stale)])
    by_kind = {}
    for finding in report["findings"]:
        by_kind.setdefault(finding["kind"], set()).add(finding["op"])
    assert "aten::cholesky" in by_kind["unknown_op"]
    assert "aten::bmm" in by_kind["missing_policy"]  # native kernel, no entry in this file
    assert report["ok"]  # warnings only


def test_shipped_cpu_policy_matches_this_torch():
    report = castscope.policy_check(policy_files=castscope.default_policy_files(["cpu", "cuda", "xpu", "mps"]))
    aten = [f for f in report["findings"] if f["op"].startswith("aten::")]
    assert report["ok"] and not report["errors"] and not aten, aten
