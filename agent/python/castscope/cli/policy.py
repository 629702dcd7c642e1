"""`castscope policy check`."""
from __future__ import annotations

import importlib
import json
import sys


def add_parsers(commands) -> None:
    policy = commands.add_parser("policy", help="policy files").add_subparsers(dest="policy_command", required=True)
    check = policy.add_parser("check", help="validate policy files and compare them with this torch's dispatcher")
    check.add_argument("--policy", dest="policies", action="append", default=[],
                       help="base policy file (default: the shipped policies/*.json)")
    check.add_argument("--overlay", dest="overlays", action="append", default=[], help="user overlay, applied last")
    check.add_argument("--import", dest="imports", action="append", default=[],
                       help="import this module first, e.g. torchvision, so its ops exist")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=check_command)


def check_command(args) -> int:
    from ..policy import policy_check

    for module in args.imports:
        try:
            importlib.import_module(module)  # registers that library's ops first
        except ImportError as e:
            print(f"castscope: --import {module}: {e}", file=sys.stderr)
            return 2
    report = policy_check(policy_files=args.policies or None, overlays=args.overlays)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    for error in report["errors"]:
        print(f"error: {error}")
    for finding in report["findings"]:
        print(f"{finding['severity']}: [{finding['device']}] {finding['kind']}: {finding['message']}")
    counts = ", ".join([f"{device}: {n} ops" for device, n in report.get("ops_per_device", {}).items()] +
                       [f"{len(report['callable_overlays'])} module and function overlays"] * bool(
                           report.get("callable_overlays")))
    print(f"castscope policy check: {'OK' if report['ok'] else 'REFUSED'} ({counts}; "
          f"{len(report['findings'])} findings)")
    return 0 if report["ok"] else 1
