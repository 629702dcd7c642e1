"""Generated parity sweep over every op in the CPU policy.

For each policy op, the OpInfos of torch.testing._internal whose aten name
matches provide valid sample inputs (float32 and, where supported, bfloat16
and float16). Each sample runs under native autocast and under castscope, in
bf16 and fp16 regions, with the same seed: outputs must be bit-identical
with the same dtype, errors must match.
"""
import json
import pathlib

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import castscope
from parity import compare_outcomes, run_captured, steady_state

POLICY = json.loads((pathlib.Path(castscope.policies_dir()) / "cpu.json").read_text())["ops"]
POLICY_BASE_NAMES = {op.split("::")[1].split(".")[0] for op, entry in POLICY.items()
                     if not (isinstance(entry, dict) and entry["policy"] == "keep_native")}
SAMPLES_PER_DTYPE = 3
# Policy ops the coverage test reached; read by test_parity_policy_ops.py.
SWEEP_REACHED: set = set()


def _aten_base(opinfo):
    return opinfo.aten_name.split(".")[0]


SWEEP = [o for o in op_db if _aten_base(o) in POLICY_BASE_NAMES or o.name.split(".")[-1] in POLICY_BASE_NAMES]


def _samples(opinfo):
    supported = opinfo.supported_dtypes("cpu")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        if dtype not in supported:
            continue
        try:
            samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=False))[:SAMPLES_PER_DTYPE]
        except Exception:  # noqa: BLE001 - some generators need what the CPU lacks
            continue
        yield from samples


@pytest.mark.parametrize("opinfo", SWEEP, ids=[f"{o.name}{'.' + o.variant_test_name if o.variant_test_name else ''}" for o in SWEEP])
@pytest.mark.parametrize("windows", [True, False], ids=["windows", "steady"])
def test_sweep_matches_native(tmp_path, windows, opinfo):
    samples = list(_samples(opinfo))
    if not samples:
        pytest.skip(f"{opinfo.name}: no CPU sample inputs in float32/bfloat16/float16")
    cases = []
    for i, sample in enumerate(samples):
        for amp_dtype in (torch.bfloat16, torch.float16):
            def run(sample=sample, amp_dtype=amp_dtype):
                with torch.autocast("cpu", dtype=amp_dtype):
                    return opinfo.op(sample.input, *sample.args, **sample.kwargs)
            cases.append((f"sample {i} ({sample.input.dtype if isinstance(sample.input, torch.Tensor) else type(sample.input).__name__}) in {amp_dtype}", run))

    native = [run_captured(run, seed=i) for i, (_, run) in enumerate(cases)]
    with castscope.attached(events_path=tmp_path / "events.jsonl", **steady_state(windows)) as agent:
        with_agent = [run_captured(run, seed=i) for i, (_, run) in enumerate(cases)]
        status = agent.status()
    mismatches = [f"{name}: {m}" for (name, _), n, a in zip(cases, native, with_agent) if (m := compare_outcomes(n, a))]
    assert not mismatches, f"{opinfo.name}:\n" + "\n".join(mismatches)
    assert status["internal_errors"] == 0


def test_sweep_covers_the_policy(tmp_path):
    """The sweep must reach most policy ops; the rest are named so gaps stay visible."""
    covered = set()
    with castscope.attached(events_path=tmp_path / "events.jsonl") as agent:
        for opinfo in SWEEP:
            for sample in list(_samples(opinfo))[:1]:
                run_captured(lambda: _run_in_bf16(opinfo, sample))
        covered = {e["op"] for e in agent.ops()}
    SWEEP_REACHED.update(covered)
    wanted = {op for op, entry in POLICY.items() if not (isinstance(entry, dict) and entry["policy"] == "keep_native")}
    missing = sorted(wanted - covered)
    print(f"sweep reached {len(wanted & covered)}/{len(wanted)} CPU policy ops; not reached: {missing}")
    assert len(wanted & covered) >= 0.6 * len(wanted), missing


def _run_in_bf16(opinfo, sample):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return opinfo.op(sample.input, *sample.args, **sample.kwargs)
