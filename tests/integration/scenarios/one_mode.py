"""Negative twin of mode_mismatch.py: the same function, eager and scripted,
without an inner autocast context: both modes cast the same way."""
import torch


def project(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


scripted = torch.jit.script(project)
a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    eager_out = project(a, b)
    script_out = scripted(a, b)
print(eager_out.dtype, script_out.dtype)
