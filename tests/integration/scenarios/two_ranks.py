"""Run with torchrun --nproc_per_node=2: both ranks keep the whole loop in
one autocast region (stale cache hits on both); rank 1 alone also calls
backward() inside the region at another line."""
import os

import torch

rank = int(os.environ["RANK"])
torch.manual_seed(rank)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(4):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()  # the stale line
        if rank == 1:
            loss.backward()  # rank 1's backward line
        else:
            loss.backward()  # rank 0's backward line
        optimizer.step()
        optimizer.zero_grad()
