"""transformers' LlamaForCausalLM (2 layers, hidden 128, random weights)
trained 3 steps under bf16 autocast with AdamW. Prints the losses' bits and,
with --count, the conversions a TorchDispatchMode saw (in the whole job, the
model's construction included, and in the 3 steps), as JSON on the last line."""
import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from conversion_counter import ConversionCounter  # noqa: E402

STEPS = 3


def llama():
    """The model (seeded), its AdamW and a batch of token ids."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), torch.randint(0, 256, (2, 16))


def step(model, optimizer, ids) -> torch.Tensor:
    """One bf16 training step; its loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


def main():
    whole_job = ConversionCounter() if "--count" in sys.argv else None
    if whole_job is not None:
        whole_job.__enter__()
    model, optimizer, ids = llama()
    counter = ConversionCounter() if "--count" in sys.argv else None
    losses = []
    if counter is not None:
        counter.__enter__()
    for _ in range(STEPS):
        loss = step(model, optimizer, ids)
        losses.append(loss.detach().float().view(torch.int32).item())
    if counter is not None:
        counter.__exit__(None, None, None)
        whole_job.__exit__(None, None, None)
    out = {"losses": losses, "weights": [int(p.detach().float().view(torch.int32).sum()) for p in model.parameters()][:8]}
    if counter is not None:
        out["step_conversions"] = counter.total
        out["conversions"] = whole_job.total
        out["pairs"] = {f"{a}->{b}": n for (a, b), n in sorted(whole_job.pairs.items(), key=str)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
