"""cast-round-trip: a float32 activation converted to bfloat16 and straight
back at one line (the values come back rounded). With `twin`, the line
computes in bfloat16 between the two conversions (a choice: silent)."""
import sys

import torch

twin = sys.argv[1:] == ["twin"]
torch.manual_seed(0)
layer = torch.nn.Linear(16, 16)
x = torch.randn(8, 16)
for _ in range(3):
    h = layer(x)
    if twin:
        y = h.to(torch.bfloat16).softmax(-1).float()  # the twin line
    else:
        y = h.to(torch.bfloat16).float()  # the round trip line
    y.pow(2).mean().backward()
