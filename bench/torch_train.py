#!/usr/bin/env python3
"""PyTorch peer of pipewright's training benchmark: the same models, batch, threads and optimizer.

Trains on random inputs (default 1x28x28; --data-dir: an image folder, below) with 10 classes (SGD lr 0.01, momentum 0.9,
cross-entropy), times each step after the warm-up steps, and prints one JSON line. The models are
built as pipewright's zoo builds them (models/zoo/zoo.cpp): inputs of at most 64x64 get the small
ResNet form (3x3 stride-1 stem, no max-pool), larger ones the ImageNet form (7x7 stride-2 stem and
a 3x3 stride-2 max-pool); bottleneck blocks put the stride on their 3x3 convolution (torchvision's
ResNet v1.5); width 64 is the standard ResNet.

CPU, with Debian's python3-torch:

    /usr/bin/python3 bench/torch_train.py --model resnet18 --width 32 --steps 60 --warmup 10 --json

GPU (scripts/gpu_check.sh runs this as pipewright's peer on the same machine):

    python3 bench/torch_train.py --device cuda --model resnet50 --width 64 \
        --input-shape 3x224x224 --batch-size 64 --steps 30 --warmup 10 --tf32 off --json

From an image folder instead (bench/gpu_input.sh runs this beside pipewright's shards):

    python3 bench/torch_train.py --device cuda --model resnet50 --width 64 --data-dir ROOT \
        --image-size 224 --workers 12 --batch-size 64 --steps 100 --warmup 10 --json

With --data-dir the batches come from torchvision's ImageFolder on ROOT/train (one class per
folder; the head has that many classes) through RandomResizedCrop(S), RandomHorizontalFlip,
ToTensor and Normalize(ImageNet's mean and std), fed by a DataLoader (shuffled, --workers worker
processes, pinned memory on CUDA, persistent workers, the last partial batch dropped) that starts
a new epoch whenever one ends. A timed step then also waits for its batch: its time runs from
asking the loader for the batch to the loss read back, and data_wait_fraction is the part of the
timed steps' time spent waiting for batches.

On CUDA: cudnn.benchmark stays off, so cuDNN picks convolution algorithms by its heuristics as
pipewright does (no autotuning); --tf32 sets both cuBLAS matmuls and cuDNN convolutions (torch's
default lets cuDNN use TF32, so "off" is set explicitly). Each timed step copies its batch from
host memory to the GPU, runs forward, backward and the optimizer, and reads the loss back, as a
pipewright step does; the step's wall time is taken after torch.cuda.synchronize(), and its GPU
time with CUDA events.
"""
import argparse
import contextlib
import json
import statistics
import sys
import time

import torch
from torch import nn

NUM_CLASSES = 10
DISTINCT_BATCHES = 4   # inputs are drawn once and cycled, so data generation is not timed
SMALL_FORM_MAX = 64    # pipewright: inputs of at most 64x64 get the small (CIFAR-style) form


