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
import tempfile

import torch
import torchvision

from harness import gpu_timing_rows, interleaved, medians, ms_per_step, print_against, repeats_parser
from helpers import autocast_steps  # noqa: E402 (harness puts tests/integration on the path)


def main():
    parser = repeats_parser(3, steps=100, batch=64)
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
        autocast_steps(model, optimizer, x, y, n, "cuda")

    with tempfile.TemporaryDirectory() as tmp:
        rows = gpu_timing_rows(args.policy, tmp, {
            "castscope+gpu": {"mode": "on", "steps": 0},
            "castscope+windows": "on",
            "castscope+cublaslt": {"mode": "off", "cublaslt_logger": True},
        })
        median = medians(interleaved(rows, args.repeats, lambda row: ms_per_step(rows[row], steps, args.steps, 2)))
    print(f"ResNet-18, batch {args.batch}x3x224x224, bf16 CUDA autocast, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}; median of {args.repeats} x {args.steps} steps")
    print_against(median, ("native", "castscope"), "ms/step")


if __name__ == "__main__":
    main()
