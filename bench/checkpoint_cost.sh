#!/usr/bin/env bash
# What an asynchronous checkpoint costs a running job: resnet50 (synthetic 3x64x64) on 4 stages,
# trained once without checkpoints and once with --checkpoint-every N. Prints one JSON line: step
# times of both runs, how long each checkpoint blocked the job (the host copy at the step
# boundary), how long the background write took, the bytes written per second, and the same
# bytes written by dd (conv=fsync) to the same folder in the same run as the peer. Asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
batch=${BATCH:-16}
steps=${STEPS:-24}
every=${EVERY:-6}
width=${WIDTH:-64}
pw=${PW_BIN:-build/bin/pipewright}
out=${OUT_DIR:-$(mktemp -d)}
trap 'rm -rf "$out"' EXIT

job=(train --model resnet50 --width "$width" --dataset synthetic --synthetic-shape 3x64x64
     --synthetic-size $((batch * steps)) --batch-size "$batch" --threads "$threads" --stages 4
     --steps "$steps" --warmup-steps 2 --optimizer sgd --lr 0.01 --eval-batches 0)
"$pw" "${job[@]}" --summary "$out/plain.json" >/dev/null 2>"$out/plain.log" || { cat "$out/plain.log" >&2; exit 1; }
"$pw" "${job[@]}" --checkpoint-dir "$out/ckpt" --checkpoint-every "$every" --keep-checkpoints 1 \
  --summary "$out/ckpt.json" >/dev/null 2>"$out/ckpt.log" || { cat "$out/ckpt.log" >&2; exit 1; }
manifest=$(ls -d "$out"/ckpt/step-*/manifest.json | tail -1)
bytes=$(python3 -c 'import json,sys; print(sum(f["bytes"] for f in json.load(open(sys.argv[1]))["files"]))' "$manifest")
# The peer: the same bytes through dd, flushed to the disk, in the same folder.
dd_start=$(date +%s.%N)
dd if=/dev/zero of="$out/ckpt/dd.bin" bs=1M count=$(( (bytes + 1048575) / 1048576 )) conv=fsync status=none
dd_end=$(date +%s.%N)
python3 - "$out/plain.json" "$out/ckpt.json" "$bytes" "$dd_start" "$dd_end" "$every" <<'PY'
import json, sys
plain, ckpt = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
nbytes, dd_seconds, every = int(sys.argv[3]), float(sys.argv[5]) - float(sys.argv[4]), int(sys.argv[6])
c = ckpt["checkpoints"]
mean_ms = lambda s: 1e3 * s["batch_size"] / s["samples_per_second"]
step_ms = mean_ms(plain)
blocked_ms = 1e3 * c["blocked_seconds"] / max(1, c["written"])
write_s = c["last_write_seconds"]
print(json.dumps({
    "bench": "checkpoint_cost", "model": "resnet50", "input": "3x64x64", "stages": 4,
    "batch_size": plain["batch_size"], "steps": plain["steps"], "checkpoint_every": every,
    "checkpoints_written": c["written"], "checkpoint_bytes": nbytes,
    "step_ms_without": round(step_ms, 1), "step_ms_with": round(mean_ms(ckpt), 1),
    "median_step_ms_without": round(plain["median_step_ms"], 1), "median_step_ms_with": round(ckpt["median_step_ms"], 1),
    "blocked_ms_per_checkpoint": round(blocked_ms, 1),
    "blocked_fraction_of_a_step": round(blocked_ms / step_ms, 4),
    "background_write_seconds": round(write_s, 3),
    "write_mb_per_second": round(nbytes / 1e6 / write_s, 1) if write_s > 0 else None,
    "dd_mb_per_second": round(nbytes / 1e6 / dd_seconds, 1),
    "ratio_write_over_dd": round((nbytes / write_s) / (nbytes / dd_seconds), 3) if write_s > 0 else None,
}))
PY
