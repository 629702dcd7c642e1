"""Progress of long work, with real processes: `castscope load` of a real
job's spool and `castscope report` of the loaded run, run under a pseudo
terminal, draw a line with percent, rate and ETA on stderr, redrawn in place;
the same commands with stderr going to a file print no progress at all."""
from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess

import pytest

from test_transport import CASTSCOPE, castscope_run

JOBS = pathlib.Path(__file__).parent / "jobs"
ITERATIONS = 60_000  # 180k events: large enough for several chunks and segments, seconds to load
# Every update drawn: the test sees frames whatever this machine's speed (docs/operations.md).
ENV = dict(os.environ, CASTSCOPE_PROGRESS_INTERVAL_MS="0")
FRAME = re.compile(r"\r(castscope-collector (?:load|report): (\d+)% \([^)]*/s, ETA \d+[smh][^)]*\))\x1b\[K")


@pytest.fixture(scope="module")
def spool(tmp_path_factory):
    """A real job's spool, left undelivered (its collector never ran)."""
    tmp = tmp_path_factory.mktemp("progress")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    out = tmp / "out"
    result = castscope_run(out, "--collector", dead, "--run-id", "progress", "--give-up-after-s", "0", "--no-jsonl",
                           "--ring-records", str(1 << 20), job=[str(JOBS / "mm_loop.py"), str(ITERATIONS)])
    assert result.returncode == 0, result.stderr
    return tmp, out / "spool"


def _on_a_terminal(argv: list[str]) -> tuple[int, str, str]:
    """Runs argv with stderr on a pseudo terminal; its exit code, stdout and what the terminal got."""
    master, slave = os.openpty()
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=ENV) as process:
        os.close(slave)
        terminal = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            terminal += chunk
        stdout = process.stdout.read()
        process.wait(timeout=300)
    os.close(master)
    return process.returncode, stdout.decode(errors="replace"), terminal.decode(errors="replace")


def _to_a_file(argv: list[str], path: pathlib.Path) -> tuple[int, str]:
    with open(path, "wb") as stderr:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=ENV,
                                timeout=300)
    return result.returncode, path.read_text(errors="replace")


def _frames(terminal: str, command: str) -> list[int]:
    """The percentages of the progress frames of `command` on the terminal."""
    return [int(m.group(2)) for m in FRAME.finditer(terminal) if m.group(1).startswith(f"castscope-collector {command}")]


def test_load_and_report_show_progress_on_a_terminal(spool):
    tmp, spool_dir = spool
    db = tmp / "terminal.db"
    code, _, terminal = _on_a_terminal([*CASTSCOPE, "load", "--db", str(db), str(spool_dir)])
    assert code == 0, terminal
    percents = _frames(terminal, "load")
    assert len(percents) >= 2, terminal
    assert percents == sorted(percents) and percents[-1] == 100, percents
    assert "MB/s" in terminal or "kB/s" in terminal, terminal
    # Drawn in place, and erased before the summary line.
    assert "\r\x1b[Kcastscope-collector load: 1 agents" in terminal, terminal

    code, stdout, terminal = _on_a_terminal([*CASTSCOPE, "report", "progress", "--db", str(db)])
    assert code == 0, terminal
    percents = _frames(terminal, "report")
    assert len(percents) >= 2, terminal
    assert percents == sorted(percents) and percents[-1] == 100, percents
    assert "events/s" in terminal, terminal
    assert terminal.endswith("\r\x1b[K"), repr(terminal[-200:])  # nothing left on the line
    assert "castscope report: run progress" in stdout


def test_no_progress_when_stderr_is_not_a_terminal(spool):
    tmp, spool_dir = spool
    db = tmp / "file.db"
    code, stderr = _to_a_file([*CASTSCOPE, "load", "--db", str(db), str(spool_dir)], tmp / "load.err")
    assert code == 0, stderr
    assert stderr.startswith("castscope-collector load: 1 agents"), stderr
    assert "\r" not in stderr and "\x1b" not in stderr and "ETA" not in stderr and "%" not in stderr
    code, stderr = _to_a_file([*CASTSCOPE, "report", "progress", "--db", str(db)], tmp / "report.err")
    assert code == 0, stderr
    assert stderr == "", stderr
