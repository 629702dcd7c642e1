"""Runs castscope-collector next to a job (`castscope run` without
--collector) and waits for the job's forwarders to deliver their spools."""
from __future__ import annotations

import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

from ._native import collector_binary
from .private_files import open_private_append


class CollectorError(RuntimeError):
    pass


class EmbeddedCollector:
    """A collector on a free loopback port, storing into `db`, for one job."""

    def __init__(self, db: pathlib.Path, log_path: pathlib.Path, ready_timeout_s: float = 30.0,
                 http_listen: str = "127.0.0.1:0", ui_dir: str | os.PathLike | None = None,
                 ship: str | None = None, ship_password_file: str | None = None):
        self.db = db
        ready = db.parent / "collector.addr"
        viewer = db.parent / "viewer.url"  # written before the ready file
        ready.unlink(missing_ok=True)
        viewer.unlink(missing_ok=True)
        self._log = open_private_append(log_path)
        self._process = subprocess.Popen(
            [str(collector_binary()), "serve", "--db", str(db), "--listen", "127.0.0.1:0", "--ready-file", str(ready),
             "--http-listen", http_listen, "--viewer-file", str(viewer),
             # Stops (committing what it has) if this process dies, even by kill -9. The kernel
             # signals when the forking *thread* ends: asked for only from the main thread.
             *(["--exit-with-parent", str(os.getpid())] if threading.current_thread() is threading.main_thread()
               else []),
             *(["--ui-dir", str(ui_dir)] if ui_dir is not None else []),
             # Fleet shipping (docs/fleet.md): the URL holds no password; the file's path is no secret.
             *(["--ship", ship] if ship else []),
             *(["--ship-password-file", str(ship_password_file)] if ship and ship_password_file else [])],
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
        # The viewer's URL carries its token: printed for the user, kept 0600 beside the database.
        self.viewer_url = viewer.read_text().strip() if viewer.exists() else None

    def wait_for_interrupt(self) -> None:
        """Serves until Ctrl-C (or SIGTERM to the collector)."""
        try:
            while self._process.poll() is None:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass

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
    """What is not delivered: segments, and written accounting files
    (forwarders delete a folder once the collector has stored all of it)."""
    if not spool_dir.is_dir():
        return []
    return sorted(path for agent_dir in spool_dir.iterdir() if agent_dir.is_dir()
                  for path in pending_spool_of(agent_dir))


def forwarder_status(agent_dir: pathlib.Path) -> dict | None:
    """The state a forwarder left in <spool>/<agent>.forwarder.json (see
    agent/forwarder/forwarder_status.h), or None; "age_s": how long ago it was
    written (a forwarder rewrites it at every attempt; a full disk stops that)."""
    path = agent_dir.parent / (agent_dir.name + ".forwarder.json")
    try:
        status = json.loads(path.read_text())
        status["age_s"] = max(0.0, time.time() - path.stat().st_mtime)
        return status
    except (OSError, ValueError, TypeError):
        return None


def _alive(pid: int | None, name: str | None = None) -> bool:
    """A running (not zombie) process, whose command is `name` when given."""
    if not pid or pid <= 0:
        return False
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] == "Z":
            return False
        return name is None or name in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return False


def _agent_pid(agent_dir: pathlib.Path, status: dict | None) -> int | None:
    """The agent's pid: from its forwarder's status, else from its id (host-pid-start)."""
    if status and status.get("agent_pid"):
        return int(status["agent_pid"])
    parts = agent_dir.name.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


