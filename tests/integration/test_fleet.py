"""Fleet shipping (docs/fleet.md) against a real PostgreSQL: two node
collectors, each with its own store, ship to one database; the fleet's
answers equal the sum of the local reports, rank-divergence is raised where
a rank took another autocast path, and what must be refused is (a wrong
password, the reader role writing, a certificate from another CA, a password
on the command line)."""
from __future__ import annotations

import collections
import json
import os
import time
import urllib.error
import urllib.request
import pathlib
import re
import socket
import subprocess
import sys

import pytest

import castscope
import helpers
from collector_server import Collector
from postgres_server import BIN, PostgresServer
from test_viewer_http import conforms  # the viewer API's schema (docs/schema/viewer-api.schema.json)

if not (BIN / "initdb").exists():
    pytest.skip(f"PostgreSQL 15 is not installed ({BIN}/initdb); scripts/setup.sh --tests installs it", allow_module_level=True)

SCENARIOS = pathlib.Path(__file__).parent / "scenarios"
CASTSCOPE = [sys.executable, "-m", "castscope"]


def fleet(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(castscope.collector_binary()), "fleet", *args], capture_output=True, text=True,
                            timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with PostgresServer() as server:
        server.writer_password = server.password_file("node_writer", "writer-secret-1")
        server.reader_password = server.password_file("fleet_reader", "reader-secret-2")
        admin_password = server.password_file(server.superuser, server.superuser_password)
        server.admin_password = admin_password
        init = fleet("init", server.admin_url(), "--password-file", admin_password, "--writer", "node_writer",
                     "--writer-password-file", server.writer_password, "--reader", "fleet_reader",
                     "--reader-password-file", server.reader_password)
        assert "fleet schema version 2" in init.stdout
        # Idempotent: a second init changes nothing.
        assert "(already)" in fleet("init", server.admin_url(), "--password-file", admin_password).stdout
        yield server


def ship_args(pg, node: str) -> tuple:
    return ("--ship", pg.url("node_writer"), "--ship-password-file", str(pg.writer_password), "--ship-interval-s",
            "0.2", "--ship-partial-minutes", "--ship-node", node)


def ask(pg, what: str, *args: str):
    return json.loads(fleet(what, pg.url("fleet_reader"), "--password-file", str(pg.reader_password), "--json",
                            "--limit", "100000", *args).stdout)


