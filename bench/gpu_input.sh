#!/usr/bin/env bash
# The image input pipeline on a GPU: resnet50 on 2 pipeline stages trained from tar shards, beside
# the same job on synthetic data (the ceiling) and torchvision's ImageFolder + DataLoader feeding
# the PyTorch peer (bench/torch_train.py) on the same GPU. One command, one report.
#
#   bench/gpu_input.sh --photos DIR --out DIR [--bundle DIR | --pw BINARY] [options]
#
#   --photos DIR          image folder ROOT/train/CLASS/*.jpg (bench/make_photo_folder.py makes one)
#   --out DIR             receives report.json, report.txt and logs.tar.gz (every log, the summaries,
#                         the traces, pipewright prof's JSON and timeline), rewritten after each step
#   --bundle DIR          the unpacked GPU bundle (scripts/gpu_bundle.sh): pipewright runs as
#                         DIR/run.sh DIR/bin/pipewright (the bundle's libraries, the machine's CUDA)
#   --pw BINARY           run this pipewright directly instead (a source tree: build/bin/pipewright)
#   --budget SECONDS      the whole run's time (default 420); each step's limit is cut to what is left
#   --steps N             timed steps of each training run (default 100), after --warmup N (default 10)
#   --batch-size N        global batch (default 64); --micro-batches N (default 4)
#   --loader-threads N    pipewright's loader pool, and the DataLoader's worker count (default 12)
#   --workers N           the DataLoader's workers, if not --loader-threads
#   --prefetch-batches N  pipewright batches decoded ahead (default 4)
#   --width N             ResNet width (default 64: the standard resnet50); --image-size S (default 224)
#   --devices LIST        pipewright's stages, one device each (default cuda:0,cuda:0)
#   --torch-device DEV    the peer's device (default cuda)
#   --threads N           pipewright --threads (CPU devices) and the peer's torch threads (default: unset, 2)
#   --tf32 on|off         TF32 on both sides (default off)
#   --precision P         fp32 (default) or bf16 on both sides (pipewright --precision, the peer's autocast)
#   --python PY           the peer's python (default: the first of /opt/torch/.venv/bin/python3,
#                         python3, /usr/bin/python3 that imports torch and torchvision)
#
# Steps, each with a time limit and a log: host (GPU, cores, versions, pipewright info), pack
# (pipewright data pack into tar shards), pw_shards (resnet50 from the shards, --trace over the
# timed steps, then pipewright prof), torch (the peer from the folder), pw_synthetic (the same job on
# --dataset synthetic of the same shape and size), inspect (pipewright data inspect: the shards
# checked, one thread's decode speed on this machine). The loader's wait share is read from the
# trace: the first stage's "data" spans (the training loop blocked on its next batch) over the time
# from each such span's start to the end of that stage's step. A small folder is trained over many
# epochs, and each epoch restarts both loaders, so the report gives the figures with and without the
# steps that begin an epoch. Asserts nothing about speed: a step fails only if its command fails.
# Exit 0 when every step ran, 1 otherwise. See docs/gpu.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peer=$here/torch_train.py
die() { echo "gpu_input: $*" >&2; exit 2; }

