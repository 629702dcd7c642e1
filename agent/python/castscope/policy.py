"""policy_check(): policy files against this process's dispatcher."""
from __future__ import annotations

import json
from typing import Sequence

from ._native import _library, _read_json
from .config import _config
from .module_paths import missing_module_errors


def policy_check(policy_files: Sequence[str] | None = None, overlays: Sequence[str] = (),
                 check_modules: bool = True) -> dict:
    """Checks policy files against this process's dispatcher without
    attaching; with `check_modules`, also that the module of every module and
    function overlay can be imported here (looked up, not imported)."""
    config = json.dumps(_config(policy_files, overlays, None, False)).encode()
    report = _read_json(lambda buf, size: _library().castscope_policy_check(config, buf, size))
    if check_modules:
        missing = missing_module_errors(report.get("callable_overlays", []))
        report["errors"] += missing
        report["ok"] = report["ok"] and not missing
    return report
