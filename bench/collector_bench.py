"""Collector ingest and cast-to-queryable latency (budgets: >= 1M cast events/s
with SQLite persistence, p99 <= 250 ms), on a fresh database per run.

  throughput  pre-built batches of 4096 cast events over gRPC as fast as acks allow
              (--window batches in flight, 16 like the agent's forwarder),
              with the live analyzer on (the default: it re-reads the growing run
              every 2 s or ten times its last analysis) and, on a second fresh
              collector, off (--analyze-interval-ms 0)
  latency     200k events/s sent in 20 ms batches; arrival measured through Subscribe
              (sent after the commit: queryable)
  end-to-end  real jobs under castscope run --collector (ring + exporter + spool +
              forwarder + collector): bench/jobs/paced_mm.py at a steady 30k events/s
              (a busy training loop), and tests/integration/jobs/mm_loop.py as fast as
              Python can call mm (~250k events/s: job, exporter, forwarder and
              collector all compete for the 2 cores)

    .venv/bin/python bench/collector_bench.py [--seconds 8] [--repeats 3] [--window 16]

Each throughput and latency row also says where the CPU went: seconds per
million events of the collector's threads (cs-writer, cs-checkpoint,
cs-analyzer; gRPC names its own: nexting_thread) and of the bench client, so a slow run
shows which of them grew or which had to share the cores.
"""
import collections
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import threading

from harness import repeats_parser
from collector_server import Collector  # noqa: E402 (harness puts tests/integration on the path)

REPO = pathlib.Path(__file__).resolve().parents[1]

BENCH = REPO / "build" / "bench" / "castscope_ingest_bench"


def bench(address: str, *args: str) -> str:
    result = subprocess.run([str(BENCH), "--collector", address, *args], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(result.stdout + result.stderr)
    return result.stdout.strip()


def thread_cpu(pid: int) -> collections.Counter:
    """CPU seconds so far of each thread name of process `pid`."""
    seconds = collections.Counter()
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seconds["grpc+other" if name == "castscope-colle" else name] += \
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def measured(collector, *args: str) -> tuple:
    """bench(...) and where the CPU went meanwhile: 'cs-writer 0.61 s/M ...'."""
    before, client_before = thread_cpu(collector.process.pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = bench(collector.address, *args)
    after, client_after = thread_cpu(collector.process.pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    events = re.search(r"(\d+) batches x (\d+)", out) or re.search(r"(\d+) events", out)
    count = int(events.group(1)) * int(events.group(2)) if events.lastindex == 2 else int(events.group(1))
    used = {name: after[name] - before[name] for name in after}
    used["client"] = (client_after.ru_utime + client_after.ru_stime) - (client_before.ru_utime + client_before.ru_stime)
    cpu = " ".join(f"{name} {seconds / count * 1e6:.2f}" for name, seconds in sorted(used.items()) if seconds > 0)
    return out, f"CPU s per M events: {cpu}"


def end_to_end(address: str, run_id: str, job: list) -> str:
    follower = {}
    thread = threading.Thread(target=lambda: follower.update(
        out=bench(address, "follow", "--run", run_id, "--seconds", "60")))
    thread.start()
    job = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", tempfile.mkdtemp(), "--no-jsonl",
                          "--collector", address, "--run-id", run_id, "--", sys.executable, *job],
                         capture_output=True, text=True, timeout=600)
    if job.returncode != 0:
        raise RuntimeError(job.stderr)
    thread.join()
    return follower["out"]


def main():
    # The agent's forwarder keeps 16 batches in flight (ForwarderConfig::window);
    # the throughput rows send as it does.
    parser = repeats_parser(3, e2e_iterations=100_000, window=16)
    parser.add_argument("--seconds", type=float, default=8)
    args = parser.parse_args()
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            collector = Collector(pathlib.Path(tmp) / "bench.db")
            try:
                throughput, throughput_cpu = measured(collector, "throughput", "--seconds", str(args.seconds),
                                                      "--window", str(args.window))
                latency, latency_cpu = measured(collector, "latency", "--seconds", str(args.seconds))
                paced = end_to_end(collector.address, "paced", [str(REPO / "bench" / "jobs" / "paced_mm.py"),
                                                                str(args.seconds), "30000"])
                stress = end_to_end(collector.address, "stress", [
                    str(REPO / "tests" / "integration" / "jobs" / "mm_loop.py"), str(args.e2e_iterations)])
            finally:
                collector.stop()
            unanalyzed = Collector(pathlib.Path(tmp) / "unanalyzed.db", extra=("--analyze-interval-ms", "0"))
            try:
                throughput_off = bench(unanalyzed.address, "throughput", "--seconds", str(args.seconds),
                                       "--window", str(args.window))
            finally:
                unanalyzed.stop()
        rate_off = float(re.search(r"([\d.]+) events/s \(window", throughput_off).group(1))
        rate = float(re.search(r"([\d.]+) events/s \(window", throughput).group(1))
        p99 = float(re.search(r"p99 ([\d.]+) ms", latency).group(1))
        paced_p99 = float(re.search(r"p99 ([\d.]+) ms", paced).group(1))
        stress_p99 = float(re.search(r"p99 ([\d.]+) ms", stress).group(1))
        print(f"repeat {repeat + 1}:")
        print(f"  {throughput}\n    ratio to budget (1M events/s): {rate / 1e6:.2f}x\n    {throughput_cpu}")
        print(f"  without live analysis: {throughput_off}\n    live analysis on / off: {rate / rate_off:.2f}x")
        print(f"  {latency}\n    p99 / budget (250 ms): {p99 / 250:.2f}\n    {latency_cpu}")
        print(f"  {paced}\n    p99 / budget (250 ms): {paced_p99 / 250:.2f}")
        print(f"  {stress}\n    p99 / budget (250 ms): {stress_p99 / 250:.2f}")


if __name__ == "__main__":
    main()
