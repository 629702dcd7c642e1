"""A scripted function whose casts the JIT autocast pass inserts, run under
eager bf16 CPU autocast: `a` and `b` are cast down for the matmul, `h` back
up for the add (JIT autocast widens add and mul operands; the one cast of
`h` also feeds the mul) and `g` for the mul, so the scripted function returns
float32 where the same code run eagerly returns bfloat16.

Argument "no-grad" runs it under torch.no_grad(); "grad" with inputs that
require grad (the graph executor wraps the ops in a DifferentiableGraph) and
a backward outside the region. Either way the same function also runs
eagerly once, whose casts must stay where they always were."""
import sys

import torch


def double_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = torch.mm(a, b)  # the matmul line
    g = h + h  # the add line
    return g * h  # the mul line


scripted = torch.jit.script(double_product)
grad = sys.argv[1] == "grad"
a = torch.randn(2, 3, requires_grad=grad)
b = torch.randn(3, 4, requires_grad=grad)
with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(grad):
    eager = double_product(a, b)
    for _ in range(3):  # the first call profiles; the executor optimizes for the next
        out = scripted(a, b)  # the caller line
if grad:
    out.sum().backward()
print(sys.argv[1], "eager", eager.dtype, "scripted", out.dtype)
