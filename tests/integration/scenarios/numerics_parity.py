"""Parity with numerics windows open for every step: the same float16 and
bfloat16 training steps, natively and with castscope attached, give
bit-identical outputs and gradients (inf and NaN included). Prints JSON."""
import json
import sys

import torch

import castscope
from castscope.events import read_events


def steps(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    outputs = []
    for step in range(6):
        x = torch.randn(8, 16)
        if step % 3 == 2:
            x[0, :4] = 1e5  # past float16's range: inf in the float16 runs
        x[1, :4] = 1e-9     # below float16's smallest subnormal
        with torch.autocast("cpu", dtype=dtype):
            y = model(x)
            z = torch.addmm(torch.full((8, 4), 1e-9), y, torch.eye(4))
        loss = z.float().nan_to_num(0.0, 0.0, 0.0).sum()
        loss.backward()
        outputs.append(z.detach().clone())
        outputs.extend(p.grad.detach().clone() for p in model.parameters())
        opt.step()
        opt.zero_grad()
    return outputs


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


result = {}
for dtype in (torch.float16, torch.bfloat16):
    native = steps(dtype)
    events = f"{sys.argv[1]}.{str(dtype)[6:]}.jsonl"
    castscope.attach(events_path=events, numerics={"steps": 10 ** 9, "max_ms": 10 ** 9})
    attached = steps(dtype)
    castscope.detach()  # the window closes: its counts are written
    numerics = [e["numerics"] for e in read_events(events) if "numerics" in e]
    result[str(dtype)] = {"identical": all(torch.equal(bits(a), bits(b)) for a, b in zip(native, attached)),
                          "tensors": len(native), "checked": sum(int(n["tensors"]) for n in numerics)}
print(json.dumps(result))
