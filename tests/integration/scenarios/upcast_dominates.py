"""explicit-upcast-dominates: under bf16 autocast, the attention scores of a
small model (bfloat16) are upcast whole every step for the loss, moving more
bytes than all of autocast's casts. With `twin`, the loss reduces first and
upcasts one value (silent)."""
import sys

import torch

twin = sys.argv[1:] == ["twin"]
torch.manual_seed(0)
layer = torch.nn.Linear(16, 16)
x = torch.randn(256, 16)
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = layer(x)
        scores = h @ h.T  # 256 x 256, bfloat16
    if twin:
        loss = scores.pow(2).mean().float()
    else:
        loss = scores.float().pow(2).mean()  # the upcast line
    loss.backward()
