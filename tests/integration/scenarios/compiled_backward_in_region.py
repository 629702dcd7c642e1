"""Positive, the compiled twin of backward_in_region.py: backward() inside
the autocast region on a model compiled with the backend given (default
"eager"), the optimizer step outside it. The finding names the user's
backward line."""
import sys

import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x).float().pow(2).mean()


torch.manual_seed(0)
model = Head()
compiled = torch.compile(model, backend=sys.argv[1] if len(sys.argv) > 1 else "eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(torch.randn(8, 16))
        loss.backward()  # the backward line
    optimizer.step()
    optimizer.zero_grad()
