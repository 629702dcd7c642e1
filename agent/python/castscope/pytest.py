"""The pytest plugin: `pytest --castscope[=SEVERITY]` attaches castscope to
the test session, sends its events to a collector started for the session,
names the test that raised each finding, and fails the run when a finding
at or above SEVERITY (default error) appears (docs/pytest.md).

Registered through the `pytest11` entry point; `-p castscope.pytest` loads
it where plugin autoloading is off. Without `--castscope` it does nothing.
"""
from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time
import uuid

import pytest

from .attribution import SEVERITIES, EventIndex, Window, at_or_above, owning_test

_DELIVERY_TIMEOUT_S = 120


def pytest_addoption(parser) -> None:
    group = parser.getgroup("castscope", "castscope: what autocast did in the tests")
    group.addoption("--castscope", nargs="?", const="error", default=None, metavar="SEVERITY",
                    help="attach castscope; fail the run on a finding at or above SEVERITY "
                         f"({', '.join(SEVERITIES)}; default error)")
    group.addoption("--castscope-out", metavar="DIR",
                    help="where the session's database, events and report.json go (default: a new private "
                         "temporary folder, named in the summary)")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """`pytest --castscope tests/`: the word after a bare --castscope is a
    test path unless it is a severity (argparse would take it as one)."""
    for i, arg in enumerate(args[:-1]):
        if arg == "--":
            break
        if arg == "--castscope" and args[i + 1] not in SEVERITIES:
            args[i] = "--castscope=error"


def pytest_configure(config) -> None:
    threshold = config.getoption("castscope")
    if threshold is None:
        return
    if threshold not in SEVERITIES:
        raise pytest.UsageError(f"--castscope={threshold}: not a castscope severity ({', '.join(SEVERITIES)})")
    if hasattr(config, "workerinput") or config.getoption("numprocesses", None):
        raise pytest.UsageError("--castscope: pytest-xdist (-n) is not supported; the tests must run in the "
                                "process castscope attaches to")
    config.pluginmanager.register(CastscopeSession(config, threshold), "castscope-session")


class CastscopeSession:
    """castscope attached for one pytest session, and its findings by test."""

    def __init__(self, config, threshold: str):
        self.config = config
        self.threshold = threshold
        self.windows: list[Window] = []
        self.findings: list[tuple[dict, str | None]] = []  # (finding, node id of the test that raised it)
        self.problem: str | None = None
        self.report_path: pathlib.Path | None = None
        self.external = "CASTSCOPE_CONFIG" in os.environ
        if self.external:
            return  # `castscope run` attaches this process and reports when it ends
        self._start(config.getoption("castscope_out"))

    def _start(self, out: str | None) -> None:
        import castscope

        from .embedded_collector import CollectorError, EmbeddedCollector

        if out is None:
            self.out = pathlib.Path(tempfile.mkdtemp(prefix="castscope-pytest-"))  # 0700
        else:
            self.out = pathlib.Path(out).resolve()
            self.out.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.spool = self.out / "spool"
        self.spool.mkdir(mode=0o700, exist_ok=True)
        if any(self.spool.iterdir()):
            raise pytest.UsageError(f"--castscope-out {self.out}: {self.spool} is not empty (an earlier session's "
                                    f"batches?); give an empty or new folder")
        self.events_path = self.out / "events.jsonl"
        self.run_id = f"pytest-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        try:
            self.collector = EmbeddedCollector(self.out / "castscope.db", self.out / "collector.log")
        except (CollectorError, FileNotFoundError) as e:
            raise pytest.UsageError(f"--castscope: cannot start the collector: {e}") from None
        try:
            castscope.attach(collector=self.collector.address, spool_dir=self.spool, run_id=self.run_id,
                             events_path=self.events_path)
        except castscope.AttachError as e:
            self.collector.stop()
            raise pytest.UsageError(f"--castscope: castscope did not attach: {e}") from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        start = time.monotonic_ns()  # CLOCK_MONOTONIC, the events' clock
        try:
            return (yield)
        finally:
            self.windows.append(Window(start, time.monotonic_ns(), item.nodeid))

    def pytest_sessionfinish(self, session) -> None:
        if self.external:
            return
        try:
            report = self._finish()
        except Exception as e:  # noqa: BLE001 - said in the summary, and the run fails: a guard must not pass silently
            self.problem = f"no castscope report: {e}"
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
        from .events import iter_events

        index = EventIndex(iter_events(self.events_path, skipped=[]))
        self.findings = [(f, owning_test(self.windows, index.first_ts(f))) for f in report["findings"]]
        if self.failing() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _finish(self) -> dict:
        import castscope

        from .private_files import write_private_text
        from .report import load_report

        try:
            castscope.detach()  # writes the final batch; the forwarder delivers it and exits
            left = self._wait_delivered()
        finally:
            self.collector.stop()
        if left:
            raise RuntimeError(f"{left} was not delivered to the collector in {_DELIVERY_TIMEOUT_S} s "
                               f"(see {self.out / 'collector.log'} and {self.spool})")
        report = load_report(self.collector.db, self.run_id)
        self.report_path = self.out / "report.json"
        write_private_text(self.report_path, json.dumps(report, indent=2) + "\n")
        return report

    def _wait_delivered(self) -> str | None:
        """None once every forwarder has finished; else what is still waiting."""
        from .embedded_collector import pending_spool

        deadline = time.monotonic() + _DELIVERY_TIMEOUT_S
        while True:
            statuses = [json.loads(p.read_text()) for p in self.spool.glob("*.forwarder.json")]
            if statuses and all(s.get("exit_code") is not None for s in statuses):
                left = pending_spool(self.spool)
                return f"{len(left)} spool file(s)" if left else None
            if time.monotonic() > deadline:
                return "the session's events" if not statuses else f"{self.spool} (forwarder: " + ", ".join(
                    s.get("state", "?") for s in statuses) + ")"
            time.sleep(0.05)

    def failing(self) -> list[tuple[dict, str | None]]:
        return [(f, test) for f, test in self.findings if at_or_above(f["severity"], self.threshold)]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "castscope")
        if self.external:
            write("castscope is attached by `castscope run` (CASTSCOPE_CONFIG is set): its findings are in that "
                  "run's report, printed when the job ends; --castscope does not name tests or change the exit "
                  "status here")
            return
        if self.problem:
            write(f"castscope: {self.problem}", red=True)
            return
        order = sorted(self.findings, key=lambda ft: -SEVERITIES.index(ft[0]["severity"]))
        for finding, test in order:
            site = finding["sites"][0] if finding["sites"] else None
            where = f"{self._path(site['file'])}:{site['line']}" if site else "(no source location)"
            blocking = at_or_above(finding["severity"], self.threshold)
            write(f"{'FAIL' if blocking else 'note'} [{finding['severity']}] {finding['kind']} at {where} in "
                  f"{test or '(outside any test)'}: {finding['summary']}", red=blocking, yellow=not blocking)
        failing = self.failing()
        verdict = (f"{len(failing)} finding(s) at or above {self.threshold}: the run fails" if failing
                   else f"no finding at or above {self.threshold}")
        write(f"castscope: {len(self.findings)} finding(s); {verdict}", red=bool(failing), green=not failing)
        write(f"castscope: report in {self.report_path}; more with: castscope report {self.run_id} "
              f"--db {self.collector.db}")

    def _path(self, file: str) -> str:
        """Relative to pytest's root when under it, as pytest shows paths."""
        try:
            return str(pathlib.Path(file).relative_to(self.config.rootpath))
        except ValueError:
            return file
