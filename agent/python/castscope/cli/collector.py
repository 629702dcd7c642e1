"""`castscope serve|load|query ARGS`: castscope-collector SUBCOMMAND ARGS."""
from __future__ import annotations

import os
import sys

COMMANDS = {"serve": "run the collector daemon", "load": "import spool folders into a database",
            "query": "read runs and events from a database or a collector"}


def add_parsers(commands) -> None:
    """Listed in --help only: main() hands these to castscope-collector before parsing."""
    for name, help_text in COMMANDS.items():
        commands.add_parser(name, help=f"{help_text} (castscope-collector {name})")


def pass_through(subcommand: str, arguments: list[str]) -> int:
    from .._native import collector_binary

    try:
        binary = collector_binary()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(str(binary), [str(binary), subcommand, *arguments])
