"""pytorch#179804 (reproduces on torch 2.14.1): a compiled function run under
bf16 autocast disables autocast around an mm, so its forward runs in float32;
the compiled backward still casts the mm's inputs to bfloat16 (the backward
is traced under the forward's autocast state), while eager's backward runs
in float32. Positive with "mismatch"; its negative twin, "off", sets
torch._functorch.config.backward_pass_autocast = "off" (the compiled
backward then matches eager). Each step runs eager, then compiled; a further
argument "eager" or "compiled" runs only that one (castscope diff), and
"inductor" compiles with inductor instead of aot_eager (AOTAutogradCache
serves inductor's graphs only)."""
import sys

import torch
import torch._functorch.config

variant = sys.argv[1]
assert variant in ("mismatch", "off"), variant
assert set(sys.argv[2:]) <= {"eager", "compiled", "inductor"}, sys.argv
only = next((arg for arg in sys.argv[2:] if arg in ("eager", "compiled")), None)
backend = "inductor" if "inductor" in sys.argv[2:] else "aot_eager"
if variant == "off":
    torch._functorch.config.backward_pass_autocast = "off"


def project(x, w):
    with torch.autocast("cpu", enabled=False):
        y = torch.mm(x.float(), w)  # the fp32 line
    return y.sum()


compiled = torch.compile(project, backend=backend)
torch.manual_seed(0)
w = torch.randn(16, 16, requires_grad=True)
for _ in range(2):
    x = torch.randn(8, 16)
    for function in [f for f, name in ((project, "eager"), (compiled, "compiled")) if only in (None, name)]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = function(x, w)
        loss.backward()
        w.grad = None
