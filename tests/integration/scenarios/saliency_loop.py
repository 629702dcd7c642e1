"""Input-gradient saliency without an optimizer: each pass makes a new input
leaf that requires grad and takes the gradient of the score with respect to
it. `one-region` (positive): one autocast region around the whole loop, the
gradient taken with autocast off inside it, as PyTorch recommends for
backward; every pass leaves the input's cached bf16 copy (and the graph
behind it) in the cache until the loop ends. `per-pass` (negative twin): the
region opens and closes every pass, so the cache is emptied each time."""
import sys

import torch

PASSES = 50  # step-free samples come every few passes: the growth shows in about 20

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
saliency = torch.zeros(2, 16)


def saliency_of(x):
    score = model(x).max()  # the saliency line
    with torch.autocast("cpu", enabled=False):
        (grad,) = torch.autograd.grad(score, x)
    return grad.abs()


if sys.argv[1] == "one-region":
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(PASSES):
            x = torch.randn(2, 16, requires_grad=True)  # a new leaf each pass
            saliency += saliency_of(x)
else:
    for _ in range(PASSES):
        x = torch.randn(2, 16, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            score = model(x).max()
        (grad,) = torch.autograd.grad(score, x)
        saliency += grad.abs()
