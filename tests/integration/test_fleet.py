"""Fleet shipping (docs/fleet.md) against a real PostgreSQL: the schema and
its roles, and what is refused (a wrong password, the reader role writing, a
certificate from another CA, a password on the command line)."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import castscope
from collector import Collector
from postgres_server import BIN, PostgresServer

if not (BIN / "initdb").exists():
    pytest.skip(f"PostgreSQL 15 is not installed ({BIN}/initdb); scripts/setup.sh installs it", allow_module_level=True)

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
        init = fleet("init", server.admin_url(), "--password-file", admin_password, "--writer", "node_writer",
                     "--writer-password-file", server.writer_password, "--reader", "fleet_reader",
                     "--reader-password-file", server.reader_password)
        assert "fleet schema version 1" in init.stdout
        # Idempotent: a second init changes nothing.
        assert "(already)" in fleet("init", server.admin_url(), "--password-file", admin_password).stdout
        yield server


def ship_args(pg, node: str) -> tuple:
    return ("--ship", pg.url("node_writer"), "--ship-password-file", str(pg.writer_password), "--ship-interval-s",
            "0.2", "--ship-partial-minutes", "--ship-node", node)


def ask(pg, what: str, *args: str):
    return json.loads(fleet(what, pg.url("fleet_reader"), "--password-file", str(pg.reader_password), "--json",
                            "--limit", "100000", *args).stdout)


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
        helpers_job = subprocess.run([*CASTSCOPE, "run", "--collector", collector.address, "--out",
                                      str(tmp_path / "out"), "--run-id", "reader-writes", "--no-jsonl", "--",
                                      sys.executable, "-c", "import helpers; helpers.train(2)"],
                                     capture_output=True, text=True, timeout=300,
                                     env={**__import__("os").environ, "PYTHONPATH": str(pathlib.Path(__file__).parent)})
        assert helpers_job.returncode == 0, helpers_job.stderr
        import time
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
