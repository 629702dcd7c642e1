"""Negative twin of stale_cache.py, backward_under_autocast.py and
cache_growth.py: autocast around forward and loss only, backward and step
outside it, as the AMP recipe says."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
