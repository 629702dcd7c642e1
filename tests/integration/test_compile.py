"""torch.compile capture (docs/compile.md), through the whole pipeline: real
torch jobs compiled with inductor, aot_eager and eager, run under
`castscope run` (agent, forwarder, collector); events and reports read back.
Each scenario process runs once per module (an inductor compile takes ~12 s)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import jsonschema
import pytest
import torch

import aot_graph_log
from castscope.events import is_probe_record, read_events, summarize
from parity import bits_equal
from test_findings import CASTSCOPE, SCENARIOS, SCHEMA, findings, line_of

STEPS = 3  # compiled_loop.py's training steps
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class ScenarioRun:
    """One `castscope run` of a scenario: its report, its events and torch's
    log of the AOT graphs (TORCH_LOGS=aot_graphs). "{out}" in an argument is
    the run's own folder."""

    def __init__(self, out, script: str, args: tuple[str, ...], cache_dir):
        self.script = str(SCENARIOS / script)
        self.out = out
        args = tuple(arg.format(out=out) for arg in args)
        log = out / "aot_graphs.log"
        # Inductor's caches (AOTAutogradCache among them) of this module's runs only: a
        # scenario's first run traces its graphs, whatever ran on this machine before.
        env = dict(os.environ, TORCH_LOGS="aot_graphs", TORCH_LOGS_OUT=str(log), TORCHINDUCTOR_CACHE_DIR=str(cache_dir))
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(out / "castscope"), "--run-id", "compile", "--",
                                 sys.executable, self.script, *args], capture_output=True, text=True, timeout=600,
                                env=env)
        assert result.returncode == 0, result.stderr
        self.stderr = result.stderr
        self.report = json.loads((out / "castscope" / "report.json").read_text())
        jsonschema.validate(self.report, SCHEMA)
        self.events = [e for path in sorted((out / "castscope").glob("events-*.jsonl")) for e in read_events(path)]
        self.aot_log = log.read_text() if log.exists() else ""

    def casts(self, mode: str) -> list[dict]:
        return [e["cast"] for e in self.events if "cast" in e and e["cast"].get("mode") == f"EXECUTION_MODE_{mode}"]

    def ops(self, name: str) -> list[dict]:
        return [e["op"] for e in self.events if "op" in e and e["op"].get("op") == name]

    def line(self, marker: str) -> tuple[str, int]:
        return self.script, line_of(os.path.basename(self.script), marker)


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("inductor-cache")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, inductor_cache):
    runs: dict[tuple[str, ...], ScenarioRun] = {}

    def run(script: str, *args: str) -> ScenarioRun:
        if (script, *args) not in runs:
            runs[(script, *args)] = ScenarioRun(tmp_path_factory.mktemp("compile"), script, args, inductor_cache)
        return runs[(script, *args)]
    return run


def at(cast: dict) -> tuple[str, int]:
    location = cast.get("location") or {}
    return location.get("file", ""), int(location.get("line", 0))


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_compiled_loop_is_bit_identical_with_castscope_attached(scenario, tmp_path, backend, inductor_cache):
    attached = scenario("compiled_loop.py", backend, "--save", "{out}/saved.pt")
    plain = subprocess.run([sys.executable, str(SCENARIOS / "compiled_loop.py"), backend, "--save",
                            str(tmp_path / "plain.pt")], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(inductor_cache)))
    assert plain.returncode == 0, plain.stderr
    expected, got = torch.load(tmp_path / "plain.pt"), torch.load(attached.out / "saved.pt")
    assert len(expected) == len(got) == STEPS * 5  # loss and 4 grads per step
    assert all(bits_equal(a, b) for a, b in zip(expected, got))
    assert attached.casts("COMPILED"), "castscope saw no compiled graph: the parity above proves nothing"


