"""Runs castscope-collector next to a job (`castscope run` without
--collector) and waits for the job's forwarders to deliver their spools."""
from __future__ import annotations

import pathlib
import signal
import subprocess
import time

from ._native import collector_binary
from .files import open_private_append


class CollectorError(RuntimeError):
    pass


class EmbeddedCollector:
    """A collector on a free loopback port, storing into `db`, for one job."""

    def __init__(self, db: pathlib.Path, log_path: pathlib.Path, ready_timeout_s: float = 30.0):
        self.db = db
        ready = db.parent / "collector.addr"
        ready.unlink(missing_ok=True)
        self._log = open_private_append(log_path)
        self._process = subprocess.Popen(
            [str(collector_binary()), "serve", "--db", str(db), "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, start_new_session=True)
        deadline = time.monotonic() + ready_timeout_s
        while not ready.exists():
            if self._process.poll() is not None:
                raise CollectorError(f"the collector exited with code {self._process.returncode} before it was "
                                     f"ready; see {log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise CollectorError(f"the collector was not ready after {ready_timeout_s:.0f} s; see {log_path}")
            time.sleep(0.02)
        self.address = ready.read_text().strip()

    def stop(self) -> int:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)  # commits what is queued, then exits
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()
        return self._process.returncode


def pending_spool(spool_dir: pathlib.Path) -> list[pathlib.Path]:
    """Segments not yet delivered (forwarders delete what is acknowledged)."""
    return sorted(spool_dir.glob("*/*.cspool")) if spool_dir.is_dir() else []


def wait_for_delivery(spool_dir: pathlib.Path, timeout_s: float) -> list[pathlib.Path]:
    """Waits until every agent folder is delivered; returns what is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in spool_dir.iterdir() if p.is_dir() and not _forwarder_exited(p)] if spool_dir.is_dir() else []
        if not left or time.monotonic() > deadline:
            return pending_spool(spool_dir)
        time.sleep(0.05)


def _forwarder_exited(agent_dir: pathlib.Path) -> bool:
    log = agent_dir.parent / (agent_dir.name + ".forwarder.log")
    try:
        return "forwarder exit " in log.read_text(errors="replace")
    except OSError:
        return False
