#!/usr/bin/env bash
# Training throughput of pipewright against PyTorch on the same models, batch and threads, in
# one run: seed-cnn and resnet18 (width 32) on 1x28x28 inputs, CPU, in fp32 and in bf16 (PyTorch:
# autocast). Prints one JSON line per model and precision with both figures (median step time
# after warm-up) and their ratio, each framework's bf16-over-fp32 speed-up, and the bytes a 4-stage
# resnet18 pipeline sends across its boundaries per step in fp32 and bf16. Asserts nothing.
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

# pw_run MODEL PRECISION OUT.json [extra flags]: one pipewright run of the benchmark's shape.
pw_run() {
  local model=$1 precision=$2 summary=$3
  shift 3
  "$pw" train --model "$model" --width 32 --dataset synthetic --synthetic-shape 1x28x28 \
    --synthetic-size $((batch * (steps + warmup))) --batch-size "$batch" --threads "$threads" \
    --steps $((steps + warmup)) --warmup-steps "$warmup" --optimizer sgd --lr 0.01 --momentum 0.9 --eval-batches 0 \
    --precision "$precision" --summary "$summary" "$@" >/dev/null 2>"$out/pw.log" || { cat "$out/pw.log" >&2; exit 1; }
}

for model in seed-cnn resnet18; do
  for precision in fp32 bf16; do
    pw_run "$model" "$precision" "$out/pw-$precision.json"
    # PyTorch's bf16 is torch.cpu.amp.autocast around the forward and the loss, as a user turns it on.
    "$torch_python" bench/torch_train.py --model "$model" --width 32 --batch-size "$batch" --threads "$threads" \
      --steps "$steps" --warmup "$warmup" --precision "$precision" --json >"$out/torch-$precision.json"
  done
  "$torch_python" - "$out" "$model" "$threads" "$batch" <<'PY'
import json, sys
out, model, threads, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def pw(p): return json.load(open(f"{out}/pw-{p}.json"))
def torch(p): return json.loads(open(f"{out}/torch-{p}.json").read().strip().splitlines()[-1])
for p in ("fp32", "bf16"):
    a, b = pw(p), torch(p)
    print(json.dumps({
        "bench": "train_throughput", "model": model, "width": 32, "input": "1x28x28", "precision": p,
        "threads": threads, "batch_size": batch,
        "pipewright_samples_per_second": round(a["steady_samples_per_second"], 1),
        "pipewright_median_step_ms": round(a["median_step_ms"], 3),
        "pytorch_samples_per_second": round(b["steady_samples_per_second"], 1),
        "pytorch_median_step_ms": round(b["median_step_ms"], 3),
        "ratio_pipewright_over_pytorch": round(a["steady_samples_per_second"] / b["steady_samples_per_second"], 3),
    }))
print(json.dumps({
    "bench": "train_throughput_bf16_speedup", "model": model,
    "pipewright_bf16_over_fp32": round(pw("bf16")["steady_samples_per_second"] / pw("fp32")["steady_samples_per_second"], 3),
    "pytorch_bf16_over_fp32": round(torch("bf16")["steady_samples_per_second"] / torch("fp32")["steady_samples_per_second"], 3),
}))
PY
done

# What crosses the stage boundaries of a 4-stage resnet18 pipeline per step, fp32 against bf16
# (activations forward and their gradients back, payload bytes, from the run's summary).
for precision in fp32 bf16; do
  steps=2 warmup=0 pw_run resnet18 "$precision" "$out/pipe-$precision.json" --stages 4 --micro-batches 4
done
"$torch_python" - "$out" "$batch" <<'PY'
import json, sys
out, batch = sys.argv[1], int(sys.argv[2])
fp32 = json.load(open(f"{out}/pipe-fp32.json"))["boundary_bytes_per_step"]
bf16 = json.load(open(f"{out}/pipe-bf16.json"))["boundary_bytes_per_step"]
print(json.dumps({"bench": "pipeline_boundary_bytes", "model": "resnet18", "width": 32, "stages": 4,
                  "micro_batches": 4, "batch_size": batch, "fp32_bytes_per_step": fp32, "bf16_bytes_per_step": bf16,
                  "ratio_bf16_over_fp32": round(bf16 / fp32, 3)}))
PY
