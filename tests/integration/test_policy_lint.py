"""libcastscope_policy_lint.so: policy files read without torch, as `castscope
run` and each job process's start-up use it."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def _lint(*files):
    """Linted in a fresh interpreter, which must not import torch for it."""
    code = ("import json, sys; from castscope._policy_lint import lint_policy_files, built_for_torch; "
            "report = lint_policy_files(sys.argv[1:]); "
            "print(json.dumps({**report, 'torch_imported': 'torch' in sys.modules, 'built_for': built_for_torch()}))")
    result = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True,
                            timeout=120, check=True)
    return json.loads(result.stdout)


def test_the_shipped_policies_lint_clean_without_torch():
    report = _lint(REPO / "policies/cpu.json", REPO / "policies/cuda.json")
    assert report["ok"] and report["errors"] == []
    assert report["ops_per_device"]["cpu"] > 100
    assert report["torch_imported"] is False
    import torch

    assert report["built_for"].split("+")[0] == torch.__version__.split("+")[0]


def test_errors_name_the_file_line_and_entry(tmp_path):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {\n  "aten::mm": "bf16"\n},\n'
                       ' "modules": {"not a path": "fp32"}}\n')
    report = _lint(REPO / "policies/cpu.json", overlay)
    assert not report["ok"]
    assert any(e.startswith(f'{overlay}:2: entry "aten::mm": unknown policy "bf16"') for e in report["errors"])
    assert any(str(overlay) in e and "not a path" in e for e in report["errors"])


def test_a_missing_file_and_a_bad_request_are_refused_clearly(tmp_path):
    report = _lint(tmp_path / "absent.json")
    assert not report["ok"] and str(tmp_path / "absent.json") in report["errors"][0]
    assert _lint()["errors"] == ['castscope policy lint: "policy_files" is empty']


def test_the_overlays_callables_come_back_for_the_module_lookup(tmp_path):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu",\n "functions": {"mylib.fru": "fp32"}}\n')
    report = _lint(REPO / "policies/cpu.json", overlay)
    assert report["ok"]
    [entry] = report["callable_overlays"]
    assert (entry["target"], entry["kind"], entry["file"], entry["line"]) == ("mylib.fru", "function", str(overlay), 2)
