"""What castscope's cuBLASLt logger (GEMM precision, opt-in) adds to a
matmul-bound CUDA step, where it is called most: a 16-layer MLP (hidden 1024,
batch 64: small, launch-bound GEMMs, each forward linear an autocast op and
every backward GEMM logged too), bf16 autocast, SGD, each step synchronized.
Rows interleaved within each repeat:
  native             torch's autocast
  castscope          castscope attached (GPU timing off)
  castscope+cublaslt castscope attached with `cublaslt_logger` on
Prints the median step time per row, the ratios, and the matmuls the logger
read per step. Needs a CUDA GPU (docs/gpu.md):

    python bench/cublaslt_logger_bench.py [--steps 200] [--repeats 5] [--policy FILE]
"""
import tempfile
import time

import torch

from harness import gpu_timing_rows, interleaved, medians, print_against, repeats_parser
from helpers import autocast_steps  # noqa: E402 (harness puts tests/integration on the path)


def main():
    parser = repeats_parser(5, steps=200)
    parser.add_argument("--policy", action="append", help="policy files (default: the shipped ones)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cublaslt_logger_bench: needs a CUDA GPU")
    torch.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 1024, device="cuda")

    def steps(n):
        autocast_steps(model, optimizer, x, None, n, "cuda", loss_of=lambda out: out.float().pow(2).mean())

    matmuls = {}

    def timed(name, wrap):
        with wrap() as agent:
            steps(3)
            before = agent.status()["cublaslt_logger"] if agent else None
            start = time.perf_counter()
            steps(args.steps)
            elapsed = (time.perf_counter() - start) / args.steps * 1e3
            if agent and before.get("state") == "on":
                after = agent.status()["cublaslt_logger"]
                matmuls[name] = sum(after[k] - before[k] for k in ("matmuls_in_ops", "matmuls_outside_ops")) / args.steps
            return elapsed

    with tempfile.TemporaryDirectory() as tmp:
        rows = gpu_timing_rows(args.policy, tmp, {"castscope+cublaslt": {"mode": "off", "cublaslt_logger": True}})
        median = medians(interleaved(rows, args.repeats, lambda row: timed(row, rows[row])))
    print(f"16-layer MLP 1024x1024, batch 64, bf16 CUDA autocast, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}; median of {args.repeats} x {args.steps} steps; "
          f"logger read {matmuls.get('castscope+cublaslt', 0):.0f} matmuls per step")
    print_against(median, ("native", "castscope"), "ms/step", digits=3)


if __name__ == "__main__":
    main()
