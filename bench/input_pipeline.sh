#!/usr/bin/env bash
# The image input pipeline against torchvision's, and what it costs training, in one run.
#
# 1. An ImageNet-like folder of real photographs (bench/make_photo_folder.py: 384 training JPEGs,
#    mostly 500x375, quality 90, 12 classes), unless PHOTO_DIR names one already made.
# 2. images/s of decode + RandomResizedCrop(224) + horizontal flip + ToTensor + Normalize into
#    batches of 64, with 1 and 2 threads: pipewright's own image data set filled by the engine's
#    gather in a oneTBB arena of N threads (build/bin/input_bench) beside torchvision's ImageFolder +
#    DataLoader with N worker processes (bench/torch_input.py), alternating, REPEATS times each
#    (the fastest run of each counts); one JSON line per thread count with both figures and their
#    ratio.
# 3. resnet50 (--width WIDTH) at 3x224x224 trained by `pipewright train` from that folder and from
#    --dataset synthetic of the same shape, alternating, REPEATS times each (the fastest counts),
#    with --trace. From the trace, over the steps after the warm-up: samples/s over the median step
#    counting the wait for its batch (step k runs from the start of its "data" span, the training
#    loop waiting on TrainFeed::next while the prefetcher decodes, to the end of its "step" span;
#    the summary's samples/s leaves that wait out), the ratio folder over synthetic, and the share
#    of all those steps' time the first stage waited for data.
# Prints figures only; asserts nothing. The machine's 1-minute load average is printed beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${SECONDS_PER_RUN:-10}
batch=${BATCH:-64}
width=${WIDTH:-8}
train_batch=${TRAIN_BATCH:-32}
train_steps=${TRAIN_STEPS:-12}
train_warmup=${TRAIN_WARMUP:-2}
threads_list=${THREADS_LIST:-"1 2"}
repeats=${REPEATS:-2}
train_threads=${TRAIN_THREADS:-2}
pw=${PW_BIN:-build/bin/pipewright}
input_bench=${INPUT_BENCH_BIN:-build/bin/input_bench}
python=${TORCH_PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

photos=${PHOTO_DIR:-$out/photos}
[ -d "$photos/train" ] || "$python" bench/make_photo_folder.py "$photos" >&2

for threads in $threads_list; do
  for r in $(seq "$repeats"); do
    "$input_bench" --data-dir "$photos" --threads "$threads" --batch-size "$batch" --seconds "$seconds" >"$out/pw-$threads-$r.json"
    "$python" bench/torch_input.py --data-dir "$photos" --workers "$threads" --batch-size "$batch" \
      --seconds "$seconds" >"$out/torch-$threads-$r.json"
  done
  "$python" - "$out" "$threads" "$repeats" <<'PY'
import json, os, sys
out, threads, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
def best(framework):   # the fastest of the repeats: the least disturbed by other work on the machine
    runs = [json.loads(open(f"{out}/{framework}-{threads}-{r}.json").read().strip().splitlines()[-1]) for r in range(1, repeats + 1)]
    return max(runs, key=lambda run: run["images_per_second"])
pw, tv = best("pw"), best("torch")
print(json.dumps({
    "bench": "input_pipeline", "transforms": "RandomResizedCrop(224)+flip+ToTensor+Normalize",
    "threads": pw["threads"], "batch_size": pw["batch_size"], "images_in_folder": pw["samples_in_folder"], "best_of": repeats,
    "pipewright_images_per_second": round(pw["images_per_second"], 1),
    "torchvision_images_per_second": round(tv["images_per_second"], 1),
    "pipewright_images_per_second_per_thread": round(pw["images_per_second"] / pw["threads"], 1),
    "torchvision_images_per_second_per_worker": round(tv["images_per_second"] / tv["threads"], 1),
    "ratio_pipewright_over_torchvision": round(pw["images_per_second"] / tv["images_per_second"], 3),
    "load_average_1m": round(os.getloadavg()[0], 2),
}))
PY
done

# train_run NAME [data flags]: resnet50 at 3x224x224, traced after the warm-up.
train_run() {
  local name=$1
  shift
  "$pw" train --model resnet50 --width "$width" "$@" --batch-size "$train_batch" --threads "$train_threads" \
    --steps "$train_steps" --warmup-steps "$train_warmup" --optimizer sgd --lr 0.01 --momentum 0.9 --eval-batches 0 \
    --summary "$out/$name.json" --trace "$out/$name.trace.json" --trace-steps "$train_warmup:$train_steps" \
    >/dev/null 2>"$out/$name.log" || { cat "$out/$name.log" >&2; exit 1; }
}
for r in $(seq "$repeats"); do
  train_run "folder-$r" --dataset image-folder --data-dir "$photos" --image-size 224
  train_run "synthetic-$r" --dataset synthetic --synthetic-shape 3x224x224 --synthetic-size $((train_batch * train_steps))
done
"$python" - "$out" "$width" "$train_batch" "$train_threads" "$repeats" <<'PY'
import json, os, sys
out, width, batch, threads, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def traced(name):
    """Samples/s over the traced steps, counting the wait for each batch, and the share of it spent waiting."""
    events = [e for e in json.load(open(f"{out}/{name}.trace.json"))["traceEvents"] if e.get("ph") == "X"]
    data = {e["args"]["step"]: e for e in events if e["args"]["kind"] == "data"}
    steps = {e["args"]["step"]: e for e in events if e["args"]["kind"] == "step"}
    timed = sorted(set(data) & set(steps))
    walls_us = sorted(steps[s]["ts"] + steps[s]["dur"] - data[s]["ts"] for s in timed)
    median_us = walls_us[len(walls_us) // 2]   # as the summary's median step: robust to a burst of other work
    wait_us = sum(data[s]["dur"] for s in timed)
    return {"steps": len(timed), "samples_per_second": batch / (median_us * 1e-6),
            "step_ms": median_us * 1e-3, "data_wait_share": wait_us / sum(walls_us)}

runs = {name: [traced(f"{name}-{r}") for r in range(1, repeats + 1)] for name in ("folder", "synthetic")}
folder, synthetic = (max(runs[name], key=lambda t: t["samples_per_second"]) for name in ("folder", "synthetic"))
summary = json.load(open(f"{out}/folder-1.json"))
print(json.dumps({
    "bench": "input_pipeline_training", "model": "resnet50", "width": width, "input": "3x224x224",
    "batch_size": batch, "threads": threads, "timed_steps": folder["steps"], "best_of": repeats, "folder": summary["dataset"],
    "folder_samples_per_second": round(folder["samples_per_second"], 2),
    "synthetic_samples_per_second": round(synthetic["samples_per_second"], 2),
    "ratio_folder_over_synthetic": round(folder["samples_per_second"] / synthetic["samples_per_second"], 3),
    "folder_samples_per_second_each_run": [round(t["samples_per_second"], 2) for t in runs["folder"]],
    "synthetic_samples_per_second_each_run": [round(t["samples_per_second"], 2) for t in runs["synthetic"]],
    "folder_median_step_ms_with_wait": round(folder["step_ms"], 1),
    "synthetic_median_step_ms_with_wait": round(synthetic["step_ms"], 1),
    "folder_data_wait_share": round(folder["data_wait_share"], 6),
    "synthetic_data_wait_share": round(synthetic["data_wait_share"], 6),
    "load_average_1m": round(os.getloadavg()[0], 2),
}))
PY
