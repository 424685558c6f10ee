#!/usr/bin/python3
"""Writes resize_golden.safetensors: a small generated RGB image (F32 holding 0..255 integers,
HxWx3) and torchvision's antialiased bilinear resizes of it (CHW, on 0..1 values), checked by
tests/models/data/test_image_transform.cpp:
  eval_s32, eval_s24: resize(shorter side S*256//224, antialias=True) + center_crop(S), the
                      evaluation transform of torchvision's ImageNet recipe
  crop_down, crop_up: resized_crop(top, left, h, w, [S, S], antialias=True), as RandomResizedCrop
                      applies its box (a downscale with a changed aspect, and an upscale)

Run with Debian's python3-torchvision:  /usr/bin/python3 tests/golden/make_resize_golden.py
Written with json + struct in the safetensors layout, so no extra package is needed.
"""
import os

import torch
import torchvision
import torchvision.transforms.functional as F

import safetensors_file

torch.manual_seed(20250125)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resize_golden.safetensors")

H, W = 43, 61
y = torch.linspace(0, 1, H)[:, None, None]
x = torch.linspace(0, 1, W)[None, :, None]
c = torch.tensor([0.0, 1.0, 2.0])[None, None, :]
smooth = 128 + 90 * torch.sin(6 * x + 2 * c) * torch.cos(4 * y - c)
edges = 60 * ((x * 7 + y * 5).floor() % 2)   # sharp edges, where antialiasing matters
image = (smooth + edges - 30 + 20 * torch.randn(H, W, 3)).clamp(0, 255).round()
chw = image.permute(2, 0, 1) / 255.0

tensors = {"image": image.float()}
for s in (32, 24):
    tensors[f"eval_s{s}"] = F.center_crop(F.resize(chw, s * 256 // 224, antialias=True), [s, s])
tensors["crop_down"] = F.resized_crop(chw, 5, 9, 30, 40, [16, 16], antialias=True)
tensors["crop_up"] = F.resized_crop(chw, 2, 3, 10, 12, [32, 32], antialias=True)

entries = [(name, "F32", t.shape, t.contiguous().float().numpy().tobytes()) for name, t in tensors.items()]
data_bytes = safetensors_file.write(OUT, entries, {"made_by": "tests/golden/make_resize_golden.py", "torch": torch.__version__,
                                                   "torchvision": torchvision.__version__})
print(OUT, data_bytes, "bytes of tensors")
