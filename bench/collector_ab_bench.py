"""Two collector builds in one sitting: the throughput and latency rows of
collector_bench.py, each repeat on a fresh collector of each binary, the
order alternating between repeats, so that a busy or quiet spell of a shared
machine falls on both. With --fill-events N, each repeat also stores a
training-shaped run of N events (`castscope_ingest_bench fill --prebuild`,
the viewer bench's shape: ops, casts and kernels on six tracks) into a fresh
store of each binary.

    .venv/bin/python bench/collector_ab_bench.py --before OLD/server/castscope-collector \\
        [--after build/server/castscope-collector] [--seconds 8] [--repeats 5] [--skip-latency] \\
        [--fill-events 10000000]
"""
import argparse
import os
import pathlib
import re
import statistics
import sys
import tempfile

from collector_bench import REPO, measured

sys.path.insert(0, str(REPO / "tests" / "integration"))
from collector_server import Collector  # noqa: E402


def one_run(binary: str, seconds: float, latency: bool) -> tuple:
    os.environ["CASTSCOPE_COLLECTOR_BIN"] = binary  # castscope.collector_binary() reads it at each start
    with tempfile.TemporaryDirectory() as tmp:
        collector = Collector(pathlib.Path(tmp) / "bench.db")
        try:
            throughput, throughput_cpu = measured(collector, "throughput", "--seconds", str(seconds))
            p99, latency_cpu = float("nan"), ""
            if latency:
                out, latency_cpu = measured(collector, "latency", "--seconds", str(seconds))
                p99 = float(re.search(r"p99 ([\d.]+) ms", out).group(1))
        finally:
            collector.stop()
    rate = float(re.search(r"([\d.]+) events/s \(window", throughput).group(1))
    return rate, p99, throughput_cpu, latency_cpu


def fill_run(binary: str, events: int) -> tuple:
    """A training-shaped run of `events` into a fresh store: events/s stored."""
    os.environ["CASTSCOPE_COLLECTOR_BIN"] = binary
    with tempfile.TemporaryDirectory() as tmp:
        collector = Collector(pathlib.Path(tmp) / "bench.db")
        try:
            out, cpu = measured(collector, "fill", "--events", str(events), "--prebuild")
        finally:
            # Stored is all this measures: a clean stop would wait for the
            # run's final analysis (tens of seconds at 10 M events).
            collector.kill9()
    return float(re.search(r"\(([\d.]+) events/s\)", out).group(1)), cpu


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=str(REPO / "build" / "server" / "castscope-collector"))
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--fill-events", type=int, default=0, help="also a training-shaped run of this many events")
    args = parser.parse_args()
    results = {"before": [], "after": []}
    fills = {"before": [], "after": []}
    for repeat in range(args.repeats):
        order = ["before", "after"] if repeat % 2 == 0 else ["after", "before"]
        for name in order:
            rate, p99, throughput_cpu, latency_cpu = one_run(getattr(args, name), args.seconds, not args.skip_latency)
            results[name].append((rate, p99))
            print(f"repeat {repeat + 1} {name:6}: {rate / 1e6:.2f} M events/s, latency p99 {p99:.1f} ms\n"
                  f"    throughput {throughput_cpu}\n    latency    {latency_cpu}", flush=True)
            if args.fill_events:
                fill, fill_cpu = fill_run(getattr(args, name), args.fill_events)
                fills[name].append(fill)
                print(f"    training-shaped: {fill / 1e6:.3f} M events/s stored; {fill_cpu}", flush=True)
    for name, rows in results.items():
        print(f"{name:6}: median {statistics.median(r for r, _ in rows) / 1e6:.2f} M events/s "
              f"({', '.join(f'{r / 1e6:.2f}' for r, _ in rows)}); latency p99 median "
              f"{statistics.median(p for _, p in rows):.1f} ms ({', '.join(f'{p:.1f}' for _, p in rows)})")
        if fills[name]:
            print(f"        training-shaped median {statistics.median(fills[name]) / 1e6:.3f} M events/s "
                  f"({', '.join(f'{r / 1e6:.3f}' for r in fills[name])})")
    if fills["before"]:
        print(f"training-shaped after/before: {statistics.median(fills['after']) / statistics.median(fills['before']):.2f}x")


if __name__ == "__main__":
    main()
