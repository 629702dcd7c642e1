"""Delivery when the agent is gone: the forwarder reads every spool segment to
its end before it calls the spool delivered (zero-byte segments, which a full
disk leaves behind, do not end delivery)."""
from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

import castscope
from collector import Collector, runs
from test_transport import castscope_run, stored_event_seqs

JOBS = pathlib.Path(__file__).parent / "jobs"


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_empty_segments_and_a_dead_agent_lose_nothing(tmp_path):
    with socket.socket() as probe:  # a collector nobody runs: the whole spool stays
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    out = tmp_path / "out"
    result = castscope_run(out, "--collector", dead, "--run-id", "gaps", job=[str(JOBS / "train_mlp.py")])
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
    [dump] = out.glob("events-*.jsonl")
    dumped = [e for e in castscope.iter_events(dump) if "stats" not in e]
    stored = stored_event_seqs(collector.db)
    assert len(stored) == len(dumped), f"{len(stored)} of {len(dumped)} events stored"
    assert stored == sorted(int(next(iter(e.values()))["seq"]) for e in dumped)
    # Zero-byte segments hold nothing: they are not reported as damage.
    assert "corrupt" not in forwarder.stderr and "incomplete frame" not in forwarder.stderr, forwarder.stderr
    [run] = runs(collector.db)
    [agent] = run["agents"]
    assert agent["finished"]
    assert not agent_dir.exists()  # removed only once everything in it was stored
