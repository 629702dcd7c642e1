"""Events through a real collector: castscope run with its own collector, a
collector killed with -9 mid-run, a collector that never comes, and bad
requests beside a well-behaved agent."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import grpc
import pytest

import castscope
from collector_server import Collector, query, runs
from crafted_run import _field, _varint
from helpers import closed_address, dumped_events, seqs

CASTSCOPE = [sys.executable, "-m", "castscope"]
JOBS = pathlib.Path(__file__).parent / "jobs"


def _run_command(out: pathlib.Path, options: tuple, job: list) -> list:
    return [*CASTSCOPE, "run", "--out", str(out), *options, "--", sys.executable, *job]


def castscope_run(out: pathlib.Path, *options: str, job: list, env=None, timeout=600):
    return subprocess.run(_run_command(out, options, job), capture_output=True, text=True, timeout=timeout, env=env)


def start_castscope_run(out: pathlib.Path, *options: str, job: list, env=None) -> subprocess.Popen:
    """castscope_run, left running: its output is read with communicate()."""
    return subprocess.Popen(_run_command(out, options, job), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


@contextlib.contextmanager
def running_castscope_run(out: pathlib.Path, *options: str, job: list, env=None):
    """start_castscope_run, killed if the test leaves before it ended."""
    process = start_castscope_run(out, *options, job=job, env=env)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()


def the_agent(db: pathlib.Path) -> dict:
    [run] = runs(db)
    [agent] = run["agents"]
    return _numbers(agent)


def _numbers(agent: dict) -> dict:
    """proto3 JSON writes 64-bit counters as strings."""
    counters = ("batches", "casts", "ops", "cache_samples", "kernels", "numerics", "events_recorded_total",
                "events_dropped_total",
                "first_sequence", "last_sequence", "missing_sequences", "gpu_records_dropped")
    return {k: int(v) if k in counters else v for k, v in agent.items()} | {
        k: 0 for k in counters if k not in agent}


def stored_event_seqs(db: pathlib.Path) -> list[int]:
    """Every stored event's per-process seq (the low 40 bits of its key)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return [row[0] for row in connection.execute(
            "SELECT id & 1099511627775 FROM casts UNION ALL SELECT id & 1099511627775 FROM ops "
            "UNION ALL SELECT id & 1099511627775 FROM cache_samples "
            "UNION ALL SELECT id & 1099511627775 FROM kernels "
            "UNION ALL SELECT id & 1099511627775 FROM numerics ORDER BY 1")]


