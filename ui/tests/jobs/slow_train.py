"""Trains a small MLP on CPU for about 15 s (or the seconds given as its
argument), sleeping between steps, so a page can watch its casts arrive live.
Autocast is entered per step (the recommended way)."""
import sys
import time

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
deadline = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 15.0)
step = 0
while time.monotonic() < deadline:
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)  # castscope-ui: live line
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    step += 1
    time.sleep(0.1)
print(f"slow_train: {step} steps, final loss {loss.item():.4f}", flush=True)
