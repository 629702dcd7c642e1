"""Positive, the compiled twin of cast_churn.py (backend="eager": Dynamo's
graph runs eager kernels): inside the compiled forward, each block's bf16
output is cast up with .float() and autocast casts it straight back down
for the next linear. The finding must name the user's line, not the
generated graph code."""
import torch


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, h):
        for block in self.blocks:
            h = block(h)  # the block line
            h = h.float()
        return h.pow(2).mean()


torch.manual_seed(0)
model = Blocks()
compiled = torch.compile(model, backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(x)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
