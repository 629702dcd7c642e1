"""Negative (clean): the AMP recipe on a compiled model. A user-defined
module (so the compiled graphs' stack traces name user lines) trained 3
steps, compiled with the backend given (inductor, aot_eager or eager; none:
not compiled);
forward and loss under bf16 autocast, backward and step outside. With
--save FILE, the losses and grads are saved (the parity test)."""
import argparse

import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(16, 16)
        self.outer = torch.nn.Linear(16, 16)

    def forward(self, x):
        hidden = torch.relu(self.inner(x))  # the inner line
        return self.outer(hidden)  # the outer line


parser = argparse.ArgumentParser()
parser.add_argument("backend")
parser.add_argument("--save")
parser.add_argument("--dynamic", action="store_true", help="compile with dynamic shapes (symbolic sizes)")
args = parser.parse_args()

torch.manual_seed(0)
model = Block()
# "none": the same loop eagerly (castscope diff of an eager and a compiled run).
compiled = model if args.backend == "none" else torch.compile(model, backend=args.backend,
                                                             dynamic=True if args.dynamic else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
saved = []
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(torch.randn(8, 16)).float().pow(2).mean()  # the calling line
    loss.backward()
    saved += [loss.detach().clone()] + [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    optimizer.zero_grad()
if args.save:
    torch.save(saved, args.save)
