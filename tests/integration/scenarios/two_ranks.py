"""Run with torchrun --nproc_per_node=2: both ranks keep forward and step in
one autocast region (stale cache hits on both); rank 1 alone also calls
backward() inside the region, rank 0 outside it."""
import contextlib
import os

import torch

rank = int(os.environ["RANK"])
torch.manual_seed(rank)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(4):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()  # the stale line
        outside = torch.autocast("cpu", enabled=False) if rank == 0 else contextlib.nullcontext()
        with outside:
            loss.backward()  # the backward line
        optimizer.step()
        optimizer.zero_grad()
