"""Parity on torch's own autocast test lists (torch/testing/_internal/autocast_test_lists.py).

Every entry runs under native autocast and under castscope with the same
arguments and seed; outputs must be bit-identical with the same dtype, and
errors must match. CPU entries always run; CUDA entries need a GPU.
"""
import os

import pytest
import torch
from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists, AutocastTestLists

import castscope
from parity import compare_outcomes, run_captured, steady_state

CPU_LISTS = ("torch_expect_builtin_promote", "methods_expect_builtin_promote", "torch_16", "torch_fp32",
             "nn_16", "nn_fp32", "torch_need_autocast_promote")


def _cpu_cases():
    lists = AutocastCPUTestLists(torch.device("cpu"))
    cases = []
    for list_name in CPU_LISTS:
        for entry in getattr(lists, list_name):
            op = entry[0]
            module = torch._C._nn if list_name.startswith("nn_") else (None if list_name.startswith("methods") else torch)
            # builtin_promote / need_autocast_promote entries carry bf16 args, then fp16 args.
            has_fp16_args = list_name in ("torch_expect_builtin_promote", "methods_expect_builtin_promote",
                                          "torch_need_autocast_promote")
            kwargs = entry[2] if len(entry) > 2 and isinstance(entry[2], dict) else {}
            for amp_dtype in (torch.bfloat16, torch.float16):
                args = entry[2] if (has_fp16_args and amp_dtype == torch.float16) else entry[1]
                cases.append(pytest.param(module, op, args, kwargs, amp_dtype, "builtin_promote" not in list_name, id=f"{list_name}-{op}-{str(amp_dtype)[6:]}"))
    return cases


def _call(module, op, args, kwargs):
    if module is not None and hasattr(module, op):
        return getattr(module, op)(*args, **kwargs)
    return getattr(args[0], op)(*args[1:], **kwargs)


@pytest.mark.parametrize("module,op,args,kwargs,amp_dtype,autocast_handles_it", _cpu_cases())
@pytest.mark.parametrize("windows", [True, False], ids=["windows", "steady"])
def test_cpu_list_entry_matches_native(tmp_path, windows, module, op, args, kwargs, amp_dtype, autocast_handles_it):
    def run():
        with torch.autocast("cpu", dtype=amp_dtype):
            return _call(module, op, args, kwargs)

    native = run_captured(run)
    with castscope.attached(events_path=tmp_path / "events.jsonl", **steady_state(windows)) as agent:
        with_agent = run_captured(run)
        ops_seen = {e["op"] for e in agent.ops()}
    mismatch = compare_outcomes(native, with_agent)
    assert mismatch is None, f"{op} under {amp_dtype}: {mismatch}"
    if native[0] == "ok" and autocast_handles_it:
        # Ops autocast handles must show up as castscope op events
        # (builtin-promote ops are not autocast ops: they must not).
        assert any(name.split("::")[1].split(".")[0] == op for name in ops_seen), (op, ops_seen)


def _cuda_cases():
    if not torch.cuda.is_available():
        return [pytest.param(None, None, None, None, id="cuda",
                             marks=pytest.mark.skip(reason="needs a CUDA GPU; this machine has none"))]
    lists = AutocastTestLists(torch.device("cuda"))
    cases = []
    for list_name in ("torch_fp16", "torch_fp32", "nn_fp16", "nn_fp32", "linalg_fp16", "torch_need_autocast_promote",
                      "banned"):
        for entry in getattr(lists, list_name):
            module = torch._C._nn if list_name.startswith("nn_") else (torch._C._linalg if list_name.startswith("linalg") else torch)
            cases.append(pytest.param(module, entry[0], entry[1], entry[2] if len(entry) > 2 else {}, id=f"{list_name}-{entry[0]}"))
    return cases


@pytest.mark.parametrize("module,op,args,kwargs", _cuda_cases())
def test_cuda_list_entry_matches_native(tmp_path, module, op, args, kwargs):
    def run():
        with torch.autocast("cuda"):
            return _call(module, op, args, kwargs)

    native = run_captured(run)
    # CASTSCOPE_TEST_CUBLASLT=1 (on a GPU machine): the same lists with the cuBLASLt logger on.
    gpu = {"mode": "off", "cublaslt_logger": True} if os.environ.get("CASTSCOPE_TEST_CUBLASLT") == "1" else None
    with castscope.attached(events_path=tmp_path / "events.jsonl", gpu_timing=gpu) as agent:
        with_agent = run_captured(run)
        if gpu:
            assert agent.status()["cublaslt_logger"]["state"] == "on"
    mismatch = compare_outcomes(native, with_agent)
    assert mismatch is None, f"{op}: {mismatch}"
