"""Positive (`autocast`): torch.jit.trace records code that calls a scripted
function while autocast is on; the scripted mm runs in bf16 while tracing,
yet the traced graph runs it in fp32. Negative twin (`plain`): the same code
traced and run with autocast off."""
import sys

import torch


@torch.jit.script
def scripted(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)  # the scripted line


def model(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return scripted(a, b) + 1


a, b = torch.randn(8, 8), torch.randn(8, 8)
autocast = sys.argv[1] == "autocast"
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False, enabled=autocast):
    traced = torch.jit.trace(model, (a, b), check_trace=False)
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False, enabled=autocast):
    print("eager", model(a, b).dtype, "traced", traced(a, b).dtype)