@pytest.mark.parametrize("backend", ["inductor", "aot_eager", "eager"])
def test_compiled_amp_recipe_raises_nothing_above_info(scenario, backend):
    """Compiled runs and compile-time decisions are no run-time casts: the
    backward graph running outside autocast is no backward-under-autocast."""
    report = scenario("compiled_loop.py", backend, "--save", "{out}/saved.pt").report
    assert [f for f in report["findings"] if f["severity"] != "info"] == []


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_compiled_casts_per_step_are_the_aot_graphs_autocast_casts(scenario, backend):
    run = scenario("compiled_loop.py", backend, "--save", "{out}/saved.pt")
    in_graphs = aot_graph_log.conversions(run.aot_log)  # torch's own print of the graphs castscope read
    assert "(from cache)" not in run.aot_log  # traced: the module's first run of this scenario
    inner, outer = run.line("the inner line"), run.line("the outer line")
    # Linear(x, weight, bias), then Linear(weight, bias) on a bf16 activation.
    assert in_graphs == Counter({("forward", *inner): 3, ("forward", *outer): 2}), in_graphs
    compiled = run.casts("COMPILED")
    by_line = Counter((c["phase"], *at(c)) for c in compiled)
    assert by_line == Counter({("PHASE_FORWARD", *inner): 3 * STEPS, ("PHASE_FORWARD", *outer): 2 * STEPS}), by_line
    assert {(c["src_dtype"], c["dst_dtype"], c["op"]) for c in compiled} == {
        ("DTYPE_FLOAT32", "DTYPE_BFLOAT16", "aten::linear")}
    assert Counter(c["arg_name"] for c in compiled if at(c) == outer) == {"weight": STEPS, "bias": STEPS}
    # Who each cast is for, by eager's rule: parameters are weights, the batch an input.
    assert {(c["arg_name"], c["role"]) for c in compiled} == {
        ("input", "ROLE_INPUT"), ("weight", "ROLE_WEIGHT"), ("bias", "ROLE_WEIGHT")}
    # Each run of a graph is one op, at the line that called the compiled module.
    forward_runs, backward_runs = run.ops("compiled::forward"), run.ops("compiled::backward")
    assert len(forward_runs) == len(backward_runs) == STEPS
    assert {at(op) for op in forward_runs} == {run.line("the calling line")}
    assert {op["phase"] for op in backward_runs} == {"PHASE_BACKWARD"}
    forward_seqs = {op["seq"] for op in forward_runs}
    assert {c["op_seq"] for c in compiled} <= forward_seqs
    # Decisions made while compiling (one compile): once, not per step.
    compiling = Counter((c["op"], c.get("arg_name"), c["phase"], *at(c)) for c in run.casts("COMPILING"))
    assert compiling and set(compiling.values()) == {1}, compiling
    assert ("aten::linear", "PHASE_FORWARD", *inner) in {(op, phase, *where) for op, _, phase, *where in compiling}
    # The events' own summary (castscope run with a remote collector prints it) counts them as the report does.
    summary = summarize(run.events).splitlines()
    assert summary[0] == f"castscope: 0 autocast ops, {5 * STEPS} casts", summary
    # The loss's .float() after the graph and its gradient's way back; none of the graphs' casts again.
    assert f"  other conversions: {2 * STEPS} (explicit {STEPS}, backward {STEPS})" in summary, summary
    assert (f"  torch.compile: {sum(compiling.values())} decisions while compiling (not counted), {2 * STEPS} "
            f"compiled graph runs") in summary, summary


@pytest.mark.parametrize("script, marker, kind, args", [
    ("compiled_in_region.py", "the stale line", "stale-cache-hit", ("stale-cache",)),
    ("compiled_in_region.py", "the backward line", "backward-under-autocast", ("backward-in-region",)),
    ("compiled_in_region.py", "the backward line", "backward-under-autocast", ("backward-in-region", "aot_eager")),
    ("compiled_cast_churn.py", "the block line", "cast-churn", ()),
])
def test_eager_backend_findings_point_at_the_users_line(scenario, script, marker, kind, args):
    """backend="eager" (and, for backward() in the region, aot_eager: the
    compiled backward's run is at the line that called backward())."""
    run = scenario(script, *args)
    raised = findings(run.report, kind)
    assert raised, [f["kind"] for f in run.report["findings"]]
    assert run.line(marker) in {(s["file"], s["line"]) for f in raised for s in f["sites"]}, raised
    # backend="eager" runs eager kernels from Dynamo's generated code: the
    # agent maps them to the user's lines, never to the generated code or torch.
    for event in run.events:
        body = event.get("cast") or (event.get("op") if "op" in event and not is_probe_record(event["op"]) else None)
        if body and (body.get("location") or {}).get("file"):
            file = body["location"]["file"]
            assert not file.startswith(("<eval_with_key>", TORCH_DIR)), body
    twin = scenario("compiled_loop.py", "eager")
    assert not findings(twin.report, kind), findings(twin.report, kind)


