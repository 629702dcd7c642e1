"""Casts castscope makes without Tensor::to's dispatch (make_cast's `direct`
in agent/src/dispatch/kernel_core.h, cast_without_dispatch.h: at::_to_copy, the
op to() calls, after the RecordFunction draw to's dispatch takes) against
native autocast, to everything that can look at a cast: its tensor, autograd's
graph and gradients, a profiler's list of ops (thread-local RecordFunction
callbacks), an execution trace's (global ones), a Python dispatch mode's, and
the JIT tracer's graph. The last two make castscope cast as native does (their
thread includes a dispatch key); the others run the direct path in the steady
state of full and aggregate mode. Sampled observers: dispatch_test.cc.

Each test runs on the CPU (bfloat16) and, where torch sees a GPU, on CUDA
(float16): castscope reads native's cast order from a CPU op at attach
(native_cast_order.h) and its CUDA kernels cast in it too.
"""
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import castscope
from parity import same_result, steady_state


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                               reason="needs a CUDA device"))]
AUTOCAST_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16}


def _autocast(device):
    return torch.autocast(device, dtype=AUTOCAST_DTYPE[device])


def _attached(tmp_path, **options):
    """Attached in the steady state from the first op: no op probe, numerics or
    GPU timing window open (in one, the unboxed kernel records each cast as it
    is made, through cached_cast as natively)."""
    return castscope.attached(events_path=tmp_path / "events.jsonl", **steady_state(windows=False),
                              gpu_timing="off", **options)


def _graph_names(root):
    """Autograd's graph below `root`, breadth first, by node name. Seen nodes
    are kept (not only their ids): each access to next_functions may make a
    new Python object for a C++ node, and a freed one's id can be reused by
    another node (seen on torch 2.11: a graph walked short)."""
    names, frontier, seen = [], [root.grad_fn], {}
    while frontier:
        node = frontier.pop(0)
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        names.append(node.name())
        frontier.extend(next_node for next_node, _ in node.next_functions)
    return names


