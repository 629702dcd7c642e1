"""Casts inserted by JIT autocast are reported at the line of the op that
consumes them: real torch under `castscope run`, the scenario's scripted
`h = torch.mm(a, b); g = h + h; return g * h` under eager bf16 autocast,
with and without grad (a DifferentiableGraph in the grad case)."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from castscope.events import read_events
import helpers

SCENARIO = pathlib.Path(__file__).parent / "scenarios" / "jit_inserted_casts.py"
REDUCED = "aten::_autocast_to_reduced_precision"
FULL = "aten::_autocast_to_full_precision"
CALLS = 3  # the scenario's calls of the scripted function


def line_of(marker: str) -> int:
    return helpers.line_of(SCENARIO, marker)


def run_scenario(tmp_path, mode: str) -> tuple[list[dict], dict]:
    """The scenario's cast events in the order they ran, and its report."""
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", str(out), "--", sys.executable,
                             str(SCENARIO), mode], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"{mode} eager torch.bfloat16 scripted torch.float32" in result.stdout
    events = [e for path in out.glob("events-*.jsonl") for e in read_events(path)]
    casts = sorted((e["cast"] for e in events if "cast" in e), key=lambda c: int(c["seq"]))
    return casts, json.loads((out / "report.json").read_text())


def where(cast: dict) -> tuple[str, str, int]:
    location = cast["location"]
    return location["kind"], location["file"], location["line"]


@pytest.mark.parametrize("mode", ["no-grad", "grad"])
def test_inserted_casts_at_their_consumer_line(tmp_path, mode):
    casts, report = run_scenario(tmp_path, mode)
    scenario = str(SCENARIO)
    matmul = ("KIND_TORCHSCRIPT", scenario, line_of("the matmul line"))
    add = ("KIND_TORCHSCRIPT", scenario, line_of("the add line"))
    mul = ("KIND_TORCHSCRIPT", scenario, line_of("the mul line"))
    caller = ("KIND_PYTHON", scenario, line_of("the caller line"))

    jit = [c for c in casts if c["op"] in (REDUCED, FULL)]
    assert all(c["mode"] == "EXECUTION_MODE_SCRIPT" for c in jit)
    # Every call casts a and b down and h and g up, in that order.
    forward = [c for c in jit if c.get("phase", "PHASE_FORWARD") == "PHASE_FORWARD"]
    assert [c["op"] for c in forward] == [REDUCED, REDUCED, FULL, FULL] * CALLS
    calls = [forward[i:i + 4] for i in range(0, len(forward), 4)]
    # The first call profiles the graph before any pass runs: the caller's line.
    assert {where(c) for c in calls[0]} == {caller}
    # Once the executor has optimized the graph, each cast is at its consumer.
    for call in calls[-1:]:
        assert [where(c) for c in call] == [matmul, matmul, add, mul], call
        assert [c["dst_dtype"] for c in call] == ["DTYPE_BFLOAT16", "DTYPE_BFLOAT16", "DTYPE_FLOAT32", "DTYPE_FLOAT32"]
        assert [c["shape"] for c in call] == [["2", "3"], ["3", "4"], ["2", "4"], ["2", "4"]]  # a, b, h, g
        # The one cast of h feeds the add and the mul: the mul's line is listed.
        assert [c["location"].get("also_consumed_at", []) for c in call] == [[], [], [f"{scenario}:{mul[2]}"], []]
    # torch's own symbolic_script source is never reported as a user line.
    assert not [c for c in casts if "<string>" in c["location"].get("file", "")]

    # Eager autocast's casts of the same function are where they always were.
    eager = [c for c in casts if c["mode"] == "EXECUTION_MODE_EAGER"]
    assert eager and {c["op"] for c in eager} == {"aten::mm"}
    assert {where(c) for c in eager} == {("KIND_PYTHON", scenario, line_of("the matmul line"))}

    # The report's sites carry the same lines.
    sites = {(row["site"]["line"], row["site"]["op"]) for row in report["sites"] if row["site"]["file"] == scenario}
    assert {(matmul[2], REDUCED), (add[2], FULL)} <= sites, sites
