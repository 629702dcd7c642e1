"""Run with torchrun --nproc_per_node=2 (gloo, CPU): FSDP2's fully_shard with
a MixedPrecisionPolicy casts each parameter to bfloat16 before its
all-gather and each gradient to float32 for its reduce-scatter. Prints each
rank's losses' bits (JSON, a line per rank)."""
import json

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

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
losses = []
for _ in range(3):
    loss = model(x).float().pow(2).mean()  # the step line
    loss.backward()  # the backward line
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.detach().view(torch.int32).item())
print(json.dumps({"rank": rank, "losses": losses}), flush=True)
# Both ranks past their last collective before either tears gloo down: a rank
# that exits while the other's gloo still reads from it aborts it (measured:
# "terminate called without an active exception" in about 1 run in 8).
dist.barrier()
dist.destroy_process_group()
