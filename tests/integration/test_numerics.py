"""Numerics at the cast (docs/numerics.md): cast-overflow, cast-underflow,
nonfinite-output and scaler-skips raised at the user's line with the counts
the job itself sees, their twins silent, outputs bit-identical with the
checks on. Real torch on the CPU (CPU autocast takes float16, and
torch.amp.GradScaler("cpu") exists)."""
import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest
import torch

import helpers

REPO = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = pathlib.Path(__file__).parent / "scenarios"
SCHEMA = json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text())
NUMERICS_KINDS = {"cast-overflow", "cast-underflow", "nonfinite-output", "scaler-skips"}


def run(tmp_path, script: str, *args: str) -> tuple[dict, str]:
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", str(out), "--", sys.executable,
                             str(SCENARIOS / script), *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    # Numerics summaries are stored events: `castscope run` counts them as stored, never as lost.
    assert report["totals"]["accounting"]["complete"], result.stderr
    assert "numerics summaries stored" in result.stderr, result.stderr
    assert "not stored" not in result.stderr, result.stderr
    return report, result.stdout


def line_of(script: str, marker: str) -> int:
    return helpers.line_of(SCENARIOS / script, marker)


def of_kind(report: dict, kind: str) -> list[dict]:
    return [f for f in report["findings"] if f["kind"] == kind]


def test_an_activation_past_float16s_range_is_cast_overflow_at_its_line_and_argument(tmp_path):
    report, _ = run(tmp_path, "cast_numerics.py", "overflow")
    [finding] = of_kind(report, "cast-overflow")
    assert finding["severity"] == "error"
    [site] = finding["sites"]
    assert (site["file"], site["line"], site["op"], site["arg"]) == (
        str(SCENARIOS / "cast_numerics.py"), line_of("cast_numerics.py", "the overflowing line"), "aten::mm", "self")
    evidence = finding["evidence"]
    # Three of x's 32 values are 1e5 in every cast the windows checked.
    assert evidence["casts_checked"] >= 1
    assert evidence["overflowed"] == 3 * evidence["casts_checked"]
    assert evidence["values"] == 32 * evidence["casts_checked"]
    assert evidence["max_abs_log2"] == 16  # 1e5 lies in [2^16, 2^17)
    assert evidence["overlay"]["ops"] == {"aten::mm": "fp32"}
    assert f"{evidence['overflowed']} of {evidence['values']} values of `self` became inf" in finding["summary"]
    # Natively the output holds inf as well: castscope reports, it changes nothing.
    x = torch.ones(4, 8)
    x[0, :3] = 1e5
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.mm(x, torch.ones(8, 8)).isinf().any()


def test_an_epsilon_cast_into_float16_is_cast_underflow(tmp_path):
    report, _ = run(tmp_path, "cast_numerics.py", "underflow")
    [finding] = of_kind(report, "cast-underflow")
    assert finding["severity"] == "warning"
    [site] = finding["sites"]
    assert (site["line"], site["op"], site["arg"]) == (line_of("cast_numerics.py", "the epsilon line"), "aten::addmm",
                                                       "self")
    assert finding["evidence"]["underflowed"] == finding["evidence"]["values"] > 0


@pytest.mark.parametrize("case", ["in-range", "bfloat16"])
def test_twins_in_range_and_in_bfloat16_raise_nothing_above_info(tmp_path, case):
    report, _ = run(tmp_path, "cast_numerics.py", case)
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert not [f for f in report["findings"] if f["kind"] in NUMERICS_KINDS]


def test_gradscaler_skips_are_counted_as_gradscaler_reports_them_with_the_first_nonfinite_op(tmp_path):
    report, stdout = run(tmp_path, "scaler_skips.py", "spikes")
    skipped, steps = (int(word) for word in stdout.split()[1::2][:2])  # "skipped N of M"
    assert skipped == 5
    [finding] = of_kind(report, "scaler-skips")
    assert finding["severity"] == "warning"
    assert (finding["evidence"]["skipped"], finding["evidence"]["updates"]) == (skipped, steps)
    layer = line_of("scaler_skips.py", "the overflowing layer")
    first = finding["evidence"]["first_nonfinite"]
    assert (first["kind"], first["site"]["line"], first["site"]["op"]) == ("op_output", layer, "aten::linear")
    assert (finding["sites"][0]["line"], finding["sites"][1]["line"]) == (layer, line_of("scaler_skips.py",
                                                                                          "the update line"))
    scales = [point["scale"] for point in finding["evidence"]["scale_path"]]
    assert scales[0] == 256 and scales == sorted(scales, reverse=True) and len(scales) == skipped + 1
    [output] = of_kind(report, "nonfinite-output")
    assert (output["severity"], output["sites"][0]["line"]) == ("error", layer)


def test_a_calm_gradscaler_loop_raises_nothing_above_info(tmp_path):
    report, stdout = run(tmp_path, "scaler_skips.py", "calm")
    assert stdout.strip() == "skipped 0 of 40"
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert not [f for f in report["findings"] if f["kind"] in NUMERICS_KINDS]


def test_outputs_and_gradients_stay_bit_identical_with_numerics_windows_open(tmp_path):
    result = subprocess.run([sys.executable, str(SCENARIOS / "numerics_parity.py"), str(tmp_path / "events.jsonl")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    for dtype in ("torch.float16", "torch.bfloat16"):
        assert outcome[dtype]["identical"] and outcome[dtype]["tensors"] == 30, outcome
        assert outcome[dtype]["checked"] > 0, outcome  # the checks ran: the window was open throughout


def test_numerics_off_records_no_numerics(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--no-numerics", "--out", str(out), "--",
                             sys.executable, str(SCENARIOS / "cast_numerics.py"), "overflow"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert not of_kind(report, "cast-overflow")
    events = [json.loads(line) for f in out.glob("events-*.jsonl") for line in f.read_text().splitlines()]
    assert not [e for e in events if "numerics" in e]
