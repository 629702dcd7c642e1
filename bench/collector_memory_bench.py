"""Collector memory under many streaming clients (budget: RSS at most the queue
budget plus 64 MiB while they stream, and back within 64 MiB of the idle RSS
after they leave; docs/performance.md).

A fresh collector (live analysis on, the default) gets `--streams` concurrent
ingest streams, each on its own connection, each sending 4096-event batches
as fast as acknowledgements allow for `--seconds`; its RSS (/proc/PID/status
VmRSS) is sampled every 50 ms during the load and for `--settle` seconds
after the clients have gone.

    .venv/bin/python bench/collector_memory_bench.py [--streams 50] [--seconds 10] [--repeats 3]
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from collector_server import Collector  # noqa: E402

BENCH = REPO / "build" / "bench" / "castscope_ingest_bench"
MiB = 1 << 20


def rss_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def one_repeat(streams: int, seconds: float, settle: float, budget: int, window: int, extra: list) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        collector = Collector(pathlib.Path(scratch) / "store.db", extra=("--queue-budget-bytes", str(budget), *extra))
        pid = collector.process.pid
        try:
            time.sleep(1.0)
            idle = rss_bytes(pid)
            samples = []
            done = threading.Event()

            def sample():
                while not done.is_set():
                    samples.append(rss_bytes(pid))
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample)
            sampler.start()
            result = subprocess.run([str(BENCH), "--collector", collector.address, "--streams", str(streams),
                                     "--seconds", str(seconds), "--window", str(window), "throughput"], capture_output=True, text=True,
                                    timeout=600)
            done.set()
            sampler.join()
            after = []
            end = time.monotonic() + settle
            while time.monotonic() < end:
                after.append(rss_bytes(pid))
                time.sleep(0.05)
        finally:
            collector.stop()
    return {"idle": idle, "peak": max(samples, default=0), "after": after[-1] if after else 0,
            "client": (result.stdout + result.stderr).strip()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--window", type=int, default=16, help="batches in flight per stream (forwarders: 16)")
    parser.add_argument("--settle", type=float, default=5, help="seconds of sampling after the clients leave")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-mib", type=int, default=64, help="--queue-budget-bytes of the collector, in MiB")
    parser.add_argument("--collector-arg", action="append", default=[], help="extra collector argument")
    args = parser.parse_args()
    budget = args.budget_mib * MiB
    bound = budget + 64 * MiB
    for repeat in range(args.repeats):
        r = one_repeat(args.streams, args.seconds, args.settle, budget, args.window, args.collector_arg)
        print(f"repeat {repeat + 1}: {args.streams} streams, budget {args.budget_mib} MiB: idle {r['idle'] / MiB:.0f} MiB, "
              f"peak {r['peak'] / MiB:.0f} MiB ({r['peak'] / bound:.2f}x of budget+64 MiB), after {args.settle:.0f} s "
              f"{r['after'] / MiB:.0f} MiB (idle +{(r['after'] - r['idle']) / MiB:.0f} MiB)")
        print(f"    {r['client']}")


if __name__ == "__main__":
    main()
