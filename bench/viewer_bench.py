"""The viewer's server side at scale, side by side in one run:

  ingest      collector ingest (castscope_ingest_bench throughput) with no
              viewer, then with two live viewers following every run
              (/api/live), each on a fresh store; prints the ratio
  ranges      a store filled to --events cast events, then /api/timeline
              answers (track, t0, t1, px=1500) at zooms from the whole run to
              1/10^5 of it, random offsets, and /api/tracks, /api/counters;
              prints p50/p95 collector answer times per zoom

    .venv/bin/python bench/viewer_bench.py [--events 10000000] [--seconds 8] [--queries 40] [--repeats 2]
                                           [--skip-ingest] [--skip-ranges]

Paint times and the live latency in a real browser: bench/viewer_browser_bench.mjs;
docs/performance.md has both.
"""
from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[1]
COLLECTOR = REPO / "build" / "server" / "castscope-collector"
BENCH = REPO / "build" / "bench" / "castscope_ingest_bench"


class Collector:
    def __init__(self, db: pathlib.Path):
        ready, url = db.with_suffix(".addr"), db.with_suffix(".url")
        self.process = subprocess.Popen([str(COLLECTOR), "serve", "--db", str(db), "--listen", "127.0.0.1:0",
                                         "--ready-file", str(ready), "--viewer-file", str(url)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not ready.exists():
            time.sleep(0.02)
        self.address = ready.read_text().strip()
        parsed = urllib.parse.urlparse(url.read_text().strip())
        self.host, self.port = parsed.hostname, parsed.port
        self.token = urllib.parse.parse_qs(parsed.query)["token"][0]

    def get(self, path: str) -> tuple[float, dict]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        start = time.perf_counter()
        connection.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
        body = connection.getresponse().read()
        elapsed = time.perf_counter() - start
        connection.close()
        return elapsed, json.loads(body)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)


def ingest(address: str, seconds: float) -> float:
    out = subprocess.run([str(BENCH), "--collector", address, "throughput", "--seconds", str(seconds)],
                         capture_output=True, text=True, timeout=600).stdout
    return float(re.search(r"([0-9.]+) events/s", out).group(1))


def live_viewer(collector: Collector, stop: threading.Event, counts: list):
    connection = http.client.HTTPConnection(collector.host, collector.port, timeout=600)
    connection.request("GET", "/api/live", headers={"Authorization": f"Bearer {collector.token}"})
    response = connection.getresponse()
    while not stop.is_set():
        line = response.fp.readline()
        if not line:
            break
        if line.startswith(b"event: "):
            counts.append(line[7:].strip().decode())


def bench_ingest(tmp: pathlib.Path, seconds: float, repeats: int) -> None:
    rates = {}
    for viewers in (0, 2) * repeats:
        collector = Collector(tmp / f"ingest-{viewers}-{time.monotonic_ns()}.db")
        stop, counts = threading.Event(), []
        threads = [threading.Thread(target=live_viewer, args=(collector, stop, counts), daemon=True)
                   for _ in range(viewers)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        rates.setdefault(viewers, []).append(ingest(collector.address, seconds))
        stop.set()
        collector.stop()
        if viewers:
            print(f"  two viewers got {counts.count('batch')} batch and {counts.count('skipped')} skipped messages")
    none, two = statistics.median(rates[0]), statistics.median(rates[2])
    print(f"ingest: no viewer {', '.join(f'{r / 1e6:.2f}' for r in rates[0])} M/s; "
          f"two live viewers {', '.join(f'{r / 1e6:.2f}' for r in rates[2])} M/s; ratio {two / none:.3f}")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def bench_ranges(tmp: pathlib.Path, events: int, queries: int) -> None:
    collector = Collector(tmp / "ranges.db")
    try:
        stored = 0
        fill_start = time.monotonic()
        while stored < events:
            ingest(collector.address, 6)
            _, runs = collector.get("/api/runs")
            stored = sum(a["events_stored"] for r in runs["runs"] for a in r["agents"])
        print(f"ranges: store filled with {stored / 1e6:.1f} M events in {time.monotonic() - fill_start:.0f} s")
        _, runs = collector.get("/api/runs")
        biggest = max(runs["runs"], key=lambda r: sum(a["events_stored"] for a in r["agents"]))
        rid = urllib.parse.quote(biggest["run_id"])
        elapsed, tracks = collector.get(f"/api/tracks?run={rid}")
        print(f"  /api/tracks {elapsed * 1e3:.1f} ms ({sum(a['events_stored'] for a in biggest['agents']) / 1e6:.1f} M "
              f"events in this run, {sum(len(p['tracks']) for p in tracks['processes'])} tracks)")
        span = tracks["t_max"]
        track = urllib.parse.quote(tracks["processes"][0]["tracks"][0]["track"])
        rng = random.Random(1)
        for zoom in (1, 10, 100, 1000, 10_000, 100_000):
            width = max(1000, span // zoom)
            times, kinds = [], set()
            for _ in range(queries):
                t0 = rng.randrange(0, max(1, span - width))
                elapsed, body = collector.get(f"/api/timeline?run={rid}&tracks={track}&t0={t0}&t1={t0 + width}&px=1500")
                times.append(elapsed)
                kinds.add(body["lanes"][0]["kind"])
            print(f"  /api/timeline 1/{zoom:<6} of the run ({width / 1e6:10.3f} ms wide, {'/'.join(sorted(kinds))}): "
                  f"p50 {percentile(times, 50) * 1e3:6.1f} ms, p95 {percentile(times, 95) * 1e3:6.1f} ms")
        times = [collector.get(f"/api/counters?run={rid}&t0=0&t1={span}&points=1500")[0] for _ in range(10)]
        print(f"  /api/counters whole run: p50 {percentile(times, 50) * 1e3:.1f} ms, p95 {percentile(times, 95) * 1e3:.1f} ms")
    finally:
        collector.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-ranges", action="store_true")
    parser.add_argument("--repeats", type=int, default=2, help="ingest: alternations of no viewer / two viewers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="castscope-viewer-bench-") as tmp:
        if not args.skip_ingest:
            bench_ingest(pathlib.Path(tmp), args.seconds, args.repeats)
        if not args.skip_ranges:
            bench_ranges(pathlib.Path(tmp), args.events, args.queries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
