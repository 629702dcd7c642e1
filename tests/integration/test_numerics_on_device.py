"""Numerics at the cast (docs/numerics.md) read straight from the agent's
events file, on the CPU and on CUDA. On CUDA the checks' sums stay on the
device until a window closes and GradScaler's values come back through
pinned memory and a CUDA event: code the CPU rows never reach. The CUDA rows
run only where torch sees a GPU (checked on a GPU machine, docs/gpu.md); no
collector is needed, so they run on a machine with torch and the agent
alone."""
from __future__ import annotations

import contextlib
import pathlib

import pytest
import torch

import castscope
import helpers
from castscope.events import read_events
from helpers import policies_for_this_torch

THIS_FILE = str(pathlib.Path(__file__).resolve())
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")),
]
ALWAYS_OPEN = {"steps": 10 ** 9, "max_ms": 10 ** 9}


def attached(tmp_path, device: str, numerics) -> contextlib.AbstractContextManager:
    return castscope.attached(policy_files=policies_for_this_torch(device), events_path=tmp_path / "events.jsonl", probe=False,
                              gpu_timing="off", numerics=numerics)


def summaries(tmp_path) -> list[dict]:
    return [e["numerics"] for e in read_events(tmp_path / "events.jsonl") if "numerics" in e]


def line_of(marker: str) -> int:
    return helpers.line_of(pathlib.Path(THIS_FILE), f"# {marker}")  # the commented line, not a test naming it


def at_line(summary: dict, marker: str) -> bool:
    location = summary.get("location", {})
    return location.get("file") == THIS_FILE and int(location.get("line", 0)) == line_of(marker)


def overflow_steps(device: str, steps: int = 4) -> list[torch.Tensor]:
    torch.manual_seed(0)
    w = torch.randn(8, 8, device=device, requires_grad=True)
    outputs = []
    for _ in range(steps):
        x = torch.randn(4, 8, device=device)
        x[0, :3] = 1e5  # three values past float16's range
        eps = torch.full((4, 8), 1e-9, device=device)
        with torch.autocast(device, dtype=torch.float16):
            h = torch.mm(x, w)  # the overflowing mm
            y = torch.addmm(eps, h.nan_to_num(), w)  # the underflowing addmm
        y.float().nan_to_num().sum().backward()
        outputs += [h.detach().clone(), y.detach().clone(), w.grad.detach().clone()]
        w.grad = None
    return outputs


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


@pytest.mark.parametrize("device", DEVICES)
def test_overflow_and_underflow_are_counted_at_the_line_and_outputs_stay_bit_identical(tmp_path, device):
    native = overflow_steps(device)
    with attached(tmp_path, device, ALWAYS_OPEN):
        observed = overflow_steps(device)
    assert len(native) == len(observed) == 12
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(native, observed))

    events = summaries(tmp_path)
    casts = [s for s in events if s["kind"] == "KIND_CAST"]
    [overflow] = [s for s in casts if at_line(s, "the overflowing mm") and s["arg_name"] == "self"]
    checked = int(overflow["tensors"])
    assert checked == 4  # x is new every step: four casts, none served by the cache
    assert (int(overflow["overflowed"]), int(overflow["values"])) == (3 * checked, 32 * checked)
    assert int(overflow["max_abs_log2"]) == 16  # 1e5 lies in [2^16, 2^17)
    assert overflow["device_type"] == ("DEVICE_TYPE_CUDA" if device == "cuda" else "DEVICE_TYPE_CPU")
    [underflow] = [s for s in casts if at_line(s, "the underflowing addmm") and s["arg_name"] == "self"]
    assert int(underflow["underflowed"]) == int(underflow["values"]) == 32 * int(underflow["tensors"]) > 0
    # addmm's output overflows from finite inputs (65504 times the weights): the op produced it. mm's does not
    # count: its input already held inf.
    outputs = {line: s for s in events if s["kind"] == "KIND_OP_OUTPUT"
               for line in ("the overflowing mm", "the underflowing addmm") if at_line(s, line)}
    assert int(outputs["the underflowing addmm"]["nonfinite"]) > 0
    assert int(outputs["the underflowing addmm"]["first_nonfinite_seq"]) > 0
    assert int(outputs["the overflowing mm"]["nonfinite"]) == 0
    # The weight's values are all in range: its casts are checked and count nothing.
    weights = [s for s in casts if s["arg_name"] == "mat2"]
    assert weights and not any(int(s.get("overflowed", 0)) or int(s.get("underflowed", 0)) for s in weights)


def scaler_steps(device: str, steps: int) -> tuple[list[float], list[torch.Tensor]]:
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(16, 16).to(device), torch.nn.Linear(16, 1).to(device)
    with torch.no_grad():
        fc1.weight.fill_(0.5)
    parameters = list(fc1.parameters()) + list(fc2.parameters())
    opt = torch.optim.SGD(parameters, lr=1e-4)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8)
    scales = []
    for step in range(steps):
        x = torch.rand(4, 16, device=device)
        if step % 7 == 6:
            x = torch.full((4, 16), 1e4, device=device)  # 0.5 * 16 * 1e4 = 8e4 > 65504
        with torch.autocast(device, dtype=torch.float16):
            h = fc1(x)  # the overflowing layer
            loss = fc2(torch.relu(h)).float().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()  # the update line
        scales.append(scaler.get_scale())
        opt.zero_grad()
    return scales, [p.detach().clone() for p in parameters]


