"""Context on every cast: role, source location, mode, phase, cache outcome.

Each scenario is real torch on the CPU through castscope; lines are found by
the marker comments at the end of the lines they name.
"""
import gc
import pathlib
import warnings

import pytest
import torch

import castscope
import helpers

THIS_FILE = str(pathlib.Path(__file__).resolve())


def line_of(marker: str) -> int:
    return helpers.line_of(pathlib.Path(THIS_FILE), f"# <{marker}>")


def casts_of(agent, op, arg=None):
    return [c for c in agent.casts() if c["op"] == op and (arg is None or c["arg_name"] == arg)]


def test_eager_forward_backward_roles_locations_and_cache(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            first = model(x)  # <first-forward>
            second = model(x)  # <second-forward>
            (first.float().sum() + second.float().sum()).backward()  # <backward>
        casts = casts_of(agent, "aten::linear")
        ops = agent.ops()
    by_line = {}
    for c in casts:
        assert c["location"]["kind"] == "KIND_PYTHON" and c["location"]["file"] == THIS_FILE, c["location"]
        assert c["location"]["function"] == "test_eager_forward_backward_roles_locations_and_cache"
        assert c["mode"] == "EXECUTION_MODE_EAGER" and c["phase"] == "PHASE_FORWARD"
        by_line.setdefault(c["location"]["line"], {})[c["arg_name"]] = c
    first_casts, second_casts = by_line[line_of("first-forward")], by_line[line_of("second-forward")]
    assert first_casts["input"]["role"] == "ROLE_INPUT" and first_casts["input"]["cache"] == "CACHE_OUTCOME_NOT_CACHEABLE"
    assert first_casts["weight"]["role"] == "ROLE_WEIGHT" and first_casts["weight"]["cache"] == "CACHE_OUTCOME_MISS"
    assert second_casts["weight"]["cache"] == "CACHE_OUTCOME_HIT"
    assert second_casts["bias"]["cache"] == "CACHE_OUTCOME_HIT"
    backward = [o for o in ops if o["phase"] == "PHASE_BACKWARD"]
    assert backward, "backward inside the region dispatches autocast ops"
    assert {o["location"]["line"] for o in backward} == {line_of("backward")}


def test_autocast_state_on_op_events(tmp_path):
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.float16):
            torch.mm(torch.randn(2, 2), torch.randn(2, 2))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.mm(torch.randn(2, 2), torch.randn(2, 2))
        outer, inner = [o for o in agent.ops() if o["op"] == "aten::mm"]
    assert (outer["autocast_nesting"], outer["autocast_dtype"]) == (1, "DTYPE_FLOAT16")
    assert (inner["autocast_nesting"], inner["autocast_dtype"]) == (2, "DTYPE_BFLOAT16")
    assert outer["autocast_enabled"] == ["DEVICE_TYPE_CPU"]


def test_activation_role(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randn(2, 8))
        inputs = [c for c in casts_of(agent, "aten::linear", "input")]
    assert [c["role"] for c in inputs] == ["ROLE_INPUT", "ROLE_ACTIVATION"]
    assert inputs[1]["outcome"] == "CAST_OUTCOME_ALREADY_TARGET"  # relu kept bf16


def test_roles_match_autograd_for_views_and_detached_tensors(tmp_path):
    """A cast's role is what torch's requires_grad and is_leaf say of its
    source (castscope reads the autograd meta itself, as C++'s is_leaf does:
    the grad_fn stored; Python's regenerates a view's after its base changed
    in place, which none of these had): views of a weight made
    with and without grad, a detached copy, a detached copy made to need
    grad, an activation and a plain input."""
    w = torch.randn(8, 8, requires_grad=True)
    with torch.no_grad():
        view_without_grad = w.view(8, 8)
    sources = {
        "input": torch.randn(8, 8),
        "weight": w,
        "view_of_weight": w.t(),
        "view_without_grad": view_without_grad,
        "detached": w.detach(),
        "detached_needing_grad": w.detach().clone().requires_grad_(),
        "activation": w * 2,
    }
    expected = {name: "ROLE_INPUT" if not t.requires_grad else ("ROLE_WEIGHT" if t.is_leaf else "ROLE_ACTIVATION")
                for name, t in sources.items()}
    assert set(expected.values()) == {"ROLE_INPUT", "ROLE_WEIGHT", "ROLE_ACTIVATION"}
    x = torch.randn(4, 8)
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for t in sources.values():
                torch.mm(x, t)
        seen = [c["role"] for c in casts_of(agent, "aten::mm", "mat2")]
    assert seen == list(expected.values()), (list(expected), seen)


