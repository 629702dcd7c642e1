"""`castscope export RUN --db DB [--perfetto FILE] [--chrome FILE]`: a stored
run as a Perfetto trace and/or a Chrome trace (docs/export.md). The collector
binary writes them (`castscope-collector export`), 0600, each complete or not
at all; its exit code comes back: 0 written, 1 a failure while writing,
2 a bad command line or no such store or run."""
from __future__ import annotations

import subprocess
import sys

from . import arguments


def add_parsers(commands) -> None:
    export = commands.add_parser("export", help="write a stored run as a Perfetto and/or Chrome trace")
    arguments.stored_run(export)
    export.add_argument("--perfetto", metavar="FILE", help="Perfetto trace (protobuf) for ui.perfetto.dev")
    export.add_argument("--chrome", metavar="FILE", help="Chrome trace (JSON) for chrome://tracing")
    export.set_defaults(handler=export_command)


def export_command(args) -> int:
    if not args.perfetto and not args.chrome:
        print("castscope export: give --perfetto FILE, --chrome FILE or both", file=sys.stderr)
        return 2
    from .._native import collector_binary

    try:
        binary = collector_binary()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    if not arguments.resolve_run(args, "export"):
        return 2
    command = [str(binary), "export", "--db", str(args.db), "--run", args.run]
    if args.perfetto:
        command += ["--perfetto", str(args.perfetto)]
    if args.chrome:
        command += ["--chrome", str(args.chrome)]
    sys.stdout.flush()
    return subprocess.run(command).returncode
