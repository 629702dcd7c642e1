"""The JSON configuration the agent takes (castscope_agent_start,
castscope_policy_check), and the shipped policy files it names by default."""
from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Sequence

from ._native import _PACKAGE_DIR, _REPO_ROOT, _torch_dir


def policies_dir() -> pathlib.Path:
    """$CASTSCOPE_POLICIES, else the policies installed with the wheel
    (castscope/policies), else the source tree's (an editable install)."""
    if "CASTSCOPE_POLICIES" in os.environ:
        return pathlib.Path(os.environ["CASTSCOPE_POLICIES"])
    installed = _PACKAGE_DIR / "policies"
    return installed if (installed / "cpu.json").is_file() else _REPO_ROOT / "policies"


# As the agent and the preload shim bound it (common/json/json_limits.h):
# Python's json recurses per level, so a deep text would end in a
# RecursionError that names nothing.
MAX_ENVIRONMENT_CONFIG_BYTES = 1 << 20
MAX_ENVIRONMENT_CONFIG_NESTING = 8
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def environment_config() -> dict:
    """The configuration `castscope run` passes in CASTSCOPE_CONFIG, bounded
    before it is parsed; ValueError names what is wrong with it."""
    text = os.environ["CASTSCOPE_CONFIG"]
    if len(text) > MAX_ENVIRONMENT_CONFIG_BYTES:
        raise ValueError(f"CASTSCOPE_CONFIG is larger than {MAX_ENVIRONMENT_CONFIG_BYTES >> 20} MiB")
    depth = 0
    for bracket in re.sub(r"[^\[\]{}]", "", _JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_ENVIRONMENT_CONFIG_NESTING:
            raise ValueError(f"CASTSCOPE_CONFIG is nested deeper than {MAX_ENVIRONMENT_CONFIG_NESTING} levels of "
                             f"arrays and objects")
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ValueError(f"CASTSCOPE_CONFIG is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError("CASTSCOPE_CONFIG is not a JSON object")
    return config


def default_policy_files(devices: Sequence[str] = ("cpu", "cuda", "xpu", "mps")) -> list[str]:
    """The native policy lists shipped for the reference torch, one per device."""
    return [str(policies_dir() / f"{device}.json") for device in devices if (policies_dir() / f"{device}.json").is_file()]


def _config(policy_files, overlays, events_path, record_events, **extra) -> dict:
    import torch

    files = list(policy_files) if policy_files is not None else default_policy_files()
    files += [str(o) for o in overlays]
    config = {"policy_files": files, "record_events": record_events, "torch_version": torch.__version__,
              "internal_path_prefix": _torch_dir()}
    if events_path is not None:
        config["events_path"] = str(events_path)
    config.update({k: v for k, v in extra.items() if v is not None})
    return config


def _numerics_config(numerics: bool | dict) -> dict:
    if isinstance(numerics, dict):
        return {"numerics": True, **{f"numerics_{key}": value for key, value in numerics.items()}}
    return {"numerics": bool(numerics)}


def _probe_config(probe: bool | dict) -> dict:
    if isinstance(probe, dict):
        return {"probe": True, **{f"probe_{key}": value for key, value in probe.items()}}
    return {"probe": bool(probe)}


# attach(gpu_timing={...})'s names of the configuration's GPU keys, which
# docs/schema/agent-config.schema.json declares (test_agent_config_schema.py
# checks that this covers exactly its GPU keys).
GPU_TIMING_KEYS = {"mode": "gpu_timing", "cupti_library": "cupti_library", "correlate": "gpu_correlate",
                   "buffer_bytes": "gpu_buffer_bytes", "buffer_budget_bytes": "gpu_buffer_budget_bytes",
                   "correlation_kind": "gpu_correlation_kind", "steps": "gpu_steps",
                   "every_steps": "gpu_every_steps", "max_ms": "gpu_max_ms", "every_ms": "gpu_every_ms",
                   # the old names (deprecated: the agent warns and reads them as the new ones)
                   "window_steps": "gpu_window_steps", "window_max_ms": "gpu_window_max_ms",
                   "cublaslt_logger": "cublaslt_logger", "cublaslt_library": "cublaslt_library"}


def _gpu_config(gpu_timing: str | dict | None) -> dict:
    """gpu_timing="auto"|"on"|"off", or a dict with "mode" and the other
    gpu keys without their prefix: {"mode": "on", "cupti_library": PATH,
    "correlate": "all_ops", "buffer_bytes": N, "buffer_budget_bytes": N,
    "correlation_kind": "CUSTOM2", "steps": 2, "every_steps": 100,
    "max_ms": 5000, "every_ms": 60000, "cublaslt_logger": False,
    "cublaslt_library": PATH} (docs/gpu.md; steps 0: every step;
    cublaslt_logger: GEMM precision from cuBLASLt's logger, opt-in)."""
    if gpu_timing is None:
        return {}
    if isinstance(gpu_timing, str):
        return {"gpu_timing": gpu_timing}
    unknown = set(gpu_timing) - set(GPU_TIMING_KEYS)
    if unknown:
        raise ValueError(f"castscope: unknown gpu_timing keys {sorted(unknown)}; known: {sorted(GPU_TIMING_KEYS)}")
    return {GPU_TIMING_KEYS[key]: value for key, value in gpu_timing.items()}