def _training_step(device):
    """An fp32 activation that needs grad (not a leaf: cast directly), a weight
    (a leaf: the cast cache's) and an input that needs no grad (cast directly),
    through the unboxed kernel (mm, linear) and the boxed one (cross_entropy_loss,
    fp32: a bf16 activation cast up)."""
    torch.manual_seed(0)
    x = torch.randn(8, 8, device=device)
    w1 = torch.randn(8, 8, device=device, requires_grad=True)
    w2 = torch.randn(8, 8, device=device, requires_grad=True)
    labels = torch.randint(0, 8, (8,), device=device)
    with _autocast(device):
        h = torch.sin(x * w1)  # float32 under autocast
        out = torch.mm(h, w2)
        plain = torch.mm(x, x)
        lin = torch.nn.functional.linear(h, w2)
        loss = torch.nn.functional.cross_entropy(out, labels)
    (loss + lin.float().sum()).backward()
    return {"out": out, "plain": plain, "lin": lin, "loss": loss, "w1.grad": w1.grad, "w2.grad": w2.grad,
            "graph": _graph_names(loss) + _graph_names(lin)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggregate", [False, True], ids=["full", "aggregate"])
def test_direct_casts_give_the_same_tensors_graph_and_gradients(tmp_path, aggregate, device):
    native = _training_step(device)
    with _attached(tmp_path, aggregate=aggregate) as agent:
        before = agent.status()["direct_casts"]  # the process's count: earlier attaches included
        attached = _training_step(device)
        direct = agent.status()["direct_casts"] - before
    assert "ToCopyBackward0" in native["graph"]
    # mm's h and x (twice), linear's h, cross_entropy's bf16 out; not the weights (the cache's)
    assert direct == 5, direct
    for key in native:
        assert same_result(native[key], attached[key], key) is None, same_result(native[key], attached[key], key)


def _inputs(device):
    """Two inputs told apart by their shapes and autograd, both cast directly:
    an activation that needs grad (its cast has an autograd node and sequence
    number) and an input that needs none. What observes the casts sees their
    order: castscope casts in native autocast's (native_cast_order.h; the
    wheel's libtorch, built by GCC, casts right to left)."""
    torch.manual_seed(0)
    return (torch.randn(8, 4, device=device, requires_grad=True) * 2, torch.randn(4, 8, device=device))


def _two_ops(x, y):
    """mm (the unboxed kernel) and linalg_vecdot (the boxed one), each casting
    both its inputs directly; their outputs."""
    return torch.mm(x, y), torch.linalg.vecdot(x, y.t())


def _profiled_ops(device):
    """Every aten op the profiler saw, in order, with its input shapes and
    scalar inputs' values, its autograd sequence number relative to mm's (-1:
    none), and its parent."""
    x, y = _inputs(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with _autocast(device):
            _two_ops(x, y)
    events = [e for e in sorted(prof.events(), key=lambda e: (e.time_range.start, -e.time_range.end))
              if e.name.startswith("aten::")]
    mm = next(e.sequence_nr for e in events if e.name == "aten::mm")
    return [(e.name, e.input_shapes, e.concrete_inputs,
             e.sequence_nr - mm if e.sequence_nr >= 0 else -1, e.cpu_parent.name if e.cpu_parent else None)
            for e in events]


@pytest.mark.parametrize("device", DEVICES)
def test_a_profiler_lists_the_casts_ops_as_natively(tmp_path, device):
    native = _profiled_ops(device)
    assert [name for name, *_ in native].count("aten::to") == 4
    with _attached(tmp_path) as agent:
        before = agent.status()["direct_casts"]
        attached = _profiled_ops(device)
        assert agent.status()["direct_casts"] - before == 4  # cast without to's dispatch, its callbacks run
    assert attached == native


def _execution_trace(path, device):
    """The ops an execution trace (global RecordFunction callbacks, inputs and
    outputs) recorded, in order: name, inputs' and outputs' shapes and types,
    the values of its inputs that are not tensors (a tensor's value names its
    storage, another in each run), parent's name."""
    x, y = _inputs(device)
    observer = torch.profiler.ExecutionTraceObserver().register_callback(str(path))
    observer.start()
    with _autocast(device):
        _two_ops(x, y)
    observer.stop()
    observer.unregister_callback()
    nodes = json.loads(path.read_text())["nodes"]
    names = {node["id"]: node["name"] for node in nodes}
    def plain_values(values):
        return [value for value, kind in zip(values["values"], values["types"]) if "Tensor" not in kind]

    return [(node["name"], node["inputs"]["shapes"], node["inputs"]["types"], plain_values(node["inputs"]),
             node["outputs"]["shapes"], node["outputs"]["types"], names.get(node["ctrl_deps"]))
            for node in nodes if node["name"].startswith("aten::")]


@pytest.mark.parametrize("device", DEVICES)
def test_an_execution_trace_records_the_casts_ops_as_natively(tmp_path, device):
    native = _execution_trace(tmp_path / "native.json", device)
    assert [name for name, *_ in native].count("aten::to") == 4
    with _attached(tmp_path) as agent:
        before = agent.status()["direct_casts"]
        attached = _execution_trace(tmp_path / "attached.json", device)
        assert agent.status()["direct_casts"] - before == 4
    assert attached == native


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func), [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def _dispatched_ops(device):
    x, y = _inputs(device)
    with _OpLog() as log, _autocast(device):
        _two_ops(x, y)
    return log.ops


def _traced_graph(device):
    def fn(x, y):
        with _autocast(device):
            return _two_ops(x, y)

    traced = torch.jit.trace(fn, _inputs(device), check_trace=False)
    return [(node.kind(), [value.debugName() for value in node.inputs()]) for node in traced.graph.nodes()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("observed,cast_op", [(_dispatched_ops, "aten._to_copy.default"), (_traced_graph, "aten::to")],
                         ids=["dispatch_mode", "trace"])
def test_a_dispatch_mode_or_trace_sees_the_casts_ops_as_natively(tmp_path, observed, cast_op, device):
    """The mode's dispatch key, or the tracer's, included on the thread: castscope casts as natively, none directly."""
    native = observed(device)
    assert [name for name, _ in native].count(cast_op) == 4
    with _attached(tmp_path) as agent:
        before = agent.status()["direct_casts"]
        attached = observed(device)
        assert agent.status()["direct_casts"] == before
    assert attached == native


def _memory_events(device):
    """The bytes of every allocation (+) and free (-) a memory-profiling
    profiler saw, in order, around an mm (unboxed kernel) and a linalg_vecdot
    (boxed) whose inputs differ in size: the casts' allocations show the order
    they were made in, their frees the order their tensors were let go."""
    torch.manual_seed(0)
    x, y, row = (torch.randn(shape, device=device) for shape in ((64, 32), (32, 128), (1, 32)))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        with _autocast(device):
            torch.mm(x, y)
            torch.linalg.vecdot(x, row)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    return [e.nbytes() for e in sorted(events, key=lambda e: e.start_ns())]


@pytest.mark.parametrize("device", DEVICES)
def test_a_memory_profile_sees_the_casts_allocations_and_frees_as_natively(tmp_path, device):
    _memory_events(device)  # once first: a first CUDA mm allocates cuBLAS's workspace, natively or not
    native = _memory_events(device)
    assert 8192 in native and -4096 in native  # y's cast (32 x 128, 2 bytes) made, x's let go
    with _attached(tmp_path):
        attached = _memory_events(device)
    assert attached == native
