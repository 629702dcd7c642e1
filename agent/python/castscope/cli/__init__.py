"""`castscope` command line.

    castscope policy check [--policy FILE]... [--overlay FILE]... [--import MODULE]... [--json]
        exit 0: usable, 1: refused (errors printed), 2: bad command line
    castscope run [--policy FILE]... [--overlay FILE]... [--out DIR] [--stacks] [--no-probe]
                  [--collector HOST:PORT [--tls-ca PEM]] [--run-id ID] [--no-jsonl] [--serve] -- COMMAND...
        runs COMMAND with castscope attached through LD_PRELOAD; exits with
        COMMAND's code, 2 when castscope refuses to start, 3 when a process
        of the job could not attach although COMMAND succeeded. Without
        --collector, a collector runs beside the job and stores into
        DIR/castscope.db; batches wait in DIR/spool until delivered.
    castscope report RUN [--db DB] [--json FILE] [--sarif FILE [--source-root DIR]]
        the audit report of a stored run (JSON with --json, the findings as
        SARIF 2.1.0 with --sarif) and a summary
    castscope diff RUN_A RUN_B [--db DB | --db-a DB --db-b DB] [--json]
        site-by-site cast differences; exit 1 when the runs differ
    castscope export RUN [--db DB] [--perfetto FILE] [--chrome FILE]
        the run as a Perfetto trace and/or a Chrome trace (docs/export.md)
    castscope serve ARGS...   the collector daemon (castscope-collector serve --help)
    castscope load ARGS...    import spool folders into a database (castscope-collector load)
    castscope view DIR|DB     serve the viewer over a stored run, read-only, until Ctrl-C
    castscope query ARGS...   read a database or a collector (castscope-collector query;
                              --collector HOST:PORT [--token T] [--tls-ca PEM])
    castscope fleet ARGS...   the fleet's PostgreSQL: init, retain, jobs, sites, findings,
                              compare, job, view (castscope-collector fleet; docs/fleet.md)
    castscope --version       castscope's release and the torch the agent was built for

One module per command group: `policy`, `run`, `report` (report and diff),
`export`, `collector_commands` (serve, load, query, fleet, view: handed to
castscope-collector).
"""
from __future__ import annotations

import argparse
import sys

from . import collector_commands, export, policy, report, run


class _VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def version_text() -> str:
    """castscope's release (the package's, = project(castscope VERSION)) and,
    when the agent is built, the torch it was built for (loading it imports torch)."""
    from importlib.metadata import PackageNotFoundError, version

    from .._native import AttachError, agent_torch_version

    try:
        release = version("castscope")
    except PackageNotFoundError:
        release = "unknown (the castscope package is not installed; pip install -e agent/python)"
    try:
        torch = f"agent built for torch {agent_torch_version()}"
    except (AttachError, ImportError, OSError) as e:
        torch = f"agent: {e}"
    return f"castscope {release}\n{torch}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in collector_commands.COMMANDS:
        return collector_commands.pass_through(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="castscope", description="see what autocast did to your job")
    parser.add_argument("--version", action=_VersionAction, help="print castscope's release and the torch the agent "
                                                                 "was built for, and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in (policy, run, report, export, collector_commands):
        group.add_parsers(commands)
    args = parser.parse_args(argv)
    return args.handler(args)