bundle="" pw="" photos="" out="" python="" budget=420 steps=100 warmup=10 batch=64 micro=4 loader_threads=12
workers="" prefetch=4 width=64 image_size=224 devices=cuda:0,cuda:0 torch_device=cuda threads="" tf32=off precision=fp32
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    --bundle|--pw|--photos|--out|--python|--devices|--torch-device|--tf32|--precision|--budget|--steps|--warmup|--batch-size|\
    --micro-batches|--loader-threads|--workers|--prefetch-batches|--width|--image-size|--threads)
      [ $# -ge 2 ] || die "$1 needs a value"
      v=$2
      case $1 in
        --bundle) bundle=$v ;; --pw) pw=$v ;; --photos) photos=$v ;; --out) out=$v ;; --python) python=$v ;;
        --devices) devices=$v ;; --torch-device) torch_device=$v ;;
        --tf32) case $v in on|off) tf32=$v ;; *) die "--tf32 takes on or off, got '$v'" ;; esac ;;
        --precision) case $v in fp32|bf16) precision=$v ;; *) die "--precision takes fp32 or bf16, got '$v'" ;; esac ;;
        *) [[ $v =~ ^[0-9]+$ ]] || die "$1 needs a whole number, got '$v'"
           case $1 in
             --budget) budget=$v ;; --steps) steps=$v ;; --warmup) warmup=$v ;; --batch-size) batch=$v ;;
             --micro-batches) micro=$v ;; --loader-threads) loader_threads=$v ;; --workers) workers=$v ;;
             --prefetch-batches) prefetch=$v ;; --width) width=$v ;; --image-size) image_size=$v ;;
             --threads) threads=$v ;;
           esac ;;
      esac
      shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$photos" ] || die "--photos DIR is required (ROOT/train/CLASS/*.jpg)"
[ -n "$out" ] || die "--out DIR is required"
[ -d "$photos/train" ] || die "$photos has no train/ folder (expected ROOT/train/CLASS/*.jpg)"
for n in steps batch micro width image_size budget; do [ "${!n}" -ge 1 ] || die "--${n//_/-} must be at least 1"; done
workers=${workers:-$loader_threads}
if [ -n "$pw" ]; then
  [ -x "$pw" ] || die "--pw $pw is not an executable"
  pwcmd=("$pw")
elif [ -n "$bundle" ]; then
  [ -x "$bundle/run.sh" ] && [ -x "$bundle/bin/pipewright" ] || die "$bundle is not an unpacked GPU bundle (no run.sh, bin/pipewright)"
  bundle=$(cd "$bundle" && pwd)
  pwcmd=("$bundle/run.sh" "$bundle/bin/pipewright")
else
  die "give --bundle DIR (the unpacked GPU bundle) or --pw BINARY"
fi
[ -f "$peer" ] || die "no PyTorch peer at $peer"
stages=$(awk -F, '{ print NF }' <<<"$devices")
if [ -z "$python" ]; then
  for p in /opt/torch/.venv/bin/python3 python3 /usr/bin/python3; do
    command -v "$p" >/dev/null 2>&1 || continue
    timeout 120 "$p" -c 'import torch, torchvision' >/dev/null 2>&1 && { python=$(command -v "$p"); break; }
  done
  [ -n "$python" ] || die "no python3 that imports torch and torchvision (give --python)"
fi
photos=$(cd "$photos" && pwd)
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_input.XXXXXX") || die "cannot create a work folder"
trap '[ "${PW_GPU_INPUT_KEEP_WORK:-0}" = 1 ] || rm -rf "$work"' EXIT
mkdir -p "$work/logs"
start=$(date +%s)
deadline=$((start + budget))
total=$((warmup + steps))

# The configuration, as the report shows it.
{
  printf 'started\t"%s"\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf 'budget_seconds\t%s\n' "$budget"
  printf 'pipewright\t"%s"\n' "${pwcmd[*]}"
  printf 'torch_python\t"%s"\n' "$python"
  printf 'photos\t"%s"\n' "$photos"
  printf 'model\t"resnet50"\nwidth\t%s\nimage_size\t%s\nbatch_size\t%s\n' "$width" "$image_size" "$batch"
  printf 'stages\t%s\nmicro_batches\t%s\nschedule\t"1f1b"\ndevices\t"%s"\n' "$stages" "$micro" "$devices"
  printf 'timed_steps\t%s\nwarmup_steps\t%s\n' "$steps" "$warmup"
  printf 'loader_threads\t%s\nprefetch_batches\t%s\ntorch_workers\t%s\ntorch_device\t"%s"\ntf32\t"%s"\n' \
    "$loader_threads" "$prefetch" "$workers" "$torch_device" "$tf32"
  printf 'precision\t"%s"\n' "$precision"
  printf 'threads\t"%s"\n' "${threads:-default}"
} >"$work/config.tsv"

# ---------------------------------------------------------------------------------------------
# The report writer (standard-library Python): reads the work folder, writes OUT/report.json,
# OUT/report.txt and OUT/logs.tar.gz.
helper=$work/report.py
cat >"$helper" <<'PY'
import io, json, os, statistics, sys, tarfile

work, out = sys.argv[2], sys.argv[3]

def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def tsv(name):
    rows = []
    try:
        for line in open(os.path.join(work, name), encoding="utf-8", errors="replace"):
            if "\t" in line:
                rows.append(line.rstrip("\n").split("\t"))
    except OSError:
        pass
    return rows

def kv(name):
    d = {}
    for row in tsv(name):
        try:
            d[row[0]] = json.loads(row[1])
        except ValueError:
            d[row[0]] = row[1]
    return d

def traced(path, batch, bpe):
    """The first stage's steps from the trace: each step's wall time runs from the start of its data
    span (the training loop waiting for the batch) to the end of stage 0's step span. A world of
    threads records every rank's data spans on rank 0's track, so stage 0's is the one of the step
    that ends nearest the start of stage 0's step (host times both; the last stage reads labels
    only, and in 1F1B it finishes a step, and asks for the next batch, before the first stage)."""
    try:
        events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError):
        return None
    step0 = {e["args"]["step"]: e for e in events if e["args"].get("kind") == "step" and e["args"].get("stage") == 0
             and e["args"].get("replica", 0) == 0}
    data = {}
    for e in events:
        if e["args"].get("kind") == "data":
            data.setdefault(e["args"]["step"], []).append(e)
    rows = []
    for s in sorted(step0):
        begin = step0[s]["ts"]
        spans = data.get(s, [])
        if not spans:
            continue
        d = min(spans, key=lambda d: abs(begin - d["ts"] - d["dur"]))
        end = step0[s]["ts"] + step0[s]["dur"]
        rows.append((s, d["dur"], end - d["ts"], d["ts"], end))
    if not rows:
        return None
    waits = [r[1] for r in rows]
    walls = [r[2] for r in rows]
    rest = [r for r in rows if bpe is None or r[0] % bpe != 0]
    span_us = rows[-1][4] - rows[0][3]
    fig = {
        "timed_steps": len(rows),
        "samples_per_second": batch * len(rows) / (sum(walls) * 1e-6),
        "samples_per_second_median_step": batch / (statistics.median(walls) * 1e-6),
        "samples_per_second_wall": batch * len(rows) / (span_us * 1e-6),
        "median_step_ms_with_wait": statistics.median(walls) * 1e-3,
        "data_wait_share": sum(waits) / sum(walls),
        "median_data_wait_ms": statistics.median(waits) * 1e-3,
        "max_data_wait_ms": max(waits) * 1e-3,
        "epoch_start_steps": len(rows) - len(rest),
        "data_wait_share_excluding_epoch_starts": (sum(r[1] for r in rest) / sum(r[2] for r in rest)) if rest else None,
        "data_spans_per_step": statistics.median(len(v) for v in data.values()),
    }
    return fig

def pw_figures(label, batch, bpe, images):
    s = load(label + ".summary.json")
    if s is None:
        return None
    fig = {k: s.get(k) for k in ("dataset", "params", "final_loss", "median_step_ms", "steady_samples_per_second",
                                  "peak_memory_bytes", "stage_peak_memory_bytes", "stage_busy_fraction", "split",
                                  "wall_seconds", "devices", "bad_samples") if k in s}
    fig["summary_steady_samples_per_second"] = fig.pop("steady_samples_per_second", None)
    fig["summary_median_step_ms"] = fig.pop("median_step_ms", None)
    t = traced(os.path.join(work, label + ".trace.json"), batch, bpe)
    if t:
        fig.update(t)
    if images:
        fig["epochs_covered"] = s.get("steps", 0) * batch / images
    p = load(label + ".prof.json")
    if p:
        fig["prof"] = {k: p.get(k) for k in ("step_ms", "measured_bubble", "analytic_bubble", "imbalance", "steps")}
        fig["prof"]["ranks_busy_bubble_waiting"] = [[round(r.get("busy", 0), 4), round(r.get("bubble", 0), 4),
                                                     round(r.get("waiting", 0), 4)] for r in p.get("ranks", [])]
    return fig

def ratio(a, b):
    return a / b if a and b else None

def render():
    cfg = kv("config.tsv")
    host = kv("host.tsv")
    batch = int(cfg.get("batch_size", 64))
    manifest = load("shards/manifest.json")
    images = classes = None
    if manifest:
        images = manifest["splits"]["train"]["samples"]
        classes = len(manifest.get("classes", []))
    bpe = images // batch if images else None
    shards = pw_figures("pw_shards", batch, bpe, images)
    synthetic = pw_figures("pw_synthetic", batch, bpe, images)
    torch = load("torch.json")
    steps = []
    for row in tsv("status.tsv"):
        name, status, seconds, limit, note = (row + [""] * 5)[:5]
        steps.append({"name": name, "status": status, "seconds": float(seconds), "limit_seconds": int(limit),
                      "note": note, "log": "logs/%s.log" % name})
    running = sys.argv[4] if len(sys.argv) > 4 else ""
    if running:
        steps.append({"name": running, "status": "RUNNING", "seconds": 0, "limit_seconds": 0,
                      "note": "the run ended inside this step", "log": "logs/%s.log" % running})
    failed = any(s["status"] in ("FAIL", "RUNNING") for s in steps)
    g = lambda d, k: d.get(k) if d else None
    headline = {
        "pipewright_shards_samples_per_second": g(shards, "samples_per_second"),
        "pipewright_synthetic_samples_per_second": g(synthetic, "samples_per_second"),
        "pipewright_loader_wait_share": g(shards, "data_wait_share"),
        "pipewright_loader_wait_share_excluding_epoch_starts": g(shards, "data_wait_share_excluding_epoch_starts"),
        "pipewright_synthetic_wait_share": g(synthetic, "data_wait_share"),
        "torch_samples_per_second": g(torch, "samples_per_second"),
        "torch_loader_wait_share": g(torch, "data_wait_fraction"),
        "torch_loader_wait_share_excluding_epoch_starts": g(torch, "data_wait_fraction_excluding_epoch_starts"),
        "ratio_shards_over_synthetic": ratio(g(shards, "samples_per_second"), g(synthetic, "samples_per_second")),
        "ratio_pipewright_shards_over_torch": ratio(g(shards, "samples_per_second"), g(torch, "samples_per_second")),
        "ratio_pipewright_synthetic_over_torch": ratio(g(synthetic, "samples_per_second"), g(torch, "samples_per_second")),
        "pipewright_summary_steady_samples_per_second": g(shards, "summary_steady_samples_per_second"),
        "images": images,
        "classes": classes,
        "batches_per_epoch": bpe,
        "epochs_covered_pipewright": g(shards, "epochs_covered"),
        "epochs_covered_torch": g(torch, "epochs_covered"),
    }
    notes = [
        "samples/s on both sides count the wait for data: timed samples over the sum of the timed steps' wall "
        "times, a step running from asking for its batch to the loss read back (pipewright: the first stage's "
        "data span to the end of its step span, from the trace; the summary's own samples/s leaves the wait out).",
        "loader wait share: the time the training loop blocked on its next batch over the timed steps' time "
        "(pipewright: the first stage's data spans; PyTorch: next() on the DataLoader iterator).",
        "pipewright runs %s stages on %s (1F1B, %s micro-batches); the PyTorch peer is one model on %s."
        % (cfg.get("stages"), cfg.get("devices"), cfg.get("micro_batches"), cfg.get("torch_device")),
    ]
    if images:
        covered = lambda v: "?" if v is None else "%.1f" % v
        notes.append("the folder holds %d training images (%d batches of %d an epoch): training loops over epochs "
                     "(%s of them for pipewright, %s for PyTorch, warm-up included), and each epoch restarts both "
                     "loaders, so the wait shares without the steps that begin an epoch are given too."
                     % (images, bpe, batch, covered(headline["epochs_covered_pipewright"]),
                        covered(headline["epochs_covered_torch"])))
    report = {"tool": "pipewright gpu_input", "format": 1, "result": "FAIL" if failed else "PASS",
              "config": cfg, "machine": host, "headline": headline, "pipewright_shards": shards,
              "pipewright_synthetic": synthetic, "pytorch": torch, "steps": steps, "notes": notes}
    tmp = os.path.join(out, ".report.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "report.json"))

    def fmt(v):
        if isinstance(v, float):
            return "%.4g" % v
        return "-" if v is None else str(v)
    lines = ["pipewright gpu_input: %s (%s)" % (report["result"], ", ".join("%s %s" % (s["name"], s["status"]) for s in steps))]
    for k in ("gpu", "cores", "torch", "bundle_commit"):
        if k in host:
            lines.append("  %-14s %s" % (k, host[k]))
    lines.append("  resnet50 width %s, 3x%sx%s, batch %s, %s timed steps after %s; pipewright %s stages on %s, %s micro-batches, "
                 "%s loader threads, %s batches prefetched; PyTorch %s DataLoader workers on %s; TF32 %s; %s"
                 % (cfg.get("width"), cfg.get("image_size"), cfg.get("image_size"), batch, cfg.get("timed_steps"),
                    cfg.get("warmup_steps"), cfg.get("stages"), cfg.get("devices"), cfg.get("micro_batches"),
                    cfg.get("loader_threads"), cfg.get("prefetch_batches"), cfg.get("torch_workers"),
                    cfg.get("torch_device"), cfg.get("tf32"), cfg.get("precision")))
    lines.append("")
    for k, v in headline.items():
        lines.append("  %-54s %s" % (k, fmt(v)))
    lines.append("")
    for s in steps:
        lines.append("%-7s %-13s %6.1fs (limit %ss)  %s" % (s["status"], s["name"], s["seconds"], s["limit_seconds"], s["note"]))
    lines.append("")
    lines += ["note: " + n for n in notes]
    with open(os.path.join(out, ".report.txt.tmp"), "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(os.path.join(out, ".report.txt.tmp"), os.path.join(out, "report.txt"))

def pack_logs():
    """OUT/logs.tar.gz: logs/, the summaries, traces, prof output and timelines, the peer's JSON."""
    tmp = os.path.join(out, ".logs.tar.gz.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in sorted(os.listdir(os.path.join(work, "logs"))):
            tar.add(os.path.join(work, "logs", name), arcname="logs/" + name)
        for name in sorted(os.listdir(work)):
            if name.endswith((".json", ".svg", ".tsv")):
                tar.add(os.path.join(work, name), arcname=name)
        if os.path.exists(os.path.join(work, "shards", "manifest.json")):
            tar.add(os.path.join(work, "shards", "manifest.json"), arcname="shards_manifest.json")
    os.replace(tmp, os.path.join(out, "logs.tar.gz"))

if sys.argv[1] == "render":
    render()
elif sys.argv[1] == "pack":
    render()
    pack_logs()
PY
report_py=$python
command -v python3 >/dev/null 2>&1 && report_py=$(command -v python3)
render() { "$report_py" "$helper" render "$work" "$out" "$@" || echo "gpu_input: the report could not be written" >&2; }

# ---------------------------------------------------------------------------------------------
# Steps: run_step NAME LIMIT FUNCTION. The limit is cut to what is left of the budget (less 10 s for
# the report); a step with under 15 s left is skipped. FUNCTION's output goes to logs/NAME.log;
# it returns 0 (PASS) or not (FAIL) and may write a note to $work/note.
failed=0
run_step() {
  local name=$1 limit=$2 fn=$3 left t0 rc status
  left=$((deadline - $(date +%s) - 10))
  [ "$left" -lt "$limit" ] && limit=$left
  log=$work/logs/$name.log
  : >"$work/note"
  if [ "$limit" -lt 15 ]; then
    printf '%s\tSKIP\t0\t%s\tno time left in the budget\n' "$name" "$((limit < 0 ? 0 : limit))" >>"$work/status.tsv"
    echo "gpu_input: $name skipped (no time left)" >&2
    return 0
  fi
  step_deadline=$(($(date +%s) + limit))
  echo "gpu_input: $name (limit ${limit}s) ..." >&2
  render "$name"
  t0=$(date +%s%N)
  rc=0
  "$fn" >>"$log" 2>&1 || rc=$?
  status=PASS
  if [ $rc -ne 0 ]; then
    status=FAIL; failed=1
    [ -s "$work/note" ] || echo "exit $rc; see logs/$name.log" >"$work/note"
    tail -n 20 "$log" | sed "s/^/  $name| /" >&2
  fi
  local ds=$((($(date +%s%N) - t0) / 100000000))
  printf '%s\t%s\t%d.%d\t%s\t%s\n' "$name" "$status" $((ds / 10)) $((ds % 10)) "$limit" \
    "$(tr '\n\t' '  ' <"$work/note")" >>"$work/status.tsv"
  echo "gpu_input: $name $status" >&2
  render
}
note() { echo "$*" >>"$work/note"; }
why() {   # why RC WHAT: a note for a failed command
  case $1 in
    124|137) note "$2 timed out (the step's limit)" ;;
    *) note "$2 failed (exit $1)" ;;
  esac
}
left_s() { echo $((step_deadline - $(date +%s))); }
limited() {   # limited COMMAND...: the command, killed at the step's deadline
  local l; l=$(left_s)
  [ "$l" -ge 1 ] || { echo "no time left for: $*"; return 124; }
  echo "\$ $*" >&2
  timeout -k 10 "$l" "$@"
}

step_host() {
  local q=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    limited nvidia-smi || true
    q=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  fi
  printf 'gpu\t"%s"\n' "${q:-none (no nvidia-smi)}" >>"$work/host.tsv"
  printf 'cores\t%s\n' "$(nproc)" >>"$work/host.tsv"
  local t
  t=$(limited "$python" -c 'import torch, torchvision, PIL
print("torch %s (CUDA %s), torchvision %s, PIL %s, cuda available %s" % (torch.__version__, torch.version.cuda,
      torchvision.__version__, PIL.__version__, torch.cuda.is_available()))' | tail -1) || { note "the peer's python does not import torch"; return 1; }
  echo "$t"
  printf 'torch\t"%s"\n' "$t" >>"$work/host.tsv"
  if [ -n "$bundle" ] && [ -f "$bundle/MANIFEST.txt" ]; then
    printf 'bundle_commit\t"%s"\n' "$(sed -n 's/^commit: //p' "$bundle/MANIFEST.txt" | cut -c1-12)$(grep -q '^dirty: yes' "$bundle/MANIFEST.txt" && echo ' (uncommitted changes)')" >>"$work/host.tsv"
  fi
  limited "${pwcmd[@]}" info || { why $? "pipewright info"; return 1; }
  note "$(printf '%s; %s' "${q:-no GPU listed}" "$t")"
}

step_pack() {
  limited "${pwcmd[@]}" data pack "$photos" "$work/shards" || { why $? "pipewright data pack"; return 1; }
  note "$(grep -m1 '^packed' "$log" || echo packed)"
}

# pw_train LABEL DATA-FLAGS...: the 2-stage resnet50 job, traced over the timed steps, then prof.
pw_train() {
  local label=$1; shift
  local args=(train --model resnet50 --width "$width" "$@" --batch-size "$batch" --steps "$total" --warmup-steps "$warmup"
              --stages "$stages" --micro-batches "$micro" --schedule 1f1b --devices "$devices"
              --loader-threads "$loader_threads" --prefetch-batches "$prefetch"
              --optimizer sgd --lr 0.01 --momentum 0.9 --seed 1 --eval-batches 0 --log-every 10
              --summary "$work/$label.summary.json" --trace "$work/$label.trace.json" --trace-steps "$warmup:$total")
  [ "$tf32" = on ] && args+=(--allow-tf32)
  [ "$precision" != fp32 ] && args+=(--precision "$precision")
  [ -n "$threads" ] && args+=(--threads "$threads")
  limited "${pwcmd[@]}" "${args[@]}" || { why $? "pipewright train"; return 1; }
  [ -s "$work/$label.summary.json" ] || { note "no summary"; return 1; }
  limited "${pwcmd[@]}" prof --json "$work/$label.trace.json" >"$work/$label.prof.json" \
    || { why $? "pipewright prof --json"; return 1; }
  limited "${pwcmd[@]}" prof --svg "$work/$label.timeline.svg" "$work/$label.trace.json" || true
}
step_pw_shards() {
  [ -f "$work/shards/manifest.json" ] || { note "no shards (the pack step failed)"; return 1; }
  pw_train pw_shards --dataset shards --data-dir "$work/shards" --image-size "$image_size" --augment imagenet
}
step_pw_synthetic() {
  local n
  n=$("$report_py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["splits"]["train"]["samples"])' \
      "$work/shards/manifest.json" 2>/dev/null) || n=$((batch * total))
  note "synthetic set of $n samples (as the folder's training split)"
  pw_train pw_synthetic --dataset synthetic --synthetic-shape "3x${image_size}x${image_size}" --synthetic-size "$n"
}
step_torch() {
  local targs=(--device "$torch_device" --model resnet50 --width "$width" --data-dir "$photos" --image-size "$image_size"
               --workers "$workers" --batch-size "$batch" --steps "$steps" --warmup "$warmup" --tf32 "$tf32"
               --precision "$precision" --threads "${threads:-2}" --json)
  limited "$python" "$peer" "${targs[@]}" >"$work/torch.json" || { why $? "the PyTorch peer"; return 1; }
  cat "$work/torch.json"
}
step_inspect() {
  limited "${pwcmd[@]}" data inspect "$work/shards" || { why $? "pipewright data inspect"; return 1; }
  note "$(grep -m1 '^decode:' "$log" || true)"
}

echo "gpu_input: report in $out; pipewright: ${pwcmd[*]}; peer: $python" >&2
run_step host 60 step_host
run_step pack 120 step_pack
run_step pw_shards 200 step_pw_shards
run_step torch 200 step_torch
run_step pw_synthetic 150 step_pw_synthetic
run_step inspect 60 step_inspect
"$report_py" "$helper" pack "$work" "$out" || echo "gpu_input: the report could not be written" >&2
cat "$out/report.txt"
exit $failed
