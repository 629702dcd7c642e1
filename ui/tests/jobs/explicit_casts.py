"""Explicit casts beside autocast's: each step converts its input with
`.to(torch.bfloat16)` and back with `.float()` outside autocast (maker
"user"), then runs an mm under bf16 autocast (maker "autocast")."""
import torch

torch.manual_seed(0)
w = torch.randn(16, 16)
x = torch.randn(8, 16)
for step in range(4):
    h = x.to(torch.bfloat16)  # castscope-ui: explicit to
    y = h.float()  # castscope-ui: explicit float
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.mm(y, w)  # castscope-ui: autocast mm
print(f"explicit_casts: {z.dtype}", flush=True)
