"""Negative twin of trace_dropped_disable.py: the same model traced and run
under autocast, without a disabled block: the graph casts where eager code
casts."""
import torch


def model(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.mm(a, b)
    return torch.relu(y)


a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
    traced = torch.jit.trace(model, (a, b), check_trace=False)
    print(model(a, b).dtype, traced(a, b).dtype)
