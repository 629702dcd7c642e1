"""A model's own conversions beside autocast's: an explicit upcast of an
activation and its way back, a dtype copy_ into a buffer, each with its
gradient's conversion in the backward."""
import torch

torch.manual_seed(0)
layer = torch.nn.Linear(16, 16)
buffer = torch.zeros(4, 16, dtype=torch.float16)
x = torch.randn(4, 16)
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = layer(x)
        up = h.float()  # UPCAST
        down = up.to(torch.bfloat16)  # DOWNCAST
        buffer.copy_(down.detach())  # COPY
        loss = down.float().sum()
    loss.backward()
