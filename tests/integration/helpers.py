"""What the integration tests (and the benches) share: finding a marked line,
the shipped policies as another torch (a GPU machine's) can load them,
the small training loops, a loopback address nobody listens on, the events a
job's JSON-lines dump holds. conftest.py puts this folder on sys.path; the
benches insert it themselves (bench/harness.py)."""
from __future__ import annotations

import pathlib
import socket
import sys
import textwrap

import torch

import castscope


def policies_for_this_torch(device: str = "cuda") -> list[str] | None:
    """`device`'s shipped policy less the ops another torch than the reference lacks (GPU machines run
    another torch: docs/gpu.md); None (the shipped policies) on the reference torch."""
    if torch.__version__.split("+")[0] == "2.14.1":
        return None
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "gpu"))
    from policy_for_this_torch import policy_for_this_torch
    return [policy_for_this_torch(device)]


def line_of(source: str | pathlib.Path, marker: str) -> int:
    """The number (from 1) of the first line of `source` (a file, or a text) that contains `marker`."""
    text = source.read_text() if isinstance(source, pathlib.Path) else source
    for number, line in enumerate(text.splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"no line with {marker!r}")


def scenario_code(name: str, indent: str = "") -> str:
    """The code of scenarios/`name` after its docstring and `import torch`,
    indented by `indent`: a test's own job built around a scenario."""
    text = (pathlib.Path(__file__).parent / "scenarios" / name).read_text()
    return textwrap.indent(text.split("import torch\n", 1)[1].lstrip("\n"), indent)


def autocast_steps(model, optimizer, x, y, steps: int, device: str = "cpu", loss_of=None) -> list[torch.Tensor]:
    """`steps` bf16 autocast training steps on one batch (cross entropy against `y`
    unless `loss_of` says otherwise); the losses, CUDA synchronized after the last."""
    loss_of = loss_of or (lambda out: torch.nn.functional.cross_entropy(out, y))
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_of(model(x))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    if device == "cuda":
        torch.cuda.synchronize()
    return losses


def mlp_step(device: str = "cuda"):
    """tests/gpu/smoke_on_gpu.py's training step, which test_gpu_timing.py profiles too: a 2-layer MLP
    (seeded by the caller), its forward and loss under bf16 autocast, backward and an SGD step outside
    the region. A function of no arguments that runs one step each call (CUDA synchronized after it)."""
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256, device=device)
    return lambda: autocast_steps(model, optimizer, x, None, 1, device, loss_of=lambda out: out.float().pow(2).mean())


# Self-contained, so that a test can also run it as a job's source (inspect.getsource).
def train(steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def closed_port() -> int:
    """A loopback port nothing listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_address() -> str:
    """host:port of a collector nobody runs."""
    return f"127.0.0.1:{closed_port()}"


def dumped_events(out: pathlib.Path) -> list[dict]:
    """The events of the one JSON-lines dump in `out`, the agent's stats left out."""
    [dump] = out.glob("events-*.jsonl")
    return [e for e in castscope.iter_events(dump) if "stats" not in e]


def seqs(events: list[dict]) -> list[int]:
    """The events' sequence numbers, sorted."""
    return sorted(int(next(iter(e.values()))["seq"]) for e in events)
