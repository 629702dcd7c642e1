"""Builds a model, waits (a slow model construction: loading weights), then
trains for a fraction of a second on CPU, so that the run's casts fill only
its last part. Construction runs two autocast ops on bfloat16 tensors (their
decisions convert nothing); each training step concatenates six tensors of
two dtypes under autocast (cat promotes: six decisions in one op, stacked on
the timeline) beside the model's linears (input, weight, bias)."""
import time

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
with torch.autocast("cpu", dtype=torch.bfloat16):
    a = torch.randn(8, 8, dtype=torch.bfloat16)
    torch.mm(a, a)  # castscope-ui: construction op
    torch.mm(a, a)
time.sleep(2.0)  # the slow part of construction
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(12):
    x = torch.randn(16, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)  # castscope-ui: model line
        parts = [out, x[:, :8]] + [out.float()] * 4
        both = torch.cat(parts, dim=0)  # castscope-ui: cat line
        loss = both.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"late_train: final loss {loss.item():.4f}", flush=True)
