"""Autocast ops at a steady rate, like a training loop (3 events per mm).
`python paced_mm.py SECONDS EVENTS_PER_SECOND`"""
import sys
import time

import torch

seconds, rate = float(sys.argv[1]), float(sys.argv[2])
a = torch.randn(4, 4)
b = torch.randn(4, 4, requires_grad=True)
per_tick = max(1, int(rate / 3 / 100))  # mm calls per 10 ms tick
start = time.monotonic()
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
    tick = 0
    while time.monotonic() - start < seconds:
        for _ in range(per_tick):
            torch.mm(a, b)
        tick += 1
        time.sleep(max(0.0, start + tick * 0.01 - time.monotonic()))
