"""Run with torchrun --nproc_per_node=2 (fleet tests, docs/fleet.md): both
ranks train the same two layers under bfloat16 autocast, but rank 1 runs the
head under float16: rank-divergence where the head runs, ranks [1] vs [0].
With DIVERGE=0 both ranks take the same path (the clean twin)."""
import os

import torch

rank = int(os.environ["RANK"])
diverge = os.environ.get("DIVERGE", "1") == "1"
torch.manual_seed(0)
body, head = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.1)
head_dtype = torch.float16 if diverge and rank == 1 else torch.bfloat16
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = body(torch.randn(8, 16)).relu()  # the body line
        with torch.autocast("cpu", dtype=head_dtype):
            out = head(h)  # the head line
    out.float().pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
