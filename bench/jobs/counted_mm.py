"""A fixed number of cast and op events (3 per mm), made at a steady rate
like a training loop: `python counted_mm.py EVENTS EVENTS_PER_SECOND`.
Unlike paced_mm.py it stops after EVENTS, however long a slow machine takes."""
import sys
import time

import torch

events, rate = int(sys.argv[1]), float(sys.argv[2])
a = torch.randn(4, 4)
b = torch.randn(4, 4, requires_grad=True)
calls = events // 3
per_tick = max(1, int(rate / 3 / 100))  # mm calls per 10 ms tick
start = time.monotonic()
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
    done, tick = 0, 0
    while done < calls:
        for _ in range(min(per_tick, calls - done)):
            torch.mm(a, b)
        done += per_tick
        tick += 1
        time.sleep(max(0.0, start + tick * 0.01 - time.monotonic()))
