"""A small model trained the recommended way under bf16 autocast."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"train_mlp: final loss {loss.item():.4f}", flush=True)
