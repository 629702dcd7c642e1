"""Instructions per autocast op, native and under castscope, counted by callgrind.

This VM's timings move 5-15 % between processes, more than a hot-path change
of a few tens of nanoseconds; instruction counts do not move. Each row is one
process under `valgrind --tool=callgrind`, counting only inside
`THPVariable_mm` (the Python binding's call of torch.mm: the dispatcher, the
autocast kernel, the casts and the matmul), over --ops calls of an 8x8 bf16
CPU autocast mm, the steady state (no probe or numerics window):

  native            torch's own autocast kernel
  castscope         castscope attached, every event recorded
  castscope-aggregate  the same in aggregate mode (--aggregate): per-site counters
  castscope:<lib>   the same with another build's agent library (old and new in one run);
                    with --aggregate also castscope-aggregate:<lib>

    .venv/bin/python bench/dispatch_instructions_bench.py [--ops 3000] [--agent-lib OLD/libcastscope_agent.so]
        [--cache-sim] [--aggregate]

Prints instructions per op, castscope's added instructions and the ratio to
native; with --cache-sim also the simulated L1 instruction and data cache
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
mode, n = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
a, b = torch.randn(8, 8), torch.randn(8, 8)
tmp = tempfile.mkdtemp()
ctx = contextlib.nullcontext() if mode == "native" else castscope.attached(
    events_path=f"{tmp}/events.jsonl", probe=False, numerics=False, aggregate=mode == "aggregate")
with ctx, torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(n):
        torch.mm(a, b)
"""


def count(row, lib, mode, ops, workdir, cache_sim):
    """Per op: {"Ir": instructions} and, with cache_sim, "I1mr" and "D1mr" (L1 misses)."""
    env = dict(os.environ)
    if lib:
        env["CASTSCOPE_AGENT_LIB"] = lib
    out = os.path.join(workdir, "callgrind." + re.sub(r"[^A-Za-z0-9_.-]", "_", row) + ".out")
    sim = ["--cache-sim=yes"] if cache_sim else []
    done = subprocess.run(["valgrind", "--tool=callgrind", *sim, "--toggle-collect=*THPVariable_mm*",
                           f"--callgrind-out-file={out}", sys.executable, "-c", LOOP,
                           mode, str(ops)],
                          env=env, capture_output=True, text=True)
    events = re.search(r"Events +: ([\w ]+)\n", done.stderr)
    collected = re.search(r"Collected : ([\d ]+)\n", done.stderr)
    if done.returncode != 0 or not events or not collected:
        sys.exit(f"{row}: valgrind exited {done.returncode}:\n{done.stderr[-2000:]}")
    totals = dict(zip(events.group(1).split(), (int(n) for n in collected.group(1).split())))
    return {name: totals[name] / ops for name in ("Ir", "I1mr", "D1mr") if name in totals}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="mm calls counted per row (default 3000)")
    parser.add_argument("--agent-lib", action="append", default=[],
                        help="another agent library to count as its own row, with --aggregate also in aggregate "
                             "mode (repeatable)")
    parser.add_argument("--cache-sim", action="store_true",
                        help="also simulate the L1 caches: instruction and data misses per op")
    parser.add_argument("--aggregate", action="store_true",
                        help="also count castscope in aggregate mode (per-site counters, docs/aggregate.md)")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each row's callgrind output in DIR (for callgrind_annotate per function)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found: a benchmark-only tool, not set up by scripts/ (apt-get install valgrind)")
    if args.ops < 100:
        parser.error("--ops must be at least 100")
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
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(max_workers=2) as pool:
        workdir = args.keep or scratch
        counts = dict(zip((row for row, _, _ in rows),
                          pool.map(lambda r: count(*r, args.ops, workdir, args.cache_sim), rows)))
    native = counts["native"]
    print(f"inside THPVariable_mm per 8x8 bf16 autocast mm, {args.ops} calls per row")
    header = f"{'row':60s} {'instr/op':>9s} {'added':>8s} {'x native':>9s}"
    if args.cache_sim:
        header += f" {'I1 miss/op':>11s} {'added':>7s} {'D1 miss/op':>11s} {'added':>7s}"
    print(header)
    for row, value in counts.items():
        line = f"{row:60s} {value['Ir']:9.0f} {value['Ir'] - native['Ir']:8.0f} {value['Ir'] / native['Ir']:8.3f}x"
        if args.cache_sim:
            line += (f" {value['I1mr']:11.1f} {value['I1mr'] - native['I1mr']:7.1f}"
                     f" {value['D1mr']:11.1f} {value['D1mr'] - native['D1mr']:7.1f}")
        print(line)


if __name__ == "__main__":
    main()
