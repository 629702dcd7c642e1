"""Findings, reports and diff through the whole pipeline: real torch jobs
under `castscope run` (agent, forwarder, collector), reports read back from
the store. Each finding has a positive scenario that raises it at the right
line and a negative twin that does not."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

import jsonschema
import pytest

import castscope
from castscope.report import load_report
from collector_server import Collector
import helpers

REPO = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = pathlib.Path(__file__).parent / "scenarios"
SCHEMA = json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text())
CASTSCOPE = [sys.executable, "-m", "castscope"]


def line_of(script: str, marker: str) -> int:
    return helpers.line_of(SCENARIOS / script, marker)


def run_scenario(tmp_path, script: str, *args: str, run_id: str = "scenario") -> dict:
    out = tmp_path / "out"
    result = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--run-id", run_id, "--", sys.executable,
                             str(SCENARIOS / script), *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)  # every report the tests see follows the published schema
    return report


def findings(report: dict, kind: str) -> list[dict]:
    return [f for f in report["findings"] if f["kind"] == kind]


# (kind, positive scenario and arguments, its marker line, negative twin and arguments)
CASES = [
    ("stale-cache-hit", ["stale_cache.py"], "the stale line", ["recommended_loop.py"]),
    ("backward-under-autocast", ["backward_in_region.py"], "the backward line", ["recommended_loop.py"]),
    ("cache-growth", ["cache_growth.py"], "torch.mm(x, w)", ["cache_per_iteration.py"]),
    ("cache-growth", ["saliency_loop.py", "one-region"], "the saliency line", ["saliency_loop.py", "per-pass"]),
    ("cache-growth", ["input_grad_loop.py", "one-region"], "the feeding line", ["input_grad_loop.py", "per-step"]),
    ("mode-mismatch", ["mode_mismatch.py", "inner-region"], "the mismatching line", ["mode_mismatch.py", "plain"]),
    ("mode-mismatch", ["jit_promote.py", "mixed"], "the promoting line", ["jit_promote.py", "explicit"]),
    ("script-disable-ignored", ["disable_in_script.py", "script"], "fp32 by intent", ["disable_in_script.py", "eager"]),
    ("script-disable-ignored", ["disable_in_script.py", "script"], "fp32 by intent", ["mode_mismatch.py", "plain"]),
    ("trace-dropped-autocast", ["trace_dropped_disable.py"], "fp32 by intent", ["trace_kept_dtypes.py"]),
    ("script-under-trace", ["script_under_trace.py", "autocast"], "the scripted line",
     ["script_under_trace.py", "plain"]),
    ("low-precision-escape", ["low_precision_escape.py", "escape"], "the escaping line",
     ["low_precision_escape.py", "cast-back"]),
    ("cast-churn", ["cast_churn.py", "churn"], "the block line", ["cast_churn.py", "direct"]),
    ("not-autocast", ["not_autocast.py", "out"], "torch.mm(a, b, out=c)", ["not_autocast.py", "functional"]),
    ("not-autocast", ["not_autocast.py", "inplace"], "addmm_", ["not_autocast.py", "functional"]),
    ("not-autocast", ["not_autocast.py", "custom"], "castscope_demo.scale(a, b)", ["not_autocast.py", "functional"]),
    ("not-autocast", ["not_autocast.py", "float64"], "a.double()", ["not_autocast.py", "functional"]),
]


@pytest.fixture(scope="module")
def scenario_report(tmp_path_factory):
    """The report of a scenario run, run once per module: several cases share
    a twin, and a scenario's report does not depend on who reads it."""
    reports: dict[tuple[str, ...], dict] = {}

    def report(script: str, *args: str) -> dict:
        if (script, *args) not in reports:
            reports[(script, *args)] = run_scenario(tmp_path_factory.mktemp("scenario"), script, *args)
        return reports[(script, *args)]
    return report


@pytest.mark.parametrize("kind,positive,marker,negative", CASES,
                         ids=[f"{c[0]}-vs-{'-'.join(c[3])}" for c in CASES])
def test_finding_raised_at_its_line_and_not_by_its_twin(scenario_report, kind, positive, marker, negative):
    positive, *positive_args = positive
    report = scenario_report(positive, *positive_args)
    raised = findings(report, kind)
    assert raised, f"{kind} not raised: {[f['kind'] for f in report['findings']]}"
    expected = (str(SCENARIOS / positive), line_of(positive, marker))
    assert expected in {(s["file"], s["line"]) for f in raised for s in f["sites"]}, raised
    for finding in raised:
        assert finding["summary"] and finding["explanation"] and finding["fix"]
        assert finding["id"].startswith(kind + "/")
    twin = scenario_report(*negative)
    assert not findings(twin, kind), findings(twin, kind)