def test_dynamic_shapes_keep_the_casts_per_step(scenario):
    """With dynamic=True the trace's sizes are symbolic (its decisions carry
    no shape); each graph cast is still matched to its decision."""
    run = scenario("compiled_loop.py", "aot_eager", "--dynamic")
    inner, outer = run.line("the inner line"), run.line("the outer line")
    by_line = Counter((c["arg_name"], *at(c)) for c in run.casts("COMPILED"))
    assert by_line == Counter({("input", *inner): STEPS, ("weight", *inner): STEPS, ("bias", *inner): STEPS,
                               ("weight", *outer): STEPS, ("bias", *outer): STEPS}), by_line
    assert [f for f in run.report["findings"] if f["severity"] != "info"] == []


def test_compiled_backward_casts_what_eager_keeps_in_float32(scenario):
    """pytorch#179804: the compiled backward casts an mm that autocast(enabled=False)
    keeps in float32; with backward_pass_autocast="off" it does not."""
    run = scenario("compiled_backward_mismatch.py", "mismatch")
    fp32_line = run.line("the fp32 line")
    in_graphs = aot_graph_log.conversions(run.aot_log)
    # Both mm inputs of the backward; the partitioner computes one of them in the forward graph.
    assert sum(n for (_, *where), n in in_graphs.items() if tuple(where) == fp32_line) == 2, in_graphs
    compiled_at_line = [c for c in run.casts("COMPILED") if at(c) == fp32_line]
    assert len(compiled_at_line) == 2 * 2, compiled_at_line  # 2 steps
    assert {(c["op"], c["src_dtype"], c["dst_dtype"]) for c in compiled_at_line} == {
        ("aten::mm", "DTYPE_FLOAT32", "DTYPE_BFLOAT16")}
    twin = scenario("compiled_backward_mismatch.py", "off")
    assert not aot_graph_log.conversions(twin.aot_log)
    assert not [c for c in twin.casts("COMPILED") if at(c) == fp32_line]


def test_compiled_backward_casting_what_eager_keeps_in_float32_is_a_compile_mismatch(scenario):
    run = scenario("compiled_backward_mismatch.py", "mismatch")
    raised = findings(run.report, "compile-mismatch")
    assert run.line("the fp32 line") in {(s["file"], s["line"]) for f in raised for s in f["sites"]}, \
        run.report["findings"]
    twin = scenario("compiled_backward_mismatch.py", "off")
    assert not [f for f in twin.report["findings"] if f["severity"] != "info"], twin.report["findings"]


