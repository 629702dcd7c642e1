"""A model whose inner block disables autocast; run eagerly (argument
"eager") or with that block scripted ("script"), under bf16 autocast. In
TorchScript the disable does not hold: `castscope diff` of the two runs
points at the matmul line."""
import sys

import torch


def inner(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", enabled=False):
        return torch.mm(a, b)  # fp32 by intent


block = torch.jit.script(inner) if sys.argv[1] == "script" else inner
a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = torch.relu(torch.mm(a, b))
    out = block(out.float(), b)
print(sys.argv[1], out.dtype)
