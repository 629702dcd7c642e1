"""A GradScaler loop on the CPU where one layer overflows now and then.

  spikes  every 7th batch is large: fc1's float16 output passes 65504 (inf),
          the loss and gradients follow, GradScaler skips that step and
          backs off (scaler-skips, nonfinite-output at fc1's line)
  calm    the same loop without the large batches: nothing
Prints "skipped N of M" as GradScaler itself reports it (its scale backing off).
"""
import sys

import torch

case = sys.argv[1]
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 16)
        self.fc2 = torch.nn.Linear(16, 1)
        with torch.no_grad():
            self.fc1.weight.fill_(0.5)

    def forward(self, x):
        h = self.fc1(x)  # the overflowing layer
        return self.fc2(torch.relu(h))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
steps, skipped = 40, 0
for step in range(steps):
    x = torch.rand(4, 16)
    if case == "spikes" and step % 7 == 6:
        x = torch.full((4, 16), 1e4)  # 0.5 * 16 * 1e4 = 8e4 > 65504
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().mean()
    before = scaler.get_scale()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()  # the update line
    skipped += scaler.get_scale() < before
    opt.zero_grad()
print(f"skipped {skipped} of {steps}")
