"""Positive (`escape`): the model's bf16 output leaves the autocast region
and meets an fp32 target in the loss (computed in fp32 after a silent
promotion). Negative twin (`cast-back`): the output is cast back to fp32
when it leaves the region, as PyTorch's autocast docs advise."""
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, target = torch.randn(8, 16), torch.randn(8, 4)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    if sys.argv[1] == "escape":
        loss = F.mse_loss(out, target)  # the escaping line
    else:
        loss = F.mse_loss(out.float(), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(out.dtype, loss.item())
