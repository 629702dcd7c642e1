"""`castscope serve|load|query|fleet ARGS`: castscope-collector SUBCOMMAND ARGS;
`castscope view DIR|DB`: castscope-collector view over a stored run."""
from __future__ import annotations

import os
import sys

COMMANDS = {"serve": "run the collector daemon", "load": "import spool folders into a database",
            "query": "read runs and events from a database or a collector",
            "fleet": "the fleet's PostgreSQL: init, retain, jobs, sites, findings, compare, job (docs/fleet.md)"}


def add_parsers(commands) -> None:
    """Listed in --help only: main() hands these to castscope-collector before parsing."""
    for name, help_text in COMMANDS.items():
        commands.add_parser(name, help=f"{help_text} (castscope-collector {name})")
    view = commands.add_parser("view", help="serve the viewer over a stored run (castscope-collector view)")
    view.add_argument("path", metavar="DIR|DB", help="castscope run's --out folder, or a database")
    view.add_argument("--http-listen", default="127.0.0.1:0", help="HOST:PORT (default: a free loopback port)")
    view.add_argument("--token-file", help="the token every request must carry (default: a random one)")
    view.add_argument("--ui-dir", help="the built viewer (default: the one installed with castscope, or ui/dist of the source tree)")
    view.set_defaults(handler=view_command)


def view_command(args) -> int:
    import pathlib

    path = pathlib.Path(args.path)
    db = path / "castscope.db" if path.is_dir() else path
    if not db.is_file():
        print(f"castscope view: {db}: no such database (give castscope run's --out folder or a .db file)",
              file=sys.stderr)
        return 2
    arguments = ["--db", str(db), "--http-listen", args.http_listen]
    if args.token_file:
        arguments += ["--token-file", args.token_file]
    if args.ui_dir:
        arguments += ["--ui-dir", args.ui_dir]
    return pass_through("view", arguments)


def pass_through(subcommand: str, arguments: list[str]) -> int:
    from .._native import collector_binary

    try:
        binary = collector_binary()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(str(binary), [str(binary), subcommand, *arguments])
