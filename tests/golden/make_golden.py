#!/usr/bin/python3
"""Writes ops_golden.safetensors: small deterministic inputs and PyTorch's outputs and gradients
for the ops in kernels/ops/, checked by tests/kernels/test_ops_golden.cpp.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_golden.py
The file uses the safetensors layout (8-byte little-endian header length, JSON header, raw
little-endian bytes), written with json + struct so no extra package is needed.
"""
import os
import struct

import torch
import torch.nn.functional as F

import safetensors_file

torch.manual_seed(20240521)
torch.use_deterministic_algorithms(True)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_golden.safetensors")
tensors = {}


def put(name, t):
    tensors[name] = t.detach().cpu().clone().contiguous()   # a copy: some inputs are updated in place later


def rand(*shape, lo=-1.0, hi=1.0):
    return (torch.rand(*shape, dtype=torch.float64) * (hi - lo) + lo).float()


def with_grad(t):
    return t.clone().requires_grad_(True)


# conv2d, stride (2, 1), padding (1, 2), with bias; L = sum(y * r).
x, w, b = with_grad(rand(2, 3, 6, 5)), with_grad(rand(4, 3, 3, 2)), with_grad(rand(4))
y = F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2))
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(x=x, w=w, b=b, y=y, r=r, grad_x=x.grad, grad_w=w.grad, grad_b=b.grad).items():
    put("conv." + n, t)

# batch_norm training: output, running stats (momentum 0.1, unbiased variance), gradients;
# then evaluation with the updated running statistics.
x, gamma, beta = with_grad(rand(4, 3, 3, 5, lo=-1, hi=3)), with_grad(rand(3, lo=0.5, hi=1.5)), with_grad(rand(3))
running_mean, running_var = rand(3), rand(3, lo=0.5, hi=2.0)
put("bn.running_mean_in", running_mean)
put("bn.running_var_in", running_var)
y = F.batch_norm(x, running_mean, running_var, gamma, beta, training=True, momentum=0.1, eps=1e-5)
r = rand(*y.shape)
(y * r).sum().backward()
y_eval = F.batch_norm(x.detach(), running_mean, running_var, gamma.detach(), beta.detach(), training=False, eps=1e-5)
for n, t in dict(x=x, gamma=gamma, beta=beta, y=y, r=r, grad_x=x.grad, grad_gamma=gamma.grad, grad_beta=beta.grad,
                 running_mean_out=running_mean, running_var_out=running_var, y_eval=y_eval).items():
    put("bn." + n, t)

# max pooling 3x3, stride 2, padding 1.
x = with_grad(rand(2, 2, 7, 6))
y = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(x=x, y=y, r=r, grad_x=x.grad).items():
    put("maxpool." + n, t)

# average pooling 3x2, stride (2, 1), padding 1, padded cells counted.
x = with_grad(rand(2, 2, 7, 6))
y = F.avg_pool2d(x, kernel_size=(3, 2), stride=(2, 1), padding=1, count_include_pad=True)
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(x=x, y=y, r=r, grad_x=x.grad).items():
    put("avgpool." + n, t)

# adaptive average pooling 5x7 -> 3x2 (bins overlap).
x = with_grad(rand(2, 3, 5, 7))
y = F.adaptive_avg_pool2d(x, (3, 2))
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(x=x, y=y, r=r, grad_x=x.grad).items():
    put("adaptive." + n, t)

# linear.
x, w, b = with_grad(rand(5, 7)), with_grad(rand(4, 7)), with_grad(rand(4))
y = F.linear(x, w, b)
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(x=x, w=w, b=b, y=y, r=r, grad_x=x.grad, grad_w=w.grad, grad_b=b.grad).items():
    put("linear." + n, t)

# relu.
x = with_grad(rand(3, 8))
y = F.relu(x)
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(x=x, y=y, r=r, grad_x=x.grad).items():
    put("relu." + n, t)

# softmax cross-entropy, mean over the batch.
logits = with_grad(rand(6, 5, lo=-3, hi=3))
labels = torch.tensor([0, 4, 2, 2, 1, 3], dtype=torch.int64)
loss = F.cross_entropy(logits, labels)
loss.backward()
for n, t in dict(logits=logits, labels=labels, loss=loss.reshape(1), grad_logits=logits.grad).items():
    put("ce." + n, t)

# embedding with repeated ids: the table gradient adds repeated rows.
table = with_grad(rand(7, 3))
ids = torch.tensor([5, 0, 5, 2, 6, 5], dtype=torch.int64)
y = F.embedding(ids, table)
r = rand(*y.shape)
(y * r).sum().backward()
for n, t in dict(table=table, ids=ids, y=y, r=r, grad_table=table.grad).items():
    put("embedding." + n, t)

# optimizers: two steps each with gradients g1 then g2, from the same starting parameter.
param0, g1, g2 = rand(10), rand(10), rand(10)
for n, t in dict(param=param0, g1=g1, g2=g2).items():
    put("optim." + n, t)
optimizers = {
    "sgd": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda p: torch.optim.Adam([p], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "adagrad": lambda p: torch.optim.Adagrad([p], lr=0.05, eps=1e-10, weight_decay=0.01),
}
for name, make in optimizers.items():
    p = param0.clone().requires_grad_(True)
    opt = make(p)
    for step, g in enumerate((g1, g2), start=1):
        p.grad = g.clone()
        opt.step()
        put(f"optim.{name}.step{step}", p)

DTYPES = {torch.float32: ("F32", "<f"), torch.int64: ("I64", "<q")}
entries = []
for name in sorted(tensors):
    t = tensors[name]
    dtype, fmt = DTYPES[t.dtype]
    entries.append((name, dtype, t.shape, struct.pack("<%d%s" % (t.numel(), fmt[1]), *t.flatten().tolist())))
data_bytes = safetensors_file.write(OUT, entries, {"generator": "tests/golden/make_golden.py", "torch": torch.__version__})
print("wrote %s: %d tensors, %d tensor bytes" % (OUT, len(tensors), data_bytes))
