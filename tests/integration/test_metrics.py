"""The collector's /metrics with real processes: a real collector, a real torch
job streaming to it under `castscope run --collector`, scraped over a real
socket and read back with Prometheus' own parser."""
from __future__ import annotations

import http.client
import pathlib
import sqlite3
import subprocess
import sys
import time
import urllib.parse

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector_server import Collector

REPO = pathlib.Path(__file__).resolve().parents[2]
CASTSCOPE = [str(REPO / ".venv" / "bin" / "castscope")]
SCENARIOS = pathlib.Path(__file__).resolve().parent / "scenarios"
RUN_ID = "metrics-run"
LABELS = {"reason", "kind", "severity"}


def scrape(host: str, port: int, headers: dict) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection(host, port, timeout=30)
    connection.putrequest("GET", "/metrics", skip_host="Host" in headers)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, response.getheader("Content-Type") or "", body


def samples(text: str) -> dict:
    """{(sample name, sorted labels): value} as Prometheus' parser reads the text."""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("castscope_"), family.name
        assert family.documentation, family.name
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A collector that stored a real job's run (with a finding) and took one malformed message."""
    tmp = tmp_path_factory.mktemp("metrics")
    url_file = tmp / "viewer.url"
    collector = Collector(tmp / "store.db", extra=("--viewer-file", str(url_file), "--analyze-interval-ms", "100"))
    try:
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp / "out"), "--collector", collector.address,
                                 "--run-id", RUN_ID, "--", sys.executable, str(SCENARIOS / "stale_cache.py")],
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        with grpc.insecure_channel(collector.address) as channel:
            call = channel.stream_stream("/castscope.v1.Ingest/Stream")
            hello = b"\x08\x01\x12\x01x"
            with pytest.raises(grpc.RpcError) as refused:
                list(call(iter([b"\x0a" + bytes([len(hello)]) + hello, b"\xff\xff\xff\xff garbage"]), timeout=30))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        url = urllib.parse.urlparse(url_file.read_text().strip())
        token = urllib.parse.parse_qs(url.query)["token"][0]
        yield collector, url.hostname, url.port, token
    finally:
        collector.stop()


def settled(served) -> dict:
    """Scrapes until the run's final batch is counted and analyzed (the job has ended; the analyzer runs after)."""
    collector, host, port, token = served
    with sqlite3.connect(f"file:{collector.db}?mode=ro", uri=True) as db:
        stored_events, stored_batches = db.execute("SELECT sum(n_events), count(*) FROM batches").fetchone()
    deadline = time.monotonic() + 60
    while True:
        status, _, body = scrape(host, port, {"Authorization": f"Bearer {token}"})
        assert status == 200, body
        got = samples(body)
        with sqlite3.connect(f"file:{collector.db}?mode=ro", uri=True) as db:
            findings = db.execute("SELECT count(*) FROM findings").fetchone()[0]
        if got[("castscope_events_ingested_total", ())] == stored_events and findings > 0 and \
                got.get(("castscope_findings", (("kind", "stale-cache-hit"), ("severity", "critical"))), 0) > 0:
            return got, stored_events, stored_batches
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


def test_metrics_count_what_the_run_stored(served):
    collector, _, _, _ = served
    got, stored_events, stored_batches = settled(served)
    assert stored_events > 0
    assert got[("castscope_events_ingested_total", ())] == stored_events
    assert got[("castscope_batches_total", ())] == stored_batches
    assert got[("castscope_duplicate_batches_total", ())] == 0
    assert got[("castscope_batches_rejected_total", (("reason", "malformed"),))] == 1
    assert got[("castscope_batches_rejected_total", (("reason", "invalid_batch"),))] == 0
    assert got[("castscope_runs", ())] == 1 and got[("castscope_agents", ())] == 1
    assert got[("castscope_analyzer_passes_total", ())] >= 1
    assert got[("castscope_analyzer_seconds_total", ())] > 0
    assert got[("castscope_store_bytes", ())] >= collector.db.stat().st_size > 0
    assert got[("castscope_queue_bytes", ())] >= 0 and got[("castscope_live_streams", ())] == 0
    with sqlite3.connect(f"file:{collector.db}?mode=ro", uri=True) as db:
        dropped = db.execute("SELECT sum(events_dropped_total) FROM agents").fetchone()[0]
        by_kind = db.execute("SELECT kind, severity, count(*) FROM findings GROUP BY kind, severity").fetchall()
    assert got[("castscope_agent_events_dropped_total", ())] == dropped
    assert {(dict(k)["kind"], dict(k)["severity"], v) for (n, k), v in got.items() if n == "castscope_findings"} == \
        set(by_kind)


def test_labels_never_name_runs_agents_or_sources(served):
    collector, _, _, _ = served
    got, _, _ = settled(served)
    with sqlite3.connect(f"file:{collector.db}?mode=ro", uri=True) as db:
        agent_ids = {row[0] for row in db.execute("SELECT agent_id FROM agents")}
    for (name, labels), _ in got.items():
        for key, value in labels:
            assert key in LABELS, (name, key)
            assert value != RUN_ID and value not in agent_ids and "/" not in value and ".py" not in value, (name, value)


def test_counters_are_typed_and_the_format_is_0_0_4(served):
    _, host, port, token = served
    status, content_type, body = scrape(host, port, {"Authorization": f"Bearer {token}"})
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    types = {line.split()[2]: line.split()[3] for line in body.splitlines() if line.startswith("# TYPE ")}
    assert types["castscope_events_ingested_total"] == "counter" and types["castscope_queue_bytes"] == "gauge"
    assert all(name.endswith("_total") for name, kind in types.items() if kind == "counter"), types


@pytest.mark.parametrize("headers,expected", [
    ({}, 401),
    ({"Authorization": "Bearer wrong"}, 401),
    ({"Authorization": "Basic d3Jvbmc="}, 401),
    ({"Host": "evil.example", "Authorization": "Bearer TOKEN"}, 403),
])
def test_scrapes_without_the_token_or_for_another_host_are_refused(served, headers, expected):
    _, host, port, token = served
    headers = {k: v.replace("TOKEN", token) for k, v in headers.items()}
    status, _, body = scrape(host, port, headers)
    assert status == expected, body
    assert "castscope_" not in body
