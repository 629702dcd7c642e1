"""torchao float8 training (convert_to_float8_training, emulate=True: runs on
the CPU) of a small MLP, 3 steps under bf16 autocast with AdamW; the recipe
("tensorwise" or "rowwise") is the first argument. With --cuda: on the GPU,
with torchao's real float8 matmul (torch._scaled_mm) instead of emulation.
Prints the losses' bits and, with --count, the conversions a
TorchDispatchMode saw in the steps, as JSON on the last line."""
import dataclasses
import json
import sys

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from conversion_counter import ConversionCounter  # noqa: E402


def main():
    recipe = sys.argv[1]
    device = "cuda" if "--cuda" in sys.argv else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).to(device)
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=device == "cpu")
    convert_to_float8_training(model, config=config)
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(32, 64).to(device)
    counter = ConversionCounter() if "--count" in sys.argv else None
    if counter is not None:
        counter.__enter__()
    losses = []
    for _ in range(3):
        with torch.autocast(device, dtype=torch.bfloat16):
            y = model(x)  # the model line
        loss = y.float().pow(2).mean()
        loss.backward()  # the backward line
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().view(torch.int32).item())
    if counter is not None:
        counter.__exit__(None, None, None)
    out = {"losses": losses}
    if counter is not None:
        out["conversions"] = counter.total
        out["pairs"] = {f"{a}->{b}": n for (a, b), n in sorted(counter.pairs.items(), key=str)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
