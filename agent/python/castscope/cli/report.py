"""`castscope report` and `castscope diff` (castscope.report does the work)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from . import arguments
from ..private_files import write_private_text
from ..report import (ReportError, diff_eager_compiled, diff_reports, format_diff, format_precision_map, format_report,
                      load_report)
from ..sarif import to_sarif


def add_parsers(commands) -> None:
    report = commands.add_parser("report", help="the audit report of a stored run")
    arguments.stored_run(report)
    report.add_argument("--json", metavar="FILE", help="also write the JSON report to FILE")
    report.add_argument("--rank", type=arguments.whole_number("a rank", 0, (1 << 31) - 1),
                        help="only the processes of this rank (RANK): their totals, sites and findings")
    report.add_argument("--sarif", metavar="FILE", help="also write the findings as SARIF 2.1.0 to FILE (docs/sarif.md)")
    report.add_argument("--source-root", metavar="DIR",
                        help="SARIF paths are relative to DIR (default: the current directory); files outside it "
                             "keep absolute file:// URIs")
    report.add_argument("--precision-map", action="store_true",
                        help="print the precision map instead: per module and parameter, the dtypes it was stored, "
                             "computed, communicated and cast in, and the bytes each maker converted per step")
    report.set_defaults(handler=report_command)
    diff = commands.add_parser("diff", help="site-by-site cast differences between two runs")
    diff.add_argument("run_a")
    diff.add_argument("run_b")
    diff.add_argument("--db", default=arguments.DEFAULT_DB,
                      help=f"database of both runs (default: {arguments.DEFAULT_DB})")
    diff.add_argument("--db-a", help="database of RUN_A, when the runs are in different files")
    diff.add_argument("--db-b", help="database of RUN_B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(handler=diff_command)


def report_command(args) -> int:
    if args.source_root and not args.sarif:
        print("castscope report: --source-root is for --sarif", file=sys.stderr)
        return 2
    if args.source_root and not pathlib.Path(args.source_root).is_dir():
        print(f"castscope report: --source-root {args.source_root}: not a directory", file=sys.stderr)
        return 2
    if not arguments.resolve_run(args, "report"):
        return 2
    try:
        report = load_report(args.db, args.run, rank=args.rank, show_progress=sys.stderr.isatty())
    except (ReportError, FileNotFoundError) as e:
        print(f"castscope report: {e}", file=sys.stderr)
        return 2
    if args.json:
        write_private_text(args.json, json.dumps(report, indent=2) + "\n")
    if args.sarif:
        try:
            sarif = to_sarif(report, args.source_root or os.getcwd(), tool_version=_castscope_version())
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"castscope report: --sarif: the finding catalog: {e}", file=sys.stderr)
            return 2
        write_private_text(args.sarif, json.dumps(sarif, indent=2) + "\n")
    print(format_precision_map(report) if args.precision_map else format_report(report))
    return 0


def _castscope_version() -> str | None:
    """The installed package's version (pyproject.toml), when it is installed."""
    from importlib import metadata

    try:
        return metadata.version("castscope")
    except metadata.PackageNotFoundError:
        return None


def diff_command(args) -> int:
    try:
        a = load_report(args.db_a or args.db, args.run_a)
        b = load_report(args.db_b or args.db, args.run_b)
    except (ReportError, FileNotFoundError) as e:
        print(f"castscope diff: {e}", file=sys.stderr)
        return 2
    eager_compiled = diff_eager_compiled(a, b)
    differences = diff_reports(a, b, casts_only=eager_compiled is not None)
    if args.json:
        out = {"run_a": args.run_a, "run_b": args.run_b, "differences": differences}
        if eager_compiled is not None:
            out["eager_vs_compiled"] = eager_compiled
        print(json.dumps(out, indent=2))
    else:
        print(format_diff(args.run_a, args.run_b, differences, eager_compiled))
    return 1 if differences or (eager_compiled and eager_compiled["sites"]) else 0
