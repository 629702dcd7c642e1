"""`castscope` command line.

    castscope policy check [--policy FILE]... [--overlay FILE]... [--import MODULE]... [--json]

Exit codes: 0 the policy is usable, 1 it is refused (errors printed),
2 bad command line.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys


def _policy_check(args) -> int:
    import castscope

    for module in args.imports:
        try:
            importlib.import_module(module)  # registers that library's ops first
        except ImportError as e:
            print(f"castscope: --import {module}: {e}", file=sys.stderr)
            return 2
    report = castscope.policy_check(policy_files=args.policies or None, overlays=args.overlays)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    for error in report["errors"]:
        print(f"error: {error}")
    for finding in report["findings"]:
        print(f"{finding['severity']}: [{finding['device']}] {finding['kind']}: {finding['message']}")
    counts = ", ".join(f"{device}: {n} ops" for device, n in report.get("ops_per_device", {}).items())
    print(f"castscope policy check: {'OK' if report['ok'] else 'REFUSED'} ({counts}; "
          f"{len(report['findings'])} findings)")
    return 0 if report["ok"] else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="castscope", description="see what autocast did to your job")
    commands = parser.add_subparsers(dest="command", required=True)
    policy = commands.add_parser("policy", help="policy files").add_subparsers(dest="policy_command", required=True)
    check = policy.add_parser("check", help="validate policy files and compare them with this torch's dispatcher")
    check.add_argument("--policy", dest="policies", action="append", default=[],
                       help="base policy file (default: the shipped policies/*.json)")
    check.add_argument("--overlay", dest="overlays", action="append", default=[], help="user overlay, applied last")
    check.add_argument("--import", dest="imports", action="append", default=[],
                       help="import this module first, e.g. torchvision, so its ops exist")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(run=_policy_check)
    args = parser.parse_args(argv)
    return args.run(args)
