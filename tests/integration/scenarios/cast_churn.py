"""Positive (`churn`): inside the region, each block's bf16 output is cast
up with .float() and autocast casts it straight back down for the next
linear, every step. Negative twin (`direct`): the bf16 output goes on as
it is."""
import sys

import torch

torch.manual_seed(0)
blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))
optimizer = torch.optim.SGD(blocks.parameters(), lr=0.01)
x = torch.randn(16, 32)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = x
        for block in blocks:
            h = block(h)  # the block line
            if sys.argv[1] == "churn":
                h = h.float()
        loss = h.float().pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(loss.item())
