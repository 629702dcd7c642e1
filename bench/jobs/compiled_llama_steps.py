"""A 2-layer LLaMA from transformers (hidden 128, random weights), compiled
with torch.compile, trained under bf16 autocast with AdamW on the CPU; prints
one JSON line: the wall seconds of each step, the first one with its compile.

    python bench/jobs/compiled_llama_steps.py [--steps 3]

bench/compile_first_step_bench.py runs it natively and under `castscope run`.
"""
import argparse
import json
import time

import torch


def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    steps = parser.parse_args().steps
    torch.manual_seed(0)
    llama = model()
    optimizer = torch.optim.AdamW(llama.parameters(), lr=1e-3)
    compiled = torch.compile(llama)
    tokens = torch.randint(0, 512, (2, 32))
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = compiled(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"step_seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
