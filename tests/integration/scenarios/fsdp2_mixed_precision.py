"""Run with torchrun --nproc_per_node=2 (gloo, CPU): FSDP2's fully_shard with
a MixedPrecisionPolicy casts each parameter to bfloat16 before its
all-gather and each gradient to float32 for its reduce-scatter. With
--count, prints the conversions a TorchDispatchMode saw on this rank (JSON)."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conversion_counter import ConversionCounter  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 16, generator=torch.Generator().manual_seed(rank))
counter = ConversionCounter() if "--count" in sys.argv else None
if counter is not None:
    counter.__enter__()
for _ in range(3):
    loss = model(x).float().pow(2).mean()  # the step line
    loss.backward()  # the backward line
    optimizer.step()
    optimizer.zero_grad()
if counter is not None:
    counter.__exit__(None, None, None)
    print(json.dumps({"rank": rank, "conversions": counter.total,
                      "pairs": {f"{a}->{b}": n for (a, b), n in sorted(counter.pairs.items(), key=str)}}))
dist.destroy_process_group()
