"""Argument types of the `castscope` commands: a bad value is argparse's
usage error (exit 2) naming the argument, before anything starts.

The address rule is common/cli/host_port.h's, which the collector and the
forwarder apply to the same addresses: HOST:PORT, HOST a name or an address
(IPv6 in brackets), PORT decimal; unix:PATH where gRPC dials."""
from __future__ import annotations

import argparse
import os
import sys
import pathlib
import stat
import string

_HOST_CHARACTERS = frozenset(string.ascii_letters + string.digits + ".-_")
_IPV6_CHARACTERS = frozenset(string.hexdigits + ":.")


DEFAULT_DB = "castscope-out/castscope.db"  # the store castscope run writes by default (--out castscope-out)


def stored_run(parser) -> None:
    """[RUN] and --db: a run of a collector database (castscope report, export);
    without RUN, the database's latest (resolve_run)."""
    parser.add_argument("run", nargs="?", help="run id (castscope query --db DB runs lists them); default: the "
                                               "database's only run, or its latest (the one seen last), named on stderr")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"collector database (default: {DEFAULT_DB})")


def resolve_run(args, command: str) -> bool:
    """Fills args.run with the database's latest run when none was given,
    saying which on stderr; False (the error printed) when there is none to take."""
    if args.run is not None:
        return True
    import json
    import subprocess

    from .._native import collector_binary

    if not os.path.exists(args.db):
        print(f"castscope {command}: {args.db}: no such database (give --db, and a run id)", file=sys.stderr)
        return False
    result = subprocess.run([str(collector_binary()), "query", "--db", str(args.db), "runs"], capture_output=True,
                            text=True, timeout=300)
    if result.returncode != 0:
        print(f"castscope {command}: cannot list the runs of {args.db}: {result.stderr.strip()}", file=sys.stderr)
        return False
    runs = json.loads(result.stdout)
    if not runs:
        print(f"castscope {command}: {args.db} holds no run", file=sys.stderr)
        return False
    latest = max(runs, key=lambda run: (int(run.get("last_seen_unix_ns", 0)), run["run_id"]))
    args.run = latest["run_id"]
    which = "its only run" if len(runs) == 1 else f"the latest of its {len(runs)} runs (castscope query --db {args.db} runs lists them)"
    print(f"castscope {command}: no run id given; {args.db}: {which}, {args.run}", file=sys.stderr)
    return True


def whole_number(what: str, low: int, high: int):
    """An int in [low, high]; `what` names it in the error ("a rank", "seconds")."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (a whole number from {low} to {high})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range for {what} ({low} to {high})")
        return value
    return parse


def host_port_error(text: str, port_zero_ok: bool) -> str | None:
    """What is wrong with HOST:PORT `text`, or None."""
    host, colon, port = text.rpartition(":")
    if not colon:
        return "expected HOST:PORT"
    if len(host) >= 2 and host[0] == "[" and host[-1] == "]":
        if len(host) == 2 or not set(host[1:-1]) <= _IPV6_CHARACTERS:
            return "expected HOST:PORT, with an IPv6 address in brackets ([::1]:PORT)"
    elif not host or not set(host) <= _HOST_CHARACTERS:
        return "expected HOST:PORT, HOST a name or an address (an IPv6 address in brackets)"
    lowest = 0 if port_zero_ok else 1
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and lowest <= int(port) <= 65535):
        return f"the port must be a number from {lowest} to 65535"
    return None


def collector_address(text: str) -> str:
    """Where to send: HOST:PORT (port 1 to 65535) or unix:PATH."""
    if text.startswith("unix:"):
        error = None if len(text) > len("unix:") else "unix: needs a path (unix:PATH)"
    else:
        error = host_port_error(text, port_zero_ok=False)
    if error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}")
    return text


def listen_address(text: str) -> str:
    """Where to listen: HOST:PORT, port 0 for any free one."""
    error = host_port_error(text, port_zero_ok=True)
    if error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}")
    return text


def output_folder(text: str) -> pathlib.Path:
    """A folder castscope may create or write into: not a file, nor under one."""
    path = pathlib.Path(text)
    try:
        for place in (path, *path.parents):
            if place.exists():
                if not place.is_dir():
                    raise argparse.ArgumentTypeError(
                        f"{text!r}: {'is' if place == path else str(place) + ' is'} a file, not a folder")
                break
    except OSError as e:  # a name too long, a folder we may not look into
        raise argparse.ArgumentTypeError(f"{text!r}: {e.strerror}") from None
    return path


def readable_file(text: str) -> pathlib.Path:
    """A regular file this process can read (a certificate, a key)."""
    path = pathlib.Path(text)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: opening a FIFO waits for a writer
            raise argparse.ArgumentTypeError(f"{text!r}: not a regular file")
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e.strerror}") from None
    return path
