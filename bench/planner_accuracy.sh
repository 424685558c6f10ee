#!/usr/bin/env bash
# How close `pipewright plan`'s predictions are to real runs: for each layout below (resnet18,
# resnet50 and vgg16 at a small width on 3x32x32 synthetic samples; 1-4 stages, 1-2 replicas, three
# schedules, with and without recomputation and optimizer-state sharding) it plans the job with the
# same flags, trains it for a few steps, and prints the predicted and measured step time (the
# summary's median after warm-up) and peak memory per rank (the summary's `memory`), each layout's
# errors, and the mean absolute error of each. Asserts nothing: the figures depend on the machine
# (the prediction counts the job's own ranks sharing the host's cores, not other work on it: on a
# loaded machine the measured steps run slower than the layers did when profiled).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
width=${WIDTH:-8}
batch=${BATCH:-16}
steps=${STEPS:-12}
warmup=${WARMUP:-4}
pw=${PW_BIN:-build/bin/pipewright}
python=${PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

layouts=(
  "--model resnet18 --stages 1"
  "--model resnet18 --stages 2 --micro-batches 4 --schedule 1f1b"
  "--model resnet18 --stages 2 --micro-batches 4 --schedule gpipe --recompute all"
  "--model resnet18 --stages 1 --replicas 2 --shard-optimizer"
  "--model resnet18 --stages 4 --micro-batches 4 --schedule zb-h1"
  "--model resnet50 --stages 2 --micro-batches 2 --schedule 1f1b"
  "--model resnet50 --stages 2 --micro-batches 4 --schedule zb-h1 --recompute all"
  "--model vgg16 --stages 2 --micro-batches 2 --schedule gpipe"
  "--model vgg16 --stages 1 --replicas 2"
)
common="--width $width --dataset synthetic --synthetic-shape 3x32x32 --batch-size $batch --threads $threads --optimizer adam"

i=0
for layout in "${layouts[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  "$pw" plan $common $layout --partition profile --repeats 3 --json >"$out/plan$i.json" 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
  # The run takes the plan's split: profiling again would time the layers anew and may cut elsewhere.
  split=$("$python" -c 'import json, sys; s = json.load(open(sys.argv[1]))["split"]; print(",".join(str(p["begin"]) for p in s[1:]))' "$out/plan$i.json")
  split_flag=()
  [ -n "$split" ] && split_flag=(--split "$split")
  # shellcheck disable=SC2086
  "$pw" train $common $layout "${split_flag[@]}" --synthetic-size $((batch * (steps + warmup))) --steps $((steps + warmup)) \
    --warmup-steps "$warmup" --eval-batches 0 --summary "$out/run$i.json" >/dev/null 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
  echo "$layout" >"$out/layout$i"
done

"$python" - "$out" "$i" <<'EOF'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
step_errors, memory_errors = [], []
print(f"{'layout':<70} {'pred ms':>8} {'meas ms':>8} {'err':>6}   peak per rank predicted/measured (err)")
for i in range(1, n + 1):
    plan = json.load(open(f"{out}/plan{i}.json"))
    run = json.load(open(f"{out}/run{i}.json"))
    layout = open(f"{out}/layout{i}").read().strip()
    predicted, measured = plan["predicted_step_seconds"] * 1e3, run["median_step_ms"]
    err = (predicted - measured) / measured
    step_errors.append(abs(err))
    stages = plan["stages"]
    ranks = []
    for m in run["memory"]:
        p = plan["memory"][m["rank"] % stages]["peak_bytes"]
        e = (p - m["peak_bytes"]) / m["peak_bytes"]
        memory_errors.append(abs(e))
        ranks.append(f"{p / 2**20:.1f}/{m['peak_bytes'] / 2**20:.1f} MiB ({e:+.0%})")
    print(f"{layout:<70} {predicted:8.1f} {measured:8.1f} {err:+6.0%}   " + ", ".join(ranks))
print(json.dumps({"layouts": n,
                  "step_time_mean_abs_error": round(sum(step_errors) / len(step_errors), 4),
                  "peak_memory_mean_abs_error": round(sum(memory_errors) / len(memory_errors), 4)}))
EOF
