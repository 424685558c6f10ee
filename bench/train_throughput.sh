#!/usr/bin/env bash
# Training throughput of pipewright against PyTorch on the same models, batch and threads, in
# one run: seed-cnn and resnet18 (width 32) on 1x28x28 inputs, CPU. Prints one JSON line per
# model with both figures (median step time after warm-up) and their ratio. Asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
batch=${BATCH:-64}
steps=${STEPS:-60}
warmup=${WARMUP:-10}
pw=${PW_BIN:-build/bin/pipewright}
torch_python=${TORCH_PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for model in seed-cnn resnet18; do
  "$pw" train --model "$model" --width 32 --dataset synthetic --synthetic-shape 1x28x28 \
    --synthetic-size $((batch * (steps + warmup))) --batch-size "$batch" --threads "$threads" \
    --steps $((steps + warmup)) --warmup-steps "$warmup" --optimizer sgd --lr 0.01 --momentum 0.9 --eval-batches 0 \
    --summary "$out/pw.json" >/dev/null 2>"$out/pw.log" || { cat "$out/pw.log" >&2; exit 1; }
  "$torch_python" bench/torch_train.py --model "$model" --width 32 --batch-size "$batch" --threads "$threads" \
    --steps "$steps" --warmup "$warmup" --json >"$out/torch.json"
  "$torch_python" - "$out/pw.json" "$out/torch.json" "$model" "$threads" "$batch" <<'PY'
import json, sys
pw = json.load(open(sys.argv[1]))
torch = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
pw_sps = pw["steady_samples_per_second"]
print(json.dumps({
    "bench": "train_throughput", "model": sys.argv[3], "width": 32, "input": "1x28x28",
    "threads": int(sys.argv[4]), "batch_size": int(sys.argv[5]),
    "pipewright_samples_per_second": round(pw_sps, 1),
    "pipewright_median_step_ms": round(pw["median_step_ms"], 3),
    "pytorch_samples_per_second": round(torch["samples_per_second"], 1),
    "pytorch_median_step_ms": round(torch["median_step_ms"], 3),
    "ratio_pipewright_over_pytorch": round(pw_sps / torch["samples_per_second"], 3),
}))
PY
done