class Delivery:
    """Waits for a job's forwarders once the job has ended. State comes from
    their status files and from process liveness, never from log text. A
    folder whose agent and forwarder are both gone without a final state (a
    forwarder killed after its agent ended, or one whose status file a full
    disk kept from being written) gets a new forwarder, which delivers what is
    left and exits.

    The run has one give-up time, counted from the job's end: a replacement
    gets what is left of it, not the whole of it again (three replacements
    that each waited the full give-up turned 60 s into 245 s), and one started
    after it has passed gives up at its first failed attempt."""

    def __init__(self, spool_dir: pathlib.Path, collector: str, give_up_after_s: int, tls_ca: str | None = None,
                 say=None):
        self.spool_dir = spool_dir
        self.collector = collector
        self.give_up_after_s = give_up_after_s
        self.tls_ca = tls_ca
        self.say = say or (lambda text: print(text, file=sys.stderr))
        self.restarted: dict[str, int] = {}
        self.left_running: set[str] = set()
        # Per folder, our latest replacement: trusted over the status file, which a
        # full disk keeps naming the forwarder that died. One replaces another only
        # once poll() has reaped it, so these are all the children still to reap.
        self._replacing: dict[str, subprocess.Popen] = {}
        self._give_up_at = time.monotonic() + give_up_after_s

    def _restart(self, agent_dir: pathlib.Path, agent_pid: int | None) -> bool:
        from ._native import agent_library_path

        count = self.restarted.get(agent_dir.name, 0)
        if count >= 3:
            return False
        self.restarted[agent_dir.name] = count + 1
        forwarder = agent_library_path().parent / "castscope-forwarder"
        left_s = max(0, math.ceil(self._give_up_at - time.monotonic()))
        command = [str(forwarder), "--spool", str(agent_dir), "--collector", self.collector,
                   "--parent-pid", str(agent_pid or 0), "--give-up-after-s", str(left_s),
                   "--token-env", "CASTSCOPE_TOKEN"]
        if self.tls_ca:
            command += ["--tls-ca", self.tls_ca]
        log = agent_dir.parent / (agent_dir.name + ".forwarder.log")
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd,
                                     start_new_session=True)
        finally:
            os.close(fd)
        self._replacing[agent_dir.name] = child
        self.say(f"castscope: the forwarder of {agent_dir.name} ended before delivering everything; started "
                 f"another to deliver the rest (it gives up after {left_s} s, what is left of the run's "
                 f"{self.give_up_after_s} s)")
        return True

    def waiting_for(self) -> list[tuple[pathlib.Path, dict | None]]:
        """Folders still being delivered, after restarting what needs it."""
        for child in self._replacing.values():
            child.poll()  # ours to reap
        waiting = []
        folders = sorted(p for p in self.spool_dir.iterdir() if p.is_dir()) if self.spool_dir.is_dir() else []
        for agent_dir in folders:
            status = forwarder_status(agent_dir)
            if status is not None and status.get("exit_code") is not None:
                continue  # delivered, refused or gave up: said in its status and log
            agent_pid = _agent_pid(agent_dir, status)
            if _alive(agent_pid):
                # A process the job left running: it supervises its own forwarder, and delivery
                # goes on for as long as it lives; waiting for it could be forever.
                if agent_dir.name not in self.left_running:
                    self.left_running.add(agent_dir.name)
                    self.say(f"castscope: process {agent_pid} of the job is still running; its events keep "
                             f"going to {self.collector} while it lives")
                continue
            if status is not None and _alive(status.get("pid"), "castscope-forwarder"):
                waiting.append((agent_dir, status))
                continue
            replacing = self._replacing.get(agent_dir.name)
            if replacing is not None and replacing.poll() is None:
                # Ours, still running, though its status file does not say so (a full disk):
                # one replacement at a time, never one queued behind another's lock.
                waiting.append((agent_dir, {"state": "replacement", "pid": replacing.pid}))
                continue
            if not pending_spool_of(agent_dir):
                continue
            if self._restart(agent_dir, agent_pid):
                waiting.append((agent_dir, None))
        return waiting

    def wait(self) -> list[pathlib.Path]:
        """Until every folder is delivered or its forwarder gave up; returns what is left."""
        started = time.monotonic()
        self._give_up_at = started + self.give_up_after_s
        next_word = started + 2.0
        while True:
            waiting = self.waiting_for()
            if not waiting:
                for child in self._replacing.values():
                    child.wait()
                return pending_spool(self.spool_dir)
            now = time.monotonic()
            if now >= next_word:
                self.say(f"castscope: waiting {now - started:.0f} s for {len(waiting)} forwarder(s) to deliver: "
                         + "; ".join(_describe(agent_dir, status) for agent_dir, status in waiting))
                next_word = now + 5.0
            time.sleep(0.01 if now - started < 1.0 else 0.05)  # most jobs' last batches land within a second


def pending_spool_of(agent_dir: pathlib.Path) -> list[pathlib.Path]:
    accounting = agent_dir / "accounting"  # space reserved at start; holds a frame once written
    try:
        with open(accounting, "rb") as f:
            written = f.read(8) == b"CSSPOOL1"
    except OSError:
        written = False
    return sorted(agent_dir.glob("*.cspool")) + ([accounting] if written else [])


def _describe(agent_dir: pathlib.Path, status: dict | None) -> str:
    if status is None:
        return f"{agent_dir.name}: starting"
    state = status.get("state", "?")
    stale = status.get("age_s", 0) > 5  # rewritten at every attempt, at least every second while unreachable
    if state == "unreachable":
        return (f"{agent_dir.name}: collector {status.get('collector')} unreachable for "
                f"{status.get('unreachable_for_s') or 0:.0f} s (gives up after {status.get('give_up_after_s')} s"
                f"{': ' + status['message'] if status.get('message') else ''})"
                + (f"; as its status said {status['age_s']:.0f} s ago, not rewritten since (is the spool's disk "
                   f"full?)" if stale else ""))
    if state == "replacement":
        return (f"{agent_dir.name}: forwarder {status['pid']} started by castscope run (its status file cannot be "
                f"written: is the spool's disk full?)")
    if state == "streaming":
        return (f"{agent_dir.name}: streaming to {status.get('collector')}, {status.get('batches_acknowledged', 0)} "
                f"batches stored, {status.get('batches_pending', 0)} pending")
    return f"{agent_dir.name}: {state}"
