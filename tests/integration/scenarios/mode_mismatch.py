"""Positive (`inner-region`): one function run eagerly and scripted under the
same bf16 autocast. Its inner fp16 region is honoured eagerly but inert in
TorchScript (without JIT autocast), so the mm line casts to fp16 in eager
mode and to bf16 when scripted. Negative twin (`plain`): the same function
without the inner autocast context: both modes cast the same way."""
import sys

import torch


def project(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.float16):
        return torch.mm(a, b)  # the mismatching line


def plain(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


function = {"inner-region": project, "plain": plain}[sys.argv[1]]
scripted = torch.jit.script(function)
a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    eager_out = function(a, b)
    script_out = scripted(a, b)
print(eager_out.dtype, script_out.dtype)
