"""`castscope policy check` as a user runs it: a real subprocess."""
import subprocess
import sys

import pytest


def _castscope(*args):
    return subprocess.run([sys.executable, "-m", "castscope", *args], capture_output=True, text=True, timeout=300)


def test_shipped_policies_pass():
    result = _castscope("policy", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "castscope policy check: OK (cpu: 126 ops" in result.stdout


def test_refused_overlay_names_file_line_entry(tmp_path):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {\n  "aten::mm": "bf16"\n}}\n')
    result = _castscope("policy", "check", "--overlay", str(overlay))
    assert result.returncode == 1
    assert f'error: {overlay}:2: entry "aten::mm": unknown policy "bf16"' in result.stdout
    assert "REFUSED" in result.stdout


@pytest.mark.parametrize("imports,expect_unknown", [([], True), (["--import", "torchvision"], False)])
def test_third_party_ops_resolve_after_import(tmp_path, imports, expect_unknown):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {"torchvision::roi_pool": "fp32"}}')
    result = _castscope("policy", "check", "--policy", str(overlay), *imports)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("unknown_op" in result.stdout and "torchvision::roi_pool" in result.stdout) == expect_unknown, result.stdout


def test_bad_arguments_exit_2():
    assert _castscope("policy", "frobnicate").returncode == 2
    assert _castscope("policy", "check", "--import", "no_such_module_xyz").returncode == 2
