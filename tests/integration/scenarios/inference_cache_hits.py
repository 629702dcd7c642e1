"""A no_grad inference loop inside one autocast region: the Linear's weight
and bias are converted once and then served by the cast cache; only the
inputs are converted every iteration. Known counts, for the report test."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 8)  # weight 8x8, bias 8: float32
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(5):
        model(torch.randn(4, 8))  # the inference line
