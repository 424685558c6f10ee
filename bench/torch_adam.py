#!/usr/bin/env python3
"""PyTorch peer of optimizer_bench: torch.optim.Adam stepping one fp32 tensor on the CPU.

    /usr/bin/python3 bench/torch_adam.py --elements 16777216 --threads 2 --steps 20 --warmup 3

Prints one JSON line: the median seconds of a step and the elements updated per second. The
gradient is fixed (set once), as in optimizer_bench, so only the update is timed. Runs the
default implementation torch picks for a single CPU tensor, and foreach=False beside it.
"""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(7)
    out = {"peer": "torch.optim.Adam", "torch": torch.__version__, "elements": a.elements, "threads": a.threads}
    for name, foreach in (("default", None), ("for_loop", False)):
        w = torch.nn.Parameter(torch.rand(a.elements, generator=gen) * 2 - 1)
        w.grad = torch.rand(a.elements, generator=gen) - 0.5
        opt = torch.optim.Adam([w], lr=1e-3, weight_decay=a.weight_decay, foreach=foreach)
        times = []
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            opt.step()
            dt = time.perf_counter() - t0
            if i >= a.warmup:
                times.append(dt)
        median = statistics.median(times)
        out[name + "_seconds"] = median
        out[name + "_elements_per_second"] = a.elements / median
    print(json.dumps(out))


if __name__ == "__main__":
    main()
