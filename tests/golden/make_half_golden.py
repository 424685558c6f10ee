#!/usr/bin/python3
"""Writes half_golden.safetensors: float32 inputs (ordinary values over many magnitudes, rounding
ties, the edges of each format, zeros, infinities, NaN) and PyTorch's conversions of them to
bfloat16 and float16, checked by tests/kernels/test_cast.cpp.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_half_golden.py
Written with json + struct in the safetensors layout, so no extra package is needed.
"""
import os

import torch

import safetensors_file

torch.manual_seed(20261123)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "half_golden.safetensors")

special = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"),
           # bfloat16 ties (8 mantissa bits) and their neighbours
           1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, -(1.0 + 2.0 ** -8),
           # float16 ties (11 bits), its largest value, the overflow boundary, subnormals
           1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 65504.0, 65519.0, 65520.0, 65536.0, -65520.0,
           2.0 ** -14, 2.0 ** -15, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -25,
           6.1e-5, 1e-7, -3e-6,
           # float32 edges
           3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38, 1e-45]
magnitudes = torch.logspace(-9, 6, 64, dtype=torch.float64)
ordinary = (torch.randn(64, 32, dtype=torch.float64) * magnitudes[:, None]).flatten()
x = torch.cat([torch.tensor(special, dtype=torch.float64), ordinary]).float()

tensors = {"input": x, "bf16": x.to(torch.bfloat16), "f16": x.to(torch.float16)}


def raw(t):
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.contiguous().view(torch.int16).numpy().tobytes()
    return t.contiguous().numpy().tobytes()


names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
entries = [(name, names[t.dtype], t.shape, raw(t)) for name, t in tensors.items()]
data_bytes = safetensors_file.write(OUT, entries, {"made_by": "tests/golden/make_half_golden.py", "torch": torch.__version__})
print(OUT, data_bytes, "bytes of tensors,", x.numel(), "values")
