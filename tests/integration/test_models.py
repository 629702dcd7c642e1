"""Real models train under bf16 autocast with bit-identical losses and weights
with and without castscope, and the events show the casts autocast made."""
import collections

import pytest
import torch
import torchvision

import castscope
from helpers import autocast_steps
from parity import bits_equal

STEPS = 3


def _resnet():
    return torchvision.models.resnet18(num_classes=10), torch.randn(4, 3, 64, 64), torch.randint(0, 10, (4,))


def _transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2), torch.nn.Flatten(), torch.nn.Linear(8 * 32, 10))
    return model, torch.randn(4, 8, 32), torch.randint(0, 10, (4,))


def _train(make):
    torch.manual_seed(0)
    model, x, y = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = autocast_steps(model, optimizer, x, y, STEPS)
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("make", [_resnet, _transformer], ids=["resnet18", "transformer_encoder"])
def test_training_is_bit_identical(tmp_path, make):
    native_losses, native_params = _train(make)
    with castscope.attached(events_path=tmp_path / "events.jsonl") as agent:
        losses, params = _train(make)
        casts = agent.casts()
        ops = agent.ops()
    assert [l.dtype for l in losses] == [torch.float32] * STEPS
    for step, (a, b) in enumerate(zip(native_losses, losses)):
        assert bits_equal(a, b), f"step {step}: native loss {a.item()!r} vs castscope {b.item()!r}"
    assert all(bits_equal(a, b) for a, b in zip(native_params, params)), "weights diverged"

    performed = collections.Counter((c["op"], c["arg_name"], c["src_dtype"], c["dst_dtype"])
                                    for c in casts if c["outcome"] == "CAST_OUTCOME_CAST")
    loss_casts = performed[("aten::cross_entropy_loss", "self", "DTYPE_BFLOAT16", "DTYPE_FLOAT32")]
    assert loss_casts == STEPS, performed
    if make is _resnet:
        assert performed[("aten::conv2d", "input", "DTYPE_FLOAT32", "DTYPE_BFLOAT16")] == STEPS  # the stem's input
        assert performed[("aten::conv2d", "weight", "DTYPE_FLOAT32", "DTYPE_BFLOAT16")] == 20 * STEPS
        assert performed[("aten::linear", "weight", "DTYPE_FLOAT32", "DTYPE_BFLOAT16")] == STEPS
    else:
        assert performed[("aten::linear", "weight", "DTYPE_FLOAT32", "DTYPE_BFLOAT16")] >= 4 * STEPS
        assert performed[("aten::linear", "input", "DTYPE_FLOAT32", "DTYPE_BFLOAT16")] >= STEPS
    assert all(o["outcome"] == "OP_OUTCOME_OK" for o in ops)
    assert {o["autocast_dtype"] for o in ops} == {"DTYPE_BFLOAT16"}
