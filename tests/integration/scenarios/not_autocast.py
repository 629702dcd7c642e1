"""Positive: under autocast, ops that autocast does not cover run at full
precision: `out=` (`out`), in-place (`inplace`), a custom op (`custom`),
float64 inputs (`float64`). Negative twin (`functional`): the functional
op, which autocast casts."""
import sys

import torch

lib = torch.library.Library("castscope_demo", "DEF")
lib.define("scale(Tensor x, Tensor w) -> Tensor")
lib.impl("scale", lambda x, w: x @ w * 0.5, "CPU")

variant = sys.argv[1]
a, b = torch.randn(16, 16), torch.randn(16, 16)
c = torch.empty(16, 16)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if variant == "out":
            torch.mm(a, b, out=c)  # the full-precision line
        elif variant == "inplace":
            c = torch.zeros(16, 16).addmm_(a, b)  # the full-precision line
        elif variant == "custom":
            c = torch.ops.castscope_demo.scale(a, b)  # the full-precision line
        elif variant == "float64":
            c = torch.mm(a.double(), b.double())  # the full-precision line
        else:
            c = torch.mm(a, b)  # autocast casts this one
print(c.dtype)
