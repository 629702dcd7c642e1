"""Aggregate mode (docs/aggregate.md) in real torch processes: results stay
bit-identical to native autocast, counters are flushed at optimizer steps,
keys past the limit are counted as dropped, and the collector's report of an
aggregate run has the same sites and conversions as a full-event run of the
same job, says it was in aggregate mode and which findings it could not
look for."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections import Counter

import jsonschema
import pytest
import torch

import castscope
from castscope.events import read_events
from castscope.report import format_report
from collector_server import runs
from parity import compare_outcomes, run_captured

REPO = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = pathlib.Path(__file__).parent / "scenarios"
SCHEMA = json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text())


def _mm():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.mm(a, b)


def _linear():
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return layer(x)


def _conv2d():
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return conv(x)


def _cached_training():
    """The cast cache at work: one region around several steps, weights
    served from the cache (and stale after each step)."""
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            y = model(torch.randn(8, 16))
            outputs.append(model(y))  # a second use of the cached weight in the same step
            outputs[-1].float().sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    return [o.detach() for o in outputs] + [p.detach().clone() for p in model.parameters()]


def _repeated_training():
    """_cached_training with each step's forward called four times at one
    line: after a step's first call, an op's casts are counted through the
    op group the counters remember (cast_counters.h)."""
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            for _ in range(4):
                y = model(torch.randn(8, 16))
            outputs.append(model(y))
            outputs[-1].float().sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    return [o.detach() for o in outputs] + [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("job", [_mm, _linear, _conv2d, _cached_training], ids=lambda f: f.__name__[1:])
def test_results_are_bit_identical_to_native_autocast(tmp_path, job):
    native = run_captured(job)
    with castscope.attached(events_path=tmp_path / "events.jsonl", aggregate=True) as agent:
        with_agent = run_captured(job)
        events = agent.events()
    assert compare_outcomes(native, with_agent) is None
    # Counters came out, and no per-event record did.
    assert any("cast_counts" in e for e in events) and any("op_counts" in e for e in events)
    assert not any("cast" in e or "op" in e for e in events)


# numerics=False: no window open, so every unboxed op's casts are counted with
# no record made (the kernel's steady state); True: windows record some at once.
@pytest.mark.parametrize("numerics", [False, True], ids=["steady", "numerics-windows"])
@pytest.mark.parametrize("job", [_cached_training, _repeated_training], ids=lambda f: f.__name__[1:])
def test_counters_add_up_to_the_full_event_records_of_the_same_job(tmp_path, job, numerics):
    def counted(events):
        """Per cast key: decisions, source bytes, round trips and the largest
        stale-hit version gap; per op site: calls."""
        casts, gaps, ops = Counter(), {}, Counter()

        def cast_key(c):
            return (c["op"], c["arg_name"], c["location"]["line"], c["src_dtype"], c["dst_dtype"],
                    c.get("outcome"), c["cache"], c["role"], c.get("mode"), c.get("phase"))

        for e in events:
            if "cast" in e:
                c = e["cast"]
                casts[cast_key(c) + ("count",)] += 1
                casts[cast_key(c) + ("bytes",)] += int(c.get("bytes", 0))
                casts[cast_key(c) + ("round_trips",)] += 1 if c.get("round_trip") else 0
                if c["cache"] == "CACHE_OUTCOME_STALE_HIT":
                    gap = int(c.get("source_version", 0)) - int(c.get("cached_version", 0))
                    gaps[cast_key(c)] = max(gaps.get(cast_key(c), gap), gap)
            elif "cast_counts" in e:
                c = e["cast_counts"]
                casts[cast_key(c) + ("count",)] += int(c["count"])
                casts[cast_key(c) + ("bytes",)] += int(c.get("bytes", 0))
                casts[cast_key(c) + ("round_trips",)] += int(c.get("round_trips", 0))
                if c["cache"] == "CACHE_OUTCOME_STALE_HIT":
                    gap = int(c.get("max_version_gap", 0))
                    gaps[cast_key(c)] = max(gaps.get(cast_key(c), gap), gap)
            elif "op" in e and e["op"].get("probe_reason", "PROBE_REASON_UNSPECIFIED") == "PROBE_REASON_UNSPECIFIED":
                ops[(e["op"]["op"], e["op"]["location"]["line"])] += 1
            elif "op_counts" in e and e["op_counts"].get("probe_reason", "PROBE_REASON_UNSPECIFIED") == \
                    "PROBE_REASON_UNSPECIFIED":
                ops[(e["op_counts"]["op"], e["op_counts"]["location"]["line"])] += int(e["op_counts"]["calls"])
        return +casts, gaps, ops

    with castscope.attached(events_path=tmp_path / "full.jsonl", probe=False, numerics=numerics) as agent:
        job()
        full = counted(agent.events())
    with castscope.attached(events_path=tmp_path / "aggregate.jsonl", probe=False, numerics=numerics,
                            aggregate=True) as agent:
        job()
        aggregate = counted(agent.events())
    assert full[0] and full == aggregate
    # The cache outcomes survive folding: misses, hits and stale hits (with their version gaps).
    caches = {key[6] for key in aggregate[0]}
    assert {"CACHE_OUTCOME_MISS", "CACHE_OUTCOME_HIT", "CACHE_OUTCOME_STALE_HIT"} <= caches
    assert aggregate[1] and all(gap > 0 for gap in aggregate[1].values())


_STEPS_JOB = r"""
import sys, torch, castscope
agent = castscope.attach(events_path=sys.argv[1], aggregate=True, probe=False)
w = torch.nn.Parameter(torch.randn(8, 8))
optimizer = torch.optim.SGD([w], lr=0.1)
x = torch.randn(8, 8)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(step + 1):
            torch.mm(x, w)  # the counted line
    optimizer.step()
