"""torchao float8 training with the real float8 matmul (torch._scaled_mm) on a
GPU, under castscope (issue 69's GPU acceptance; docs/gpu.md): for each
recipe, the float8 conversions a TorchDispatchMode counts natively are in the
agent's events under their dtype pairs, made by torchao with its roles, at
the user's two lines (the model's call and loss.backward()), and the losses
are bit-identical to the native run. Events go to a file (no collector on
the GPU machine). --cpu runs the same checks emulated, to try the script
where no GPU is."""
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "integration" / "jobs" / "float8_steps.py"
sys.path[:0] = [str(REPO / "tests" / "gpu")]

DTYPES = {"DTYPE_FLOAT32": "float32", "DTYPE_BFLOAT16": "bfloat16", "DTYPE_FLOAT8_E4M3FN": "float8_e4m3fn",
          "DTYPE_FLOAT8_E5M2": "float8_e5m2"}


def line_of(marker: str) -> int:
    return next(i for i, text in enumerate(JOB.read_text().splitlines(), 1) if marker in text)


def run_job(recipe: str, device_flag: list[str], events: pathlib.Path | None) -> dict:
    args = [str(JOB), recipe, *device_flag]
    if events is None:  # native, with the mode's count
        code = ["-c", "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                *args, "--count"]
    else:
        from policy_for_this_torch import policy_for_this_torch
        policy = policy_for_this_torch("cuda" if device_flag else "cpu")
        code = ["-c", "import runpy, sys, castscope; sys.argv = sys.argv[1:]\n"
                f"with castscope.attached(policy_files=[{policy!r}], events_path={str(events)!r}, probe=False):\n"
                "    runpy.run_path(sys.argv[0], run_name='__main__')", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "agent" / "python"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, *code], capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        sys.exit(f"{recipe}: the job failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(recipe: str, device_flag: list[str]) -> list[str]:
    problems = []
    native = run_job(recipe, device_flag, None)
    events = pathlib.Path(tempfile.mkdtemp()) / "events.jsonl"
    attached = run_job(recipe, device_flag, events)
    if attached["losses"] != native["losses"]:
        problems.append(f"losses differ: native {native['losses']}, attached {attached['losses']}")
    counted = {pair.replace("torch.", ""): n for pair, n in native["pairs"].items() if "float8" in pair}
    pairs, makers, roles, lines, scaled = collections.Counter(), collections.Counter(), collections.Counter(), set(), 0
    for text in events.read_text().splitlines():
        kind, body = next(iter(json.loads(text).items()))
        if kind != "cast" or "FLOAT8" not in body.get("dst_dtype", ""):
            continue
        pairs[f"{DTYPES.get(body['src_dtype'], body['src_dtype'])}->{DTYPES.get(body['dst_dtype'])}"] += 1
        makers[body.get("maker")] += 1
        roles[(body.get("role"), body["dst_dtype"])] += 1
        location = body.get("location", {})
        lines.add((pathlib.Path(location.get("file", "")).name, int(location.get("line", 0))))
        scaled += "float8" in body
    print(f"{recipe}: native float8 conversions {counted}; castscope {dict(pairs)}; makers {dict(makers)}; "
          f"roles {dict(roles)}; lines {sorted(lines)}; with scale {scaled}")
    # The mode counts _to_copy calls to float8 whatever their source dtype; castscope names the source too.
    by_dst = collections.Counter()
    for pair, n in pairs.items():
        by_dst[pair.split("->")[1]] += n
    wanted = collections.Counter()
    for pair, n in counted.items():
        wanted[pair.split("->")[1]] += n
    if by_dst != wanted or not wanted:
        problems.append(f"float8 conversions by dtype: mode {dict(wanted)}, castscope {dict(by_dst)}")
    if set(makers) != {"CAST_MAKER_TORCHAO"}:
        problems.append(f"makers {dict(makers)}")
    if lines != {(JOB.name, line_of("the model line")), (JOB.name, line_of("the backward line"))}:
        problems.append(f"lines {sorted(lines)}")
    if not {r for r, _ in roles} >= {"ROLE_INPUT", "ROLE_WEIGHT", "ROLE_GRADIENT"}:
        problems.append(f"roles {dict(roles)}")
    return problems


def main():
    device_flag = [] if "--cpu" in sys.argv else ["--cuda"]
    if device_flag:
        import torch
        if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
            sys.exit("needs a GPU with float8 matmuls (compute capability 8.9 or later)")
    failed = {recipe: problems for recipe in ("tensorwise", "rowwise") if (problems := check(recipe, device_flag))}
    for recipe, problems in failed.items():
        print(f"{recipe}: FAILED: " + "; ".join(problems))
    if failed:
        sys.exit(1)
    print("float8 on the device: all checks passed")


if __name__ == "__main__":
    main()
