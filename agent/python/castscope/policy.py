"""policy_check(): policy files against this process's dispatcher."""
from __future__ import annotations

import json
from typing import Sequence

from ._native import _library, _read_json
from .config import _config


def policy_check(policy_files: Sequence[str] | None = None, overlays: Sequence[str] = ()) -> dict:
    """Checks policy files against this process's dispatcher without attaching."""
    config = json.dumps(_config(policy_files, overlays, None, False)).encode()
    return _read_json(lambda buf, size: _library().castscope_policy_check(config, buf, size))
