"""What GPU timing (CUPTI) adds to a CUDA training step (budget: <= 2 %).

ResNet-18 (torchvision, random init) on random 64x3x224x224 batches, SGD, bf16
CUDA autocast, each step synchronized. Rows, interleaved within each repeat:
  native            torch's autocast
  castscope         castscope attached, GPU timing off
  castscope+gpu     castscope attached, GPU timing on every step (CUPTI activity records, correlation ids)
  castscope+windows GPU timing in its default windows (2 steps in 100, docs/gpu.md): what a run pays
  castscope+cublaslt GPU timing off, cuBLASLt's logger on (GEMM precision, opt-in): its cost
Prints the median step time per row and the ratios to native and to castscope.
Needs a CUDA GPU (docs/gpu.md):

    python bench/gpu_training_step_bench.py [--steps 100] [--repeats 3] [--policy FILE]
"""
import argparse
import contextlib
import statistics
import tempfile
import time

import torch
import torchvision

import castscope


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--policy", action="append", help="policy files (default: the shipped ones)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_training_step_bench: needs a CUDA GPU")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 10, (args.batch,), device="cuda")

    def steps(n):
        for _ in range(n):
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize()

    def timed(wrap):
        with wrap():
            steps(2)  # warm-up inside the row's context
            start = time.perf_counter()
            steps(args.steps)
            return (time.perf_counter() - start) / args.steps * 1e3

    with tempfile.TemporaryDirectory() as tmp:
        def attached(gpu):
            return castscope.attached(policy_files=args.policy, events_path=f"{tmp}/e.jsonl", probe=False, gpu_timing=gpu)

        rows = {
            "native": contextlib.nullcontext,
            "castscope": lambda: attached("off"),
            "castscope+gpu": lambda: attached({"mode": "on", "window_steps": 0}),
            "castscope+windows": lambda: attached("on"),
            "castscope+cublaslt": lambda: attached({"mode": "off", "cublaslt_logger": True}),
        }
        times = {name: [] for name in rows}
        for _ in range(args.repeats):
            for name, wrap in rows.items():
                times[name].append(timed(wrap))
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"ResNet-18, batch {args.batch}x3x224x224, bf16 CUDA autocast, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}; median of {args.repeats} x {args.steps} steps")
    for name, value in median.items():
        print(f"  {name:18s} {value:8.2f} ms/step  x{value / median['native']:.3f} of native  "
              f"x{value / median['castscope']:.3f} of castscope")


if __name__ == "__main__":
    main()
