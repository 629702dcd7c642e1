"""A real castscope-collector process for the transport tests."""
from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import time

import castscope


class Collector:
    def __init__(self, db: pathlib.Path, listen: str = "127.0.0.1:0", extra: tuple = ()):
        self.db = db
        self.ready = db.with_suffix(".addr")
        self.log_path = db.with_suffix(".log")
        self.listen = listen
        self.extra = list(extra)
        self.process = None
        self.start()

    def start(self) -> None:
        self.ready.unlink(missing_ok=True)
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [str(castscope.collector_binary()), "serve", "--db", str(self.db), "--listen", self.listen,
             "--ready-file", str(self.ready), *self.extra], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while not self.ready.exists():
            assert self.process.poll() is None, f"collector exited early: {self.log_text()}"
            assert time.monotonic() < deadline, "collector not ready in 30 s"
            time.sleep(0.02)
        self.address = self.ready.read_text().strip()
        self.listen = self.address  # a restart comes back on the same port

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.log.close()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        self.log.close()
        return self.process.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def query(db: pathlib.Path, *args: str):
    result = subprocess.run([str(castscope.collector_binary()), "query", "--db", str(db), *args], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def runs(db: pathlib.Path) -> list:
    return json.loads(query(db, "runs"))


def wait_delivered(spool: pathlib.Path, timeout_s: float = 60) -> None:
    """Waits until the forwarder's status file in `spool` says every batch was delivered."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = list(spool.glob("*.forwarder.json"))
        if files and json.loads(files[0].read_text()).get("state") == "delivered":
            return
        assert time.monotonic() < deadline, f"the forwarder did not deliver in {timeout_s:.0f} s"
        time.sleep(0.1)
