#!/usr/bin/env bash
# Sets up, builds, and trains the seed CNN for one epoch on Fashion-MNIST on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/bin/pipewright train --model seed-cnn --dataset fashion-mnist --epochs 1 --batch-size 64 --optimizer adam --lr 0.001 \
  --threads "$(nproc)" --summary build/demo-summary.json --save build/seed-cnn.safetensors "$@"
echo "summary: build/demo-summary.json, weights: build/seed-cnn.safetensors"
