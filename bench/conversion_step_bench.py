"""What recording every conversion costs on a model whose code converts: a
training step of transformers' LlamaForCausalLM (2 layers, hidden 128,
random weights, bf16 CPU autocast, AdamW; the model of
tests/integration/test_every_conversion.py), side by side in one run. Rows,
interleaved within each repeat:
  native                 torch's autocast
  castscope              castscope attached: autocast's casts and every other conversion
                         (explicit, autograd's, a library's; docs/events.md, "Makers")
  castscope-no-explicit  the same with explicit_casts=False: autocast's casts alone
  castscope-aggregate    aggregate mode, every conversion counted per site

Needs the test-only transformers (tests/requirements.txt).

    .venv/bin/python bench/conversion_step_bench.py [--steps 5] [--repeats 7] 2>/dev/null
"""
import contextlib
import tempfile

import torch

import castscope
from harness import interleaved, medians, ms_per_step, repeats_parser
from jobs.llama_steps import llama, step  # tests/integration/jobs (harness puts tests/integration on the path)


def main():
    args = repeats_parser(7, steps=5).parse_args()
    model, optimizer, ids = llama()

    def steps(n):
        for _ in range(n):
            step(model, optimizer, ids)

    with tempfile.TemporaryDirectory() as tmp:
        def attached(**options):
            return lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", probe=False, numerics=False, **options)
        rows = {
            "native": contextlib.nullcontext,
            "castscope": attached(),
            "castscope-no-explicit": attached(explicit_casts=False),
            "castscope-aggregate": attached(aggregate=True),
        }
        steps(2)
        median = medians(interleaved(rows, args.repeats, lambda row: ms_per_step(rows[row], steps, args.steps, 1)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, LlamaForCausalLM 2 layers hidden 128, "
          f"2x16 tokens, bf16 training step, median of {args.repeats} interleaved runs of {args.steps} steps")
    print(f"{'row':22s} {'ms/step':>8s} {'x native':>9s} {'x no-explicit':>14s}")
    for row, value in median.items():
        print(f"{row:22s} {value:8.2f} {value / median['native']:8.3f}x "
              f"{value / median['castscope-no-explicit']:13.3f}x")


if __name__ == "__main__":
    main()
