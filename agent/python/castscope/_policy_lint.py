"""Policy files read and checked without torch, by
libcastscope_policy_lint.so (agent/include/castscope/policy_lint.h).

`castscope run` uses it before the job starts, and each Python process of
the job at start-up: neither imports torch for it (importing torch takes
seconds; loading this library takes milliseconds). The checks that need
torch's dispatcher happen when the agent attaches.
"""
from __future__ import annotations

import ctypes
import json
from typing import Sequence

from ._native import _agent_library_path, _read_json

_lib = None


def _library():
    global _lib
    if _lib is None:
        path = _agent_library_path().parent / "libcastscope_policy_lint.so"
        if not path.is_file():
            raise FileNotFoundError(f"castscope: {path} not found; build it with scripts/setup.sh")
        lib = ctypes.CDLL(str(path))
        lib.castscope_policy_lint.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_policy_lint.restype = ctypes.c_size_t
        lib.castscope_policy_lint_torch_version.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def lint_policy_files(files: Sequence[str]) -> dict:
    """{"ok", "errors", "ops_per_device", "callable_overlays"} of the policy
    files (base files, then overlays), as far as they can be checked without
    torch: syntax, entries, policies, overlays' targets."""
    request = json.dumps({"policy_files": [str(f) for f in files]}).encode()
    return _read_json(lambda buf, size: _library().castscope_policy_lint(request, buf, size))


def built_for_torch() -> str:
    """The torch version the agent was built against ("2.14.1+cu130")."""
    return _library().castscope_policy_lint_torch_version().decode()
