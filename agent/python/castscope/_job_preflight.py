"""What `castscope run` checks in each Python process of its job at start-up,
before the job's own code runs, without importing torch: that the torch it
will import is the one the agent was built against, that the policy files
read, and that the overlays' modules can be found on the job's own path.

A failed check stops the process with exit status 2 and leaves
stopped-<pid>.txt in CASTSCOPE_STATUS_DIR, which `castscope run` prints.
The checks that need torch's dispatcher run at attach, right after
`import torch` (attachment.py); a refusal there stops the process the same way.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys

from .module_paths import missing_module_errors

_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def job_path0(argv: list[str]) -> str:
    """sys.path[0] of this interpreter once it runs the job (site runs before
    Python sets it): the script's folder, or the current directory for -c,
    -m and an interactive interpreter."""
    if not argv or argv[0] in ("", "-c", "-m", "-"):
        return os.getcwd()
    return os.path.dirname(os.path.abspath(argv[0]))


def torch_version_without_import(path0: str) -> str | None:
    """The version of the torch this process would import, read from the
    package's version.py (or __init__.py) rather than by importing it;
    None when there is no torch or its version cannot be read that way."""
    sys.path.insert(0, path0)
    try:
        spec = importlib.util.find_spec("torch")  # a top-level name: imports nothing
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path.remove(path0)
    if spec is None or not spec.origin:
        return None
    folder = os.path.dirname(spec.origin)
    for name in ("version.py", "__init__.py"):
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as source:
                found = _VERSION_ASSIGNMENT.search(source.read())
        except OSError:
            continue
        if found:
            return found.group(1)
    return None


def version_mismatch(built_for: str, found: str | None) -> str | None:
    if found is None or found.split("+")[0] == built_for.split("+")[0]:
        return None
    return (f"the agent was built against torch {built_for}, but {sys.executable} imports torch {found}; rebuild "
            f"castscope against that torch (scripts/setup.sh)")


def preflight_errors(config: dict, is_the_job: bool) -> list[str]:
    """Why this process must not start; empty when it may. `is_the_job`: this
    is the Python command `castscope run` started (not a launcher's child,
    whose modules a launcher may set up differently: there a missing module
    is only a warning)."""
    from ._policy_lint import built_for_torch, lint_policy_files

    path0 = job_path0(sys.argv)
    mismatch = version_mismatch(built_for_torch(), torch_version_without_import(path0))
    if mismatch and is_the_job:
        return [mismatch]
    report = lint_policy_files(config.get("policy_files", []))
    if not report["ok"]:
        return report["errors"]
    sys.path.insert(0, path0)
    try:
        missing = missing_module_errors(report.get("callable_overlays", []))
    finally:
        sys.path.remove(path0)
    if missing and not is_the_job:
        for error in missing:
            print(f"[castscope] warning in pid {os.getpid()}: {error}", file=sys.stderr)
        return []
    return missing


def stop_the_job(errors: list[str]) -> None:
    """Ends this process with exit status 2 before (more of) the job runs,
    saying why in CASTSCOPE_STATUS_DIR/stopped-<pid>.txt for `castscope run`
    to print, or on stderr without one."""
    text = "\n".join(errors) + "\n"
    status_dir = os.environ.get("CASTSCOPE_STATUS_DIR")
    written = False
    if status_dir:
        from .private_files import write_private_text

        try:
            write_private_text(os.path.join(status_dir, f"stopped-{os.getpid()}.txt"), text)
            written = True
        except OSError:
            pass
    if not written:
        print(f"[castscope] refused in pid {os.getpid()}, the job was not started:\n  " + text.replace("\n", "\n  "),
              file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(2)  # SystemExit from site start-up is a fatal error with a traceback