def test_stale_cache_hit_evidence(tmp_path):
    report = run_scenario(tmp_path, "stale_cache.py")
    [weight] = [f for f in findings(report, "stale-cache-hit") if f["sites"][0]["arg"] == "weight"]
    assert weight["severity"] == "critical"
    assert weight["evidence"]["stale_hits"] == 3  # steps 2-4 reuse step 1's copy
    assert weight["evidence"]["max_version_gap"] >= 1
    assert report["totals"]["cache"]["stale_hits"] == 6  # weight and bias


def test_saliency_loop_growth_is_seen_without_steps_and_its_twin_is_silent(scenario_report):
    report = scenario_report("saliency_loop.py", "one-region")
    assert [f["kind"] for f in report["findings"] if f["severity"] != "info"] == ["cache-growth"]
    [growth] = findings(report, "cache-growth")
    evidence = growth["evidence"]
    assert evidence["detected_by"] == "samples inside one region"
    assert "misses" in evidence["triggers"] and evidence["iterations"] == [0, 0]  # no optimizer step
    first, last = evidence["live_casts"]
    assert evidence["samples"] >= 4 and evidence["intervals_that_grew"] >= 3 and last > first
    assert evidence["cache_hits_between"] > 0 and evidence["released_between"] == 0
    assert evidence["orphaned_casts"] == [0, 0]  # each input's graph keeps it alive while its cast is cached
    assert growth["sites"][0]["line"] == line_of("saliency_loop.py", "the saliency line")
    assert growth["sites"][0]["arg"] == "input"  # the new leaf, not the weights
    twin = scenario_report("saliency_loop.py", "per-pass")
    assert [f for f in twin["findings"] if f["severity"] != "info"] == []


@pytest.mark.parametrize("steps", [20, 400])
def test_input_gradient_loop_growth_is_seen_within_20_steps_and_its_twin_is_silent(tmp_path, steps):
    """An input-gradient loop with the backward inside its one region: the
    growth shows within 20 steps (step-free samples about every few steps),
    and still at 400, where samples at 64, 128, 256, 512 misses showed none."""
    for mode in ("one-region", "per-step"):
        (tmp_path / mode).mkdir()
    report = run_scenario(tmp_path / "one-region", "input_grad_loop.py", "one-region", str(steps))
    growth = findings(report, "cache-growth")
    assert len(growth) == 1, report["findings"]
    evidence = growth[0]["evidence"]
    assert evidence["detected_by"] == "samples inside one region" and evidence["iterations"] == [0, 0]
    assert evidence["intervals_that_grew"] >= 3 and evidence["released_between"] == 0
    first, last = evidence["live_casts"]
    assert last - first >= evidence["intervals_that_grew"]  # an input cached each step, none let go
    site = growth[0]["sites"][0]
    assert (site["file"], site["line"]) == (str(SCENARIOS / "input_grad_loop.py"),
                                            line_of("input_grad_loop.py", "the feeding line"))
    assert site["arg"] == "input"  # the new leaf, not the weights
    # The twin: the region around each step's forward pass, emptied at its exit.
    twin = run_scenario(tmp_path / "per-step", "input_grad_loop.py", "per-step", str(steps))
    assert [f for f in twin["findings"] if f["severity"] != "info"] == []


