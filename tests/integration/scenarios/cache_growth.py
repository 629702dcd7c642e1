"""Positive: one autocast region around the whole loop, and a new leaf that
requires grad every iteration: each one's cached bf16 copy stays alive."""
import torch

x = torch.randn(32, 64)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for step in range(6):
        w = torch.randn(64, 64, requires_grad=True)  # a new leaf each iteration
        y = torch.mm(x, w)
        torch.optim.SGD([w], lr=0.1).step()  # an iteration ends
