"""What `castscope run` adds to a job's wall time, and how soon after a big
job ends it prints the summary (budgets: <= 0.5 s each; issue 13).

  tiny    bench/jobs/tiny_autocast.py natively and under `castscope run`,
          paired whole-process runs (order alternated): added seconds.
  summary bench/jobs/counted_mm.py making --events cast and op events at --rate
          events/s (a rate the exporter keeps up with, so they are all stored)
          under `castscope run`, wrapped in a shell that stamps the moment the
          job's process exits (`date`): seconds from there to the summary's
          first line ("castscope report: ...") and to `castscope run`'s exit.

    .venv/bin/python bench/run_overhead_bench.py [--pairs 5] [--repeats 3] [--events 1000000] [--rate 100000]
"""
import pathlib
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from harness import repeats_parser

REPO = pathlib.Path(__file__).resolve().parents[1]
CASTSCOPE = [str(REPO / ".venv/bin/castscope"), "run"]
TINY = str(REPO / "bench/jobs/tiny_autocast.py")
COUNTED_MM = str(REPO / "bench/jobs/counted_mm.py")


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def tiny_repeat(pairs: int, out: str) -> tuple[float, float, float]:
    native_runs, castscope_runs, added = [], [], []
    for pair in range(pairs):
        native_first = pair % 2 == 0
        times = {}
        for row in (("native", "castscope") if native_first else ("castscope", "native")):
            job = [sys.executable, TINY]
            times[row] = wall(job if row == "native" else [*CASTSCOPE, "--out", out, "--", *job])
        native_runs.append(times["native"])
        castscope_runs.append(times["castscope"])
        added.append(times["castscope"] - times["native"])
    return statistics.median(native_runs), statistics.median(castscope_runs), statistics.median(added)


def summary_run(events: int, rate: int, out: str, marker: pathlib.Path) -> tuple[float, float, str]:
    job = f"{shlex.quote(sys.executable)} {shlex.quote(COUNTED_MM)} {events} {rate}; " \
          f"date +%s.%N > {shlex.quote(str(marker))}"
    run = subprocess.Popen([*CASTSCOPE, "--out", out, "--", "sh", "-c", job], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    summary_at, stored = None, ""
    for line in run.stderr:
        if summary_at is None and line.startswith("castscope report:"):
            summary_at = time.time()
        if " stored; " in line:
            stored = line.strip()
    run.wait()
    done_at = time.time()
    job_ended = float(marker.read_text())
    if summary_at is None:
        raise SystemExit(f"castscope run printed no summary (exit {run.returncode})")
    return summary_at - job_ended, done_at - job_ended, stored


def main():
    args = repeats_parser(3, pairs=5, events=1_000_000, rate=100_000).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/out"
        wall([*CASTSCOPE, "--out", out, "--", sys.executable, TINY])  # warm the page cache
        print(f"tiny job, {args.pairs} paired runs per repeat (medians):")
        for repeat in range(args.repeats):
            native, castscope, added = tiny_repeat(args.pairs, out)
            print(f"  repeat {repeat + 1}: native {native:.3f} s, castscope run {castscope:.3f} s, "
                  f"added {added:+.3f} s ({castscope / native:.2f}x)", flush=True)
        print(f"summary after a job of {args.events} events, {args.pairs} runs per repeat (medians):")
        for repeat in range(args.repeats):
            to_summary, to_exit, stored = [], [], ""
            for _ in range(args.pairs):
                summary, done, stored = summary_run(args.events, args.rate, out, pathlib.Path(tmp) / "ended")
                to_summary.append(summary)
                to_exit.append(done)
            print(f"  repeat {repeat + 1}: summary {statistics.median(to_summary):.3f} s after the job ended "
                  f"(max {max(to_summary):.3f}), castscope run done {statistics.median(to_exit):.3f} s after; "
                  f"last run: {stored}", flush=True)


if __name__ == "__main__":
    main()
