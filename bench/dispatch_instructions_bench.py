"""Instructions per autocast op, native and under castscope, counted by callgrind.

This VM's timings move 5-15 % between processes, more than a hot-path change
of a few tens of nanoseconds; instruction counts do not move. Each row is one
process under `valgrind --tool=callgrind`, counting only inside
`THPVariable_mm` (the Python binding's call of torch.mm: the dispatcher, the
autocast kernel, the casts and the matmul), over --ops calls of an 8x8 bf16
CPU autocast mm, the steady state (no probe or numerics window); with --op
the per-op bench's `linear` (4x16 -> 16 with bias: its weight's and bias's
casts the cast cache's) or `conv2d` (1x3x8x8, 4 filters 3x3 with bias)
inside `THPVariable_linear` / `THPVariable_conv2d` instead:

  native            torch's own autocast kernel
  castscope         castscope attached, every event recorded
  castscope-aggregate  the same in aggregate mode (--aggregate): per-site counters
  castscope:<lib>   the same with another build's agent library (old and new in one run);
                    with --aggregate also castscope-aggregate:<lib>

    .venv/bin/python bench/dispatch_instructions_bench.py [--ops 3000] [--agent-lib OLD/libcastscope_agent.so]
        [--cache-sim] [--aggregate] [--op mm|linear|conv2d] [--heap-histories K]

Prints instructions per op, castscope's added instructions and the ratio to
native, and how many of them glibc's allocator ran (its cost per op depends on
where earlier allocations left free chunks: --heap-histories runs each row
under several histories of the heap); with --cache-sim also the simulated L1 instruction and data cache
misses per op (callgrind's cache model: 32 KiB, 8-way; slower to run), where
castscope's cost shows more than in instructions (docs/performance.md). The whole op's count moves by up to ~300 from run to run (malloc's
state, other threads counted while inside the window): compare castscope's
own functions with --keep and callgrind_annotate (docs/performance.md). The castscope rows include the thread's first ring (zeroed once, about
2 M instructions: ~700 per op at 3000 ops); it is the same in every row.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

LOOP = """
import sys, tempfile, contextlib, torch, castscope
mode, n, op, history = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)
# Another history of the heap: `history` tensors of odd sizes kept alive.
held = [torch.empty(16 * (k + 1) + 8 * history) for k in range(history)]
F = torch.nn.functional
if op == "mm":
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    call = lambda: torch.mm(a, b)
elif op == "linear":
    x, w, bias = torch.randn(4, 16), torch.randn(16, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    call = lambda: F.linear(x, w, bias)
else:
    x, w, bias = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3, requires_grad=True), torch.randn(4, requires_grad=True)
    call = lambda: F.conv2d(x, w, bias)
tmp = tempfile.mkdtemp()
ctx = contextlib.nullcontext() if mode == "native" else castscope.attached(
    events_path=f"{tmp}/events.jsonl", probe=False, numerics=False, aggregate=mode == "aggregate")
with ctx, torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(n):
        call()
"""


def allocator_instructions(out):
    """Instructions in glibc's allocator (malloc/malloc.c, arena.c) in a
    callgrind output; None where libc's functions have no source file names
    (no debug information for libc: Debian's libc6-dbg, or debuginfod)."""
    table = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", out],
                           capture_output=True, text=True, check=True).stdout
    counted = [int(line.split()[0].replace(",", "")) for line in table.splitlines()
               if re.match(r"\s*[\d,]+ ", line) and "/malloc/" in line]
    return sum(counted) if counted else None


