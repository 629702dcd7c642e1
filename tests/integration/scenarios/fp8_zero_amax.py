"""fp8-zero-amax: torchao float8 training (tensorwise, emulate=True) of a
model whose second layer starts at zero, as a LoRA B or a zero-initialized
output projection does: its weight's amax is 0 at the first step. With
`twin`, every layer starts at its default (nonzero) init (silent)."""
import dataclasses
import sys

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

twin = sys.argv[1:] == ["twin"]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
if not twin:
    torch.nn.init.zeros_(model[2].weight)
config = dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=True)
convert_to_float8_training(model, config=config)
optimizer = torch.optim.AdamW(model.parameters())
x = torch.randn(32, 64)
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)  # the model line
    loss = y.float().pow(2).mean()
    loss.backward()  # the backward line
    optimizer.step()
    optimizer.zero_grad()
