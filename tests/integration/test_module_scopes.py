"""The precision map's modules (docs/events.md, "Modules and the precision
map") in a real torch process: names under their root, a second root of one
class apart, a layer called alone before its model, torch.compile's wrapper
named as the module it wraps (its global-hook warning not raised under -W
error), the backward's conversions at their forward's module, parameters by
their tensor, module_scopes=False, and hooks gone after detach."""
import collections
import json
import subprocess
import sys

JOB = r"""
import json, pathlib, sys, warnings
import torch, castscope

warnings.simplefilter("error")  # torch.compile(module) warns of global hooks: castscope's must not stop the job
out = pathlib.Path(sys.argv[1])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.main = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())

    def forward(self, x):
        return self.main(x).float().to(torch.bfloat16)  # the model's own round of conversions


first, second = Net(), Net()
x = torch.randn(4, 8)
with castscope.attached(events_path=out / "on.jsonl", probe=False, numerics=False):
    with torch.autocast("cpu", dtype=torch.bfloat16):  # its own region: its weight's cached cast is not y's
        first.main[0](x)  # a layer alone, before its model
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = first(x)
        second(x)
        torch.compile(first, backend="eager")(x)
    y.float().sum().backward()
    hooks_attached = len(torch.nn.modules.module._global_forward_pre_hooks)
hooks_detached = len(torch.nn.modules.module._global_forward_pre_hooks)
with castscope.attached(events_path=out / "off.jsonl", probe=False, numerics=False, module_scopes=False):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first(x)
print(json.dumps({"hooks_attached": hooks_attached, "hooks_detached": hooks_detached}))
"""


def _casts(path):
    return [json.loads(line)["cast"] for line in path.read_text().splitlines() if line.startswith('{"cast"')]


def test_modules_are_named_under_their_roots_and_the_backward_at_its_forwards_module(tmp_path):
    result = subprocess.run([sys.executable, "-c", JOB, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    hooks = json.loads(result.stdout.strip().splitlines()[-1])
    assert hooks == {"hooks_attached": 1, "hooks_detached": 0}

    casts = _casts(tmp_path / "on.jsonl")
    seen = collections.Counter((c.get("module"), c.get("parameter"), c.get("maker", "CAST_MAKER_AUTOCAST"),
                                c["phase"], c["mode"]) for c in casts)
    eager = {(m, p) for m, p, _, _, mode in seen if mode == "EXECUTION_MODE_EAGER"}
    # The layer called alone is a root of its own at first; its model's walk names it under the model.
    assert ("<Linear>", "weight") in eager
    assert ("<Net>.main.0", "weight") in eager and ("<Net>.main.0", "bias") in eager
    # A second Net is a second root: its modules apart from the first's.
    assert ("<Net>#2.main.0", "weight") in eager
    # The model's own conversions at the model; their gradients' way back at it too, by the node's forward.
    made = {(m, maker, phase) for m, _, maker, phase, mode in seen if mode == "EXECUTION_MODE_EAGER"}
    assert ("<Net>", "CAST_MAKER_EXPLICIT", "PHASE_FORWARD") in made, made
    assert ("<Net>", "CAST_MAKER_BACKWARD", "PHASE_BACKWARD") in made, made
    assert ("<Net>.main.0", "CAST_MAKER_AUTOCAST_BACKWARD", "PHASE_BACKWARD") in made, made
    # torch.compile's wrapper is the module it wraps: no "_orig_mod" in any name.
    assert not [m for m, *_ in seen if m and "_orig_mod" in m], seen
    assert any(m == "<Net>" and mode == "EXECUTION_MODE_COMPILING" for m, _, _, _, mode in seen), seen

    # module_scopes=False: no cast names a module.
    off = _casts(tmp_path / "off.jsonl")
    assert off and not [c for c in off if "module" in c or "parameter" in c]
