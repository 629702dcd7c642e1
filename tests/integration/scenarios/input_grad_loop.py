"""An input-gradient loop with no optimizer (fast-gradient-sign adversarial
examples): the model's weights are leaves that require grad, and each step
makes a new input leaf and takes the loss's gradient with respect to it.
`one-region` (positive): one autocast region around the whole loop and the
backward inside it; every step adds the new input's cached bf16 copy (and
the graph behind it) to the cache until the loop ends. `per-step` (negative
twin): the region opens around each step's forward pass only, so its exit
empties the cache every step. The step count is the second argument."""
import sys

import torch

STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 50

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
target = torch.randint(0, 4, (8,))
adversarial = []


def input_gradient(x):
    loss = torch.nn.functional.cross_entropy(model(x).float(), target)  # the feeding line
    loss.backward()
    return x.grad


if sys.argv[1] == "one-region":
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(STEPS):
            x = torch.randn(8, 16, requires_grad=True)  # a new leaf each step
            adversarial.append((x + 0.01 * input_gradient(x).sign()).detach())
else:
    for _ in range(STEPS):
        x = torch.randn(8, 16, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), target)
        loss.backward()
        adversarial.append((x + 0.01 * x.grad.sign()).detach())
