"""End-to-end cost of castscope on a training step (budget: <= 2 % with full events).

ResNet-18 (torchvision, random init) on random 8x3x64x64 batches, SGD, bf16
CPU autocast. Rows, interleaved within each repeat:
  native         torch's autocast
  castscope      castscope attached: every cast with location, context, cache outcome
                 (between op probe windows: the steady state)
  castscope+probe  the same with an op probe window open for every step (the first
                 steps of a run, then 2 steps in 100; docs/diagnostics.md)
  castscope+numerics  the same with a numerics window open for every step (the
                 first steps, then 2 in 100; docs/numerics.md)
Then, derived from the rows: a run with the default windows, where probe and
numerics windows are open in 2 steps of every 100:
  0.98 * castscope + 0.02 * (castscope+probe + castscope+numerics - castscope).
  castscope-aggregate  aggregate mode: counters per site instead of events (docs/aggregate.md)
  castscope-noloc  the same without source locations
  castscope-off  castscope attached, recording nothing (the kernel alone)
  profiler       torch.profiler with record_shapes and with_stack
  dispatch-mode  a Python TorchDispatchMode dtype logger

    .venv/bin/python bench/training_step_bench.py [--steps 5] [--repeats 7] 2>/dev/null
"""
import contextlib
import tempfile

import torch
import torchvision

import castscope
from baselines import DtypeLogger, profiler_with_stacks
from harness import interleaved, medians, ms_per_step, repeats_parser
from helpers import autocast_steps  # noqa: E402 (harness puts tests/integration on the path)


def main():
    args = repeats_parser(7, steps=5).parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))

    def steps(n):
        autocast_steps(model, optimizer, x, y, n)

    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            "native": contextlib.nullcontext,
            "castscope": lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", probe=False, numerics=False),
            "castscope+probe": lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", numerics=False,
                                                          probe={"steps": 1000, "max_ms": 600000}),
            "castscope+numerics": lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", probe=False,
                                                             numerics={"steps": 1000, "max_ms": 600000}),
            "castscope-aggregate": lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", probe=False,
                                                              numerics=False, aggregate=True),
            "castscope-noloc": lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", locations=False, probe=False,
                                                          numerics=False),
            "castscope-off": lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", record_events=False, probe=False,
                                                        numerics=False),
            "profiler": profiler_with_stacks,
            "dispatch-mode": DtypeLogger,
        }
        steps(2)
        median = medians(interleaved(rows, args.repeats, lambda row: ms_per_step(rows[row], steps, args.steps, 1)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ResNet-18 8x3x64x64 bf16 training step, "
          f"median of {args.repeats} interleaved runs of {args.steps} steps")
    steady = median["castscope"]
    median["default windows"] = 0.98 * steady + 0.02 * (median["castscope+probe"] + median["castscope+numerics"] - steady)
    print(f"{'row':20s} {'ms/step':>8s} {'x native':>9s}")
    for row, value in median.items():
        print(f"{row:20s} {value:8.1f} {value / median['native']:8.3f}x")


if __name__ == "__main__":
    main()
