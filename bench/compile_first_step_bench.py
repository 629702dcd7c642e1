"""torch.compile's first step natively and under `castscope run` (issue 71,
item 10; target: castscope's first step within 1.3x of native's).

bench/jobs/compiled_llama_steps.py (a 2-layer LLaMA from transformers, bf16
autocast, AdamW, torch.compile with inductor on the CPU) in fresh processes
sharing one inductor cache, as a user's jobs share theirs:

  warm-up   one native run compiles from nothing and fills the cache, then
            one castscope run finds AOTAutogradCache entries castscope has
            not read, traces them again and stores its reading (printed: the
            cost of a cache warmed without castscope, once)
  rows      native and castscope, interleaved (--repeats each): the first
            step's seconds (compile included), the later steps' median, the
            process's wall seconds; medians and castscope/native ratios

    .venv/bin/pip install transformers==5.23.0   # the job's model (a test-only package: not in requirements.txt)
    .venv/bin/python bench/compile_first_step_bench.py [--repeats 5] [--steps 3]
"""
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from harness import interleaved, medians, repeats_parser

REPO = pathlib.Path(__file__).resolve().parents[1]
JOB = str(REPO / "bench/jobs/compiled_llama_steps.py")
CASTSCOPE = [str(REPO / ".venv/bin/castscope"), "run"]


def run(row: str, steps: int, cache: str, out: str) -> dict:
    """One process of `row`: its step seconds and wall seconds."""
    job = [sys.executable, JOB, "--steps", str(steps)]
    command = job if row == "native" else [*CASTSCOPE, "--out", out, "--", *job]
    began = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=900,
                            env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache))
    wall = time.perf_counter() - began
    if result.returncode != 0:
        raise RuntimeError(f"{row}: exit {result.returncode}\n{result.stderr[-4000:]}")
    line = next(line for line in result.stdout.splitlines() if line.startswith('{"step_seconds"'))
    seconds = json.loads(line)["step_seconds"]
    return {"first": seconds[0], "later": statistics.median(seconds[1:]) if len(seconds) > 1 else 0.0, "wall": wall}


def main() -> None:
    args = repeats_parser(5, steps=3).parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("this bench needs transformers: .venv/bin/pip install transformers==5.23.0")
    with tempfile.TemporaryDirectory() as tmp:
        cache, out = f"{tmp}/inductor-cache", f"{tmp}/out"
        cold = run("native", args.steps, cache, out)
        print(f"warm-up: native, empty cache: first step {cold['first']:.2f} s", flush=True)
        unread = run("castscope", args.steps, cache, out)
        print(f"warm-up: castscope, a cache warmed natively (its graphs traced again, castscope's reading stored): "
              f"first step {unread['first']:.2f} s", flush=True)

        def measure(row: str) -> dict:
            sample = run(row, args.steps, cache, out)
            print(f"  {row}: first step {sample['first']:.3f} s, later steps {sample['later'] * 1e3:.1f} ms, "
                  f"process {sample['wall']:.2f} s", flush=True)
            return sample

        samples = interleaved(["native", "castscope"], args.repeats, measure)
    for what, unit, scale in (("first", "s", 1), ("later", "ms", 1e3), ("wall", "s", 1)):
        m = medians({row: [s[what] for s in values] for row, values in samples.items()})
        name = {"first": "first step (compile included)", "later": "later steps", "wall": "whole process"}[what]
        print(f"{name}: native {m['native'] * scale:.3f} {unit}, castscope {m['castscope'] * scale:.3f} {unit}, "
              f"{m['castscope'] / m['native']:.2f}x (medians of {args.repeats})", flush=True)


if __name__ == "__main__":
    main()