def test_whole_loop_in_one_region_gives_stale_hits(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for _ in range(3):
                optimizer.zero_grad()
                model(x).float().sum().backward()
                optimizer.step()
        weights = casts_of(agent, "aten::linear", "weight")
    samples = [e["cache_sample"] for e in castscope.read_events(tmp_path / "e.jsonl") if "cache_sample" in e]
    assert [w["cache"] for w in weights] == ["CACHE_OUTCOME_MISS", "CACHE_OUTCOME_STALE_HIT", "CACHE_OUTCOME_STALE_HIT"]
    assert int(weights[1]["source_version"]) > int(weights[1]["cached_version"])
    assert weights[2]["cached_version"] == weights[0]["source_version"]  # still the first step's copy
    iterations = [s for s in samples if s["trigger"] == "TRIGGER_ITERATION"]
    assert [s["iteration"] for s in iterations] == ["1", "2", "3"]
    assert all(s["live_casts"] == "2" for s in iterations)  # weight and bias stay cached
    assert samples[-1]["trigger"] == "TRIGGER_STOP"


def test_recommended_loop_has_no_stale_hits(tmp_path):
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        for _ in range(3):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().sum()
            loss.backward()
            optimizer.step()
        weights = casts_of(agent, "aten::linear", "weight")
        samples = [s for s in agent.cache_samples() if s["trigger"] == "TRIGGER_ITERATION"]
    assert [w["cache"] for w in weights] == ["CACHE_OUTCOME_MISS"] * 3
    assert all(s["live_casts"] == "0" for s in samples)  # the region exit cleared the cache


# Two identical functions: the graph executor keeps the plan it made under
# the JIT autocast setting of its first runs.
@torch.jit.script
def scripted_jit_autocast_on(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.mm(x, w)  # <scripted-mm-on>


@torch.jit.script
def scripted_jit_autocast_off(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.mm(x, w)  # <scripted-mm-off>


@torch.jit.script
def scripted_plain(x, w):
    return torch.mm(x, w)  # <scripted-plain-mm>


@pytest.mark.parametrize("jit_autocast", [True, False], ids=["jit-autocast-on", "jit-autocast-off"])
def test_scripted_function_with_autocast_inside(tmp_path, jit_autocast):
    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    scripted_with_autocast = scripted_jit_autocast_on if jit_autocast else scripted_jit_autocast_off
    marker = "scripted-mm-on" if jit_autocast else "scripted-mm-off"
    previous = torch._C._jit_set_autocast_mode(jit_autocast)
    try:
        native = [scripted_with_autocast(x, w) for _ in range(3)]  # warm the profiling executor
        with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
            out = [scripted_with_autocast(x, w) for _ in range(3)]  # <call-scripted>
            casts = [c for c in agent.casts() if c["op"] in ("aten::_autocast_to_reduced_precision", "aten::mm")]
    finally:
        torch._C._jit_set_autocast_mode(previous)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(native, out))
    if not jit_autocast:
        # Without JIT autocast a scripted `with torch.autocast` is inert.
        assert out[0].dtype == torch.float32 and not casts
        return
    assert out[0].dtype == torch.bfloat16
    assert casts and {c["op"] for c in casts} == {"aten::_autocast_to_reduced_precision"}
    assert {c["mode"] for c in casts} == {"EXECUTION_MODE_SCRIPT"}
    assert {c["dst_dtype"] for c in casts} == {"DTYPE_BFLOAT16"}
    # The graph executor runs differentiable subgraphs on detached tensors, so
    # a weight passed into scripted code is seen as a plain input there.
    assert {c["role"] for c in casts} == {"ROLE_INPUT"}
    # The casts the JIT autocast pass inserts carry no source range, and this
    # executor optimized its graph before castscope attached (so castscope's
    # pass never saw it): the location is the Python line that called the
    # scripted function (test_jit_cast_lines.py covers the attached case).
    assert {(c["location"]["kind"], c["location"]["file"], c["location"]["line"]) for c in casts} == {
        ("KIND_PYTHON", THIS_FILE, line_of("call-scripted"))}


def test_scripted_code_under_eager_autocast_reports_script_range(tmp_path):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    previous = torch._C._jit_set_autocast_mode(False)
    try:
        with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = scripted_plain(x, w)
            casts = casts_of(agent, "aten::mm")
    finally:
        torch._C._jit_set_autocast_mode(previous)
    assert out.dtype == torch.bfloat16
    assert casts and {c["mode"] for c in casts} == {"EXECUTION_MODE_SCRIPT"}
    assert {(c["location"]["kind"], c["location"]["line"]) for c in casts} == {("KIND_TORCHSCRIPT", line_of("scripted-plain-mm"))}


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()  # <traced-forward>


class ScriptedLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)  # <scripted-module-linear>


def test_a_scripted_modules_layer_casts_at_the_users_line_as_eagerly(tmp_path):
    """nn.Linear is inlined into a scripted module's graph: its casts are at the
    user's `self.fc(x)`, as eagerly, not in torch's linear.py (which split an
    eager/script comparison of one line over two rows)."""
    module, x = ScriptedLinear(), torch.randn(2, 4)
    scripted = torch.jit.script(ScriptedLinear())
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for _ in range(3):
                module(x)
                scripted(x)
        casts = [c for c in agent.casts() if c["op"] == "aten::linear"]
    by_mode = {mode: {(c["location"]["file"], c["location"]["line"]) for c in casts if c["mode"] == mode}
               for mode in ("EXECUTION_MODE_EAGER", "EXECUTION_MODE_SCRIPT")}
    assert by_mode["EXECUTION_MODE_SCRIPT"], casts
    assert by_mode["EXECUTION_MODE_EAGER"] == by_mode["EXECUTION_MODE_SCRIPT"] == {(THIS_FILE, line_of("scripted-module-linear"))}


def test_traced_module_while_tracing_and_when_run(tmp_path):
    module, x = TwoLayer(), torch.randn(2, 4)
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(module, (x,), check_trace=False)
            traced(x)
            traced(x)
        casts = casts_of(agent, "aten::linear", "input")
    recording = [c for c in casts if c["mode"] == "EXECUTION_MODE_TRACE_RECORDING"]
    running = [c for c in casts if c["mode"] == "EXECUTION_MODE_TRACED"]
    assert recording and running
    want = line_of("traced-forward")
    assert {(c["location"]["kind"], c["location"]["file"], c["location"]["line"]) for c in recording} == {("KIND_PYTHON", THIS_FILE, want)}
    assert {(c["location"]["kind"], c["location"]["file"], c["location"]["line"]) for c in running} == {("KIND_TORCHSCRIPT", THIS_FILE, want)}


def test_one_user_file_rule_for_every_frame_walk(tmp_path):
    """The frame reader, TorchScript's traced stacks and the compile capture
    all ask the agent's castscope_source_kind; this is its answer."""
    from castscope._native import is_user_file

    with castscope.attached(events_path=tmp_path / "e.jsonl"):
        assert is_user_file(THIS_FILE) and is_user_file(__file__) and is_user_file("<string>")
        assert not is_user_file(torch.nn.functional.__file__)  # the config's internal_path_prefix
        assert not is_user_file(castscope.__file__)
        assert not any(is_user_file(f) for f in ("", "<frozen runpy>", "<eval_with_key>.3"))


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_agent_never_extends_a_cast_lifetime(tmp_path):
    """The bf16 copy of a 256 MiB weight lives in the cache only while the region does."""
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        gc.collect()
        baseline = _rss_bytes()
        weight = torch.nn.Parameter(torch.randn(8192, 8192))  # 256 MiB
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.linear(torch.randn(1, 8192), weight)
            inside = _rss_bytes()
            agent.mark_iteration()
        del weight
        gc.collect()
        after = _rss_bytes()
        samples = agent.cache_samples()
    assert inside - baseline > 300 * 2**20  # the weight and its cached bf16 copy
    assert after - baseline < 32 * 2**20, f"{(after - baseline) / 2**20:.0f} MiB still held"
    (marked,) = [s for s in samples if s["trigger"] == "TRIGGER_ITERATION"]
    assert marked["live_casts"] == "1" and int(marked["live_bytes"]) == 8192 * 8192 * 2


def test_a_module_built_under_inference_mode_has_its_casts_recorded(tmp_path):
    # Its weights are inference tensors: leaves that require grad, with no
    # version counter (asking raises). Outputs stay native; every cast is
    # recorded. Run outside inference mode, the cast cache keeps the weights'
    # casts and castscope observes them; under it, torch's cached_cast keeps
    # nothing, and castscope calls none the cache's. Nothing is counted as an
    # internal error.
    torch.manual_seed(0)
    with torch.inference_mode():
        model = torch.nn.Linear(8, 8)
        x = torch.randn(4, 8)

    def forward_twice():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            outside = [model(x), model(x)]  # <outside-inference-forward>
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            inside = [model(x), model(x)]  # <inference-forward>
        return outside + inside

    native = forward_twice()
    with castscope.attached(events_path=tmp_path / "e.jsonl") as agent:
        ours = forward_twice()
        weights = casts_of(agent, "aten::linear", "weight")
        status = agent.status()
    for a, b in zip(native, ours):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert len(weights) == 4
    assert all(c["role"] == "ROLE_WEIGHT" for c in weights), weights
    assert [c["cache"] for c in weights] == ["CACHE_OUTCOME_MISS", "CACHE_OUTCOME_HIT",
                                             "CACHE_OUTCOME_NOT_CACHEABLE", "CACHE_OUTCOME_NOT_CACHEABLE"], weights
    assert [c["location"]["line"] for c in weights] == [line_of("outside-inference-forward")] * 2 + [
        line_of("inference-forward")] * 2
    assert status["internal_errors"] == 0, status
