"""Per-op overhead of castscope's autocast kernel, side by side in one run.

Rows, each timed on the same tensors in the same process:
  native         torch's own autocast kernels (the baseline, 1.00x)
  castscope      castscope attached, every event recorded with its source location and
                 context, dumped as JSON lines (between op probe windows: the steady state)
  castscope+probe  the same inside an op probe window (docs/diagnostics.md): a global
                 RecordFunction observer with inputs and outputs sees every op
  castscope+numerics  the same inside a numerics window (docs/numerics.md): each cast the
                 cache did not serve and each op's output checked for inf, NaN and zeros
  castscope+gpu  the same inside a GPU timing window (docs/gpu.md; CUPTI on, every CUDA
                 op's and cast's launches correlated): with --device cuda only
  castscope-noloc  the same without source locations
  castscope-off  castscope attached with record_events=False (casts only)
  castscope-aggregate  aggregate mode (docs/aggregate.md): per-site counters, no per-event records
  castscope-no-explicit  castscope attached with explicit_casts=False: autocast's casts alone, no
                 kernels on _to_copy / copy_ (docs/events.md, "Makers"); against `castscope`, what
                 recording every other conversion costs
  profiler       native autocast inside torch.profiler (record_shapes, with_stack)
  dispatch-mode  native autocast under a Python TorchDispatchMode dtype logger

    .venv/bin/python bench/dispatch_overhead_bench.py [--iters 20000] [--repeats 7] [--rows native,castscope]
        [--device cuda] [--grad]
With --device cuda the same ops run on the GPU under float16 autocast (what
the CPU spends launching them: the kernels are tiny). With --grad they run
with autograd on, as a training step's forward does: linear's and conv2d's
calls then record their autograd nodes (mm's inputs require no grad). Their
parameters' casts are the cast cache's either way (it serves leaves that
require grad, in or out of no_grad). Prints CPU microseconds per op of the calling thread (time.thread_time_ns:
time the thread was descheduled does not count, which removes most of a
shared VM's noise), median and minimum of the repeats, and ratios to native.
"""
import contextlib
import functools
import tempfile
import time

import torch

import castscope
from baselines import DtypeLogger, profiler_with_stacks
from harness import interleaved, medians, repeats_parser


def make_cases(device):
    torch.manual_seed(0)
    a, b = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    linear = torch.nn.Linear(16, 16, device=device)
    x16 = torch.randn(4, 16, device=device)
    conv = torch.nn.Conv2d(3, 4, 3, device=device)
    img = torch.randn(1, 3, 8, 8, device=device)
    src, dst = torch.randn(64, 64, device=device), torch.empty(64, 64, device=device)
    with torch.no_grad():
        return {
            "mm 8x8": lambda: torch.mm(a, b),
            "linear 4x16->16": lambda: torch.nn.functional.linear(x16, linear.weight, linear.bias),
            "conv2d 1x3x8x8 k3": lambda: torch.nn.functional.conv2d(img, conv.weight, conv.bias),
            # The explicit-cast kernels' ops: a copy that converts nothing, and an explicit conversion.
            "copy_ 64x64 same dtype": lambda: dst.copy_(src),
            "to 64x64 f32->bf16": lambda: src.to(torch.bfloat16),
        }


def time_once(fn, iters, wrap, device="cpu", grad=False):
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    with torch.enable_grad() if grad else torch.no_grad(), wrap(), torch.autocast(device, dtype=dtype):
        for _ in range(200):
            fn()
        start = time.thread_time_ns()
        for _ in range(iters):
            fn()
        return (time.thread_time_ns() - start) / iters / 1e3


def main():
    parser = repeats_parser(7, iters=20000)
    parser.add_argument("--rows", default="", help="comma-separated rows to time (native is always timed); default: all")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the ops run (default cpu)")
    parser.add_argument("--grad", action="store_true", help="autograd on: a training step's forward (default: no_grad)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    torch.set_num_threads(1)
    cases = make_cases(args.device)
    recorded = {}  # row -> (events recorded, dropped) in its last timing: a row that records nothing shows

    with tempfile.TemporaryDirectory() as tmp:
        @contextlib.contextmanager
        def agent(row, record_events=True, locations=True, probe=False, aggregate=False, numerics=False, gpu="off",
                  explicit_casts=True):
            # Each attach opens a probe, a numerics and (on a CUDA machine) a
            # GPU timing window that outlast one timing: rows choose by turning
            # them on (a schedule) or off.
            with castscope.attached(events_path=f"{tmp}/events.jsonl", record_events=record_events,
                                    ring_records=1 << 20, locations=locations, probe=probe,
                                    aggregate=aggregate, numerics=numerics, gpu_timing=gpu,
                                    explicit_casts=explicit_casts) as a:
                yield
                a.flush()  # aggregate mode's counters too: the status then counts this timing whole
                status = a.status()
            recorded[row] = (status["events_recorded"], status["events_dropped"])

        agent_rows = {  # row -> how it attaches
            "castscope": {},
            "castscope+probe": {"probe": {"max_ms": 600000}},
            "castscope+numerics": {"numerics": {"max_ms": 600000}},
            "castscope+gpu": {"gpu": {"mode": "on", "window_max_ms": 600000}},
            "castscope-noloc": {"locations": False},
            "castscope-off": {"record_events": False},
            "castscope-aggregate": {"aggregate": True},
            "castscope-no-explicit": {"explicit_casts": False},
        }
        rows = {
            "native": (contextlib.nullcontext, 1),
            **{row: (functools.partial(agent, row, **options), 1) for row, options in agent_rows.items()},
            "profiler": (profiler_with_stacks, 10),
            "dispatch-mode": (DtypeLogger, 10),
        }
        if args.rows:
            wanted = {"native", *args.rows.split(",")}
            unknown = wanted - rows.keys()
            if unknown:
                parser.error(f"--rows: unknown row(s) {', '.join(sorted(unknown))}; rows: {', '.join(rows)}")
            rows = {row: spec for row, spec in rows.items() if row in wanted}
        if args.device != "cuda":
            if args.rows and "castscope+gpu" in wanted:
                parser.error("--rows castscope+gpu: needs --device cuda (no CUDA op to time)")
            rows.pop("castscope+gpu", None)
        for fn in cases.values():
            time_once(fn, args.iters, contextlib.nullcontext, args.device, args.grad)  # warm-up

        def measure(cell):
            name, row = cell
            wrap, slowdown = rows[row]
            return time_once(cases[name], max(args.iters // slowdown, 100), wrap, args.device, args.grad)

        samples = interleaved([(name, row) for name in cases for row in rows], args.repeats, measure)

    print(f"torch {torch.__version__}, {args.device}{', autograd on' if args.grad else ''}, 1 intra-op thread, median of {args.repeats} interleaved runs of {args.iters} calls"
          " (profiler and dispatch-mode rows: a tenth)")
    print("castscope events recorded, dropped in each row's last timing: "
          + ", ".join(f"{row} {events} / {dropped}" for row, (events, dropped) in recorded.items()))
    header = f"{'op':20s} {'row':18s} {'median us':>9s} {'x native':>9s} {'min us':>8s} {'x native':>9s}"
    print(header)
    print("-" * len(header))
    median = medians(samples)
    for name in cases:
        base, base_min = median[(name, "native")], min(samples[(name, "native")])
        for row in rows:
            value, low = median[(name, row)], min(samples[(name, row)])
            print(f"{name:20s} {row:18s} {value:9.2f} {value / base:8.2f}x {low:8.2f} {low / base_min:8.2f}x")


if __name__ == "__main__":
    main()
