"""Trains a small model under bfloat16 autocast for SECONDS seconds (default
6), casting steadily: a job still running while a test kills something."""
import os
import time

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
end = time.monotonic() + float(os.environ.get("SECONDS", "6"))
while time.monotonic() < end:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()  # the steady line
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.001)
