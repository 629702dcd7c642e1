"""A burst of autocast ops between cues from the test, for stalls timed by
events, not by the clock. `python burst_on_cue.py CUE_DIR ITERATIONS`:
writes CUE_DIR/ready and waits for CUE_DIR/go; runs ITERATIONS 4x4 mm (3
events each); waits half a second (ten exporter passes: the burst is in the
spool or waiting for it), writes CUE_DIR/burst-done and waits for
CUE_DIR/finish before it ends."""
import pathlib
import sys
import time

import torch

cues = pathlib.Path(sys.argv[1])
iterations = int(sys.argv[2])


def wait_for(name: str) -> None:
    deadline = time.monotonic() + 120
    while not (cues / name).exists():
        if time.monotonic() > deadline:
            sys.exit(f"burst_on_cue: no {name} cue in 120 s")
        time.sleep(0.01)


a = torch.randn(4, 4)
b = torch.randn(4, 4, requires_grad=True)
(cues / "ready").touch()
wait_for("go")
with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
    for _ in range(iterations):
        torch.mm(a, b)
time.sleep(0.5)
(cues / "burst-done").touch()
wait_for("finish")
