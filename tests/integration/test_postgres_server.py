"""postgres_server.py really gives a server: TLS checked against its CA and
refused against another, passwords checked, data kept across a SIGKILL."""
import pathlib
import shutil
import stat

import pytest

from postgres_server import BIN, PostgresServer, PsqlError

if not (BIN / "initdb").exists():
    pytest.skip(f"PostgreSQL 15 is not installed ({BIN / 'initdb'} is missing)", allow_module_level=True)
if shutil.which("openssl") is None:
    pytest.skip("the openssl CLI, which makes the server's certificates, is missing", allow_module_level=True)


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie (PID 1 reaps orphaned backends lazily) counts as gone."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def pg():
    with PostgresServer() as server:
        yield server


def test_socket_trusts_and_castscope_exists(pg):
    assert pg.psql("SELECT current_database(), current_user") == f"castscope|{pg.superuser}"
    assert pg.psql("SHOW ssl") == "on"


def test_verify_full_with_its_ca(pg):
    # A password given makes psql() go over TCP, sslmode=verify-full against ca_file.
    query = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
    assert pg.psql(query, password=pg.superuser_password) == "t"
    assert pg.psql(query, url=pg.admin_url(), password=pg.superuser_password) == "t"


def test_plain_tcp_takes_a_password_too(pg):
    url = pg.admin_url(sslmode="disable")
    assert pg.psql("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", url=url,
                   password=pg.superuser_password) == "f"


def test_other_ca_is_refused(pg):
    with pytest.raises(PsqlError, match="certificate"):
        pg.psql("SELECT 1", url=pg.admin_url(sslrootcert=str(pg.other_ca_file)), password=pg.superuser_password)


def test_wrong_password_is_refused(pg):
    with pytest.raises(PsqlError, match="password authentication failed"):
        pg.psql("SELECT 1", password="not-" + pg.superuser_password)


def test_new_role_logs_in_with_its_password(pg):
    # The role's password goes on psql's stdin, never on a command line.
    pg.psql("CREATE ROLE writer LOGIN PASSWORD 'w-secret'")
    assert pg.psql("SELECT current_user", user="writer", password="w-secret") == "writer"
    path = pg.password_file("writer", "w-secret")
    assert path.read_text() == "w-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.parent == pg.tmp


def test_kill9_then_restart_keeps_committed_rows():
    with PostgresServer() as pg:
        pg.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (42)")
        old_pid, port = pg.postmaster_pid(), pg.port
        pg.kill9()
        assert not pg.running() and not pid_alive(old_pid)
        with pytest.raises(PsqlError):
            pg.psql("SELECT 1")
        pg.restart()
        assert pg.port == port and pg.postmaster_pid() != old_pid
        assert pg.psql("SELECT x FROM t") == "42"
        assert "not properly shut down" in pg.log_file.read_text()
        tmp = pg.tmp
    assert not tmp.exists()
    assert not pg.running()

