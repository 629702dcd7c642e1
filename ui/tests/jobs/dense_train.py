"""Dense enough for the density view: a tiny Linear trained for 1 500 steps
in a tight loop inside ONE bf16 autocast region (as stale_train.py: the
optimizer changes the weights while autocast's cache holds their bf16
copies, so most steps are served stale casts), some 20 000 events in a few
tenths of a second. Halfway, one mm at a line of its own: a rare site in the
crowd."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(2, 4)
w = torch.randn(4, 4)
STEPS = 1500
with torch.autocast("cpu", dtype=torch.bfloat16):
    for step in range(STEPS):
        loss = model(x).float().pow(2).mean()  # castscope-ui: the dense line
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == STEPS // 2:
            torch.mm(x, w)  # castscope-ui: the rare line
print(f"dense_train: final loss {loss.item():.4f}", flush=True)
