"""Two agent libraries against each other, per op: dispatch_overhead_bench.py
run in alternated processes, one per library (the order swapped every pair),
so that a busy or quiet spell of a shared machine falls on both. Each process
gives each row's minimum ratio to native in that same process; this prints
them per pair and their median per library.

    .venv/bin/python bench/dispatch_ab_bench.py --before OLD/libcastscope_agent.so \\
        [--after build/agent/libcastscope_agent.so] [--pairs 6] [--device cpu|cuda] [--grad] [--iters 20000]

Each library needs its frame reader (libcastscope_python.so) beside it, as
an attached agent does.
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
# One row of the per-op bench's table: op, row, median us, its ratio, min us, its ratio.
ROW = re.compile(r"^(.+?)\s+(native|castscope\S*)\s+[\d.]+\s+[\d.]+x\s+([\d.]+)\s+[\d.]+x$")


def one_process(library: str, device: str, grad: bool, iters: int) -> dict:
    """{(op, row): minimum's ratio to native} from one run of the per-op bench,
    worked out from the minimum microseconds (the table prints ratios to two
    decimals, the size of the effects compared here)."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "dispatch_overhead_bench.py"), "--device", device,
                           *(["--grad"] if grad else []),
                           "--iters", str(iters), "--repeats", "5", "--rows", "castscope,castscope-aggregate"],
                          env={**os.environ, "CASTSCOPE_AGENT_LIB": library}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"dispatch_overhead_bench.py with {library} exited {done.returncode}:\n{done.stderr[-3000:]}")
    minimums = {}
    for line in done.stdout.splitlines():
        if match := ROW.match(line.strip()):
            minimums[(match.group(1).strip(), match.group(2))] = float(match.group(3))
    ratios = {(op, row): us / minimums[(op, "native")] for (op, row), us in minimums.items()
              if row != "native" and minimums.get((op, "native"))}
    if not ratios:
        sys.exit(f"no rows in dispatch_overhead_bench.py's output:\n{done.stdout}")
    return ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the agent library to compare against")
    parser.add_argument("--after", default=str(REPO / "build" / "agent" / "libcastscope_agent.so"))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--grad", action="store_true", help="the per-op bench with autograd on")
    parser.add_argument("--iters", type=int, default=20000)
    args = parser.parse_args()
    for library in (args.before, args.after):
        # castscope falls back to build/'s library when CASTSCOPE_AGENT_LIB names no file.
        if not pathlib.Path(library).is_file():
            parser.error(f"{library}: no such file")
        if not (pathlib.Path(library).parent / "libcastscope_python.so").is_file():
            parser.error(f"{library}: no libcastscope_python.so beside it (an agent without its frame reader records no lines)")
    if pathlib.Path(args.before).resolve() == pathlib.Path(args.after).resolve():
        print(f"note: --before and --after are the same library ({args.after}): an A/A run", flush=True)
    runs = {"before": [], "after": []}
    for pair in range(1, args.pairs + 1):
        order = ["before", "after"] if pair % 2 else ["after", "before"]
        for side in order:
            ratios = one_process(getattr(args, side), args.device, args.grad, args.iters)
            runs[side].append(ratios)
            print(f"pair {pair} {side:6s} " + "  ".join(f"{op} {row.removeprefix('castscope').lstrip('-') or 'full'} {r:.3f}"
                                                     for (op, row), r in ratios.items()), flush=True)
    print(f"median over {args.pairs} pairs of each process's minimum ratio to native ({args.device}"
          f"{', autograd on' if args.grad else ''}):")
    for key in runs["before"][0]:
        before = statistics.median(r[key] for r in runs["before"])
        after = statistics.median(r[key] for r in runs["after"])
        print(f"  {key[0]:20s} {key[1]:20s} before {before:.3f}  after {after:.3f}")


if __name__ == "__main__":
    main()
