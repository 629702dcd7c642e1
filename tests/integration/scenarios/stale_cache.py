"""Positive: the whole loop in one autocast region, optimizer.step() inside it:
the cached bf16 weights are served after the weights changed (stale hits)."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(4):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()  # the stale line
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