@pytest.mark.parametrize("device", DEVICES)
def test_gradscaler_updates_are_recorded_as_it_reports_them_with_the_first_nonfinite_op(tmp_path, device):
    steps = 40
    native_scales, native_weights = scaler_steps(device, steps)
    with attached(tmp_path, device, True):  # the default windows: the skips outside them open captures
        scales, weights = scaler_steps(device, steps)
    assert scales == native_scales
    assert all(torch.equal(a, b) for a, b in zip(native_weights, weights))
    skipped = [i for i in range(steps) if scales[i] < (scales[i - 1] if i else 2.0 ** 8)]
    assert len(skipped) == 5

    events = summaries(tmp_path)
    updates = [s for s in events if s["kind"] == "KIND_SCALER_UPDATE"]
    # Every update, read without synchronising: on CUDA through pinned memory, read at a later update or at detach.
    assert [float(u["scale"]) for u in updates] == scales
    assert [i for i, u in enumerate(updates) if u.get("found_inf")] == skipped
    assert all(at_line(u, "the update line") for u in updates)
    assert [int(u["tensors"]) for u in updates] == list(range(1, steps + 1))
    outputs = [s for s in events if s["kind"] == "KIND_OP_OUTPUT" and int(s.get("nonfinite", 0)) > 0]
    assert outputs and all(at_line(s, "the overflowing layer") and s["op"] == "aten::linear" for s in outputs)


@pytest.mark.parametrize("device", DEVICES)
def test_updates_made_while_detached_are_counted_not_reported_and_none_reaches_the_next_agent(tmp_path, device):
    """Each agent gets exactly its own updates: on CUDA the last ones, still being copied at detach, are
    written before it stops, and a later agent is not handed an earlier one's."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 1).to(device)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8)

    def updates(n: int) -> None:
        for _ in range(n):
            with torch.autocast(device, dtype=torch.float16):
                loss = layer(torch.rand(4, 8, device=device)).float().mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()

    def counts(name: str) -> list[int]:
        return [int(e["numerics"]["tensors"]) for e in read_events(tmp_path / name)
                if "numerics" in e and e["numerics"]["kind"] == "KIND_SCALER_UPDATE"]

    for name, n in (("first.jsonl", 2), (None, 3), ("second.jsonl", 1)):
        if name is None:
            updates(n)  # detached
            continue
        with castscope.attached(policy_files=policies_for_this_torch(device), events_path=tmp_path / name, probe=False,
                                gpu_timing="off", numerics=True):
            updates(n)
    assert counts("first.jsonl") == [1, 2]
    assert counts("second.jsonl") == [6]  # the scaler's sixth update: the detached ones counted, not written


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
def test_a_cuda_graph_captured_inside_an_open_window_replays_bit_identical(tmp_path):
    """Inside a capture castscope checks nothing and closes no window: its checks must not join the
    graph, and reading the device sums would synchronise, which a capture forbids."""
    def replays(attach: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
        static = torch.randn(16, 64, device="cuda")
        context = attached(tmp_path, "cuda", ALWAYS_OPEN) if attach else contextlib.nullcontext()
        with context:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():  # warm up on a side stream, as torch's docs do
                for _ in range(3):
                    with torch.autocast("cuda", dtype=torch.float16):
                        model(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), torch.no_grad():
                with torch.autocast("cuda", dtype=torch.float16):
                    out = model(static)
            results = []
            for i in range(3):
                static.copy_(torch.full_like(static, float(i)) + torch.arange(64, device="cuda"))
                graph.replay()
                results.append(out.clone())
            torch.cuda.synchronize()
        return results

    native, observed = replays(False), replays(True)
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(native, observed))
    # The warm-up's ops were checked (the window was open); the captured ones were not.
    assert [s for s in summaries(tmp_path) if s["kind"] == "KIND_CAST"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
def test_the_checks_kernels_are_not_timed_as_the_ops(tmp_path):
    """With GPU timing on, a window's check kernels run under castscope's own launch id: the casts and ops
    keep exactly the kernels they have without the checks, and the agent counts the checks' ones."""
    from collections import Counter

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
    x = torch.randn(16, 64, device="cuda")

    def timed(name: str, numerics) -> tuple[Counter, int]:
        events = tmp_path / f"{name}.jsonl"
        with castscope.attached(policy_files=policies_for_this_torch("cuda"), events_path=events, probe=False,
                                gpu_timing={"mode": "on", "steps": 0}, numerics=numerics) as agent:
            for _ in range(2):
                with torch.autocast("cuda", dtype=torch.float16):
                    model(x).float().sum().backward()
            torch.cuda.synchronize()
        own = agent.status()["gpu_own_kernels"]  # after detach: every buffer was flushed
        kernels = [e["kernel"] for e in read_events(events) if "kernel" in e]
        return Counter((k["launched_by"], k["name"]) for k in kernels if k["launched_by"] != "LAUNCHED_BY_NONE"), own

    timed("warm-up", False)
    plain, plain_own = timed("plain", False)
    checked, checked_own = timed("checked", ALWAYS_OPEN)
    assert plain and checked == plain
    assert plain_own == 0 and checked_own > 0
