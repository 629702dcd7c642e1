"""fp8-saturation: large activations (many beyond ±448) converted to
float8_e4m3fn with no scale, as hand-rolled float8 code with a static scale
of 1 does: each of those is clipped to ±448. With `twin`, the tensor is
scaled by 448 / amax first (dynamic scaling, silent)."""
import sys

import torch

twin = sys.argv[1:] == ["twin"]
torch.manual_seed(0)
layer = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(layer.parameters(), lr=1e-3)
x = torch.randn(64, 64)
for _ in range(3):
    h = layer(x) * 400
    if twin:
        scale = 448 / h.detach().abs().amax()
        h8 = (h.detach() * scale).to(torch.float8_e4m3fn)
    else:
        h8 = h.detach().to(torch.float8_e4m3fn)  # the float8 line
    loss = h.pow(2).mean() + h8.float().mean() * 0
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
