#!/usr/bin/env python3
"""Generate policies/<device>.json from PyTorch's own autocast lists.

Inputs are PyTorch's sources for the torch version in the venv:
  --autocast-cpp  aten/src/ATen/autocast_mode.cpp (the KERNEL_CPU/KERNEL_MPS/
                  KERNEL_CUDA lines are read from it)
  --autocast-h    ATen/autocast_mode.h (the AT_FORALL_* lists; the wheel ships it
                  under torch/include/ATen/)
The result is then reconciled with the running dispatcher, which is the ground
truth for *which* ops have a native autocast kernel:
  - source entries for ops this torch no longer has are dropped (and printed);
  - natively registered ops the sources do not list become `keep_native`
    (castscope leaves the native kernel in place) unless --assume names their
    policy after it was checked (e.g. by the parity sweep).
Run:  .venv/bin/python scripts/gen_native_policies.py --autocast-cpp ... \
        --autocast-h .venv/.../torch/include/ATen/autocast_mode.h
"""
import argparse
import json
import pathlib
import re

import torch

DEVICE_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA", "xpu": "AutocastXPU", "mps": "AutocastMPS"}
MACRO_POLICIES = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp",
    "AT_FORALL_FP32": "fp32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
    "AT_FORALL_PROMOTE": "promote",
}
# Devices whose native registration expands the AT_FORALL_* macros.
MACRO_DEVICES = ("cuda", "xpu")


def op_name(parts):
    return "aten::" + parts[0] + ("." + parts[1] if len(parts) > 1 else "")


def parse_header(text):
    lists = {}
    for macro, policy in MACRO_POLICIES.items():
        body = re.search(r"#define " + macro + r"\(_\)(.*?)\n\n", text, re.S).group(1)
        for args in re.findall(r"_\(([^()]*?)\)", body):
            lists[op_name([a.strip() for a in args.split(",")])] = policy
    # fp32_append_dtype: "_(ADD_NS(norm), "norm.Scalar", ..." -> redispatch overload gets the dtype.
    body = re.search(r"#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE\(_\)(.*?)\n\n", text, re.S).group(1)
    for registered in re.findall(r'"([A-Za-z_0-9.]+)"', body):
        lists["aten::" + registered] = "fp32_append_dtype"
    return lists


def parse_cpp(text):
    per_device = {"cpu": {}, "mps": {}, "cuda": {}}
    for dev, args in re.findall(r"KERNEL_(CPU|MPS|CUDA)2?\(([^()]*)\)", text):
        parts = [a.strip() for a in args.split(",")]
        if parts[-1] not in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote"):
            continue  # macro definitions, not registrations
        per_device[dev.lower()][op_name(parts[:-1])] = parts[-1]
    banned = re.search(r'binary_cross_entropy_banned\(.*?AT_ERROR\((.*?)\);', text, re.S)
    message = "".join(json.loads(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', banned.group(1))) if banned else None
    return per_device, message


def redispatch_target(op):
    # norm.Scalar -> norm.ScalarOpt_dtype, norm.ScalarOpt_dim -> norm.ScalarOpt_dim_dtype
    name, overload = op.split(".")
    return f"{name}.{'ScalarOpt_dtype' if overload == 'Scalar' else overload + '_dtype'}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autocast-cpp", required=True)
    ap.add_argument("--autocast-h", required=True)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent / "policies"))
    ap.add_argument("--assume", action="append", default=[], metavar="DEVICE:OP=POLICY")
    args = ap.parse_args()
    header = parse_header(pathlib.Path(args.autocast_h).read_text())
    cpp, banned_message = parse_cpp(pathlib.Path(args.autocast_cpp).read_text())
    assumed = {}
    for a in args.assume:
        dev_op, policy = a.split("=")
        dev, op = dev_op.split(":", 1)
        assumed[(dev, op)] = policy
    version = torch.__version__.split("+")[0]
    for device, key in DEVICE_KEYS.items():
        source = dict(header) if device in MACRO_DEVICES else {}
        source.update(cpp.get(device, {}))
        if device in MACRO_DEVICES:
            source["aten::binary_cross_entropy"] = "banned"
        if device == "xpu":
            source = {k: v for k, v in source.items() if not k.startswith("aten::cudnn_")}
        native = set(torch._C._dispatch_get_registrations_for_dispatch_key(key))
        ops = {}
        for op in sorted(native):
            if (device, op) in assumed:
                ops[op] = {"policy": assumed[(device, op)], "note": "not in the sources read; policy checked by the parity sweep"}
            elif op not in source:
                ops[op] = {"policy": "keep_native", "note": "bespoke or unlisted native kernel; castscope leaves it in place"}
            elif source[op] == "fp32_append_dtype":
                ops[op] = {"policy": "fp32_append_dtype", "redispatch": "aten::" + redispatch_target(op[6:])}
            elif source[op] == "banned":
                ops[op] = {"policy": "banned", "message": banned_message}
            else:
                ops[op] = source[op]
        for op in sorted(set(source) - native):
            print(f"{device}: {op} is in the sources but has no {key} kernel in torch {torch.__version__}: dropped")
        lines = [f'    {json.dumps(op)}: {json.dumps(entry)}' for op, entry in ops.items()]
        text = (
            "{\n"
            '  "castscope_policy": 1,\n'
            f'  "device": "{device}",\n'
            f'  "torch_version": "{version}",\n'
            '  "ops": {\n' + ",\n".join(lines) + "\n  }\n}\n"
        )
        out = pathlib.Path(args.out) / f"{device}.json"
        out.write_text(text)
        print(f"wrote {out}: {len(ops)} ops")


if __name__ == "__main__":
    main()
