"""Positive (`mixed`): one function run eagerly and scripted under the same
bf16 autocast. JIT autocast casts the operands of ops outside the autocast
lists (add, mul) to the widest dtype, eager autocast leaves them alone: the
add and mul lines return bfloat16 eagerly and float32 scripted ("limited
support for promote" in PyTorch's JIT autocast notes). No cast event is made
at those lines eagerly. Negative twin (`explicit`): the same function casts
to float32 itself, so both modes compute the same way."""
import sys

import torch


def mixed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = torch.mm(a, b)
    g = h + h  # the promoting line
    return g * h  # the second promoting line


def explicit(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = torch.mm(a, b).float()
    g = h + h
    return g * h


function = {"mixed": mixed, "explicit": explicit}[sys.argv[1]]
scripted = torch.jit.script(function)
a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(3):
        eager_out = function(a, b)
        script_out = scripted(a, b)
print("eager", eager_out.dtype, "script", script_out.dtype)
