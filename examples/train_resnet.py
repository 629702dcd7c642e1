"""Train torchvision's ResNet-18 for a few steps under bf16 autocast on the
CPU with castscope attached, then print what autocast did.

    .venv/bin/python examples/train_resnet.py [--steps 5] [--events out/casts.jsonl]
    .venv/bin/castscope run -- .venv/bin/python examples/train_resnet.py   # same, attached from outside
"""
import argparse
import pathlib
import time

import torch
import torchvision

import castscope


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--events", default="out/casts.jsonl", help="JSON-lines dump of castscope.v1.Event")
    args = parser.parse_args()

    events = pathlib.Path(args.events)
    events.parent.mkdir(parents=True, exist_ok=True)
    events.unlink(missing_ok=True)

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size)
    labels = torch.randint(0, 10, (args.batch,))

    with castscope.attached(events_path=events) as agent:
        for step in range(args.steps):
            start = time.perf_counter()
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            print(f"step {step}: loss {loss.item():.4f} ({loss.dtype}), {1e3 * (time.perf_counter() - start):.0f} ms")
        print(agent.summary())
        print(f"events: {agent.events_path}")


if __name__ == "__main__":
    main()
