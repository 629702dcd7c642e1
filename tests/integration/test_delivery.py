"""Delivery under faults: the forwarder reads every spool segment to its end
before it calls the spool delivered (zero-byte segments do not end delivery);
a collector outage after the job gets its own give-up time; a forwarder
killed -9 is replaced, during the run and after it; a disk full to the end
still tells the store what was dropped."""
from __future__ import annotations

import contextlib
import json
import re
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import castscope
from collector_server import Collector, runs
from helpers import closed_address, closed_port, dumped_events, seqs
from test_transport import (CASTSCOPE, castscope_run, running_castscope_run, start_castscope_run, stored_event_seqs,
                            the_agent)

JOBS = pathlib.Path(__file__).parent / "jobs"


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_empty_segments_and_a_dead_agent_lose_nothing(tmp_path):
    dead = closed_address()  # a collector nobody runs: the whole spool stays
    out = tmp_path / "out"
    result = castscope_run(out, "--collector", dead, "--run-id", "gaps", "--give-up-after-s", "0",
                           job=[str(JOBS / "train_mlp.py")])
    assert result.returncode == 0, result.stderr
    [agent_dir] = [d for d in (out / "spool").iterdir() if d.is_dir()]
    segments = sorted(agent_dir.glob("*.cspool"))
    assert segments
    # Ten zero-byte segments first, the agent's own after them, in order.
    for segment in reversed(segments):
        index = int(segment.stem)
        segment.rename(agent_dir / f"{index + 10:08d}.cspool")
    for index in range(1, 11):
        (agent_dir / f"{index:08d}.cspool").touch()

    collector = Collector(tmp_path / "store.db")
    try:
        forwarder = subprocess.run(
            [str(castscope.agent_library_path().parent / "castscope-forwarder"), "--spool", str(agent_dir),
             "--collector", collector.address, "--parent-pid", str(_dead_pid())],
            capture_output=True, text=True, timeout=120)
    finally:
        collector.stop()
    assert forwarder.returncode == 0, forwarder.stderr
    dumped = dumped_events(out)
    stored = stored_event_seqs(collector.db)
    assert len(stored) == len(dumped), f"{len(stored)} of {len(dumped)} events stored"
    assert stored == seqs(dumped)
    # Zero-byte segments hold nothing: they are not reported as damage.
    assert "corrupt" not in forwarder.stderr and "incomplete frame" not in forwarder.stderr, forwarder.stderr
    [run] = runs(collector.db)
    [agent] = run["agents"]
    assert agent["finished"]
    assert not agent_dir.exists()  # removed only once everything in it was stored


# ---- collector outages after the job: each outage gets its own give-up time ----

def _spool_of_a_job(tmp_path, iterations: int) -> tuple[pathlib.Path, pathlib.Path]:
    """Runs mm_loop under castscope run with no collector at all: the whole run stays in the spool."""
    dead = closed_address()
    out = tmp_path / "out"
    result = castscope_run(out, "--collector", dead, "--no-jsonl", "--ring-records", str(1 << 20),
                           "--give-up-after-s", "0", "--run-id", "outages",
                           job=[str(JOBS / "mm_loop.py"), str(iterations)])
    assert result.returncode == 0, result.stderr
    [agent_dir] = [d for d in (out / "spool").iterdir() if d.is_dir()]
    return out, agent_dir


def _status(agent_dir: pathlib.Path) -> dict:
    try:
        return json.loads((agent_dir.parent / (agent_dir.name + ".forwarder.json")).read_text())
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def paused_collector(db: pathlib.Path):
    """A collector that accepts connections but answers nothing until resumed (SIGCONT)."""
    collector = Collector(db)
    collector.process.send_signal(signal.SIGSTOP)
    try:
        yield collector
    finally:
        collector.process.send_signal(signal.SIGCONT)
        collector.stop()


def _wait_for_exit(pid: int, what: str, timeout: float = 120):
    _wait_for(lambda: not pathlib.Path(f"/proc/{pid}").exists(), what, timeout)


