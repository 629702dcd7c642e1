"""The smallest autocast job: import torch, one bf16 mm (2 casts, 1 op)."""
import torch

with torch.autocast("cpu", dtype=torch.bfloat16):
    torch.mm(torch.randn(4, 4), torch.randn(4, 4))
