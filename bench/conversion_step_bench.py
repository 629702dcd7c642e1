"""What recording every conversion costs on a model whose code converts: a
training step of transformers' LlamaForCausalLM (2 layers, hidden 128,
random weights, bf16 CPU autocast, AdamW; the model of
tests/integration/test_every_conversion.py), or with `--model float8` of
torchao's float8 training (tensorwise, emulate=True) of a 3-layer MLP of
width 256 under bf16 autocast (the bracket around each float8 conversion,
castscope/float8_scopes.py, runs in the castscope rows), side by side in one
run. Rows, interleaved within each repeat:
  native                 torch's autocast
  castscope              castscope attached: autocast's casts and every other conversion
                         (explicit, autograd's, a library's; docs/events.md, "Makers")
  castscope-no-explicit  the same with explicit_casts=False: autocast's casts alone
  castscope-no-modules   castscope with module_scopes=False: no module hooks (the
                         precision map's cost is castscope's over this row)
  castscope-aggregate    aggregate mode, every conversion counted per site

Needs the test-only transformers or torchao (tests/requirements.txt).

    .venv/bin/python bench/conversion_step_bench.py [--model llama|float8] [--steps 5] [--repeats 7] 2>/dev/null
"""
import contextlib
import tempfile

import torch

import castscope
from harness import interleaved, medians, ms_per_step, repeats_parser


def float8_mlp():
    """torchao float8 training of an MLP: the model, its optimizer and one step."""
    import dataclasses

    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 256))
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=True)
    convert_to_float8_training(model, config=config)
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256)

    def one_step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
        y.float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return one_step


def main():
    parser = repeats_parser(7, steps=5)
    parser.add_argument("--model", choices=["llama", "float8"], default="llama")
    args = parser.parse_args()
    if args.model == "llama":
        from jobs.llama_steps import llama, step  # tests/integration/jobs (harness puts tests/integration on the path)

        model, optimizer, ids = llama()
        one_step = lambda: step(model, optimizer, ids)  # noqa: E731
        what = "LlamaForCausalLM 2 layers hidden 128, 2x16 tokens"
    else:
        one_step = float8_mlp()
        what = "torchao float8 (tensorwise, emulated) MLP 3x256, batch 64"

    def steps(n):
        for _ in range(n):
            one_step()

    with tempfile.TemporaryDirectory() as tmp:
        def attached(**options):
            return lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", probe=False, numerics=False, **options)
        rows = {
            "native": contextlib.nullcontext,
            "castscope": attached(),
            "castscope-no-explicit": attached(explicit_casts=False),
            "castscope-no-modules": attached(module_scopes=False),
            "castscope-aggregate": attached(aggregate=True),
        }
        steps(2)
        median = medians(interleaved(rows, args.repeats, lambda row: ms_per_step(rows[row], steps, args.steps, 1)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {what}, bf16 training step, "
          f"median of {args.repeats} interleaved runs of {args.steps} steps")
    print(f"{'row':22s} {'ms/step':>8s} {'x native':>9s} {'x no-explicit':>14s}")
    for row, value in median.items():
        print(f"{row:22s} {value:8.2f} {value / median['native']:8.3f}x "
              f"{value / median['castscope-no-explicit']:13.3f}x")


if __name__ == "__main__":
    main()
