"""A real, throwaway PostgreSQL 15 server for the tests: its own temp dir, a
free loopback port, TLS from a CA made for it, scram-sha-256 passwords over
TCP, trust on its unix socket. Passwords never go on a command line (other
tests read /proc/*/cmdline): they travel in files, on stdin or in PGPASSWORD."""
from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

BIN = pathlib.Path("/usr/lib/postgresql/15/bin")
# initdb refuses root: as root the server runs as the user Debian's package made.
SERVER_USER = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
START_TIMEOUT = 30.0


class PsqlError(RuntimeError):
    """psql failed; the message holds its stderr."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_in(directory: pathlib.Path) -> list[int]:
    """The processes whose working directory is `directory` (zombies have none)."""
    pids = []
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(proc / "cwd") == str(directory):
                pids.append(int(proc.name))
    return pids


class PostgresServer:
    """One server; `with PostgresServer() as pg:` starts it and always stops it
    (and atexit does, should a test forget). `superuser` logs in with
    `superuser_password`, over TCP only; the unix socket trusts everybody."""

    host = "127.0.0.1"
    superuser = "postgres"

    def __init__(self):
        self.superuser_password = secrets.token_urlsafe(18)
        self.port = _free_port()
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="castscope-pg-"))  # 0700
        self._chown(self.tmp)
        self.socket_dir = self.tmp
        self.data_dir = self.tmp / "data"
        self.log_file = self.tmp / "server.log"
        self.ca_file = self.tmp / "ca.crt"
        self.other_ca_file = self.tmp / "other-ca.crt"
        self._proc: subprocess.Popen | None = None
        self._initialized = self._stopped = False
        atexit.register(self.stop)

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:  # __exit__ would not run
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """initdb, certificates and settings the first time; then the server,
        waited for, and the `castscope` database."""
        if self._stopped:
            raise RuntimeError("this server was stopped; make a new one")
        if not self._initialized:
            self._make_certificates()
            self._initdb()
        self._launch()
        if not self._initialized:
            self.psql("CREATE DATABASE castscope", dbname="postgres")
            self._initialized = True

    def restart(self) -> None:
        """Start again on the same data dir and port (crash recovery after kill9)."""
        if self.running():
            raise RuntimeError("the server still runs")
        self._launch()

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None

    def kill9(self) -> None:
        """SIGKILL the postmaster and every backend, as a power cut would."""
        if not self.running():
            return
        # Backends call setsid(), so the process group misses them; SIGSTOPping the
        # postmaster first would stop runuser too (it mirrors its child's stops).
        # But they all work in the data dir: kill until none is left, late forks too.
        data_dir, deadline = self.data_dir.resolve(), time.monotonic() + 10
        while victims := _processes_in(data_dir):
            for victim in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres processes outlived SIGKILL: {victims}")
            time.sleep(0.05)
        # runuser must reap the postmaster: a zombie's PID in postmaster.pid would
        # look alive to restart(). Only if it hangs (before chdir) kill its group.
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)

    def stop(self) -> None:
        """Fast shutdown (kill9 if that hangs), then remove the temp dir. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        try:
            pid = self.postmaster_pid()
            if self.running() and pid is not None:
                os.kill(pid, signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=30)
            self.kill9()  # nothing left to do once it has shut down
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, user: str, dbname: str = "castscope", **params: str) -> str:
        """A libpq URL for `user` over TCP, TLS checked against `ca_file` unless
        `params` say otherwise; no password in it (PGPASSWORD or a passfile)."""
        query = {"sslmode": "verify-full", "sslrootcert": str(self.ca_file), **params}
        return f"postgresql://{user}@{self.host}:{self.port}/{dbname}?{urllib.parse.urlencode(query)}"

    def admin_url(self, dbname: str = "castscope", **params: str) -> str:
        return self.url(self.superuser, dbname, **params)

    def psql(self, sql: str, user: str | None = None, password: str | None = None,
             dbname: str = "castscope", url: str | None = None) -> str:
        """Run `sql` (on stdin, so that passwords in it stay off the command line);
        its output, less the last newline. Without `password` nor `url`: over the
        unix socket (trust); with `password`: over TLS (verify-full) as `user`."""
        user = user or self.superuser
        if url is None and password is None:
            target = ["-h", str(self.socket_dir), "-p", str(self.port), "-U", user, "-d", dbname]
        else:
            target = ["-d", url or self.url(user, dbname)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["PGCONNECT_TIMEOUT"] = "10"
        if password is not None:
            env["PGPASSWORD"] = password
        done = subprocess.run([str(BIN / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", *target],
                              input=sql, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise PsqlError(f"psql exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout.removesuffix("\n")

    def password_file(self, role: str, password: str) -> pathlib.Path:
        """A file (0600, in the temp dir) holding just `password`."""
        path = self.tmp / f"{role}.password"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password)
        return path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no server log)"

    def _chown(self, path: pathlib.Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, SERVER_USER, pwd.getpwnam(SERVER_USER).pw_gid)

    def _as_server_user(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", SERVER_USER, "--", *cmd] if os.geteuid() == 0 else cmd

    def _run(self, cmd: list[str], as_server_user: bool = False) -> None:
        cmd = self._as_server_user(cmd) if as_server_user else cmd
        done = subprocess.run(cmd, cwd=self.tmp, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited {done.returncode}: {done.stderr.strip()}")

    def _make_certificates(self) -> None:
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for name, cn in (("ca", "castscope test CA"), ("other-ca", "unrelated test CA")):
            self._run(["openssl", "req", "-x509", *ec, "-keyout", f"{name}.key", "-out", f"{name}.crt",
                       "-days", "7", "-subj", f"/CN={cn}",
                       "-addext", "basicConstraints=critical,CA:TRUE",
                       "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        (self.tmp / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        self._run(["openssl", "req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr",
                   "-subj", "/CN=localhost"])
        self._run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                   "-set_serial", str(secrets.randbits(63)), "-days", "7", "-extfile", "server.ext",
                   "-out", "server.crt"])
        # The server refuses a key that others can read, or that it does not own.
        os.chmod(self.tmp / "server.key", 0o600)
        self._chown(self.tmp / "server.key")

    def _initdb(self) -> None:
        pwfile = self.password_file("initdb-superuser", self.superuser_password)
        self._chown(pwfile)
        self._run([str(BIN / "initdb"), "-D", str(self.data_dir), "-U", self.superuser,
                   f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
                   "-E", "UTF8", "--no-locale", "--no-sync"], as_server_user=True)
        pwfile.unlink()
        # Appended settings win over initdb's; restart() reads them again. fsync=off
        # still write()s the WAL at commit, which a SIGKILL cannot undo;
        # synchronous_commit=off would leave the last ~0.6 s of commits in shared
        # memory, and kill9() would lose them.
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(f"""
listen_addresses = '{self.host}'
port = {self.port}
unix_socket_directories = '{self.socket_dir}'
password_encryption = 'scram-sha-256'
ssl = on
ssl_cert_file = '{self.tmp / "server.crt"}'
ssl_key_file = '{self.tmp / "server.key"}'
fsync = off
shared_buffers = 32MB
max_connections = 50
""")
        (self.data_dir / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 scram-sha-256\n")

    def _launch(self) -> None:
        """The postmaster, its stderr (the whole server log) to `log_file`; back
        once pg_isready says it accepts connections."""
        with open(self.log_file, "ab") as log:
            self._proc = subprocess.Popen(self._as_server_user([str(BIN / "postgres"), "-D", str(self.data_dir)]),
                                          cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited {self._proc.returncode}; its log ends:\n{self.log_tail()}")
            ready = subprocess.run([str(BIN / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port), "-t", "2"],
                                   timeout=10)
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"postgres not ready after {START_TIMEOUT:.0f} s; its log ends:\n{self.log_tail()}")
            time.sleep(0.1)


if __name__ == "__main__":
    # A fleet database for the browser test (ui/tests/fleet.spec.ts): a server,
    # `castscope-collector fleet init` with a writer and a reader role, then ONE
    # line of JSON on stdout (the roles' URLs and password files; admin_psql: a
    # psql command over the unix socket, as the superuser, SQL on stdin). Runs
    # until stdin closes (or SIGTERM, SIGINT), then stops the server.
    import json
    import sys

    collector = os.environ.get("CASTSCOPE_COLLECTOR_BIN") or str(
        pathlib.Path(__file__).resolve().parents[2] / "build" / "server" / "castscope-collector")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with PostgresServer() as server:
        admin_password = server.password_file(server.superuser, server.superuser_password)
        writer_password = server.password_file("node_writer", secrets.token_urlsafe(18))
        reader_password = server.password_file("fleet_reader", secrets.token_urlsafe(18))
        init = subprocess.run([collector, "fleet", "init", server.admin_url(), "--password-file", str(admin_password),
                               "--writer", "node_writer", "--writer-password-file", str(writer_password),
                               "--reader", "fleet_reader", "--reader-password-file", str(reader_password)],
                              capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            sys.exit(f"fleet init exited {init.returncode}: {init.stderr.strip()}")
        print(json.dumps({
            "writer_url": server.url("node_writer"),
            "reader_url": server.url("fleet_reader"),
            "writer_password_file": str(writer_password),
            "reader_password_file": str(reader_password),
            "admin_psql": [str(BIN / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(server.socket_dir),
                           "-p", str(server.port), "-U", server.superuser, "-d", "castscope"],
        }), flush=True)
        try:
            sys.stdin.read()  # until the test closes it (or exits)
        except KeyboardInterrupt:
            pass
