"""Positive, the compiled twin of stale_cache.py (backend="eager": Dynamo's
graph runs eager kernels): the whole loop in one autocast region, the
optimizer step inside it, so the cached bf16 weights are served after the
weights changed. The finding must name the user's line, not the generated
graph code."""
import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x).float().pow(2).mean()  # the stale line


torch.manual_seed(0)
model = Head()
compiled = torch.compile(model, backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(4):
        loss = compiled(torch.randn(8, 16))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
