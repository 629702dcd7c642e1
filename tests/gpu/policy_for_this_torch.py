"""The shipped policies less the ops this torch has no autocast kernel for:
GPU machines may run another torch than the reference 2.14.1 (docs/gpu.md).
Prints the path of the CUDA policy it writes; with --dir DIR, writes every
device's policy into DIR (for CASTSCOPE_POLICIES) and prints DIR."""
import json
import pathlib
import tempfile

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]


KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA", "xpu": "AutocastXPU", "mps": "AutocastMPS"}


def has_kernel(op: str, key: str = "AutocastCUDA") -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)
    except RuntimeError:  # no such op in this torch
        return False


def policy_for_this_torch(device: str = "cuda", out_dir: pathlib.Path | None = None) -> str:
    policy = json.loads((REPO / "policies" / f"{device}.json").read_text())
    kept = {op: p for op, p in policy["ops"].items() if has_kernel(op, KEYS[device])}
    dropped = sorted(set(policy["ops"]) - set(kept))
    policy["ops"], policy["torch_version"] = kept, torch.__version__
    out = (out_dir or pathlib.Path(tempfile.mkdtemp())) / f"{device}.json"
    out.write_text(json.dumps(policy))
    print(f"{device} policy: {len(kept)} of {len(kept) + len(dropped)} ops have an {KEYS[device]} kernel in torch "
          f"{torch.__version__}; left out: {dropped}", file=__import__("sys").stderr)
    return str(out)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--dir"]:
        out_dir = pathlib.Path(sys.argv[2])
        out_dir.mkdir(parents=True, exist_ok=True)
        for device in KEYS:
            policy_for_this_torch(device, out_dir)
        print(out_dir)
    else:
        print(policy_for_this_torch())