def test_recommended_resnet_training_raises_nothing_above_info(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--run-id", "resnet", "--", sys.executable,
                             str(REPO / "examples" / "train_resnet.py"), "--steps", "3"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    totals = report["totals"]
    assert totals["conversions"] > 0 and totals["casts_by_dtype_pair"].get("float32->bfloat16", 0) > 0
    assert totals["events_dropped"] == 0
    assert report["run"]["torch_versions"] and report["run"]["devices"] == ["cpu"]
    # No tensor contents: the report is metadata and counts.
    assert len(json.dumps(report)) < 200_000


def test_lightning_bf16_mixed_training_raises_nothing_above_info(tmp_path):
    report = run_scenario(tmp_path, "lightning_bf16.py")
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert report["totals"]["casts_by_dtype_pair"].get("float32->bfloat16", 0) > 0  # Lightning's autocast was seen


def test_mode_mismatch_compares_what_each_line_returned_in_order_of_execution(scenario_report):
    # Eager code outside the autocast lists makes no cast event: only the
    # dtypes the ops returned show that JIT autocast promoted them.
    report = scenario_report("jit_promote.py", "mixed")
    raised = findings(report, "mode-mismatch")
    script = str(SCENARIOS / "jit_promote.py")
    assert [(f["sites"][0]["file"], f["sites"][0]["line"], f["sites"][0]["op"]) for f in raised] == [
        (script, line_of("jit_promote.py", "the promoting line"), "aten::add.Tensor"),
        (script, line_of("jit_promote.py", "the second promoting line"), "aten::mul.Tensor")]
    for finding in raised:
        assert finding["evidence"]["outputs_by_mode"] == {"eager": ["bfloat16"], "script": ["float32"]}
        assert finding["evidence"]["observed"] == "op probe windows only"
        assert "eager: bfloat16; script: float32" in finding["summary"]
    assert [f for f in report["findings"] if f["severity"] not in ("info",) and f["kind"] != "mode-mismatch"] == []
    twin = scenario_report("jit_promote.py", "explicit")  # casts to float32 itself: both modes agree
    assert [f for f in twin["findings"] if f["severity"] != "info"] == []


def test_script_under_trace_names_the_traced_line_that_calls_into_torchscript(scenario_report):
    report = scenario_report("script_under_trace.py", "autocast")
    [finding] = findings(report, "script-under-trace")
    script = str(SCENARIOS / "script_under_trace.py")
    calling, scripted = finding["sites"]
    assert (calling["file"], calling["line"], calling["function"]) == (
        script, line_of("script_under_trace.py", "return scripted(a, b) + 1"), "model")
    assert (scripted["file"], scripted["line"], scripted["op"]) == (
        script, line_of("script_under_trace.py", "the scripted line"), "aten::mm")
    assert f"called from {script}:{calling['line']}" in finding["summary"]
    twin = scenario_report("script_under_trace.py", "plain")  # traced and run with autocast off
    assert [f for f in twin["findings"] if f["severity"] != "info"] == []


def test_diff_of_eager_and_scripted_runs_points_at_the_line(tmp_path):
    db = tmp_path / "out" / "castscope.db"
    run_scenario(tmp_path, "disable_in_script.py", "eager", run_id="eager")
    run_scenario(tmp_path, "disable_in_script.py", "script", run_id="script")
    line = line_of("disable_in_script.py", "fp32 by intent")
    result = subprocess.run([*CASTSCOPE, "diff", "eager", "script", "--db", str(db)], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"disable_in_script.py:{line} aten::mm" in result.stdout
    as_json = subprocess.run([*CASTSCOPE, "diff", "eager", "script", "--db", str(db), "--json"], capture_output=True,
                             text=True)
    differences = json.loads(as_json.stdout)["differences"]
    assert {(d["site"]["line"], d["site"]["op"]) for d in differences} == {(line, "aten::mm")}
    for d in differences:
        assert d["a"] == [] and d["b"][0]["dst_dtype"] == "bfloat16"
    same = subprocess.run([*CASTSCOPE, "diff", "eager", "eager", "--db", str(db)], capture_output=True, text=True)
    assert same.returncode == 0 and "cast the same way" in same.stdout


def test_report_names_the_effective_policy_by_hash(tmp_path):
    base = run_scenario(tmp_path / "base", "mode_mismatch.py", "plain")["run"]["policy_hashes"]
    overlay = tmp_path / "overlay.json"
    overlay.write_text(json.dumps({"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": "fp32"}}))
    out = tmp_path / "overlaid"
    result = subprocess.run([*CASTSCOPE, "run", "--overlay", str(overlay), "--out", str(out), "--", sys.executable,
                             str(SCENARIOS / "mode_mismatch.py"), "plain"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    overlaid = json.loads((out / "report.json").read_text())["run"]["policy_hashes"]
    assert len(base) == 1 and len(overlaid) == 1
    assert base[0].startswith("sha1:") and len(base[0]) == len("sha1:") + 40
    assert base != overlaid  # the overlay changed what ran
    assert f"policy {overlaid[0]}" in result.stderr  # the summary names it


def test_report_of_unknown_run_is_a_clear_error(tmp_path):
    run_scenario(tmp_path, "mode_mismatch.py", "plain")
    result = subprocess.run([*CASTSCOPE, "report", "nope", "--db", str(tmp_path / "out" / "castscope.db")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert 'no run "nope"' in result.stderr


def test_collector_finds_while_the_run_streams(tmp_path):
    """The standalone collector analyzes runs as batches arrive: the finding is
    in its findings table (ListFindings over gRPC) and its log, with no report
    asked for."""
    collector = Collector(tmp_path / "store.db", extra=("--analyze-interval-ms", "200"))
    try:
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp_path / "out"), "--collector", collector.address,
                                 "--run-id", "live", "--", sys.executable, str(SCENARIOS / "stale_cache.py")],
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        found = []
        for _ in range(300):  # the job's last batch triggers an analysis at once; allow a slow machine
            answer = subprocess.run([str(castscope.collector_binary()), "query", "--collector", collector.address,
                                     "findings", "--run", "live"], capture_output=True, text=True, timeout=60)
            assert answer.returncode == 0, answer.stderr
            found = [json.loads(line) for line in answer.stdout.splitlines()]
            if any(f["kind"] == "stale-cache-hit" for f in found):
                break
            time.sleep(0.1)
        stale = [f for f in found if f["kind"] == "stale-cache-hit"]
        assert stale, found
        line = line_of("stale_cache.py", "the stale line")
        assert (str(SCENARIOS / "stale_cache.py"), line) in {(s["file"], s["line"]) for f in stale for s in f["sites"]}
        assert all(f["run_id"] == "live" for f in found)
        # The same findings as the report computes from the store.
        report = subprocess.run([str(castscope.collector_binary()), "report", "--db", str(collector.db), "--run",
                                 "live"], capture_output=True, text=True, timeout=300)
        assert report.returncode == 0, report.stderr
        assert {f["id"] for f in json.loads(report.stdout)["findings"]} == {f["id"] for f in found}
    finally:
        collector.stop()
    assert "finding [critical] stale-cache-hit" in collector.log_text()


def test_the_report_counts_cache_hits_apart_from_conversions(tmp_path):
    """5 iterations of a Linear(8, 8) on a 4x8 input, one autocast region:
    the input is converted 5 times (128 bytes each); weight (256 bytes) and
    bias (32 bytes) once, then served by the cast cache 4 times each."""
    report = run_scenario(tmp_path, "inference_cache_hits.py")
    totals = report["totals"]
    assert totals["casts"] == 15
    assert totals["conversions"] == 7
    assert totals["bytes_cast"] == 5 * 128 + 256 + 32
    assert totals["cache"]["served_casts"] == 8 and totals["cache"]["hits"] == 8
    assert totals["cache"]["bytes_served"] == 4 * 256 + 4 * 32
    assert totals["casts_by_role"] == {"input": 5, "weight": 2}
    line = line_of("inference_cache_hits.py", "the inference line")
    weight = next(s for s in report["sites"] if s["site"]["arg"] == "weight" and s["site"]["line"] == line)
    assert (weight["count"], weight["conversions"], weight["cache_hits"]) == (5, 1, 4)
    assert (weight["bytes_converted"], weight["bytes_served_from_cache"]) == (256, 4 * 256)


def test_findings_name_their_ranks_and_a_report_filters_one(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--run-id", "ranks", "--", sys.executable, "-m",
                             "torch.distributed.run", "--nproc_per_node=2", "--master_port=0",
                             str(SCENARIOS / "two_ranks.py")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert sorted(a["rank"] for a in report["run"]["agents"] if a["rank"] >= 0) == [0, 1]
    stale_line = line_of("two_ranks.py", "the stale line")
    stale = findings(report, "stale-cache-hit")
    assert {f["sites"][0]["arg"] for f in stale} == {"weight", "bias"}
    assert all(f["sites"][0]["line"] == stale_line and f["ranks"] == [0, 1] for f in stale)
    backward_line = line_of("two_ranks.py", "the backward line")
    [backward] = findings(report, "backward-under-autocast")  # rank 0 ran its backward with autocast off
    assert [s["line"] for s in backward["sites"]] == [backward_line] and backward["ranks"] == [1]

    db = str(out / "castscope.db")
    one = load_report(db, "ranks", rank=1)
    jsonschema.validate(one, SCHEMA)
    assert one["run"]["rank_filter"] == 1 and [a["rank"] for a in one["run"]["agents"]] == [1]
    assert {f["kind"] for f in one["findings"]} >= {"stale-cache-hit", "backward-under-autocast"}
    zero = load_report(db, "ranks", rank=0)
    assert findings(zero, "backward-under-autocast") == [] and findings(zero, "stale-cache-hit")
    assert all(f["ranks"] == [0] for f in zero["findings"])
    assert all(f["ranks"] == [1] for f in one["findings"])
    assert one["totals"]["casts"] < report["totals"]["casts"]
    cli = subprocess.run([*CASTSCOPE, "report", "ranks", "--db", db, "--rank", "7"], capture_output=True, text=True)
    assert cli.returncode == 2 and 'run "ranks" has no process of rank 7 (its ranks: 0, 1)' in cli.stderr