castscope.detach()
"""


def _events_of_job(job: str, events_path) -> list[dict]:
    """Runs `job` (Python source, argv[1]: its events file) and returns the events it wrote."""
    result = subprocess.run([sys.executable, "-c", job, str(events_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return read_events(events_path)


def test_counters_are_flushed_at_each_optimizer_step(tmp_path):
    calls_by_step = Counter()
    for e in _events_of_job(_STEPS_JOB, tmp_path / "events.jsonl"):
        if "op_counts" in e and e["op_counts"]["op"].startswith("aten::mm"):
            calls_by_step[int(e["op_counts"]["iteration"])] += int(e["op_counts"]["calls"])
    # Step k's calls carry the k steps seen before them: each step's counters
    # went out at its step, never folded into the next step's.
    assert calls_by_step == {0: 1, 1: 2, 2: 3}


_MANY_SITES_JOB = r"""
import sys, torch, castscope
agent = castscope.attach(events_path=sys.argv[1], aggregate={"max_keys": 16}, probe=False)
a, b = torch.randn(4, 4), torch.randn(4, 4)
source = "\n".join("torch.mm(a, b)" for _ in range(40))  # 40 lines: 40 op keys, 80 cast keys
with torch.autocast("cpu", dtype=torch.bfloat16):
    exec(compile(source, "many_sites.py", "exec"))
castscope.detach()
"""


def test_keys_past_the_limit_are_counted_as_dropped_never_lost(tmp_path):
    events = _events_of_job(_MANY_SITES_JOB, tmp_path / "events.jsonl")
    counted = sum(int(e["cast_counts"]["count"]) for e in events if "cast_counts" in e and
                  e["cast_counts"]["location"]["file"] == "many_sites.py")
    counted += sum(int(e["op_counts"]["calls"]) for e in events if "op_counts" in e and
                   e["op_counts"]["location"]["file"] == "many_sites.py")
    dropped = int([e["stats"] for e in events if "stats" in e][-1]["events_dropped"])
    assert dropped > 0
    assert counted + dropped == 120  # 40 ops and their 80 casts: each counted or dropped


def _run(tmp_path, script: str, *flags: str) -> dict:
    out = tmp_path / ("out" + "".join(flags).replace("-", "_"))
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", str(out), "--run-id", "agg", *flags,
                             "--", sys.executable, str(SCENARIOS / script)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    return report


def _sites(report: dict) -> dict:
    return {(s["site"]["file"], s["site"]["line"], s["site"]["op"], s["site"]["arg"], s["mode"], s["role"],
             s["src_dtype"], s["dst_dtype"], s["outcome"]):
            (s["count"], s["conversions"], s["cache_hits"], s["stale_hits"], s["backward"], s["bytes"])
            for s in report["sites"]}


def test_report_of_an_aggregate_run_matches_a_full_event_run(tmp_path):
    full = _run(tmp_path, "stale_cache.py")
    aggregate = _run(tmp_path, "stale_cache.py", "--aggregate")
    assert full["run"]["aggregate"] is False and full["findings_not_available"] == []
    assert aggregate["run"]["aggregate"] is True
    assert _sites(aggregate) == _sites(full) and _sites(full)
    for key in ("casts", "conversions", "ops", "bytes_cast", "casts_by_dtype_pair", "casts_by_role", "cache"):
        assert aggregate["totals"][key] == full["totals"][key], key
    assert aggregate["totals"]["accounting"]["complete"], aggregate["totals"]["accounting"]
    # Stale hits are raised from counters, at the same line.
    stale = {(s["file"], s["line"], s["arg"]) for f in full["findings"] if f["kind"] == "stale-cache-hit"
             for s in f["sites"]}
    assert stale and stale == {(s["file"], s["line"], s["arg"]) for f in aggregate["findings"]
                               if f["kind"] == "stale-cache-hit" for s in f["sites"]}
    unavailable = {f["id"] for f in aggregate["findings_not_available"]}
    assert unavailable == {"cast-share", "tf32-matmul", "fp8-zero-amax"}
    text = format_report(aggregate)
    assert "aggregate mode: counters only" in text and "cast-share" in text
    # The store's run list (what the viewer's /api/runs reads) says so too.
    [listed] = runs(tmp_path / "out__aggregate" / "castscope.db")
    assert [a["identity"].get("aggregate") for a in listed["agents"]] == [True]
    [listed] = runs(tmp_path / "out" / "castscope.db")
    assert [a["identity"].get("aggregate", False) for a in listed["agents"]] == [False]


def test_cache_growth_is_raised_from_an_aggregate_run(tmp_path):
    report = _run(tmp_path, "cache_growth.py", "--aggregate")
    assert report["run"]["aggregate"] is True
    assert any(f["kind"] == "cache-growth" for f in report["findings"]), report["findings"]
