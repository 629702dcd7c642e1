"""`castscope diff` between an eager run and a torch.compile'd run of the same
code, and the report's torch.compile counts: two crafted runs stored by the
real collector (crafted_run.ingest), read back by the real CLI.

The runs are pytorch#179804's scenario, as the agent records it: line 10 is a
linear under a bfloat16 region, line 12 a `torch.mm(x.float(), w)` inside
`autocast(enabled=False)`. Eagerly, line 12 never casts; compiled, the
backward graph (traced under the forward's autocast state) casts its inputs
to bfloat16 there."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest

from crafted_run import _field, _varint, ingest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text())
CASTSCOPE = [sys.executable, "-m", "castscope"]

FILE = "/src/train.py"
EAGER, COMPILING, COMPILED = 1, 6, 7
FORWARD, BACKWARD = 1, 2
FLOAT32, BFLOAT16 = 1, 3
CPU = 1
# Interned strings of every batch.
LINEAR, MM, WEIGHT, SELF, COMPILED_FORWARD, COMPILED_BACKWARD = range(1, 7)
STRINGS = {LINEAR: "aten::linear", MM: "aten::mm", WEIGHT: "weight", SELF: "self",
           COMPILED_FORWARD: "compiled::forward", COMPILED_BACKWARD: "compiled::backward"}
LINES = {1: 10, 2: 12, 3: 20}  # location id -> line: the linear, the disabled block, backward()


def _op(seq: int, op_id: int, location_id: int, mode: int, phase: int, policy: int = 0,
        autocast: bool = True) -> bytes:
    """An op run (or traced) on the CPU, with autocast on or off there."""
    return _field(2, _field(1, seq) + _field(2, seq * 1000) + _field(3, 1) + _field(5, policy) + _field(6, CPU)
                  + _field(8, BFLOAT16 if policy else FLOAT32) + _field(10, 1) + _field(11, BFLOAT16)
                  + _field(13, mode) + _field(14, phase) + (_field(15, CPU) if autocast else b"")
                  + _field(17, op_id) + _field(18, location_id))


def _cast(seq: int, op_seq: int, op_id: int, arg_id: int, location_id: int, mode: int, phase: int) -> bytes:
    """A lower_precision_fp cast float32 -> bfloat16 of a 4x4 weight, not cacheable."""
    return _field(1, _field(1, seq) + _field(2, seq * 1000) + _field(3, 1) + _field(7, 0xFFFFFFFF) + _field(8, 1)
                  + _field(9, FLOAT32) + _field(10, BFLOAT16) + _field(11, 1) + _field(12, _varint(4) + _varint(4))
                  + _field(14, 64) + _field(15, CPU) + _field(16, op_seq) + _field(17, 1) + _field(18, 1)
                  + _field(22, mode) + _field(23, phase) + _field(24, op_id) + _field(25, arg_id)
                  + _field(26, location_id))


def _stream(run_id: str, events: list[bytes]) -> list[bytes]:
    agent_id = f"{run_id}-agent"
    identity = (_field(1, run_id) + _field(2, agent_id) + _field(3, 4242) + _field(4, 0) + _field(5, 0)
                + _field(6, 1) + _field(7, "host") + _field(8, "2.14.1") + _field(9, "python train.py"))
    strings = b"".join(_field(6, _field(1, i) + _field(2, text)) for i, text in STRINGS.items())
    locations = b"".join(_field(7, _field(1, i) + _field(2, _field(1, 1) + _field(2, FILE) + _field(3, line)
                                                         + _field(4, "train")))
                         for i, line in LINES.items())
    batch = (_field(1, 1) + _field(2, identity) + _field(3, 1) + _field(5, len(events)) + strings + locations
             + b"".join(_field(8, e) for e in events) + _field(9, 1))
    return [_field(1, _field(1, 1) + _field(2, agent_id)), _field(2, batch)]


def _eager_run() -> list[bytes]:
    events = []
    for step in range(2):  # the linear casts its weight every step; line 12 never casts
        seq = 100 * step + 1
        events += [_op(seq, LINEAR, 1, EAGER, FORWARD, policy=1), _cast(seq + 1, seq, LINEAR, WEIGHT, 1, EAGER, FORWARD)]
    return _stream("eager", events)


def _compiled_run() -> list[bytes]:
    # The compile: what autocast decided while the graphs were traced,
    # forward and backward (once; never counted as casts).
    events = [_op(1, LINEAR, 1, COMPILING, FORWARD, policy=1),
              _cast(2, 1, LINEAR, WEIGHT, 1, COMPILING, FORWARD),
              _cast(3, 1, MM, SELF, 2, COMPILING, BACKWARD)]
    for step in range(2):  # each step runs the forward and the backward graph, with their casts
        seq = 100 * (step + 1)
        events += [_op(seq, COMPILED_FORWARD, 1, COMPILED, FORWARD),
                   _cast(seq + 1, seq, LINEAR, WEIGHT, 1, COMPILED, FORWARD),
                   _op(seq + 2, COMPILED_BACKWARD, 3, COMPILED, BACKWARD, autocast=False),  # outside the region
                   _cast(seq + 3, seq + 2, MM, SELF, 2, COMPILED, BACKWARD)]
    return _stream("compiled", events)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> pathlib.Path:
    db = tmp_path_factory.mktemp("compile_diff") / "store.db"
    ingest(db, [_eager_run(), _compiled_run()])
    return db


def test_report_counts_compile_time_decisions_and_graph_runs_apart(store):
    result = subprocess.run([*CASTSCOPE, "report", "compiled", "--db", str(store), "--json", str(store.parent / "r.json")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads((store.parent / "r.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["totals"]["compile"] == {"decisions": 2, "graph_runs": 4}
    assert report["totals"]["casts"] == 4  # the graphs' runs; not the compile's decisions
    assert report["totals"]["ops"] == 0
    assert {row["mode"] for row in report["sites"]} == {"compiled"}
    assert "torch.compile: 2 decisions while compiling (not counted), 4 compiled graph runs" in result.stdout
    eager = subprocess.run([*CASTSCOPE, "report", "eager", "--db", str(store)], capture_output=True, text=True,
                           timeout=120)
    assert eager.returncode == 0, eager.stderr
    assert "torch.compile" not in eager.stdout


def test_diff_names_the_sites_whose_casts_differ_between_eager_and_compiled(store):
    as_json = subprocess.run([*CASTSCOPE, "diff", "eager", "compiled", "--db", str(store), "--json"],
                             capture_output=True, text=True, timeout=120)
    assert as_json.returncode == 1, as_json.stderr
    out = json.loads(as_json.stdout)
    # The linear casts the same way eagerly and compiled (mode aside); the
    # mm at the disabled line casts only in the compiled backward.
    assert out["eager_vs_compiled"] == {"eager_run": "a", "sites": [
        {"site": {"file": FILE, "line": 12, "op": "aten::mm", "arg": "self", "phase": "backward"},
         "eager": [], "compiled": ["float32->bfloat16"]}]}
    assert [(d["site"]["line"], d["site"]["op"]) for d in out["differences"]] == [(12, "aten::mm")]

    text = subprocess.run([*CASTSCOPE, "diff", "compiled", "eager", "--db", str(store)], capture_output=True,
                          text=True, timeout=120)
    assert text.returncode == 1, text.stderr
    assert "eager vs compiled: 1 site(s) whose casts differ between eager (eager) and compiled (torch.compile)" \
        in text.stdout
    assert f"{FILE}:12 aten::mm(self) [backward]" in text.stdout
    assert f"{FILE}:10" not in text.stdout

    same = subprocess.run([*CASTSCOPE, "diff", "eager", "eager", "--db", str(store), "--json"], capture_output=True,
                          text=True, timeout=120)
    assert same.returncode == 0, same.stderr
    assert "eager_vs_compiled" not in json.loads(same.stdout)  # neither run is compiled
