"""Positive: traced under autocast, a block that disables autocast holds
while tracing, but the traced graph keeps no trace of it: run under
autocast, the graph casts there."""
import torch


def model(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", enabled=False):
        y = torch.mm(a, b)  # fp32 by intent
    return torch.relu(y)


a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
    traced = torch.jit.trace(model, (a, b), check_trace=False)
    print(model(a, b).dtype, traced(a, b).dtype)
