"""A tiny Linear model trained on CPU with the whole loop inside ONE bf16
autocast region: optimizer.step() changes the weights while autocast's cast
cache still holds their bf16 copies, so later iterations are served stale
casts and castscope raises a stale-cache-hit finding."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for step in range(20):
        x = torch.randn(16, 32)
        loss = model(x).float().pow(2).mean()  # castscope-ui: the stale line
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
print(f"stale_train: final loss {loss.item():.4f}", flush=True)
