"""The store's readers and its writer, two builds side by side in one sitting.

One training-shaped store (castscope_ingest_bench fill, written by the OLD
build's collector, so the new readers also prove they open an old store), then,
alternating old and new each repeat (the order flips every repeat):

  report   castscope-collector report --run R --db STORE        (wall s)
  export   castscope-collector export --run R --perfetto OUT     (wall s)
  viewer   castscope-collector view over the store: /api/sites (first answer,
           uncached), /api/tracks, /api/counters and /api/timeline at zooms 1 .. 1/10^4 (the same
           seeded ranges for both builds)                        (ms per answer)
  ingest   castscope-collector serve on a fresh store, the one client
           (the new build's castscope_ingest_bench throughput)   (M events/s)

With --store-per-build each build reads a store its own collector wrote (the
same fill): a store layout change (schema version 17's segments) is read as
each build writes it.

Prints each build's median per row and the ratio new/old.

    .venv/bin/python bench/read_path_ab_bench.py --old /tmp/old-build --new build \
        [--events 1000000] [--repeats 3] [--queries 20] [--ingest-seconds 6] [--store-per-build]
"""
from __future__ import annotations

import argparse
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import viewer_bench  # noqa: E402  (its Collector: serve/view with ready and viewer files)


class Build:
    def __init__(self, name: str, root: pathlib.Path):
        self.name = name
        self.collector = root / "server" / "castscope-collector"
        self.ingest_bench = root / "bench" / "castscope_ingest_bench"
        for path in (self.collector, self.ingest_bench):
            if not path.is_file():
                raise SystemExit(f"read_path_ab_bench: {path} not found (build it first)")


def served(build: Build, db: pathlib.Path, view: bool) -> viewer_bench.Collector:
    """viewer_bench's Collector, started from `build`'s binary (serve, or view over a stored db)."""
    viewer_bench.COLLECTOR = build.collector
    if not view:
        return viewer_bench.Collector(db)
    collector = viewer_bench.Collector.__new__(viewer_bench.Collector)
    url = db.with_suffix(f".{build.name}.url")
    url.unlink(missing_ok=True)
    collector.process = subprocess.Popen([str(build.collector), "view", "--db", str(db), "--http-listen", "127.0.0.1:0",
                                          "--viewer-file", str(url)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not url.exists():
        time.sleep(0.02)
    parsed = urllib.parse.urlparse(url.read_text().strip())
    collector.host, collector.port = parsed.hostname, parsed.port
    collector.token = urllib.parse.parse_qs(parsed.query)["token"][0]
    return collector


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    return time.perf_counter() - start


def fill(build: Build, db: pathlib.Path, events: int) -> str:
    collector = served(build, db, view=False)
    try:
        subprocess.run([str(build.ingest_bench), "--collector", collector.address, "fill", "--events", str(events),
                        "--agents", "2", "--run", "ab"], check=True, stdout=subprocess.DEVNULL, timeout=1800)
    finally:
        collector.stop()
    return "ab"


def viewer_rows(build: Build, db: pathlib.Path, run: str, queries: int) -> dict[str, float]:
    """Median answer time (ms) of each viewer request kind."""
    collector = served(build, db, view=True)
    try:
        rid = urllib.parse.quote(run)
        # /api/sites once: the process caches its answer until the run grows.
        rows = {"viewer /api/sites": [collector.get(f"/api/sites?run={rid}")[0]], "viewer /api/tracks": [],
                "viewer /api/counters": []}
        for _ in range(3):
            rows["viewer /api/tracks"].append(collector.get(f"/api/tracks?run={rid}")[0])
        _, tracks = collector.get(f"/api/tracks?run={rid}")
        span = tracks["t_max"]
        for _ in range(3):
            rows["viewer /api/counters"].append(collector.get(f"/api/counters?run={rid}&t0=0&t1={span}&points=1500")[0])
        lanes = [t["track"] for p in tracks["processes"] for t in p["tracks"]]
        rng = random.Random(1)
        for zoom in (1, 100, 10_000):
            width = max(1000, span // zoom)
            row = rows.setdefault(f"viewer /api/timeline 1/{zoom}", [])
            for _ in range(queries):
                t0 = rng.randrange(0, max(1, span - width))
                track = urllib.parse.quote(rng.choice(lanes))
                row.append(collector.get(f"/api/timeline?run={rid}&track={track}&tracks={track}&t0={t0}&t1={t0 + width}&px=1500")[0])
        return {name: statistics.median(times) * 1e3 for name, times in rows.items()}
    finally:
        collector.stop()


def ingest_rate(build: Build, client: Build, tmp: pathlib.Path, seconds: float) -> float:
    collector = served(build, tmp / f"ingest-{build.name}-{time.monotonic_ns()}.db", view=False)
    try:
        viewer_bench.BENCH = client.ingest_bench
        return viewer_bench.ingest(collector.address, seconds) / 1e6
    finally:
        collector.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=pathlib.Path, required=True, help="the old build folder")
    parser.add_argument("--new", type=pathlib.Path, required=True, help="the new build folder")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--queries", type=int, default=20, help="timeline answers per zoom")
    parser.add_argument("--ingest-seconds", type=float, default=6)
    parser.add_argument("--store-per-build", action="store_true",
                        help="each build reads a store its own collector wrote (default: both read the old's)")
    args = parser.parse_args()
    old, new = Build("old", args.old), Build("new", args.new)
    results: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory(prefix="castscope-read-path-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        stores = {"old": tmp / "store.db"}
        run = fill(old, stores["old"], args.events)
        stores["new"] = stores["old"]
        if args.store_per_build:
            stores["new"] = tmp / "store-new.db"
            fill(new, stores["new"], args.events)
        print(f"store: {args.events / 1e6:.1f} M events written by "
              + ("each build's collector" if args.store_per_build else "the old build's collector"))
        for repeat in range(args.repeats):
            for build in (old, new) if repeat % 2 == 0 else (new, old):
                rows = results[build.name]
                db = stores[build.name]
                rows.setdefault("report (s)", []).append(
                    timed([str(build.collector), "report", "--db", str(db), "--run", run]))
                rows.setdefault("export --perfetto (s)", []).append(
                    timed([str(build.collector), "export", "--db", str(db), "--run", run, "--perfetto",
                           str(tmp / f"{build.name}.pftrace")]))
                for name, ms in viewer_rows(build, db, run, args.queries).items():
                    rows.setdefault(f"{name} (ms)", []).append(ms)
                rows.setdefault("ingest (M events/s)", []).append(ingest_rate(build, new, tmp, args.ingest_seconds))
            print(f"repeat {repeat + 1} done")
    print(f"\n{'row':40} {'old (median)':>14} {'new (median)':>14} {'new/old':>8}   every repeat old | new")
    for row in results["old"]:
        a, b = statistics.median(results["old"][row]), statistics.median(results["new"][row])
        each = " ".join(f"{v:.3g}" for v in results["old"][row]) + " | " + " ".join(f"{v:.3g}" for v in results["new"][row])
        print(f"{row:40} {a:14.3f} {b:14.3f} {b / a:8.3f}   {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
