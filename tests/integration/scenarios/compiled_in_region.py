"""Positive, the compiled twins of stale_cache.py and backward_in_region.py:
what the AMP recipe leaves outside the autocast region done inside it, on a
model compiled with the backend given second (default "eager": Dynamo's
graph runs eager kernels). `stale-cache`: the whole loop in one region, the
optimizer step inside it, so the cached bf16 weights are served after the
weights changed. `backward-in-region`: backward() inside the region, the
optimizer step outside it. The findings must name the user's lines, not the
generated graph code."""
import sys

import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x).float().pow(2).mean()  # the stale line


torch.manual_seed(0)
model = Head()
compiled = torch.compile(model, backend=sys.argv[2] if len(sys.argv) > 2 else "eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if sys.argv[1] == "stale-cache":
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(4):
            loss = compiled(torch.randn(8, 16))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
else:
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = compiled(torch.randn(8, 16))
            loss.backward()  # the backward line
        optimizer.step()
        optimizer.zero_grad()
