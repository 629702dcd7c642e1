"""The fleet (docs/fleet.md) at scale, on a PostgreSQL 15 this bench starts
(tests/integration/postgres_server.py: loopback, TLS, fsync off as in the tests):

  shipping   a synthetic fleet of 128 nodes' rollups (--rows in all, 10 M by
             default): 4 node stores of 32 nodes' jobs each (8 ranks, 200
             sites, a cast kind per rank and site, a row per minute over
             7 days), shipped by 4 collectors at once (--shippers); rows/s per shipper,
             from its start to its store's backlog at 0 (job summaries and
             rank-divergence at each job's end included); and the CPU seconds
             per million rows of each shipper's process (to its backlog at 0)
             and of PostgreSQL's (the postmaster and every process under it,
             over the same span), the figures that size a fleet on paper
  questions  `fleet sites --since 7d` and `fleet findings` on that data: p50, p95
  ingest     a node collector's ingest (castscope_ingest_bench throughput, the
             rows of collector_bench.py) with --ship against without, the two
             interleaved in one sitting: the ratio

    .venv/bin/python bench/fleet_bench.py [--rows 10000000] [--repeats 3] [--seconds 8] [--skip-ingest]
"""
import json
import os
import pathlib
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from harness import interleaved, medians, repeats_parser
from collector_server import Collector  # noqa: E402 (harness puts tests/integration on the path)
from collector_bench import bench
from postgres_server import PostgresServer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
COLLECTOR = REPO / "build" / "server" / "castscope-collector"
NODES, RANKS, SITES = 128, 8, 200
SHIPPERS = 4  # --shippers
NODES_PER_SHIPPER = NODES // SHIPPERS
CODE_BITS = 6  # server/src/batch/event_limits.h


def cast_key(policy=1, src=1, dst=3, outcome=1, device=1, role=1, mode=1, phase=1) -> int:
    """pack_cast_key without the cache field (server/src/store/event_columns.h)."""
    fields = [policy, src, dst, outcome, device, role, 0, mode, phase]
    return sum(value << (index * CODE_BITS) for index, value in enumerate(fields))


def fleet(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(COLLECTOR), "fleet", *args], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return result


def empty_store(path: pathlib.Path) -> None:
    """A store of the current schema, made by the collector itself."""
    Collector(path).stop()


