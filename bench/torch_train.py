#!/usr/bin/env python3
"""PyTorch peer of pipewright's training benchmark: the same models, batch, threads and optimizer.

Trains on random 1x28x28 inputs with 10 classes (SGD lr 0.01, momentum 0.9, cross-entropy), times
each step after the warm-up steps, and prints one JSON line. Run with Debian's python3-torch:

    /usr/bin/python3 bench/torch_train.py --model resnet18 --width 32 --steps 60 --warmup 10 --json
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn

INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
DISTINCT_BATCHES = 4   # inputs are drawn once and cycled, so data generation is not timed


def seed_cnn(width: int) -> nn.Module:
    """Keras' MNIST example; `width` is unused (the model has fixed sizes, as in pipewright)."""
    del width
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = None
        if stride != 1 or in_channels != width:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, width, 1, stride, bias=False),
                                            nn.BatchNorm2d(width))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


def resnet18(width: int) -> nn.Module:
    """ResNet-18 in its 28x28 form: a 3x3 stride-1 stem and no max-pool."""
    layers = [nn.Conv2d(INPUT_SHAPE[0], width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    in_channels = width
    for stage, stage_width in enumerate([width, 2 * width, 4 * width, 8 * width]):
        for block in range(2):
            stride = 2 if block == 0 and stage > 0 else 1
            layers.append(BasicBlock(in_channels, stage_width, stride))
            in_channels = stage_width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, NUM_CLASSES)]
    return nn.Sequential(*layers)


MODELS = {"seed-cnn": seed_cnn, "resnet18": resnet18}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="seed-cnn")
    p.add_argument("--width", type=int, default=32, help="resnet18 base width (default 32)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--steps", type=int, default=50, help="timed steps, after the warm-up")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    for name in ("width", "batch_size", "threads", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be 0 or more, got {args.warmup}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model = MODELS[args.model](args.width)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    batches = [(torch.randn(args.batch_size, *INPUT_SHAPE), torch.randint(0, NUM_CLASSES, (args.batch_size,)))
               for _ in range(DISTINCT_BATCHES)]

    step_seconds = []
    loss = None
    for step in range(args.warmup + args.steps):
        images, labels = batches[step % DISTINCT_BATCHES]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            step_seconds.append(elapsed)

    result = {
        "framework": "pytorch",
        "model": args.model,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "samples_per_second": args.batch_size * len(step_seconds) / sum(step_seconds),
        "median_step_ms": statistics.median(step_seconds) * 1000.0,
        "width": args.width,
        "steps": args.steps,
        "warmup": args.warmup,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": float(loss),
        "torch_version": torch.__version__,
    }
    if not args.json:
        print(f"pytorch {torch.__version__} {args.model}: {result['samples_per_second']:.1f} samples/s, "
              f"median step {result['median_step_ms']:.2f} ms over {args.steps} steps "
              f"(batch {args.batch_size}, {args.threads} threads)", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