def test_diff_of_an_eager_run_and_a_compiled_run_names_the_line_whose_casts_differ(tmp_path):
    """The same script run eagerly and compiled, into one store: `castscope diff`
    names the fp32 line, whose compiled backward casts what eager does not."""
    script = SCENARIOS / "compiled_backward_mismatch.py"
    for only in ("eager", "compiled"):
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp_path), "--run-id", only, "--", sys.executable,
                                 str(script), "mismatch", only], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
    diff = subprocess.run([*CASTSCOPE, "diff", "eager", "compiled", "--db", str(tmp_path / "castscope.db"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert diff.returncode == 1, diff.stderr  # a difference
    sites = json.loads(diff.stdout)["eager_vs_compiled"]["sites"]
    fp32_line = line_of(script.name, "the fp32 line")
    assert {(s["site"]["line"], s["site"]["op"], s["site"]["phase"]) for s in sites} == {
        (fp32_line, "aten::mm", "backward")}, sites


def test_attach_imports_no_dynamo_and_detach_restores_torch(tmp_path):
    """A job that never compiles does not pay for importing Dynamo; the first
    torch.compile installs the capture; detach puts torch back as it was."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(f"""
        import sys
        import torch
        import torch._functorch.config
        import castscope
        from castscope import compile_capture

        original_compile, cache = torch.compile, torch._functorch.config.enable_autograd_cache
        castscope.attach(events_path={str(tmp_path / "events.jsonl")!r})
        assert "torch._dynamo" not in sys.modules
        compiled = torch.compile(torch.nn.Linear(4, 4), backend="eager")
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
        import torch._functorch.aot_autograd as aot
        # castscope's wrappers (functools.wraps: __wrapped__ names what they wrap)
        wrapped = (aot.aot_stage1_graph_capture, aot.aot_stage2_compile, AOTAutogradCache.try_load,
                   AOTAutogradCache._lookup)
        assert compile_capture._current is not None and all(hasattr(f, "__wrapped__") for f in wrapped)
        assert torch._functorch.config.enable_autograd_cache is cache  # the cache stays as the job set it
        assert torch.compile is original_compile  # the wrapper served its one call
        castscope.detach()
        assert compile_capture._current is None and torch._functorch.config.enable_autograd_cache is cache
        assert [aot.aot_stage1_graph_capture, aot.aot_stage2_compile, AOTAutogradCache.try_load,
                AOTAutogradCache._lookup] == [f.__wrapped__ for f in wrapped]
        print("ok")
    """))
    result = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_diff_of_the_clean_loop_eager_and_compiled_finds_nothing(tmp_path):
    """The AMP recipe eagerly and compiled: the same casts at the same lines.
    The decisions that kept a dtype (eager's already_target rows, which a
    compiled graph has no node for) are no difference."""
    script = SCENARIOS / "compiled_loop.py"
    for backend in ("none", "aot_eager"):
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp_path), "--run-id", backend, "--", sys.executable,
                                 str(script), backend], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
    diff = subprocess.run([*CASTSCOPE, "diff", "none", "aot_eager", "--db", str(tmp_path / "castscope.db"), "--json"],
                          capture_output=True, text=True, timeout=120)
    out = json.loads(diff.stdout)
    assert diff.returncode == 0 and out["differences"] == [] and out["eager_vs_compiled"]["sites"] == [], out


def test_graphs_served_from_aot_autograd_cache_are_recorded_as_compiled_ones(tmp_path):
    """AOTAutogradCache stays on under castscope (a warm cache halves a first
    step's compile; bench/compile_first_step_bench.py). An entry a job
    without castscope saved is traced again (castscope has not read its
    graphs); the next run is served from the cache, and records the same
    casts, compile-time decisions (the backward's too, which only the trace
    makes) and findings. A stored reading that cannot be read is traced again."""
    cache = tmp_path / "inductor-cache"
    args = ("mismatch", "compiled", "inductor")
    native = subprocess.run([sys.executable, str(SCENARIOS / "compiled_backward_mismatch.py"), *args],
                            capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache)))
    assert native.returncode == 0, native.stderr
    traced = ScenarioRun(tmp_path / "traced", "compiled_backward_mismatch.py", args, cache)
    served = ScenarioRun(tmp_path / "served", "compiled_backward_mismatch.py", args, cache)
    assert "(from cache)" not in traced.aot_log and "Forward graph" in traced.aot_log, traced.aot_log[:2000]
    assert "Forward graph (from cache)" in served.aot_log, served.aot_log[:2000]

    def recorded(run: ScenarioRun):
        casts = {mode: Counter((c["op"], c.get("arg_name"), c["phase"], c["src_dtype"], c["dst_dtype"], *at(c))
                               for c in run.casts(mode)) for mode in ("COMPILED", "COMPILING")}
        ops = Counter((e["op"]["op"], e["op"].get("mode"), e["op"].get("phase"), *at(e["op"]))
                      for e in run.events if "op" in e)
        found = sorted((f["kind"], f["severity"], f["summary"]) for f in run.report["findings"])
        return casts, ops, found

    casts, ops, found = recorded(traced)
    assert recorded(served) == (casts, ops, found)
    assert casts["COMPILED"] and any(phase == "PHASE_BACKWARD" for _, _, phase, *_ in casts["COMPILING"]), casts
    assert "compile-mismatch" in {kind for kind, _, _ in found}, found
    stored = list((cache / "castscope").glob("*/*.json"))
    assert len(stored) == 1, stored
    assert stored[0].stat().st_mode & 0o777 == 0o600 and stored[0].parent.stat().st_mode & 0o777 == 0o700

    stored[0].write_text("{")
    retraced = ScenarioRun(tmp_path / "retraced", "compiled_backward_mismatch.py", args, cache)
    assert "(from cache)" not in retraced.aot_log
    assert recorded(retraced) == (casts, ops, found)
    assert json.loads(stored[0].read_text())["graphs"]  # stored anew
