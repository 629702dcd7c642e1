"""Negative twin of cache_growth.py: the region opens and closes every
iteration, so the cache is emptied each time."""
import torch

x = torch.randn(32, 64)
for step in range(6):
    w = torch.randn(64, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(x, w)
    torch.optim.SGD([w], lr=0.1).step()