def count(row, lib, mode, history, ops, op, workdir, cache_sim):
    """Per op: {"Ir": instructions, "alloc": of them glibc's allocator's} and,
    with cache_sim, "I1mr" and "D1mr" (L1 misses)."""
    env = dict(os.environ)
    if lib:
        env["CASTSCOPE_AGENT_LIB"] = lib
    out = os.path.join(workdir, "callgrind." + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{row}.{history}") + ".out")
    sim = ["--cache-sim=yes"] if cache_sim else []
    done = subprocess.run(["valgrind", "--tool=callgrind", *sim, f"--toggle-collect=*THPVariable_{op}*",
                           f"--callgrind-out-file={out}", sys.executable, "-c", LOOP,
                           mode, str(ops), op, str(history)],
                          env=env, capture_output=True, text=True)
    events = re.search(r"Events +: ([\w ]+)\n", done.stderr)
    collected = re.search(r"Collected : ([\d ]+)\n", done.stderr)
    if done.returncode != 0 or not events or not collected:
        sys.exit(f"{row}: valgrind exited {done.returncode}:\n{done.stderr[-2000:]}")
    totals = dict(zip(events.group(1).split(), (int(n) for n in collected.group(1).split())))
    totals["alloc"] = allocator_instructions(out)
    return {name: None if totals[name] is None else totals[name] / ops
            for name in ("Ir", "alloc", "I1mr", "D1mr") if name in totals}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="op calls counted per row (default 3000)")
    parser.add_argument("--op", choices=("mm", "linear", "conv2d"), default="mm",
                        help="the op counted (default mm; linear and conv2d as the per-op bench's)")
    parser.add_argument("--agent-lib", action="append", default=[],
                        help="another agent library to count as its own row, with --aggregate also in aggregate "
                             "mode (repeatable)")
    parser.add_argument("--cache-sim", action="store_true",
                        help="also simulate the L1 caches: instruction and data misses per op")
    parser.add_argument("--aggregate", action="store_true",
                        help="also count castscope in aggregate mode (per-site counters, docs/aggregate.md)")
    parser.add_argument("--heap-histories", type=int, default=1, metavar="K",
                        help="count each row K times, the k-th (from 0) with k tensors of odd sizes allocated and kept "
                             "before the loop: another history of the heap each (default 1: none)")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each row's callgrind output in DIR (for callgrind_annotate per function)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found: a benchmark-only tool, not set up by scripts/ (apt-get install valgrind)")
    if args.ops < 100:
        parser.error("--ops must be at least 100")
    if args.heap_histories < 1:
        parser.error("--heap-histories must be at least 1")
    for lib in args.agent_lib:
        if not os.path.isfile(lib):
            parser.error(f"--agent-lib {lib}: no such file")
        # The package loads the frame reader from beside the agent library:
        # without it that row would record no Python line and count less.
        if not os.path.isfile(os.path.join(os.path.dirname(lib), "libcastscope_python.so")):
            parser.error(f"--agent-lib {lib}: no libcastscope_python.so beside it (copy it from the same build): "
                         "its row would read no Python line")
    # (row, agent library or None for this build's, the loop's mode)
    modes = [("castscope", "castscope")] + ([("castscope-aggregate", "aggregate")] if args.aggregate else [])
    rows = [("native", None, "native")] + [(name, None, mode) for name, mode in modes] + \
        [(f"{name}:{lib}", lib, mode) for lib in args.agent_lib for name, mode in modes]
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    runs = [(row, lib, mode, history) for history in range(args.heap_histories) for row, lib, mode in rows]
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(max_workers=2) as pool:
        workdir = args.keep or scratch
        counted = dict(zip(((row, history) for row, _, _, history in runs),
                           pool.map(lambda run: count(*run, args.ops, args.op, workdir, args.cache_sim), runs)))
    print(f"inside THPVariable_{args.op} per bf16 autocast {args.op}, {args.ops} calls per row; "
          f"'alloc': of them glibc's allocator's (malloc.c, arena.c)")
    header = f"{'row':60s} {'instr/op':>9s} {'added':>8s} {'x native':>9s} {'alloc/op':>9s} {'added':>7s}"
    if args.cache_sim:
        header += f" {'I1 miss/op':>11s} {'added':>7s} {'D1 miss/op':>11s} {'added':>7s}"
    for history in range(args.heap_histories):
        if args.heap_histories > 1:
            print(f"heap history {history} ({history} tensors kept before the loop)")
        print(header)
        native = counted[("native", history)]
        for row, _, _ in rows:
            value = counted[(row, history)]
            line = f"{row:60s} {value['Ir']:9.0f} {value['Ir'] - native['Ir']:8.0f} {value['Ir'] / native['Ir']:8.3f}x"
            if value["alloc"] is None or native["alloc"] is None:
                line += f" {'n/a':>9s} {'':7s}"  # libc without its source file names: see allocator_instructions
            else:
                line += f" {value['alloc']:9.0f} {value['alloc'] - native['alloc']:7.0f}"
            if args.cache_sim:
                line += (f" {value['I1mr']:11.1f} {value['I1mr'] - native['I1mr']:7.1f}"
                         f" {value['D1mr']:11.1f} {value['D1mr'] - native['D1mr']:7.1f}")
            print(line)


if __name__ == "__main__":
    main()
