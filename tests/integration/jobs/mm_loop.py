"""Many small autocast ops: each mm under bf16 autocast makes 1 op and 2 cast
events. `python mm_loop.py ITERATIONS [EXIT_CODE]`."""
import sys

import torch

iterations = int(sys.argv[1])
a = torch.randn(4, 4)
b = torch.randn(4, 4, requires_grad=True)
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
    for _ in range(iterations):
        torch.mm(a, b)
print(f"mm_loop: {iterations} iterations", flush=True)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