def torchrun_job(collector: Collector, out: pathlib.Path, run_id: str, script: str, env: dict | None = None) -> None:
    result = subprocess.run([*CASTSCOPE, "run", "--collector", collector.address, "--out", str(out), "--run-id",
                             run_id, "--no-jsonl", "--", sys.executable, "-m", "torch.distributed.run",
                             "--nproc_per_node=2", "--master_port=0", str(SCENARIOS / script)],
                            capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr


def local_report(db: pathlib.Path, run_id: str) -> dict:
    result = subprocess.run([str(castscope.collector_binary()), "report", "--db", str(db), "--run", run_id],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def report_sites(report: dict, field: str = "count") -> collections.Counter:
    """Decisions (or bytes) per site and cast kind, as `fleet sites` keys them: autocast's
    decisions and every other conversion (each converted)."""
    out = collections.Counter()
    for row in report["sites"] + report["conversions"]:
        s = row["site"]
        out[(s["file"], s["line"], s["op"], s["arg"], row["src_dtype"], row["dst_dtype"], row["mode"],
             row.get("outcome", "cast"))] += row[field]
    return out


def fleet_sites(pg, jobs: list[str], field: str = "count") -> collections.Counter:
    out = collections.Counter()
    for job in jobs:
        for row in ask(pg, "sites", "--job", job):
            out[(row["file"], row["line"], row["op"], row["arg"], row["src"], row["dst"], row["mode"],
                 row["outcome"])] += row[field]
    return out


def shipping(db: pathlib.Path) -> dict:
    result = subprocess.run([str(castscope.collector_binary()), "query", "--db", str(db), "shipping"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_for_ends(pg, jobs: set[str], timeout_s: float = 120) -> None:
    """Until PostgreSQL has every job's end (its agents all finished there)."""
    deadline = time.monotonic() + timeout_s
    while not jobs <= {j["job"] for j in ask(pg, "jobs") if not j["running"]}:
        assert time.monotonic() < deadline, f"jobs not shipped in {timeout_s:.0f} s"
        time.sleep(0.3)


def test_two_nodes_four_jobs_sum_exactly_and_rank_divergence_is_found(pg, tmp_path):
    nodes = {"node-a": Collector(tmp_path / "a.db", extra=ship_args(pg, "node-a")),
             "node-b": Collector(tmp_path / "b.db", extra=ship_args(pg, "node-b"))}
    jobs = [("node-a", "stale-ranks", "two_ranks.py", None), ("node-a", "diverging", "rank_divergence.py", None),
            ("node-b", "clean", "rank_divergence.py", {"DIVERGE": "0"}), ("node-b", "stale-again", "two_ranks.py", None)]
    try:
        for node, run_id, script, env in jobs:
            torchrun_job(nodes[node], tmp_path / run_id, run_id, script, env)
        wait_for_ends(pg, {run_id for _, run_id, _, _ in jobs})
    finally:
        for collector in nodes.values():
            assert collector.stop() == 0, collector.log_text()

    # fleet sites == the sum of the four local reports, site by site.
    local = collections.Counter()
    local_bytes = collections.Counter()
    local_findings = set()
    for node, run_id, _, _ in jobs:
        report = local_report(tmp_path / ("a.db" if node == "node-a" else "b.db"), run_id)
        local += report_sites(report)
        local_bytes.update(report_sites(report, "bytes"))
        for f in report["findings"]:
            site = f["sites"][0] if f["sites"] else {"file": "", "line": 0}
            local_findings.add((run_id, f["kind"], site["file"], site["line"], tuple(f["ranks"])))
    assert fleet_sites(pg, [run_id for _, run_id, _, _ in jobs]) == local
    # ... and their bytes, which count only decisions to cast: one that
    # converted nothing (already the target, ...) moved no bytes in either.
    assert any(key[-1] != "cast" for key in local), "the scenarios make decisions that convert nothing"
    assert fleet_sites(pg, [run_id for _, run_id, _, _ in jobs], "bytes") == local_bytes

    # fleet findings == the union of the local ones, with their ranks.
    findings = [f for job in jobs for f in ask(pg, "findings", "--job", job[1])]
    assert local_findings, "the scenarios raise findings"
    assert {(f["job"], f["kind"], f["file"], f["line"], tuple(f["ranks"])) for f in findings
            if f["kind"] != "rank-divergence"} == local_findings

    # rank-divergence: at the head line of the diverging job (one per argument
    # of the head's linear), ranks [1] vs [0]; the clean twin has none.
    head_line = helpers.line_of(SCENARIOS / "rank_divergence.py", "the head line")
    divergent = [f for f in findings if f["kind"] == "rank-divergence" and f["job"] in ("diverging", "clean")]
    assert {(f["job"], f["file"], f["line"]) for f in divergent} == {
        ("diverging", str(SCENARIOS / "rank_divergence.py"), head_line)}, divergent
    # One finding per argument, each named: three at one line must not look alike.
    assert len({(f["op"], f["arg"]) for f in divergent}) == len(divergent) > 1, divergent
    assert len({f["summary"] for f in divergent}) == len(divergent), divergent
    for head in divergent:
        assert [side["ranks"] for side in head["sides"]] == [[0], [1]]
        assert f"{head['op']}({head['arg']}): ranks [1] cast differently from ranks [0]" in head["summary"]
        assert {c["dst"] for c in head["sides"][0]["casts"]} == {"bfloat16"}
        assert {c["dst"] for c in head["sides"][1]["casts"]} == {"float16"}

    # The jobs, with their nodes and ranks; compare, the fleet form of diff.
    by_job = {j["job"]: j for j in ask(pg, "jobs")}
    assert by_job["diverging"]["ranks"] == [-1, 0, 1]  # -1: torchrun's launcher, attached too
    assert [n["node"] for n in by_job["diverging"]["nodes"]] == ["node-a"]
    assert [n["node"] for n in by_job["clean"]["nodes"]] == ["node-b"]
    def compare(a: str, b: str) -> list:
        return json.loads(fleet("compare", pg.url("fleet_reader"), "--password-file", str(pg.reader_password),
                                "--json", a, b).stdout)

    assert compare("stale-ranks", "stale-again") == []  # the same code on two nodes casts alike
    differences = compare("diverging", "clean")
    assert {(d["line"], d["dst"], d["a"], d["b"]) for d in differences if d["arg"] == "weight"} == {
        (head_line, "float16", 3, 0), (head_line, "bfloat16", 3, 6)}

    # The tables say what the JSON does, readably.
    def table(*args: str) -> str:
        return fleet(args[0], pg.url("fleet_reader"), "--password-file", str(pg.reader_password), *args[1:]).stdout

    sites_table = table("sites", "--job", "diverging").splitlines()
    assert sites_table[0].split()[:6] == ["DECISIONS", "BYTES", "HITS", "MISSES", "STALE", "BACKWARD"], sites_table[0]
    jobs_table = table("jobs", "--job", "diverging").splitlines()
    assert "FIRST SEEN (UTC)" in jobs_table[0] and "NODES" in jobs_table[0], jobs_table
    assert "node-a" in jobs_table[1] and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", jobs_table[1]), jobs_table
    findings_table = table("findings", "--job", "diverging", "--kind", "rank-divergence")
    assert "SIDES" in findings_table.splitlines()[0], findings_table
    assert "[0] float32->bfloat16" in findings_table and "[1] float32->float16" in findings_table, findings_table
    job_table = table("job", "diverging")
    assert job_table.startswith("job diverging: 3 processes\n") and "RANK" in job_table, job_table
    assert json.loads(table("job", "diverging", "--json"))["job"] == "diverging"
    assert table("compare", "stale-ranks", "stale-again") == (
        "no difference: stale-ranks and stale-again cast alike at every site\n")


def test_the_reader_cannot_write_and_a_wrong_password_or_certificate_is_refused(pg, tmp_path):
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-it\n")
    wrong.chmod(0o600)
    refused = fleet("jobs", pg.url("fleet_reader"), "--password-file", str(wrong), check=False)
    assert refused.returncode == 1 and "password authentication failed" in refused.stderr
    # The reader role writing: a node collector shipping as the reader is refused, and says so.
    reader_ship = ("--ship", pg.url("fleet_reader"), "--ship-password-file", str(pg.reader_password),
                   "--ship-interval-s", "0.2", "--ship-partial-minutes")
    collector = Collector(tmp_path / "reader.db", extra=reader_ship)
    try:
        # What every user of the machine can read names the file, never the password.
        command_line = pathlib.Path(f"/proc/{collector.process.pid}/cmdline").read_bytes()
        assert str(pg.reader_password).encode() in command_line and b"reader-secret-2" not in command_line
        helpers_job = subprocess.run([*CASTSCOPE, "run", "--collector", collector.address, "--out",
                                      str(tmp_path / "out"), "--run-id", "reader-writes", "--no-jsonl", "--",
                                      sys.executable, "-c", "import helpers; helpers.train(2)"],
                                     capture_output=True, text=True, timeout=300,
                                     env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent)})
        assert helpers_job.returncode == 0, helpers_job.stderr
        deadline = time.monotonic() + 30
        while "permission denied" not in collector.log_text():
            assert time.monotonic() < deadline, collector.log_text()
            time.sleep(0.2)
    finally:
        collector.stop()
    # A certificate from another CA is refused under verify-full.
    other = fleet("jobs", pg.url("fleet_reader", sslrootcert=str(pg.other_ca_file)), "--password-file",
                  str(pg.reader_password), check=False)
    assert other.returncode == 1 and "certificate" in other.stderr
    # A password on the command line is refused before anything is sent.
    inline = fleet("jobs", pg.url("fleet_reader").replace("fleet_reader@", "fleet_reader:reader-secret-2@"),
                   check=False)
    assert inline.returncode == 2 and "carries a password" in inline.stderr
    # No password in any log.
    for log in [collector.log_path, *tmp_path.glob("*.log")]:
        text = log.read_text(errors="replace")
        assert "reader-secret-2" not in text and "writer-secret-1" not in text


def steady_job(collector: Collector, out: pathlib.Path, run_id: str, seconds: float = 8) -> subprocess.Popen:
    """A one-process job casting steadily for `seconds`, started and not waited for."""
    return subprocess.Popen([*CASTSCOPE, "run", "--collector", collector.address, "--out", str(out), "--run-id",
                             run_id, "--no-jsonl", "--", sys.executable, str(SCENARIOS / "steady_training.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SECONDS": str(seconds)})


def wait_until(what: str, condition, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not in {timeout_s:.0f} s"
        time.sleep(0.1)


def test_postgres_and_a_collector_killed_mid_shipment_lose_and_double_nothing(pg, tmp_path):
    db = tmp_path / "node.db"
    collector = Collector(db, extra=ship_args(pg, "node-k"))
    try:
        # PostgreSQL killed -9 while a job ships every 0.2 s, back two seconds later.
        job = steady_job(collector, tmp_path / "pg-killed", "pg-killed")
        wait_until("a first shipment", lambda: shipping(db)["last_success_unix_s"] > 0)
        pg.kill9()
        wait_until("rows waiting in the store while PostgreSQL is away", lambda: shipping(db)["backlog_rows"] > 0)
        time.sleep(2)
        assert shipping(db)["last_error"]  # and said why
        pg.restart()
        assert job.wait(timeout=300) == 0, job.stderr.read()
        # The collector killed -9 while the next job ships; restarted on its port.
        job = steady_job(collector, tmp_path / "collector-killed", "collector-killed")
        shipped = shipping(db)["last_success_unix_s"]
        wait_until("a shipment of the second job", lambda: shipping(db)["last_success_unix_s"] > shipped)
        collector.kill9()
        time.sleep(0.5)
        collector.start()
        assert job.wait(timeout=300) == 0, job.stderr.read()
        wait_for_ends(pg, {"pg-killed", "collector-killed"})
        deadline = time.monotonic() + 60
        while (state := shipping(db))["backlog_rows"] or state["lag_seconds"]:
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        assert state["last_error"] == "" and state["last_success_unix_s"] > 0
    finally:
        assert collector.stop() == 0, collector.log_text()
    assert "fleet shipping:" in collector.log_text()  # the outage was said, once per message
    jobs = ["pg-killed", "collector-killed"]
    local = collections.Counter()
    for run_id in jobs:
        local += report_sites(local_report(db, run_id))
    assert local and fleet_sites(pg, jobs) == local
    # No shipment twice: the database's own count of rows per shipment agrees with what each one said it carried.
    assert pg.psql("SELECT count(*) FROM castscope.shipments s WHERE rollup_rows <> (SELECT count(*) FROM "
                   "castscope.rollups r WHERE r.collector = s.collector AND r.shipment = s.shipment)") == "0"


def test_retain_drops_old_day_partitions_and_keeps_the_rest(pg, tmp_path):
    # An old job, ten days ago, as a collector would have shipped it.
    pg.psql("SELECT castscope.ensure_days(now() - interval '10 days', now() - interval '10 days');"
            "INSERT INTO castscope.rollups VALUES (now() - interval '10 days', 'old-node', 1, 'old-job', 0, 42, "
            "1, 1, 3, 1, 1, 1, 1, 1, 5, 20, 0, 0, 0);"
            "INSERT INTO castscope.agents VALUES ('old-node', 1, 'old-job', 'old-agent', 'old-node', 0, 0, 1, 1, "
            "'2.14.1', '', 5, 0, 0, false, now() - interval '10 days', now() - interval '10 days', '')")
    old_day = pg.psql("SELECT to_char((now() - interval '10 days') AT TIME ZONE 'UTC', 'YYYYMMDD')")
    before_jobs = {j["job"] for j in ask(pg, "jobs")}
    recent = sorted(before_jobs - {"old-job"})
    before_sites = fleet_sites(pg, recent)
    assert "old-job" in before_jobs

    admin_password = pg.password_file(pg.superuser, pg.superuser_password)
    refused = fleet("retain", pg.url("fleet_reader"), "--password-file", str(pg.reader_password), "--days", "7",
                    check=False)
    assert refused.returncode == 1 and "castscope" in refused.stderr  # readers cannot drop anything
    retained = fleet("retain", pg.admin_url(), "--password-file", str(admin_password), "--days", "7")
    assert f"rollups_{old_day}" in retained.stdout and f"job_sites_{old_day}" in retained.stdout
    assert "1 jobs forgotten" in retained.stdout
    assert pg.psql(f"SELECT to_regclass('castscope.rollups_{old_day}') IS NULL") == "t"
    after_jobs = {j["job"] for j in ask(pg, "jobs")}
    assert after_jobs == before_jobs - {"old-job"}
    assert fleet_sites(pg, recent) == before_sites  # the rest answers as before


def test_fleet_view_serves_the_fleet_to_the_reader_role_only(pg, tmp_path):
    # Reads the jobs the two-node test above shipped into this module's database.
    writer = fleet("view", pg.url("node_writer"), "--password-file", str(pg.writer_password), check=False)
    assert writer.returncode == 2 and "reads with the reader role" in writer.stderr
    url_file = tmp_path / "fleet.url"
    view = subprocess.Popen([str(castscope.collector_binary()), "fleet", "view", pg.url("fleet_reader"),
                             "--password-file", str(pg.reader_password), "--viewer-file", str(url_file)],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until("the fleet page", url_file.exists, 30)
        base, token = url_file.read_text().strip().split("/?token=")
        token, _, page = token.partition("#")
        assert page == "/fleet"  # the fleet page opens at its own view, with no request for a run's API

        def get(route: str, headers: dict | None = None) -> tuple[int, dict]:
            request = urllib.request.Request(base + route, headers=headers if headers is not None else {"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        status, jobs = get("/api/fleet/jobs")
        assert status == 200 and {"diverging", "clean"} <= {j["job"] for j in jobs["jobs"]}
        conforms("FleetJobsAnswer", jobs)
        status, findings = get("/api/fleet/findings?kind=rank-divergence&job=diverging")
        assert status == 200 and findings["findings"] and all(
            [s["ranks"] for s in f["sides"]] == [[0], [1]] for f in findings["findings"])
        conforms("FleetFindingsAnswer", findings)
        conforms("FleetFindingsAnswer", get("/api/fleet/findings")[1])
        status, sites = get("/api/fleet/sites?job=diverging")
        assert status == 200 and sites["sites"]
        conforms("FleetSitesAnswer", sites)
        status, job = get("/api/fleet/job?job=diverging")
        assert status == 200 and sorted(r["rank"] for r in job["ranks"]) == [-1, 0, 1]
        conforms("FleetJobAnswer", job)
        assert get("/api/fleet/sites?since=soon")[0] == 400
        assert get("/api/runs")[0] == 404  # no store behind the fleet page
        assert get("/api/fleet/jobs", headers={})[0] == 401  # the token, as on every viewer
        assert get("/api/fleet/jobs", headers={"Authorization": f"Bearer {token}", "Host": "evil.example"})[0] == 403
    finally:
        view.terminate()
        view.wait(timeout=30)


def test_a_collector_whose_postgres_never_answers_keeps_a_bounded_backlog_and_counts_the_rest(tmp_path):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "away.db"
    collector = Collector(db, extra=("--ship", f"postgresql://nobody@127.0.0.1:{port}/castscope?connect_timeout=1",
                                     "--ship-interval-s", "0.2", "--ship-partial-minutes",
                                     "--ship-backlog-max-rows", "2"))
    try:
        job = steady_job(collector, tmp_path / "away", "away", seconds=4)
        assert job.wait(timeout=300) == 0, job.stderr.read()
        wait_until("casts counted as not shipped", lambda: shipping(db)["events_not_shipped"] > 0)
        state = shipping(db)
        assert "cannot connect" in state["last_error"] and state["last_success_unix_s"] == 0
        assert "\t" not in state["last_error"] and "  " not in state["last_error"], state  # libpq's, on one line
    finally:
        assert collector.stop() == 0, collector.log_text()
    # Bounded: the rows past the bound are the casts of the commits before the pause took effect.
    stored = subprocess.run([str(castscope.collector_binary()), "report", "--db", str(db), "--run", "away"],
                            capture_output=True, text=True, timeout=120)
    report = json.loads(stored.stdout)
    decisions = sum(row["count"] for row in report["sites"] + report["conversions"])  # every cast ships
    rolled_up = shipping(db)
    assert rolled_up["backlog_rows"] >= 2 and rolled_up["events_not_shipped"] < decisions
    assert "new casts are counted, not shipped" in collector.log_text()


def test_unknown_jobs_are_an_error_not_zeros(pg):
    """`fleet job` and `fleet compare` with a job the fleet never saw exit
    non-zero and name it (they printed zeros, as for a job that cast nothing)."""
    reader = (pg.url("fleet_reader"), "--password-file", str(pg.reader_password))
    job = fleet("job", *reader, "nosuchjob", check=False)
    assert job.returncode == 1 and "no job 'nosuchjob' in the fleet" in job.stderr, (job.stdout, job.stderr)
    compared = fleet("compare", *reader, "--json", "nosuch-a", "nosuch-b", check=False)
    assert compared.returncode == 1 and "no job 'nosuch-a'" in compared.stderr, (compared.stdout, compared.stderr)
    assert compared.stdout == ""


def _shipping_database(pg, name: str, initialised: bool) -> None:
    pg.psql(f"CREATE DATABASE {name}")
    if initialised:
        fleet("init", pg.admin_url(name), "--password-file", str(pg.admin_password), "--writer", "node_writer",
              "--writer-password-file", str(pg.writer_password), "--reader", "fleet_reader",
              "--reader-password-file", str(pg.reader_password))


def _job_shipped_to(pg, tmp_path, dbname: str, run_id: str) -> dict:
    """A collector shipping to `dbname` sees one cycle fail, a job, then its
    final cycle at stop; what the store says of shipping afterwards."""
    db = tmp_path / f"{run_id}.db"
    collector = Collector(db, extra=("--ship", pg.url("node_writer", dbname), "--ship-password-file",
                                     str(pg.writer_password), "--ship-interval-s", "0.2", "--ship-partial-minutes"))
    try:
        wait_until("the first shipping cycle's error", lambda: shipping(db)["last_error"] != "")
        job = subprocess.run([*CASTSCOPE, "run", "--collector", collector.address, "--out", str(tmp_path / run_id),
                              "--run-id", run_id, "--no-jsonl", "--", sys.executable, "-c",
                              "import helpers; helpers.train(2)"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent)})
        assert job.returncode == 0, job.stderr
    finally:
        assert collector.stop() == 0, collector.log_text()  # its last cycle: a final one, over every run
    return shipping(db)


def test_every_connection_checks_the_fleet_schema_version(pg, tmp_path):
    """A schema the collector does not ship to is refused on every connection,
    not only the first (the first check failed, the connection stayed open, and
    the next cycle shipped over it)."""
    _shipping_database(pg, "skewed", initialised=True)
    pg.psql("INSERT INTO castscope.schema_version(version) VALUES (99)", dbname="skewed")
    state = _job_shipped_to(pg, tmp_path, "skewed", "skewed-job")
    assert "fleet schema version 99" in state["last_error"] and state["last_success_unix_s"] == 0, state
    assert pg.psql("SELECT count(*) FROM castscope.agents", dbname="skewed") == "0"
    assert pg.psql("SELECT count(*) FROM castscope.rollups", dbname="skewed") == "0"


def test_a_database_never_initialised_keeps_saying_run_fleet_init(pg, tmp_path):
    _shipping_database(pg, "bare", initialised=False)
    state = _job_shipped_to(pg, tmp_path, "bare", "bare-job")
    assert "run `castscope fleet init URL` once as the database owner" in state["last_error"], state


def test_connect_timeout_in_the_url_is_honoured(tmp_path):
    """A server that accepts TCP and never answers: the URL's connect_timeout=2
    ends the attempt, not castscope's default of 10 s."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # the kernel completes the handshake; nobody ever reads
        port = silent.getsockname()[1]
        started = time.monotonic()
        result = fleet("jobs", f"postgresql://nobody@127.0.0.1:{port}/castscope?connect_timeout=2", check=False)
        waited = time.monotonic() - started
    assert result.returncode == 1 and "cannot connect" in result.stderr, result.stderr
    assert waited < 8, f"waited {waited:.1f} s: the URL's connect_timeout=2 was not used"


def test_messages_name_the_right_flag_the_cause_and_the_role(pg, tmp_path):
    # serve's password file is --ship-password-file; fleet's is --password-file.
    served = subprocess.run([str(castscope.collector_binary()), "serve", "--db", str(tmp_path / "s.db"), "--ship",
                             "postgresql://node_writer:secret@127.0.0.1:1/castscope"],
                            capture_output=True, text=True, timeout=60)
    assert served.returncode != 0 and "--ship-password-file FILE" in served.stderr, served.stderr
    assert " --password-file" not in served.stderr, served.stderr
    # A missing password file says why it cannot be read.
    missing = fleet("jobs", pg.url("fleet_reader"), "--password-file", str(tmp_path / "nope"), check=False)
    assert missing.returncode != 0 and "No such file or directory" in missing.stderr, missing.stderr
    # retain as the reader names the role that may run it.
    retained = fleet("retain", pg.url("fleet_reader"), "--password-file", str(pg.reader_password), "--days", "0",
                     check=False)
    assert retained.returncode == 1 and "permission denied" in retained.stderr, retained.stderr
    assert "run it as the fleet database's owner" in retained.stderr, retained.stderr


def test_castscope_run_says_when_shipping_failed_and_how_to_ship_later(pg, tmp_path):
    """`castscope run --ship` to a server nobody answers on, or as the reader:
    the job's status stays its own, and the run says why nothing shipped and
    how to ship what waits in its store (it said nothing)."""
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cases = {"away": (f"postgresql://nobody@127.0.0.1:{port}/castscope?connect_timeout=1", None, "cannot connect"),
             "reader": (pg.url("fleet_reader"), str(pg.reader_password), "permission denied")}
    for name, (url, password_file, why) in cases.items():
        out = tmp_path / name
        ran = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--run-id", f"unshipped-{name}", "--no-jsonl",
                              "--ship", url, *(["--ship-password-file", password_file] if password_file else []),
                              "--", sys.executable, "-c", "import helpers; helpers.train(2)"],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent)})
        assert ran.returncode == 0, ran.stderr
        assert "castscope: shipping to the fleet failed: " in ran.stderr and why in ran.stderr, ran.stderr
        assert f"castscope serve --db {out / 'castscope.db'} --ship '{url}'" in ran.stderr, ran.stderr
    # A run that shipped says nothing of it.
    out = tmp_path / "shipped"
    ran = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--run-id", "shipped-run", "--no-jsonl",
                          "--ship", pg.url("node_writer"), "--ship-password-file", str(pg.writer_password), "--",
                          sys.executable, "-c", "import helpers; helpers.train(2)"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent)})
    assert ran.returncode == 0 and "shipping to the fleet failed" not in ran.stderr, ran.stderr


class _HeldLock:
    """A psql session holding ACCESS EXCLUSIVE on `table` until released: a
    shipment's COPY into it waits, inside its transaction, after begin_shipment."""

    def __init__(self, pg, table: str):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self.session = subprocess.Popen(
            [str(BIN / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(pg.socket_dir), "-p", str(pg.port),
             "-U", pg.superuser, "-d", "castscope"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.session.stdin.write(f"BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; SELECT 'locked';\n")
        self.session.stdin.flush()
        assert self.session.stdout.readline().strip() == "locked"

    def release(self) -> None:
        self.session.stdin.write("ROLLBACK;\n")
        self.session.stdin.close()
        self.session.wait(timeout=30)


def test_a_collector_killed_inside_a_shipment_lands_it_once(pg, tmp_path):
    """kill -9 of the node collector while its shipment's COPY is in flight
    (begin_shipment done, no commit), found deterministically: the COPY waits
    on a lock the test holds on the day's partition, the test sees it waiting
    in pg_stat_activity and kills the collector then. Twice, on the same
    shipment; every shipment lands once and the fleet's sums equal the node's."""
    db = tmp_path / "node.db"
    collector = Collector(db, extra=ship_args(pg, "node-crash"))
    copies_waiting = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                      "AND query LIKE 'COPY castscope.rollups%'")
    try:
        job = steady_job(collector, tmp_path / "crash-a", "crash-a", seconds=4)
        wait_until("a first shipment (the day's partition made)", lambda: shipping(db)["last_success_unix_s"] > 0)
        partitions = pg.psql("SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'castscope.rollups'::regclass")
        for _ in range(2):
            locks = [_HeldLock(pg, table) for table in partitions.split()]
            try:
                wait_until("a shipment's COPY waiting inside its transaction", lambda: pg.psql(copies_waiting) == "1")
                collector.kill9()
            finally:
                for lock in locks:
                    lock.release()
            collector.start()
        assert job.wait(timeout=300) == 0, job.stderr.read()
        wait_for_ends(pg, {"crash-a"})
        wait_until("the backlog shipped", lambda: shipping(db)["backlog_rows"] == 0)
    finally:
        assert collector.stop() == 0, collector.log_text()
    assert fleet_sites(pg, ["crash-a"]) == report_sites(local_report(db, "crash-a"))
    assert pg.psql("SELECT count(*) FROM castscope.shipments s WHERE rollup_rows <> (SELECT count(*) FROM "
                   "castscope.rollups r WHERE r.collector = s.collector AND r.shipment = s.shipment)") == "0"