def seed_cnn(width: int, shape, num_classes: int) -> nn.Module:
    """Keras' MNIST example; `width` is unused (the model has fixed sizes, as in pipewright)."""
    del width
    c, h, w = shape
    return nn.Sequential(
        nn.Conv2d(c, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * ((h - 2) // 2) * ((w - 2) // 2), 64), nn.ReLU(), nn.Linear(64, num_classes))


def _shortcut(in_channels: int, out_channels: int, stride: int):
    if stride == 1 and in_channels == out_channels:
        return None
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = _shortcut(in_channels, width, stride)

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, 1, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.downsample = _shortcut(in_channels, out_channels, stride)

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + shortcut)


def resnet(block, blocks, width: int, shape, num_classes: int) -> nn.Module:
    c, h, w = shape
    if h <= SMALL_FORM_MAX and w <= SMALL_FORM_MAX:
        layers = [nn.Conv2d(c, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    else:
        layers = [nn.Conv2d(c, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                  nn.MaxPool2d(3, 2, 1)]
    in_channels = width
    for stage, count in enumerate(blocks):
        stage_width = width << stage
        for b in range(count):
            stride = 2 if b == 0 and stage > 0 else 1
            layers.append(block(in_channels, stage_width, stride))
            in_channels = stage_width * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes)]
    return nn.Sequential(*layers)


def _resnet(block, blocks):
    return lambda width, shape, num_classes: resnet(block, blocks, width, shape, num_classes)


MODELS = {
    "seed-cnn": seed_cnn,
    "resnet18": _resnet(BasicBlock, [2, 2, 2, 2]),
    "resnet34": _resnet(BasicBlock, [3, 4, 6, 3]),
    "resnet50": _resnet(Bottleneck, [3, 4, 6, 3]),
    "resnet101": _resnet(Bottleneck, [3, 4, 23, 3]),
    "resnet152": _resnet(Bottleneck, [3, 8, 36, 3]),
}


def parse_shape(text: str):
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected CxHxW with positive sizes, e.g. 3x224x224; got '{text}'")
    return dims


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="seed-cnn")
    p.add_argument("--width", type=int, default=32, help="ResNet base width (default 32; 64 = standard)")
    p.add_argument("--input-shape", type=parse_shape, default=(1, 28, 28), help="CxHxW of one sample (default 1x28x28)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--tf32", choices=["on", "off"], default="off",
                   help="CUDA: TF32 tensor-core math for fp32 matmuls and convolutions (default off)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="bf16/fp16: torch.autocast around the forward and the loss (fp16 with a GradScaler), "
                        "as a user turns mixed precision on; CPU autocast takes bf16 only")
    p.add_argument("--steps", type=int, default=50, help="timed steps, after the warm-up")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("--data-dir", help="train from this image folder (ROOT/train/CLASS/*.jpg, torchvision's "
                                      "ImageFolder) instead of random inputs; --input-shape is then 3xSxS")
    p.add_argument("--image-size", type=int, default=224, help="--data-dir: RandomResizedCrop size S (default 224)")
    p.add_argument("--workers", type=int, default=4, help="--data-dir: DataLoader worker processes (default 4)")
    args = p.parse_args(argv)
    for name in ("width", "batch_size", "threads", "steps", "image_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be 0 or more, got {args.warmup}")
    if not (args.device == "cpu" or args.device == "cuda" or args.device.startswith("cuda:")):
        p.error(f"--device must be cpu, cuda or cuda:N, got '{args.device}'")
    if args.workers < 0:
        p.error(f"--workers must be 0 or more, got {args.workers}")
    if args.data_dir is not None:
        args.input_shape = (3, args.image_size, args.image_size)
    return args


def image_folder_batches(args, pin_memory: bool):
    """An endless stream of (epoch, (images, labels)) from torchvision's ImageFolder + DataLoader."""
    import os
    import torchvision
    from torchvision import transforms

    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = torchvision.datasets.ImageFolder(os.path.join(args.data_dir, "train"), transform=transform)
    if len(dataset) < args.batch_size:
        raise SystemExit(f"torch_train: {args.data_dir}/train holds {len(dataset)} images, fewer than a batch "
                         f"of {args.batch_size}")
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, pin_memory=pin_memory,
        persistent_workers=args.workers > 0, drop_last=True,
        generator=torch.Generator().manual_seed(args.seed))

    def stream():
        epoch = 0
        while True:
            for batch in loader:
                yield epoch, batch
            epoch += 1

    info = {"data_dir": args.data_dir, "images": len(dataset), "classes": len(dataset.classes),
            "batches_per_epoch": len(loader), "workers": args.workers, "pin_memory": pin_memory,
            "torchvision_version": torchvision.__version__,
            "transforms": "RandomResizedCrop(%d)+RandomHorizontalFlip+ToTensor+Normalize(ImageNet)" % args.image_size}
    return stream(), info


def set_tf32(enabled: bool) -> dict:
    """Sets TF32 for cuBLAS and cuDNN with whichever API this torch has; returns what is in force."""
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        precision = "tf32" if enabled else "ieee"   # torch >= 2.9 (the allow_tf32 flags are deprecated)
        matmul.fp32_precision = precision
        conv.fp32_precision = precision
        return {"api": "fp32_precision", "matmul": matmul.fp32_precision, "conv": conv.fp32_precision}
    matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    return {"api": "allow_tf32", "matmul": "tf32" if matmul.allow_tf32 else "ieee",
            "conv": "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"}


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and device.index is None:
        device = torch.device("cuda", 0)   # torch.cuda.set_device refuses a device with no index
    extra = {}
    if cuda:
        if not torch.cuda.is_available():
            print(f"torch_train: --device {args.device} but torch {torch.__version__} sees no CUDA device",
                  file=sys.stderr)
            return 2
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = False   # heuristics, as pipewright (no autotuning)
        extra = {
            "tf32": set_tf32(args.tf32 == "on"),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_version": torch.backends.cudnn.version(),
            "torch_cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(device),
            "inputs": "host memory, copied to the GPU in each timed step",
        }

    if args.precision == "fp16" and not cuda:
        print("torch_train: --precision fp16 needs --device cuda (CPU autocast takes bf16 only)", file=sys.stderr)
        return 2
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.cuda.amp.GradScaler() if args.precision == "fp16" else None

    def autocast():
        if autocast_dtype is None:
            return contextlib.nullcontext()
        if device.type == "cpu":
            return torch.cpu.amp.autocast(dtype=autocast_dtype)
        return torch.autocast(device_type="cuda", dtype=autocast_dtype)

    num_classes, stream, data_info = NUM_CLASSES, None, None
    if args.data_dir is not None:
        stream, data_info = image_folder_batches(args, pin_memory=cuda)
        num_classes = data_info["classes"]
    model = MODELS[args.model](args.width, args.input_shape, num_classes).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    batches = [] if stream is not None else [
        (torch.randn(args.batch_size, *args.input_shape), torch.randint(0, NUM_CLASSES, (args.batch_size,)))
        for _ in range(DISTINCT_BATCHES)]

    step_seconds, gpu_ms = [], []
    wait_seconds, step_epochs = [], []   # --data-dir: each timed step's wait for its batch; every step's epoch
    loss_value = None
    for step in range(args.warmup + args.steps):
        if stream is None:
            images, labels = batches[step % DISTINCT_BATCHES]
        if cuda:
            torch.cuda.synchronize(device)
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if stream is None:
                begin.record()
        start = time.perf_counter()
        if stream is not None:
            epoch, (images, labels) = next(stream)   # blocks until the DataLoader has the batch
            step_epochs.append(epoch)
            if step >= args.warmup:
                wait_seconds.append(time.perf_counter() - start)
            if cuda:
                begin.record()   # the GPU time starts at the copy, not while the loader is waited for
            images = images.to(device, non_blocking=cuda)
            labels = labels.to(device, non_blocking=cuda)
        else:
            images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if cuda:
            end.record()
        loss_value = float(loss)   # reads the loss back (a sync on CUDA), as a pipewright step does
        if cuda:
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            step_seconds.append(elapsed)
            if cuda:
                gpu_ms.append(begin.elapsed_time(end))

    result = {
        "framework": "pytorch",
        "model": args.model,
        "device": args.device,
        "input_shape": "x".join(str(d) for d in args.input_shape),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "precision": args.precision,
        "samples_per_second": args.batch_size * len(step_seconds) / sum(step_seconds),
        "median_step_ms": statistics.median(step_seconds) * 1000.0,
        "steady_samples_per_second": args.batch_size / statistics.median(step_seconds),
        "width": args.width,
        "steps": args.steps,
        "warmup": args.warmup,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": loss_value,
        "torch_version": torch.__version__,
    }
    if data_info is not None:
        # Timed steps that began an epoch: their batch is the first a restarted DataLoader iterator
        # yields, so they carry the cost of an epoch boundary (large with a small folder).
        starts = {i for i, g in enumerate(range(args.warmup, args.warmup + args.steps))
                  if g == 0 or step_epochs[g] != step_epochs[g - 1]}
        rest = [i for i in range(args.steps) if i not in starts]
        result.update(data_info)
        result.update({
            "image_size": args.image_size,
            "data_wait_fraction": sum(wait_seconds) / sum(step_seconds),
            "median_data_wait_ms": statistics.median(wait_seconds) * 1000.0,
            "max_data_wait_ms": max(wait_seconds) * 1000.0,
            "epochs_covered": (args.warmup + args.steps) * args.batch_size / data_info["images"],
            "timed_epoch_start_steps": len(starts),
            "data_wait_fraction_excluding_epoch_starts":
                sum(wait_seconds[i] for i in rest) / sum(step_seconds[i] for i in rest) if rest else None,
        })
    if cuda:
        result["median_gpu_step_ms"] = statistics.median(gpu_ms)
        result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        result.update(extra)
    if data_info is not None:
        result["inputs"] = "torchvision ImageFolder + DataLoader (%d workers%s), epochs cycled" % (
            args.workers, ", pinned memory, copied to the GPU in each timed step" if cuda else "")
    if not args.json:
        print(f"pytorch {torch.__version__} {args.model} on {args.device}: {result['samples_per_second']:.1f} "
              f"samples/s, median step {result['median_step_ms']:.2f} ms over {args.steps} steps "
              f"(batch {args.batch_size}, input {result['input_shape']})", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
