"""Positive: backward() inside the autocast region (the optimizer step
outside it, so no stale cache hits)."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()
        loss.backward()  # the backward line
    optimizer.step()
    optimizer.zero_grad()
