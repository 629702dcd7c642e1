"""The shipped CUDA policy less the ops this torch has no AutocastCUDA kernel
for: GPU machines may run another torch than the reference 2.14.1 (docs/gpu.md).
Prints the path of the file it writes."""
import json
import pathlib
import tempfile

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]


def has_kernel(op: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCUDA")
    except RuntimeError:  # no such op in this torch
        return False


def policy_for_this_torch() -> str:
    policy = json.loads((REPO / "policies" / "cuda.json").read_text())
    kept = {op: p for op, p in policy["ops"].items() if has_kernel(op)}
    dropped = sorted(set(policy["ops"]) - set(kept))
    policy["ops"], policy["torch_version"] = kept, torch.__version__
    out = pathlib.Path(tempfile.mkdtemp()) / "cuda.json"
    out.write_text(json.dumps(policy))
    print(f"policy: {len(kept)} of {len(kept) + len(dropped)} ops have an AutocastCUDA kernel in torch "
          f"{torch.__version__}; left out: {dropped}", file=__import__("sys").stderr)
    return str(out)


if __name__ == "__main__":
    print(policy_for_this_torch())
