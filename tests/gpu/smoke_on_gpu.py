"""First look on a GPU machine: attach with GPU timing, run a CUDA autocast
step, print what the agent says and what the events file holds."""
import collections
import json
import os
import pathlib
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "agent" / "python"), str(REPO / "tests" / "integration"), str(REPO / "tests" / "gpu")]
import castscope  # noqa: E402
from helpers import mlp_step  # noqa: E402
from policy_for_this_torch import policy_for_this_torch  # noqa: E402

events = pathlib.Path(tempfile.mkdtemp()) / "events.jsonl"
step = mlp_step("cuda")
mode = os.environ.get("SMOKE_GPU_TIMING", "auto")
print("attaching, gpu_timing", mode, flush=True)
with castscope.attached(policy_files=[policy_for_this_torch()], events_path=events, probe=False, gpu_timing=mode) as agent:
    print("gpu_timing:", agent.status()["gpu_timing"])
    for _ in range(3):
        step()
    status = agent.status()
print({k: status[k] for k in ("gpu_timing", "gpu_records_dropped", "events_recorded", "events_dropped")})
kinds = collections.Counter()
kernels = collections.Counter()
seqs = {}
for line in events.read_text().splitlines():
    event = json.loads(line)
    kind, body = next(iter(event.items()))
    kinds[kind] += 1
    if kind in ("cast", "op"):
        seqs[int(body["seq"])] = (kind, body["op"], body.get("arg_name", ""))
    if kind == "kernel":
        launcher = seqs.get(int(body.get("launch_seq", 0)), ("-", "-", ""))
        kernels[(body["launched_by"], launcher[1], launcher[2], body["name"][:90])] += 1
print(dict(kinds))
for (by, op, arg, name), n in sorted(kernels.items()):
    print(f"{n:5d} {by:18s} {op:16s} {arg:8s} {name}")
