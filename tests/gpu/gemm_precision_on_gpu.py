"""On a GPU machine (docs/gpu.md, "GEMM precision"): castscope's cuBLASLt
logger on real cuBLAS. Attaches with `cublaslt_logger` on, runs GEMMs inside
and outside autocast (bf16, fp16, fp32 with TF32 off and on), prints each
autocast op's `gemm` as the agent recorded it and the logger's counts, and
checks that every output is bit-identical to the same call without castscope.
cuBLASLt's own printing must not reach stdout (the caller greps for it)."""
import json
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "agent" / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).parent))
import castscope  # noqa: E402
from policy_for_this_torch import policy_for_this_torch  # noqa: E402

torch.manual_seed(0)
x = torch.randn(512, 1024, device="cuda")
w = torch.randn(768, 1024, device="cuda")
b = torch.randn(768, device="cuda")
bx, by = torch.randn(16, 128, 64, device="cuda"), torch.randn(16, 64, 128, device="cuda")


def cases():
    torch.backends.cuda.matmul.allow_tf32 = False
    yield "fp32 linear, tf32 off (no autocast)", torch.nn.functional.linear(x, w, b)
    torch.backends.cuda.matmul.allow_tf32 = True
    yield "fp32 mm, tf32 on (no autocast)", x @ w.t()
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.autocast("cuda", dtype=torch.bfloat16):
        yield "bf16 linear", torch.nn.functional.linear(x, w, b)
        yield "bf16 bmm", torch.bmm(bx, by)
        yield "bf16 matmul", torch.matmul(x, w.t())
    with torch.autocast("cuda", dtype=torch.float16):
        yield "fp16 mm", torch.mm(x, w.t())
        yield "fp16 addmm", torch.addmm(b, x, w.t())


native = [(name, out.clone()) for name, out in cases()]
torch.cuda.synchronize()
events = pathlib.Path(tempfile.mkdtemp()) / "events.jsonl"
with castscope.attached(policy_files=[policy_for_this_torch()], events_path=events, probe=False,
                        gpu_timing={"mode": "off", "cublaslt_logger": True}) as agent:
    print("cublaslt_logger at attach:", agent.status()["cublaslt_logger"]["state"], flush=True)
    attached = [(name, out.clone()) for name, out in cases()]
    torch.cuda.synchronize()
    status = agent.status()["cublaslt_logger"]
    ops = agent.ops()
print("cublaslt_logger:", json.dumps(status))
failures = 0
for (name, a), (_, b_) in zip(native, attached):
    same = a.dtype == b_.dtype and torch.equal(a.view(torch.int16 if a.element_size() == 2 else torch.int32),
                                               b_.view(torch.int16 if b_.element_size() == 2 else torch.int32))
    failures += not same
    print(f"{'bit-identical' if same else 'DIFFERENT    '} {name}: {a.dtype}")
for op in ops:
    print(f"op {op['op']:24s} {op['location']['file'].rsplit('/', 1)[-1]}:{op['location']['line']:<4} gemm={json.dumps(op.get('gemm'))}")
missing = [op["op"] for op in ops if op["op"].split("::")[1].split(".")[0] in ("linear", "bmm", "matmul", "mm", "addmm")
           and "gemm" not in op]
print("GEMM ops without a description:", missing)
sys.exit(1 if failures or missing or status["state"] != "on" else 0)