def autocast_ops(db: pathlib.Path, agent_id: str) -> int:
    """The agent's stored op events made by castscope's autocast kernels (the
    op probe's records, which depend on its windows, left out)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return connection.execute(
            "SELECT count(*) FROM op_rows JOIN agents ON agents.id = op_rows.agent "
            "WHERE agents.agent_id = ? AND op_rows.probe_reason = 0", (agent_id,)).fetchone()[0]


def test_training_job_through_embedded_collector(tmp_path):
    result = castscope_run(tmp_path / "out", "--run-id", "mlp", job=[str(JOBS / "train_mlp.py")])
    assert result.returncode == 0, result.stderr
    assert "run mlp stored in" in result.stderr
    db = tmp_path / "out" / "castscope.db"
    agent = the_agent(db)
    assert agent["identity"]["run_id"] == "mlp"
    assert agent["finished"]
    assert agent["events_dropped_total"] == 0
    # What the agent says it recorded is exactly what is stored.
    assert agent["casts"] + agent["ops"] + agent["cache_samples"] + agent["numerics"] == agent["events_recorded_total"]
    assert autocast_ops(db, agent["identity"]["agent_id"]) == 60  # 20 steps x (3 linears + a loss)
    assert agent["missing_sequences"] == 0
    # The JSON-lines dump of the same run agrees event for event.
    assert seqs(dumped_events(tmp_path / "out")) == stored_event_seqs(db)
    # Events come back by query with names and locations resolved.
    lines = query(db, "events", "--run", "mlp", "--kind", "cast", "--limit", "5").splitlines()
    assert len(lines) == 5
    assert '"aten::linear"' in lines[0] and "train_mlp.py" in lines[0]
    assert not list((tmp_path / "out" / "spool").glob("*/*.cspool")), "delivered segments are deleted"


def stored_casts(db: pathlib.Path) -> int:
    stored = runs(db)
    return int(stored[0]["agents"][0].get("casts", 0)) if stored and stored[0]["agents"] else 0


def test_collector_killed_twice_mid_run_loses_nothing(tmp_path):
    collector = Collector(tmp_path / "store.db")
    iterations = 400_000  # 3 events each: 1.2 M
    out = tmp_path / "out"
    job = start_castscope_run(out, "--no-jsonl", "--ring-records", str(1 << 20), "--collector", collector.address,
                              "--run-id", "kill9", job=[str(JOBS / "mm_loop.py"), str(iterations)])
    try:
        for threshold in (150_000, 450_000):  # of 800k casts: twice, whether the job still runs or not
            deadline = time.monotonic() + 180
            while stored_casts(collector.db) <= threshold:
                assert time.monotonic() < deadline, f"never stored {threshold} casts: " + collector.log_text()
                time.sleep(0.1)
            collector.kill9()
            time.sleep(1.0)  # batches wait in the spool
            collector.start()
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr
    collector.stop()
    agent = the_agent(collector.db)
    assert agent["finished"] and agent["events_dropped_total"] == 0, stderr
    recorded = agent["events_recorded_total"]
    assert recorded >= 3 * iterations
    # Exactly once: every event the agent recorded, no gap, no repeat.
    assert stored_event_seqs(collector.db) == list(range(1, recorded + 1))
    assert agent["missing_sequences"] == 0
    assert "not delivered" not in stderr, stderr
    # --no-jsonl with a collector of one's own: the counts come from the collector.
    assert f"{agent['casts']} casts, {agent['ops']} ops" in stderr, stderr


def test_a_killed_process_is_reported_incomplete(tmp_path):
    job = ("import os, torch\n"
           "a, b = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)\n"
           "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
           "    for _ in range(3000):\n"
           "        torch.mm(a, b)\n"
           "import time; time.sleep(0.3)\n"
           "os.kill(os.getpid(), 9)\n")
    result = castscope_run(tmp_path / "out", "--run-id", "killed", job=["-c", job])
    assert result.returncode == 128 + 9, result.stderr
    assert "INCOMPLETE: the process did not finish normally" in result.stderr
    assert "INCOMPLETE:" in result.stderr.split("castscope report:")[1], result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    accounting = report["totals"]["accounting"]
    assert not accounting["complete"] and accounting["unfinished_processes"] == 1


def test_collector_absent_whole_run_spool_loads_the_same_events(tmp_path):
    dead = closed_address()
    out = tmp_path / "out"
    result = castscope_run(out, "--collector", dead, "--run-id", "absent", "--give-up-after-s", "2",
                           job=[str(JOBS / "train_mlp.py")])
    assert result.returncode == 0, result.stderr
    assert "were not delivered and stay in" in result.stderr
    assert f"castscope load --db DB {out / 'spool'}" in result.stderr  # the command to run, with the path
    spool = out / "spool"
    assert list(spool.glob("*/*.cspool"))
    db = tmp_path / "loaded.db"
    load = subprocess.run([*CASTSCOPE, "load", "--db", str(db), str(spool)], capture_output=True, text=True)
    assert load.returncode == 0, load.stderr
    dumped = dumped_events(out)
    assert seqs(dumped) == stored_event_seqs(db)
    agent = the_agent(db)
    assert agent["finished"] and autocast_ops(db, agent["identity"]["agent_id"]) == 60
    # Loading again stores nothing twice.
    again = subprocess.run([*CASTSCOPE, "load", "--db", str(db), str(spool)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert len(stored_event_seqs(db)) == len(dumped)


# ---- bad requests, raw over gRPC, while a real agent streams ----

def _hello(version: int = 1, agent_id: bytes = b"probe") -> bytes:
    hello = b"\x08" + bytes([version]) + b"\x12" + bytes([len(agent_id)]) + agent_id
    return b"\x0a" + bytes([len(hello)]) + hello  # IngestRequest.hello


# One batch of one cast, encoded by hand (crafted_run's _field), to send
# what no castscope agent would.
def _cast_batch(run_id: bytes, shape: list[int], nbytes: int, agent_id: bytes = b"probe", sequence: int = 1) -> bytes:
    """IngestRequest.batch: `sequence`, one cast (seq 1) of aten::mm with `shape` and `nbytes`."""
    cast = (_field(1, 1) + _field(12, b"".join(_varint(d) for d in shape)) + _field(14, nbytes)  # seq, shape, bytes
            + _field(24, 1))  # op_id
    batch = (_field(1, 1) + _field(2, _field(1, run_id) + _field(2, agent_id)) + _field(3, sequence)  # version, agent, sequence
             + _field(6, _field(1, 1) + _field(2, b"aten::mm")) + _field(8, _field(1, cast)))  # strings, events
    return _field(2, batch)


def _ingest(channel: grpc.Channel, messages: list[bytes], metadata=None) -> grpc.RpcError | None:
    call = channel.stream_stream("/castscope.v1.Ingest/Stream")
    try:
        for _ in call(iter(messages), metadata=metadata, timeout=30):
            pass
    except grpc.RpcError as error:
        return error
    return None


def test_bad_requests_get_precise_statuses_while_an_agent_streams(tmp_path):
    token = "s3cret-token"
    collector = Collector(tmp_path / "store.db", extra=("--token", token, "--max-message-bytes", str(1 << 20)))
    env = dict(os.environ, CASTSCOPE_TOKEN=token)
    job = start_castscope_run(tmp_path / "out", "--no-jsonl", "--collector", collector.address, "--run-id", "good",
                              job=[str(JOBS / "mm_loop.py"), "100000"], env=env)
    auth = [("authorization", f"Bearer {token}")]
    try:
        with grpc.insecure_channel(collector.address) as channel:
            missing = _ingest(channel, [_hello()])
            assert missing is not None and missing.code() == grpc.StatusCode.UNAUTHENTICATED
            wrong = _ingest(channel, [_hello()], metadata=[("authorization", "Bearer nope")])
            assert wrong is not None and wrong.code() == grpc.StatusCode.UNAUTHENTICATED
            version = _ingest(channel, [_hello(version=9)], metadata=auth)
            assert version is not None and version.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "9" in version.details() and "1" in version.details()
            no_hello = _ingest(channel, [b"\x12\x00"], metadata=auth)  # a batch before any hello
            assert no_hello is not None and no_hello.code() == grpc.StatusCode.FAILED_PRECONDITION
            malformed = _ingest(channel, [_hello(), b"\xff\xff\xff\xff garbage"], metadata=auth)
            assert malformed is not None and malformed.code() == grpc.StatusCode.INVALID_ARGUMENT
            oversized = _ingest(channel, [_hello(), b"\x12" + b"\x80\x80\x80\x01" + b"x" * (2 << 20)], metadata=auth)
            assert oversized is not None and oversized.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # Sizes no tensor has: refused, naming the field, the event and the value.
            negative = _ingest(channel, [_hello(), _cast_batch(b"bad", [8, -3], 96)], metadata=auth)
            assert negative is not None and negative.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "events[0] (cast seq 1): shape[1] -3 out of range" in negative.details(), negative.details()
            huge = _ingest(channel, [_hello(), _cast_batch(b"bad", [8, 3], (1 << 64) - 8)], metadata=auth)
            assert huge is not None and huge.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "events[0] (cast seq 1): bytes 18446744073709551608 out of range" in huge.details(), huge.details()
        host, port = collector.address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(4096))  # not even HTTP/2
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr
    assert collector.process.poll() is None, "the collector survived every bad request"
    collector.stop()
    assert "bad" not in {r["run_id"] for r in runs(collector.db)}, "nothing of a refused batch is stored"
    [run] = [r for r in runs(collector.db) if r["run_id"] == "good"]
    [agent] = run["agents"]
    agent = _numbers(agent)
    assert agent["finished"]
    assert agent["casts"] + agent["ops"] + agent["cache_samples"] + agent["numerics"] == agent["events_recorded_total"]
    # 100 000 mm make 200 000 casts. On a loaded machine the exporter can
    # fall behind and a full ring drops events: counted, never lost silently.
    # (The job's own tensors add an op or so beyond the mm: ops may exceed 100 000.)
    dropped = agent["events_dropped_total"]
    lost = (200_000 - agent["casts"]) + max(0, 100_000 - agent["ops"])
    assert agent["casts"] <= 200_000 and lost <= dropped, agent
    if dropped == 0:
        assert agent["casts"] == 200_000


def test_non_loopback_without_token_is_refused(tmp_path):
    result = subprocess.run([str(castscope.collector_binary()), "serve", "--db", str(tmp_path / "x.db"), "--listen",
                             "0.0.0.0:0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--token" in result.stderr


def test_ranks_of_one_job_and_a_second_job_are_kept_apart(tmp_path):
    collector = Collector(tmp_path / "store.db")
    launcher = tmp_path / "launch_two_ranks.py"
    launcher.write_text(
        "import os, subprocess, sys\n"
        "procs = [subprocess.Popen([sys.executable, sys.argv[1]], env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),"
        " WORLD_SIZE='2')) for r in range(2)]\n"
        "sys.exit(max(p.wait() for p in procs))\n")
    for run_id in ("job-a", "job-b"):
        result = castscope_run(tmp_path / run_id, "--collector", collector.address, "--run-id", run_id,
                               job=[str(launcher), str(JOBS / "train_mlp.py")])
        assert result.returncode == 0, result.stderr
    collector.stop()
    stored = {run["run_id"]: run for run in runs(collector.db)}
    assert set(stored) == {"job-a", "job-b"}
    for run in stored.values():
        agents = [_numbers(a) for a in run["agents"]]
        assert sorted(a["identity"]["rank"] for a in agents) == [0, 1]
        assert all(a["identity"]["world_size"] == 2 and a["finished"] for a in agents)
        assert [autocast_ops(collector.db, a["identity"]["agent_id"]) for a in agents] == [60, 60]
        assert len({a["identity"]["agent_id"] for a in agents}) == 2


def _self_signed_certificate(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=castscope-test", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)
    return cert, key


def test_tls_collector_with_token(tmp_path):
    cert, key = _self_signed_certificate(tmp_path)
    collector = Collector(tmp_path / "store.db", extra=("--tls-cert", str(cert), "--tls-key", str(key),
                                                          "--token", "tls-token"))
    with grpc.insecure_channel(collector.address) as plain:  # TLS only: a plaintext client gets nowhere
        error = _ingest(plain, [_hello()], metadata=[("authorization", "Bearer tls-token")])
        assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
    env = dict(os.environ, CASTSCOPE_TOKEN="tls-token")
    result = castscope_run(tmp_path / "out", "--collector", collector.address, "--tls-ca", str(cert), "--run-id",
                           "tls", job=[str(JOBS / "train_mlp.py")], env=env)
    assert result.returncode == 0, result.stderr
    collector.stop()
    agent = the_agent(collector.db)
    assert agent["finished"] and autocast_ops(collector.db, agent["identity"]["agent_id"]) == 60


def test_streams_past_the_limit_are_told_to_come_back_and_the_first_goes_on(tmp_path):
    collector = Collector(tmp_path / "store.db", extra=("--max-streams", "1"))
    try:
        with grpc.insecure_channel(collector.address) as first_channel, \
                grpc.insecure_channel(collector.address, options=[("castscope.test", 2)]) as second_channel:
            held = threading.Event()
            release = threading.Event()

            def first_messages():
                yield _hello()
                held.set()
                release.wait(30)  # keeps the stream open

            first = first_channel.stream_stream("/castscope.v1.Ingest/Stream")(first_messages(), timeout=60)
            welcome = next(first)
            assert welcome  # the first stream is served
            held.wait(10)
            error = _ingest(second_channel, [_hello()])
            release.set()
            assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE, error
            assert "limit of 1 ingest streams" in error.details()
            for _ in first:
                pass
    finally:
        collector.stop()
    assert "rejected (UNAVAILABLE)" in collector.log_text()


def test_query_a_tls_collector_with_token(tmp_path):
    cert, key = _self_signed_certificate(tmp_path)
    collector = Collector(tmp_path / "store.db", extra=("--tls-cert", str(cert), "--tls-key", str(key),
                                                          "--token", "tls-token"))
    credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    with grpc.secure_channel(collector.address, credentials) as channel:
        error = _ingest(channel, [_hello(), _cast_batch(b"tls-query", [8, 3], 96)],
                        metadata=[("authorization", "Bearer tls-token")])
        assert error is None, error

    def castscope_query(*options: str):
        return subprocess.run([*CASTSCOPE, "query", "--collector", collector.address, *options, "runs"],
                              capture_output=True, text=True, timeout=300)

    answer = castscope_query("--tls-ca", str(cert), "--token", "tls-token")
    assert answer.returncode == 0, answer.stderr
    [run] = json.loads(answer.stdout)
    assert run["run_id"] == "tls-query" and _numbers(run["agents"][0])["casts"] == 1
    plaintext = castscope_query("--token", "tls-token")  # a TLS collector asked in plaintext
    assert plaintext.returncode == 1 and "give --tls-ca" in plaintext.stderr, plaintext.stderr
    no_token = castscope_query("--tls-ca", str(cert))
    assert no_token.returncode == 1 and "gRPC code 16" in no_token.stderr, no_token.stderr  # UNAUTHENTICATED
    collector.stop()


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _modes(paths) -> dict:
    return {path.name: oct(path.stat().st_mode & 0o777) for path in paths}


def test_files_castscope_writes_are_private_under_umask_022(tmp_path, umask_022):
    out = tmp_path / "out"
    result = castscope_run(out, "--run-id", "private", job=[str(JOBS / "train_mlp.py")])
    assert result.returncode == 0, result.stderr
    report = tmp_path / "report.json"
    answer = subprocess.run([*CASTSCOPE, "report", "private", "--db", str(out / "castscope.db"), "--json",
                             str(report)], capture_output=True, text=True, timeout=300)
    assert answer.returncode == 0, answer.stderr
    dumps = list(out.glob("events-*.jsonl"))
    assert dumps
    files = [out / "castscope.db", out / "collector.log", out / "collector.addr", *dumps, report,
             *(out / "spool").glob("*.forwarder.log")]
    assert _modes(files) == {path.name: oct(0o600) for path in files}
    # SQLite gives -wal and -shm the store's mode; they exist while it is open.
    collector = Collector(tmp_path / "store.db")
    with grpc.insecure_channel(collector.address) as channel:
        assert _ingest(channel, [_hello(), _cast_batch(b"private", [8, 3], 96)]) is None
    store = [tmp_path / name for name in ("store.db", "store.db-wal", "store.db-shm", "store.addr")]
    assert _modes(store) == {path.name: oct(0o600) for path in store}
    collector.stop()


# ---- idle streams (docs/operations.md, "Limits") ----

class _HeldStream:
    """A raw ingest stream that sends `messages` and then nothing, until released;
    `error` is how the collector ended it (None: it ended the stream cleanly)."""

    def __init__(self, channel: grpc.Channel, messages: list[bytes]):
        self.release = threading.Event()
        self.error: grpc.RpcError | None = None
        self.responses = 0
        self.ended = threading.Event()

        def requests():
            yield from messages
            self.release.wait(120)

        def read():
            try:
                for _ in channel.stream_stream("/castscope.v1.Ingest/Stream")(requests(), timeout=120):
                    self.responses += 1
            except grpc.RpcError as error:
                self.error = error
            self.ended.set()

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()


def test_idle_streams_at_the_limit_give_their_places_to_an_agent(tmp_path):
    """Streams that sent Hello and then nothing hold every --max-streams place;
    a real agent still gets in (the stream idle longest gives its place), and
    delivers everything."""
    collector = Collector(tmp_path / "store.db", extra=("--max-streams", "4", "--stream-idle-s", "0"))
    try:
        with grpc.insecure_channel(collector.address) as channel:
            held = [_HeldStream(channel, [_hello(agent_id=f"idle-{k}".encode())]) for k in range(4)]
            deadline = time.monotonic() + 30
            while sum(s.responses for s in held) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sum(s.responses for s in held) == 4  # all four welcomed: every place taken
            time.sleep(2.5)  # idle past the 2 s a stream keeps its place for
            result = castscope_run(tmp_path / "out", "--collector", collector.address, "--run-id", "after-idle",
                                   job=[str(JOBS / "train_mlp.py")])
            assert result.returncode == 0, result.stderr
            evicted = [s for s in held if s.ended.wait(5) and s.error is not None]
            assert evicted and all(s.error.code() == grpc.StatusCode.UNAVAILABLE for s in evicted)
            assert "to admit a new stream" in evicted[0].error.details(), evicted[0].error.details()
            for s in held:
                s.release.set()
    finally:
        collector.stop()
    agent = the_agent(collector.db)
    assert agent["finished"] and autocast_ops(collector.db, agent["identity"]["agent_id"]) == 60


def test_a_stream_without_hello_or_without_messages_is_ended(tmp_path):
    collector = Collector(tmp_path / "store.db", extra=("--stream-hello-s", "1", "--stream-idle-s", "2"))
    try:
        with grpc.insecure_channel(collector.address) as channel:
            began = time.monotonic()
            silent, greeted = _HeldStream(channel, []), _HeldStream(channel, [_hello()])
            assert silent.ended.wait(10) and greeted.ended.wait(10)
            assert time.monotonic() - began < 8
            assert silent.error.code() == greeted.error.code() == grpc.StatusCode.UNAVAILABLE
            assert silent.error.details() == "ended: no Hello in 1 s (--stream-hello-s)"
            assert greeted.error.details() == "ended: no message in 2 s (--stream-idle-s)"
            assert greeted.responses == 1  # welcomed first
    finally:
        collector.stop()
    assert collector.log_text().count("ended: no") == 2


def test_a_replaying_client_does_not_flood_the_collectors_log(tmp_path):
    """200 batches under new sequences, each repeating an event already stored:
    one warning each before; now 10 in 30 s, and the rest counted in one line."""
    collector = Collector(tmp_path / "store.db")
    try:
        with grpc.insecure_channel(collector.address) as channel:
            batches = [_cast_batch(b"replayed", [8, 3], 96, sequence=n) for n in range(1, 201)]
            assert _ingest(channel, [_hello(), *batches]) is None
    finally:
        collector.stop()
    log = collector.log_text()
    assert log.count("events repeat a seq stored before") == 10, log[-3000:]
    assert "batches repeating stored events: 189 more like the lines above" in log, log[-3000:]


def test_report_without_a_run_id_takes_the_latest_and_says_which(tmp_path):
    db = tmp_path / "store.db"

    def store_a_run(run_id: bytes, agent_id: bytes) -> None:
        collector = Collector(db)
        try:
            with grpc.insecure_channel(collector.address) as channel:
                assert _ingest(channel, [_hello(agent_id=agent_id), _cast_batch(run_id, [8, 3], 96, agent_id=agent_id)]) is None
        finally:
            collector.stop()

    store_a_run(b"older", b"a1")

    def report(*args: str):
        return subprocess.run([*CASTSCOPE, "report", "--db", str(db), *args], capture_output=True, text=True,
                              timeout=300)

    only = report()
    assert only.returncode == 0, only.stderr
    assert f"castscope report: no run id given; {db}: its only run, older" in only.stderr
    time.sleep(0.01)
    store_a_run(b"newer", b"a2")
    latest = report("--json", str(tmp_path / "latest.json"))
    assert latest.returncode == 0, latest.stderr
    assert "the latest of its 2 runs" in latest.stderr and latest.stderr.rstrip().endswith(", newer")
    assert json.loads((tmp_path / "latest.json").read_text())["run"]["run_id"] == "newer"
    empty = tmp_path / "empty.db"
    Collector(empty).stop()
    none = subprocess.run([*CASTSCOPE, "report", "--db", str(empty)], capture_output=True, text=True, timeout=300)
    assert none.returncode == 2 and none.stderr.strip() == f"castscope report: {empty} holds no run", none.stderr