def fill_store(path: pathlib.Path, shipper: int, rows_wanted: int) -> int:
    """Jobs of NODES_PER_SHIPPER nodes as a shipping collector would have rolled
    them up, all ended, over the last 7 days; returns the rollup rows."""
    empty_store(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    minutes = max(1, rows_wanted // (NODES_PER_SHIPPER * RANKS * SITES))
    now_minute = int(time.time()) // 60
    rng = random.Random(shipper)
    db.execute("INSERT INTO strings(id, text) VALUES (1, 'aten::linear'), (2, 'weight')")
    db.executemany("INSERT INTO locations(id, kind, file, line, function, stack) VALUES (?, 1, ?, ?, 'forward', '')",
                   [(site + 1, f"/fleet/model_{site % 20}.py", 10 + site) for site in range(SITES)])
    agent = 0
    rows = []
    for job in range(NODES_PER_SHIPPER):
        run_row = job + 1
        start = now_minute - rng.randrange(minutes, 7 * 24 * 60)
        start_ns = start * 60 * 10**9
        db.execute("INSERT INTO runs(id, run_id, first_seen_unix_ns, last_seen_unix_ns) VALUES (?, ?, ?, ?)",
                   (run_row, f"job-{shipper}-{job}", start_ns, start_ns + minutes * 60 * 10**9))
        for rank in range(RANKS):
            agent += 1
            db.execute("INSERT INTO agents(id, run, agent_id, pid, rank, local_rank, world_size, hostname, "
                       "torch_version, command, policy_hash, policy_files, finished, casts, batches) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, '2.14.1', 'train.py', '', '[]', 1, ?, 1)",
                       (agent, run_row, f"agent-{shipper}-{job}-{rank}", 1000 + rank, rank, rank, RANKS,
                        f"node-{shipper}-{job}", minutes * SITES * 4))
            # Every eighth job: its last rank runs the first site in float16 (rank-divergence).
            dst_first = 2 if job % 8 == 0 and rank == RANKS - 1 else 3
            for site in range(SITES):
                codes = cast_key(dst=dst_first if site == 0 else 3, role=1 + site % 3)
                for minute in range(start, start + minutes):
                    rows.append((agent, minute, 1, 2, site + 1, codes, 4, 4096, 3, 1, 0))
        db.execute("INSERT INTO findings(run, kind, severity, summary, details_json) VALUES (?, 'stale-cache-hit', "
                   "'critical', 'bench', ?)",
                   (run_row, json.dumps({"sites": [{"file": "/fleet/model_0.py", "line": 10}], "ranks": [0, 1]})))
    db.executemany("INSERT INTO ship_rollups(shipment, agent, minute, op, arg_name, location, codes, count, bytes, "
                   "hits, misses, stale_hits) VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.execute("INSERT INTO ship_state(key, value) VALUES ('collector_id', ?)", (f"bench-{shipper}",))
    db.commit()
    db.close()
    return len(rows)


def cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """user + system CPU seconds of a live process (with its reaped children's: /proc/PID/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: its children that exited
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(pg) -> float:
    """PostgreSQL's CPU seconds so far: the postmaster, the backends it reaped
    (closed connections) and every live process it started."""
    postmaster = pg.postmaster_pid()
    total = cpu_seconds(postmaster, reaped_children=True)
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                total += cpu_seconds(int(proc.name))
        except (OSError, ValueError):
            pass  # gone in between
    return total


def backlog(path: pathlib.Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT count(*) FROM ship_rollups").fetchone()[0]
    finally:
        db.close()


def shipping(pg, tmp: pathlib.Path, total_rows: int) -> None:
    stores = [tmp / f"node{k}.db" for k in range(SHIPPERS)]
    started = time.monotonic()
    counts = [fill_store(store, k, total_rows // SHIPPERS) for k, store in enumerate(stores)]
    print(f"made {SHIPPERS} stores, {sum(counts):,} rollup rows of {SHIPPERS * NODES_PER_SHIPPER} nodes' jobs in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    ship = ("--ship", pg.url("node_writer"), "--ship-password-file", str(pg.writer_password),
            "--ship-interval-s", "0.05", "--analyze-interval-ms", "0", "--no-http")
    postgres_before = postgres_cpu_seconds(pg)
    begun = time.monotonic()
    collectors = [Collector(store, extra=ship) for store in stores]
    done, shipper_cpu = {}, {}
    try:
        while len(done) < len(stores):
            for k, store in enumerate(stores):
                if k not in done and backlog(store) == 0:
                    done[k] = time.monotonic() - begun
                    shipper_cpu[k] = cpu_seconds(collectors[k].process.pid)
            time.sleep(0.2)
        postgres_cpu = postgres_cpu_seconds(pg) - postgres_before
    finally:
        for collector in collectors:
            collector.stop()
    if os.environ.get("CASTSCOPE_LOG") == "debug":  # each shipment's phases
        for collector in collectors:
            print("".join(line + "\n" for line in collector.log_text().splitlines() if "shipment" in line), end="")
    for k in range(SHIPPERS):
        print(f"shipper {k}: {counts[k]:,} rows in {done[k]:.1f} s = {counts[k] / done[k] / 1e3:.0f} k rows/s")
    print(f"all {SHIPPERS}: {sum(counts):,} rows in {max(done.values()):.1f} s = "
          f"{sum(counts) / max(done.values()) / 1e3:.0f} k rows/s together; per shipper median "
          f"{statistics.median(counts[k] / done[k] for k in done) / 1e3:.0f} k rows/s", flush=True)
    per_million = [shipper_cpu[k] / (counts[k] / 1e6) for k in range(SHIPPERS)]
    print(f"CPU seconds per million rows: shipper process {statistics.median(per_million):.2f} (median; "
          f"{min(per_million):.2f}-{max(per_million):.2f}), PostgreSQL {postgres_cpu / (sum(counts) / 1e6):.2f} "
          f"({postgres_cpu:.1f} s for {sum(counts):,} rows)", flush=True)
    print("PostgreSQL holds " + pg.psql("SELECT count(*) FROM castscope.rollups") + " rollup rows, " +
          pg.psql("SELECT count(*) FROM castscope.job_sites") + " job summary rows, " +
          pg.psql("SELECT count(*) FROM castscope.rank_divergences") + " rank-divergence findings")


def questions(pg, repeats: int) -> None:
    reader = (pg.url("fleet_reader"), "--password-file", str(pg.reader_password), "--json")
    for name, args in (("fleet sites --since 7d", ("sites", *reader, "--since", "7d")),
                       ("fleet findings", ("findings", *reader))):
        times = []
        for _ in range(repeats):
            began = time.monotonic()
            fleet(*args)
            times.append(time.monotonic() - began)
        times.sort()
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        print(f"{name}: p50 {statistics.median(times) * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms ({repeats} runs, "
              f"the command's whole run: connect, query, print)", flush=True)


def ingest(pg, seconds: float, repeats: int) -> None:
    ship = ("--ship", pg.url("node_writer"), "--ship-password-file", str(pg.writer_password))
    rows = {"without": (),
            # the defaults: a minute ships once it is over, every 10 s
            "with --ship": ship,
            # every second, the open minute too: the shipper and PostgreSQL busy all along
            "with --ship, 1 s, partial minutes": (*ship, "--ship-interval-s", "1", "--ship-partial-minutes")}

    def measure(row: str) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            collector = Collector(pathlib.Path(tmp) / "ingest.db", extra=rows[row])
            try:
                out = bench(collector.address, "throughput", "--seconds", str(seconds))
            finally:
                collector.stop()
        rate = float(re.search(r"([\d.]+) events/s \(window", out).group(1))
        print(f"  {row}: {rate / 1e6:.2f} M events/s", flush=True)
        return rate

    m = medians(interleaved(list(rows), repeats, measure))
    for row in rows:
        print(f"ingest {row}: {m[row] / 1e6:.2f} M events/s, {m[row] / m['without']:.3f}x (median of {repeats})",
              flush=True)
    print("(PostgreSQL runs on the same 2 cores here; on a fleet it is another machine)")


def main():
    global SHIPPERS, NODES_PER_SHIPPER
    parser = repeats_parser(3, rows=10_000_000, seconds=8, query_runs=20)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--shippers", type=int, default=SHIPPERS, help="collectors shipping at once (the 128 nodes "
                                                                       "shared among them)")
    args = parser.parse_args()
    SHIPPERS, NODES_PER_SHIPPER = args.shippers, NODES // args.shippers
    with tempfile.TemporaryDirectory() as tmp, PostgresServer() as pg:
        admin = pg.password_file(pg.superuser, pg.superuser_password)
        pg.writer_password = pg.password_file("node_writer", "bench-writer")
        pg.reader_password = pg.password_file("fleet_reader", "bench-reader")
        fleet("init", pg.admin_url(), "--password-file", str(admin), "--writer", "node_writer",
              "--writer-password-file", str(pg.writer_password), "--reader", "fleet_reader",
              "--reader-password-file", str(pg.reader_password))
        shipping(pg, pathlib.Path(tmp), args.rows)
        pg.psql("VACUUM ANALYZE")
        questions(pg, args.query_runs)
        if not args.skip_ingest:
            ingest(pg, args.seconds, args.repeats)


if __name__ == "__main__":
    sys.exit(main())
