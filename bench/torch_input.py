#!/usr/bin/env python3
"""The peer of build/bin/input_bench: images/s of torchvision's ImageFolder + DataLoader on the same
folder, with the same transforms (RandomResizedCrop(S), RandomHorizontalFlip, ToTensor, Normalize
with ImageNet's mean and std), the same batch size and N DataLoader worker processes (each worker
single-threaded, as DataLoader sets it). The samples are an endless shuffled stream (a
RandomSampler with replacement), so no epoch boundary is timed. Prints one JSON line, as
input_bench does.

    /usr/bin/python3 bench/torch_input.py --data-dir ROOT [--workers 1] [--batch-size 64]
"""
import argparse
import json
import os
import time

import torch
import torchvision
from torch.utils.data import DataLoader, RandomSampler
from torchvision import transforms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="image folder (ROOT/train/CLASS/*.jpg)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--min-batches", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(1)   # the main process only collates; workers do the work
    torch.manual_seed(args.seed)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = torchvision.datasets.ImageFolder(os.path.join(args.data_dir, "train"), transform=transform)
    total = (args.warmup_batches + 1_000_000) * args.batch_size
    sampler = RandomSampler(dataset, replacement=True, num_samples=total)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        drop_last=True, persistent_workers=args.workers > 0)
    batches = iter(loader)
    for _ in range(args.warmup_batches):
        next(batches)
    images = count = 0
    start = time.perf_counter()
    timed = 0.0
    while count < args.min_batches or timed < args.seconds:
        images += next(batches)[0].shape[0]
        count += 1
        timed = time.perf_counter() - start
    print(json.dumps({
        "bench": "input_pipeline", "framework": "torchvision", "torchvision": torchvision.__version__,
        "threads": args.workers, "batch_size": args.batch_size, "image_size": args.image_size,
        "samples_in_folder": len(dataset), "batches": count, "images": images, "seconds": timed,
        "images_per_second": images / timed,
    }))
    os._exit(0)   # skip joining the workers of an endless sampler


if __name__ == "__main__":
    main()
