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
from transformers import LlamaConfig, LlamaForCausalLM

import castscope
from harness import interleaved, medians, ms_per_step, repeats_parser


def main():
    args = repeats_parser(7, steps=5).parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (2, 16))

    def steps(n):
        for _ in range(n):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

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