def _wait_for(condition, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_second_outage_after_the_job_does_not_inherit_the_first_ones_time(tmp_path):
    out, agent_dir = _spool_of_a_job(tmp_path, 400_000)
    port = closed_port()
    give_up_s = 4
    forwarder = subprocess.Popen(
        [str(castscope.agent_library_path().parent / "castscope-forwarder"), "--spool", str(agent_dir),
         "--collector", f"127.0.0.1:{port}", "--parent-pid", str(_dead_pid()), "--give-up-after-s", str(give_up_s)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_outage = time.monotonic()  # the collector is not there yet
    collector = None
    try:
        time.sleep(1.0)
        collector = Collector(tmp_path / "store.db", listen=f"127.0.0.1:{port}")
        _wait_for(lambda: _status(agent_dir).get("state") == "streaming", "the forwarder to connect")
        collector.process.send_signal(signal.SIGSTOP)  # holds the rest back, the stream stays up
        # Outage two starts later than the limit after outage one began.
        time.sleep(max(0.0, first_outage + give_up_s + 1.5 - time.monotonic()))
        collector.kill9()
        time.sleep(1.0)
        collector.start()
        _, stderr = forwarder.communicate(timeout=300)
    finally:
        if forwarder.poll() is None:
            forwarder.kill()
        if collector is not None:
            collector.stop()
    assert forwarder.returncode == 0, stderr
    agent = the_agent(collector.db)
    assert agent["finished"] and agent["events_dropped_total"] == 0
    assert stored_event_seqs(collector.db) == list(range(1, agent["events_recorded_total"] + 1))
    assert _status(agent_dir)["state"] == "delivered" and not agent_dir.exists()


# ---- a forwarder killed -9: during the run the agent restarts it; after it, castscope run does ----

def test_forwarder_killed_mid_run_is_restarted_and_nothing_is_lost(tmp_path):
    collector = Collector(tmp_path / "store.db")
    iterations = 400_000
    out = tmp_path / "out"
    job = start_castscope_run(out, "--no-jsonl", "--ring-records", str(1 << 20), "--collector", collector.address,
                              "--run-id", "fwd-kill9", job=[str(JOBS / "mm_loop.py"), str(iterations)])
    try:
        def streaming() -> dict:
            for status_file in (out / "spool").glob("*.forwarder.json") if (out / "spool").is_dir() else []:
                status = json.loads(status_file.read_text() or "{}")
                if status.get("state") == "streaming" and status.get("batches_acknowledged", 0) >= 10:
                    return status
            return {}
        _wait_for(lambda: bool(streaming()), "the forwarder to stream", timeout=180)
        os.kill(streaming()["pid"], signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
        collector.stop()
    assert job.returncode == 0, stderr
    assert "restarted as pid" in stderr or "started another" in stderr, stderr
    agent = the_agent(collector.db)
    assert agent["finished"] and agent["events_dropped_total"] == 0, stderr
    recorded = agent["events_recorded_total"]
    assert recorded >= 3 * iterations
    assert stored_event_seqs(collector.db) == list(range(1, recorded + 1))
    assert "not delivered" not in stderr, stderr


def test_forwarder_killed_after_the_job_ended_is_replaced_by_castscope_run(tmp_path):
    out = tmp_path / "out"
    with paused_collector(tmp_path / "store.db") as collector, \
            running_castscope_run(out, "--collector", collector.address, "--run-id", "late-kill9",
                                  job=[str(JOBS / "train_mlp.py")]) as job:  # nothing gets through until we say so
        spool = out / "spool"
        _wait_for(lambda: spool.is_dir() and any(d.is_dir() for d in spool.iterdir()), "the agent's spool folder")
        [agent_dir] = [d for d in spool.iterdir() if d.is_dir()]
        _wait_for(lambda: _status(agent_dir).get("pid"), "the forwarder's status file")
        status = _status(agent_dir)
        _wait_for_exit(status["agent_pid"], "the job to end")
        os.kill(status["pid"], signal.SIGKILL)  # nobody left to restart it but castscope run
        time.sleep(0.5)
        collector.process.send_signal(signal.SIGCONT)
        stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    assert "started another" in stderr, stderr
    dumped = dumped_events(out)
    agent = the_agent(collector.db)
    assert agent["finished"]
    assert stored_event_seqs(collector.db) == seqs(dumped)


# ---- a disk that stays full to the end: the drops still reach the store ----

@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs: a disk that fills up."""
    yield from _spool_tmpfs(tmp_path, "1m")


@pytest.fixture
def two_mib_tmpfs(tmp_path):
    """A 2 MiB tmpfs: the issue's small spool disk."""
    yield from _spool_tmpfs(tmp_path, "2m")


@pytest.fixture
def four_mib_tmpfs(tmp_path):
    """A 4 MiB tmpfs: a spool disk smaller than one 16 MiB segment."""
    yield from _spool_tmpfs(tmp_path, "4m")


def _spool_tmpfs(tmp_path, size: str):
    """A tmpfs of `size` at out/spool. Mounting needs root (CI and these machines run as root)."""
    mount_point = tmp_path / "out" / "spool"
    mount_point.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_disk_full_to_the_end_still_accounts_for_every_event(tmp_path, small_tmpfs):
    out = tmp_path / "out"
    iterations = 100_000
    with paused_collector(tmp_path / "store.db") as collector, \
            running_castscope_run(out, "--no-jsonl", "--collector", collector.address, "--run-id", "full-disk",
                                  job=[str(JOBS / "mm_loop.py"), str(iterations)]) as job:  # the spool only fills
        _wait_for(lambda: any(small_tmpfs.glob("*.forwarder.json")), "the forwarder's status file")
        [status_file] = small_tmpfs.glob("*.forwarder.json")
        _wait_for_exit(json.loads(status_file.read_text())["agent_pid"], "the job to end", timeout=300)
        collector.process.send_signal(signal.SIGCONT)
        stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    agent = the_agent(collector.db)
    stored = agent["casts"] + agent["ops"] + agent["cache_samples"] + agent["numerics"]
    # The final batch could not be written: the accounting file told the store.
    assert agent["finished"], stderr
    assert agent["events_dropped_total"] > 0
    assert stored == agent["events_recorded_total"]
    assert stored + agent["events_dropped_total"] >= 3 * iterations
    assert f"{agent['events_dropped_total']} events dropped" in stderr
    # One line per kind of failure, not one per failed write.
    assert stderr.count("events lost") <= 4, stderr
    assert "corrupt" not in stderr and "incomplete frame" not in stderr, stderr
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    if report is not None:
        assert report["totals"]["accounting"]["complete"]


def _fill(folder: pathlib.Path) -> None:
    """Takes every byte left on the file system of `folder`."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)


# With the spool's disk full and no collector, the job ended in 14 s but
# `castscope run` returned after 245 s: the forwarders could not write their
# final state, and each of three replacements waited the full give-up again.
# The run has one give-up, counted from the job's end.
def test_a_full_disk_and_no_collector_give_up_once(tmp_path, small_tmpfs):
    out = tmp_path / "out"
    give_up_s = 10
    job = start_castscope_run(out, "--collector", closed_address(), "--give-up-after-s", str(give_up_s),
                              "--run-id", "full-and-alone", job=[str(JOBS / "mm_loop.py"), "100000"])
    try:
        _wait_for(lambda: any(small_tmpfs.glob("*.forwarder.json")), "the forwarder's status file")
        [status_file] = small_tmpfs.glob("*.forwarder.json")
        _wait_for_exit(json.loads(status_file.read_text())["agent_pid"], "the job to end", timeout=300)
        job_ended = time.monotonic()
        _fill(small_tmpfs)  # not a byte left: the forwarder cannot write its final state
        stdout, stderr = job.communicate(timeout=300)
        after_job_s = time.monotonic() - job_ended
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr
    # One give-up (plus start-up and reading slack), not one per replacement forwarder: with three
    # replacements each waiting a full give-up that is 40 s or more. The slack covers the replacements'
    # start-up and the summary reading the job's ~280 k events: 22 s in all was seen on this 2-core VM
    # when it was slow (2026-11-26, twice in five runs), against the 20 s bound this had before.
    assert after_job_s < 3 * give_up_s, f"castscope run took {after_job_s:.0f} s after the job ended:\n{stderr}"
    # One replacement at a time, each given what is left of the run's give-up: a full disk keeps the
    # status file naming the dead forwarder, and three replacements started within 0.1 s once queued on
    # the folder's lock, each with the whole give-up still to wait (5 s turned into 16.4 s).
    granted = [int(s) for s in re.findall(r"started another to deliver the rest \(it gives up after (\d+) s", stderr)]
    assert granted and all(left == 0 for left in granted[1:]), stderr
    # The counts as before: the events the job recorded, and the spool left for `castscope load`.
    assert "mm_loop: 100000 iterations" in stdout
    assert "casts" in stderr and "spool file(s) were not delivered" in stderr, stderr
    assert "sent to the collector" not in stderr, stderr
    assert "run full-and-alone was NOT fully delivered" in stderr, stderr


# With no collector reachable for the whole run, the summary said "sent to
# the collector".
def test_a_collector_away_for_the_whole_run_is_not_called_sent(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--collector", closed_address(),
                             "--give-up-after-s", "1", "--run-id", "alone", "--", sys.executable,
                             str(JOBS / "mm_loop.py"), "100"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "sent to the collector" not in result.stderr, result.stderr
    assert f"run alone was NOT fully delivered: the collector at 127.0.0.1:" in result.stderr, result.stderr
    assert "spool file(s) were not delivered and stay in" in result.stderr, result.stderr
    assert "cannot ask the collector" not in result.stderr, result.stderr  # it was not reached: no second wait


def test_attach_in_python_also_restarts_its_forwarder(tmp_path):
    import torch

    collector = Collector(tmp_path / "store.db")
    try:
        a = torch.randn(4, 4)
        b = torch.randn(4, 4, requires_grad=True)
        with castscope.attached(collector=collector.address, spool_dir=tmp_path / "spool", run_id="attached",
                                probe=False) as agent:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for _ in range(2000):
                    torch.mm(a, b)
                agent.flush()
                first = agent.status()["forwarder_pid"]
                assert first > 0
                os.kill(first, signal.SIGKILL)
                _wait_for(lambda: agent.status()["forwarder_pid"] not in (0, first), "the agent to restart it")
                assert agent.status()["forwarder_restarts"] == 1
                for _ in range(2000):
                    torch.mm(a, b)
        # detach wrote the final batch; the restarted forwarder delivers it and exits.
        [status_file] = (tmp_path / "spool").glob("*.forwarder.json")  # stays after the folder is delivered
        _wait_for(lambda: json.loads(status_file.read_text()).get("state") == "delivered", "delivery", timeout=60)
    finally:
        collector.stop()
    stored = the_agent(collector.db)
    assert stored["finished"] and stored["events_dropped_total"] == 0
    assert stored_event_seqs(collector.db) == list(range(1, stored["events_recorded_total"] + 1))
    assert stored["ops"] == 4000


# A process the job leaves running keeps streaming to a collector of one's
# own: its spool is not "left undelivered", and the run is not called "NOT
# fully delivered" because of it (it was, as soon as anything of it was
# still in the spool when the job ended).
def test_a_process_the_job_leaves_running_does_not_make_the_run_undelivered(tmp_path):
    collector = Collector(tmp_path / "store.db")
    out = tmp_path / "out"
    pid_file = tmp_path / "lingering.pid"
    linger = tmp_path / "linger.py"  # mm_loop's autocast ops, then a minute more of life
    linger.write_text(f"""
import runpy, sys, time
sys.argv = [{str(JOBS / "mm_loop.py")!r}, "100"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
open({str(tmp_path / "recorded")!r}, "w").close()
time.sleep(60)
""")
    job = tmp_path / "job.py"  # starts it, waits until it has recorded its ops, ends
    job.write_text(f"""
import os, subprocess, sys, time
lingering = subprocess.Popen([sys.executable, {str(linger)!r}], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open({str(pid_file)!r}, "w").write(str(lingering.pid))
while not os.path.exists({str(tmp_path / "recorded")!r}):
    time.sleep(0.05)
""")
    try:
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--collector", collector.address,
                                 "--run-id", "lingering", "--", sys.executable, str(job)],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        lingering = int(pid_file.read_text())
        assert f"process {lingering} of the job is still running" in result.stderr, result.stderr
        assert "NOT fully delivered" not in result.stderr, result.stderr
        assert "were not delivered" not in result.stderr, result.stderr
        assert f"run lingering sent to the collector at {collector.address}" in result.stderr, result.stderr
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        collector.stop()


def test_a_spool_disk_smaller_than_a_segment_loses_nothing_with_a_collector_that_keeps_up(tmp_path, four_mib_tmpfs):
    """A 4 MiB spool disk, 16 MiB segments by default: the segment being written
    could not be freed until it rotated, so the disk stayed full (a 2 MiB disk
    kept 31 083 of 5.6 M events). Segments now open at an eighth of the free
    space at most, rotate early, and are freed as the collector stores them."""
    collector = Collector(tmp_path / "store.db")
    try:
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(tmp_path / "out"), "--no-jsonl", "--collector",
                                 collector.address, "--run-id", "small-disk", "--", sys.executable,
                                 str(JOBS / "mm_loop.py"), "100000"], capture_output=True, text=True, timeout=600)
    finally:
        collector.stop()
    assert result.returncode == 0, result.stderr
    agent = the_agent(collector.db)
    assert agent["finished"] and agent["events_recorded_total"] > 100_000, agent
    assert agent["events_dropped_total"] == 0, (agent, result.stderr[-3000:])
    assert stored_event_seqs(collector.db) == list(range(1, agent["events_recorded_total"] + 1))


def test_a_collector_that_stalls_for_a_moment_costs_a_small_spool_disk_nothing(tmp_path, two_mib_tmpfs):
    """A 2 MiB spool disk holds a tenth of a second of a busy job: a collector
    that keeps up on average but stalls for a moment (here: stopped while the
    job makes about 4 MB of batches) filled it, and the batches written
    meanwhile were lost (29 k events of 60 k). They now wait in the agent's
    memory (spool_backlog_bytes, 4 MiB) and go to disk as the collector
    catches up."""
    cues = tmp_path / "cues"
    cues.mkdir()
    collector = Collector(tmp_path / "store.db")
    try:
        with running_castscope_run(tmp_path / "out", "--no-jsonl", "--collector", collector.address, "--run-id", "stall",
                                   job=[str(JOBS / "burst_on_cue.py"), str(cues), "20000"]) as job:
            _wait_for(lambda: (cues / "ready").exists(), "the job to be ready")
            collector.process.send_signal(signal.SIGSTOP)
            try:
                (cues / "go").touch()
                _wait_for(lambda: (cues / "burst-done").exists() or job.poll() is not None, "the burst")
            finally:
                collector.process.send_signal(signal.SIGCONT)
            (cues / "finish").touch()
            stdout, stderr = job.communicate(timeout=300)
    finally:
        collector.stop()
    assert job.returncode == 0, stderr
    agent = the_agent(collector.db)
    assert agent["finished"] and agent["events_recorded_total"] > 60_000, agent
    assert agent["events_dropped_total"] == 0, (agent, stderr[-3000:])
    assert stored_event_seqs(collector.db) == list(range(1, agent["events_recorded_total"] + 1))


def test_a_disk_full_at_the_jobs_end_still_finishes_the_agent_with_every_loss_counted(tmp_path, small_tmpfs):
    """The disk stays full through the job's end with batches waiting in
    memory: they are dropped and counted, and the final batch, which can wait
    for nothing, is counted too and still closes the agent's stream through
    the accounting file (it once waited behind them and was lost unseen: the
    agent never finished)."""
    cues = tmp_path / "cues"
    cues.mkdir()
    with paused_collector(tmp_path / "store.db") as collector, \
            running_castscope_run(tmp_path / "out", "--no-jsonl", "--collector", collector.address, "--run-id",
                                  "full-at-exit", job=[str(JOBS / "burst_on_cue.py"), str(cues), "20000"]) as job:
        _wait_for(lambda: (cues / "ready").exists(), "the job to be ready")
        (cues / "go").touch()
        _wait_for(lambda: (cues / "burst-done").exists() or job.poll() is not None, "the burst")
        _fill(small_tmpfs)  # not a byte left for the final batch either
        [status_file] = small_tmpfs.glob("*.forwarder.json")
        agent_pid = json.loads(status_file.read_text())["agent_pid"]
        (cues / "finish").touch()
        _wait_for_exit(agent_pid, "the job to end", timeout=120)
        (small_tmpfs / "filler").unlink()
        collector.process.send_signal(signal.SIGCONT)
        stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    agent = the_agent(collector.db)
    stored = agent["casts"] + agent["ops"] + agent["cache_samples"] + agent["numerics"]
    assert agent["finished"], (agent, stderr[-3000:])
    assert agent["events_dropped_total"] > 0, agent
    assert stored == agent["events_recorded_total"], agent  # every event kept is stored...
    assert stored + agent["events_dropped_total"] >= 3 * 20_000, agent  # ...and every other one counted
    assert agent["missing_sequences"] == 0, agent
