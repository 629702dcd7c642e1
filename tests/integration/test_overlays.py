"""User overlays: custom and third-party ops cast as configured."""
import json

import pytest
import torch
import torchvision  # noqa: F401  (registers torchvision:: ops)

import castscope


def _overlay(tmp_path, ops, device="cpu"):
    path = tmp_path / "overlay.json"
    path.write_text(json.dumps({"castscope_policy": 1, "device": device, "ops": ops}, indent=2))
    return str(path)


@pytest.fixture(scope="module")
def fused_op():
    lib = torch.library.Library("castscope_test", "DEF")
    lib.define("fused_op(Tensor x, Tensor w) -> Tensor")
    lib.impl("fused_op", lambda x, w: x * w + 1, "CPU")  # no autocast op inside
    yield torch.ops.castscope_test.fused_op
    lib._destroy()


@pytest.mark.parametrize("dtype_override,expected", [(None, torch.bfloat16), ("float16", torch.float16)])
def test_custom_op_runs_in_lower_precision(tmp_path, fused_op, dtype_override, expected):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused_op(x, w).dtype == torch.float32  # natively: not an autocast op
    entry = {"policy": "lower_precision_fp"} | ({"dtype": dtype_override} if dtype_override else {})
    overlay = _overlay(tmp_path, {"castscope_test::fused_op": entry})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fused_op(x, w)
        casts = [c for c in agent.casts() if c["op"] == "castscope_test::fused_op"]
    assert out.dtype == expected
    assert torch.equal(out, x.to(expected) * w.to(expected) + 1)
    want = "DTYPE_BFLOAT16" if expected == torch.bfloat16 else "DTYPE_FLOAT16"
    # Made in native autocast's order, as every dispatcher op's
    # (docs/architecture.md: on the wheel, the last argument first); compared
    # by argument.
    assert sorted((c["arg_name"], c["dst_dtype"], c["outcome"]) for c in casts) == [
        ("w", want, "CAST_OUTCOME_CAST"), ("x", want, "CAST_OUTCOME_CAST")]


def test_force_torchvision_roi_pool_to_fp32(tmp_path):
    x = torch.randn(1, 2, 8, 8, dtype=torch.bfloat16)
    boxes = torch.tensor([[0, 0.0, 0.0, 4.0, 4.0]])
    # Natively a bf16 input with fp32 boxes fails inside torchvision's kernel:
    # the case an overlay is for.
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="same type as rois"):
        torchvision.ops.roi_pool(x, boxes, output_size=2)
    overlay = _overlay(tmp_path, {"torchvision::roi_pool": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            forced = torchvision.ops.roi_pool(x, boxes, output_size=2)
        casts = [c for c in agent.casts() if c["op"] == "torchvision::roi_pool"]
    assert forced.dtype == torch.float32
    assert torch.equal(forced, torchvision.ops.roi_pool(x.float(), boxes, output_size=2))
    input_cast = next(c for c in casts if c["arg_name"] == "input")
    assert input_cast["dst_dtype"] == "DTYPE_FLOAT32" and input_cast["outcome"] == "CAST_OUTCOME_CAST"


def test_overlay_overrides_a_native_entry(tmp_path):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    overlay = _overlay(tmp_path, {"aten::mm": "fp32"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = torch.mm(a.bfloat16(), b)
    assert out.dtype == torch.float32


def test_promote_ignores_optional_tensors_when_choosing_the_type(tmp_path):
    """Native promote: a `Tensor?` argument does not vote for the type, but is cast to it
    (autocast_mode.h: prioritize has no std::optional<Tensor> overload, cached_cast has)."""
    x1, x2 = torch.randn(2, 3, dtype=torch.bfloat16), torch.randn(2, 4, dtype=torch.bfloat16)
    weight, bias = torch.randn(5, 3, 4, dtype=torch.bfloat16), torch.randn(5)  # bias in fp32
    overlay = _overlay(tmp_path, {"aten::bilinear": "promote"})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = torch.nn.functional.bilinear(x1, x2, weight, bias)
        casts = {c["arg_name"]: c for c in agent.casts() if c["op"] == "aten::bilinear"}
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, torch.nn.functional.bilinear(x1, x2, weight, bias.bfloat16()))
    assert casts["bias"]["outcome"] == "CAST_OUTCOME_CAST" and casts["bias"]["dst_dtype"] == "DTYPE_BFLOAT16"


def test_dtype_argument_policies_set_float32_as_native_cuda_autocast_does(tmp_path):
    """fp32_set_opt_dtype / fp32_append_dtype are CUDA policies (CPU autocast has
    none): an overlay puts them on CPU ops here, so the float32 dtype they pass
    is checked without a GPU. Found on a GPU: the dtype was never set."""
    x = torch.randn(8, 8).to(torch.bfloat16)
    overlay = _overlay(tmp_path, {
        "aten::softmax.int": "fp32_set_opt_dtype",
        "aten::sum": "fp32_set_opt_dtype",
        "aten::norm.Scalar": {"policy": "fp32_append_dtype", "redispatch": "aten::norm.ScalarOpt_dtype"}})
    with castscope.attached(overlays=[overlay], events_path=tmp_path / "events.jsonl"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            softmax, total, norm = torch.softmax(x, 0), torch.sum(x), torch.ops.aten.norm.Scalar(x, 2)
            kept = torch.softmax(x, 0, dtype=torch.float64)  # an explicit dtype is the caller's
    assert softmax.dtype == total.dtype == norm.dtype == torch.float32
    assert torch.equal(softmax, torch.softmax(x, 0, dtype=torch.float32))
    assert torch.equal(total, torch.sum(x, dtype=torch.float32))
    assert torch.equal(norm, torch.ops.aten.norm.ScalarOpt_dtype(x, 2, dtype=torch.float32))
    assert kept.dtype == torch.float64
