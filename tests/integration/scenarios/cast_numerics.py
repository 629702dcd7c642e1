"""Numerics at the cast (docs/numerics.md), one case per argument:

  overflow   an activation above float16's 65504 enters a float16 matmul:
             cast-overflow at the matmul's line, argument `self`, 3 of 32
             values per cast (natively the output holds inf too)
  underflow  an epsilon added inside a float16 addmm becomes 0
             (cast-underflow)
  in-range   the same float16 model with values in range: nothing
  bfloat16   the overflowing values under bfloat16: nothing (its range is float32's)
"""
import sys

import torch

case = sys.argv[1]
dtype = torch.bfloat16 if case == "bfloat16" else torch.float16
torch.manual_seed(0)
w = torch.randn(8, 8, requires_grad=True)
opt = torch.optim.SGD([w], lr=1e-6)
for step in range(4):
    x = torch.randn(4, 8)
    if case in ("overflow", "bfloat16"):
        x[0, :3] = 1e5  # three values past float16's range
    eps = torch.full((4, 8), 1e-9 if case == "underflow" else 1e-3)
    with torch.autocast("cpu", dtype=dtype):
        h = torch.mm(x, w)  # the overflowing line
        y = torch.addmm(eps, h, w)  # the epsilon line
    y.float().nan_to_num().sum().backward()
    opt.step()
    opt.zero_grad()
