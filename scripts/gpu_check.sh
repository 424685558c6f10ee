#!/usr/bin/env bash
# One command on a GPU machine: checks pipewright's CUDA path in order and writes one report.
#
#   gpu_check.sh [--dry-run] [--only STEPS] [--budget SECONDS] OUTDIR
#   gpu_check.sh --run COMMAND [ARGS...]   run COMMAND in the environment the checks use (run.sh)
#   gpu_check.sh --print-env               that environment as export lines
#   gpu_check.sh --list-steps | --list-binaries
#
# OUTDIR receives report.txt, report.json and logs.tar.gz, rewritten after every step, so a run
# cut short still leaves a report (the step it was in shows as RUNNING). The script keeps going
# past a failing step and exits 1 if any step failed. --dry-run skips every step that needs a GPU
# (SKIP "dry run") but runs the rest: versions and ldd, `pipewright info`, the GPU suites (which
# must exit 77, "skipped: no CUDA device", where there is no GPU), the CPU halves of the training
# comparisons with a few steps, and rehearsals of the throughput and determinism steps on the CPU
# at a tiny size (their figures mean nothing; a broken command, summary or peer fails them).
#
# Where the binaries are found:
#   - in the unpacked bundle (this script next to bin/, tests/, lib/): bin/, tests/, lib/; the
#     golden files in tests/golden (PW_SOURCE_DIR = the bundle);
#   - in the source tree (scripts/gpu_check.sh): ${PW_BUILD_DIR:-build}/bin and .../tests, the
#     system's libraries, PW_SOURCE_DIR = the source tree.
#   PW_BIN_DIR and PW_TEST_BIN_DIR override the two binary folders in either layout.
# Other settings: TORCH_PYTHON (the PyTorch peer's python; default: the first of python3,
# /opt/torch/.venv/bin/python3, /usr/bin/python3 that imports torch), PW_EXTRA_LIB_PATH (folders
# put on LD_LIBRARY_PATH after the CUDA ones), PW_DRY_STEPS (training steps in a dry run, 2), PW_KEEP_GRADIENTS (a folder that receives
# the gradients step's saved weights).
# See docs/gpu.md.
set -uo pipefail

# ---------------------------------------------------------------------------------------------
# What is checked, and with which binaries (gpu_bundle.sh ships exactly --list-binaries).
GPU_TESTS=(test_ops_cuda test_nccl_transport test_gpu_training)
BENCH_BINS=(dp_bench pipeline_bench ps_bench transport_bench)
# name:limit_seconds (the limit is cut to what is left of --budget)
STEPS=(
  host:60 ldd:90 info:60 flags:60 host_benches:120
  ops_cuda:240 ops_cuda_blocking:240 nccl:180 gpu_training:300 memcheck:420
  resnet18_cuda:180 resnet18_cpu:240 resnet18_compare:30 gradients:120
  pipeline_cuda:180 pipeline_cpu:240 pipeline_compare:30
  throughput_fp32:300 throughput_tf32:240 throughput_bf16:240 determinism:150
  shard_optimizer:300 offload_optimizer:300 schedules_cuda:180 kernel_profile:150
)
ALWAYS_STEPS=" host ldd info flags "
GROUP_checks="ops_cuda ops_cuda_blocking nccl gpu_training memcheck"
GROUP_training="resnet18_cuda resnet18_cpu resnet18_compare gradients pipeline_cuda pipeline_cpu pipeline_compare throughput_fp32 throughput_tf32 throughput_bf16 determinism shard_optimizer offload_optimizer schedules_cuda kernel_profile"
DEFAULT_BUDGET=1140   # 19 minutes; on an H200 the whole check took under 2 (docs/gpu.md)

# The workloads (docs/gpu.md explains each figure).
R18=(--model resnet18 --width 32 --dataset synthetic --synthetic-shape 3x32x32 --batch-size 32
     --optimizer sgd --lr 0.01 --momentum 0.9 --seed 1 --eval-batches 0 --log-every 10)
R18_STEPS=50
PIPE_STEPS=20
PIPE=(--stages 2 --micro-batches 4 --schedule 1f1b)
TP_MODEL=resnet50 TP_WIDTH=64 TP_SHAPE=3x224x224 TP_BATCH=64 TP_STEPS=30 TP_WARMUP=10
DET_STEPS=20
# kernel_profile: the throughput workload under CUPTI (bench/cuda_kernel_profile.cpp) for KP_SHORT
# and KP_LONG steps; the difference of the two records over KP_LONG - KP_SHORT steps is one step.
KP_SHORT=10 KP_LONG=40
# Two replicas on one GPU (ranks sharing cuda:0 use the host-staged collective) against the same
# job on cpu:0,cpu:1: Adam, so the optimizer state is two moments per parameter.
ZERO=(--model resnet18 --width 32 --dataset synthetic --synthetic-shape 3x32x32 --batch-size 32 --optimizer adam
      --lr 0.001 --seed 1 --eval-batches 0 --log-every 10 --replicas 2)
ZERO_STEPS=20
# bf16 activations round differently on the two devices, and Adam's first updates (about lr times
# the gradient's sign) carry that difference into every weight. On an H200 (stop 39) the 2-replica
# bf16 Adam job differed from the CPU by 2.1e-4 at step 1 (the forward alone), 1.2e-3 at step 2 and
# 2.2e-2 at step 3: a growth of 100x, where the fp32 job grows 5000x (3.5e-8 to 1.8e-4). 2e-2 was
# set before any GPU run. Step 1, before any update, has its own limit: a broken bf16 kernel shows
# there, where rounding alone gave 2.1e-4.
BF16_FIRST_RTOL=5e-2
BF16_FIRST_STEP_RTOL=2e-3
# Schedules on 2 stages of one GPU, traced (CUDA events): measured step against the simulator's.
ZB_KINDS=(1f1b zb-h1 zb-v)
ZB_STEPS=12
# One SGD step without momentum from the same weights: the update is -lr * gradient, so weights
# saved after it on two devices give every tensor's gradient difference (the gradients step).
# Each model with its per-tensor limit. vgg16 (no batch norm) agrees to ~2e-7 (median; worst
# tensor ~1e-4). In resnet18 a few
# ReLU masks flip where batch norm puts a pre-activation within cuDNN's fp32 rounding (~1e-5 of
# the scale, Winograd-class algorithms) of zero, and each flip moves one element's gradient
# wholesale: ~1e-3 per tensor, measured on an H200 (test_gpu_training's basic-block case
# checks that every flip is one of those).
GRAD_MODELS=("--model resnet18 --width 32" "--model vgg16 --width 16")
GRAD_RTOLS=(2e-2 1e-3)
GRAD=(--dataset synthetic --synthetic-shape 3x32x32 --batch-size 32 --synthetic-size 32 --optimizer sgd --momentum 0
      --seed 1 --eval-batches 0 --steps 1)
# The loss-history rule: training amplifies rounding (on the CPU alone, a 1e-6 relative change of
# the learning rate moves this run's loss by 1e-2 at step 10), so only the first steps are held
# to a tolerance; after them the compared run must learn as the reference does.
FIRST_STEPS=3 FIRST_RTOL=5e-3 LEARN_RATIO=0.5
PW_FLAGS_USED=(--device --devices --stages --micro-batches --schedule --trace --summary --allow-tf32 --precision
               --deterministic --synthetic-shape --synthetic-size --eval-batches --warmup-steps --log-every)

die() { echo "gpu_check: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# Layout: the unpacked bundle or the source tree.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$here/bin/pipewright" ] && [ -d "$here/lib" ]; then
  layout=bundle
  root=$here
  bin_dir=$here/bin
  test_dir=$here/tests
  lib_dir=$here/lib
else
  layout=source
  root=$(cd "$here/.." && pwd)
  build_dir=${PW_BUILD_DIR:-build}
  case $build_dir in /*) ;; *) build_dir=$root/$build_dir ;; esac
  bin_dir=$build_dir/bin
  test_dir=$build_dir/tests
  lib_dir=
fi
bin_dir=${PW_BIN_DIR:-$bin_dir}
test_dir=${PW_TEST_BIN_DIR:-$test_dir}
peer=$root/bench/torch_train.py
pw=$bin_dir/pipewright
if [ $layout = bundle ]; then profile_lib=$root/bench/libpw_cuda_kernel_profile.so; else profile_lib=$build_dir/lib/libpw_cuda_kernel_profile.so; fi

list_binaries() {
  echo bin/pipewright
  local b
  for b in "${BENCH_BINS[@]}"; do echo "bin/$b"; done
  for b in "${GPU_TESTS[@]}"; do echo "tests/$b"; done
}

# ---------------------------------------------------------------------------------------------
# The environment every pipewright binary runs in. CUDA, cuDNN and NCCL come from the machine: its
# toolkit and the nvidia/*/lib (or nvidia/*/*/lib, CUDA-13 wheels) folders of its Python packages.
# The PyTorch peer runs in the environment this script was started with (no bundle libraries).
orig_ld=${LD_LIBRARY_PATH:-}
join_path() { local IFS=:; echo "$*"; }
cuda_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && echo "$d"
  done
}
python_nvidia_dirs() {
  local py sp d seen=" "
  for py in ${TORCH_PYTHON:-} python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    while IFS= read -r sp; do
      [ -d "$sp/nvidia" ] || continue
      for d in "$sp"/nvidia/*/lib "$sp"/nvidia/*/*/lib; do
        [ -d "$d" ] || continue
        case $seen in *" $d "*) continue ;; esac
        ls "$d"/*.so* >/dev/null 2>&1 || continue
        seen="$seen$d "
        echo "$d"
      done
    done < <("$py" -c 'import site, sys
paths = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path
print("\n".join(p for p in paths if p))' 2>/dev/null)
  done
}
binary_path() {   # bin/X or tests/X (from list_binaries) -> the file
  case $1 in bin/*) echo "$bin_dir/${1#bin/}" ;; tests/*) echo "$test_dir/${1#tests/}" ;; *) echo "$root/$1" ;; esac
}
needs_compat() {   # needs_compat LD_PATH: does some binary find the machine's libstdc++/libgcc_s too old?
  local b f
  while IFS= read -r b; do
    f=$(binary_path "$b")
    [ -f "$f" ] || continue
    LD_LIBRARY_PATH=$1 ldd "$f" 2>&1 | grep -qE "(GLIBCXX|CXXABI|GCC)_[0-9.]+' not found" && return 0
  done < <(list_binaries)
  return 1
}
setup_env() {
  local dirs=() d
  while IFS= read -r d; do dirs+=("$d"); done < <(cuda_lib_dirs)
  while IFS= read -r d; do dirs+=("$d"); done < <(python_nvidia_dirs)
  [ -n "${PW_EXTRA_LIB_PATH:-}" ] && dirs+=("$PW_EXTRA_LIB_PATH")
  [ -n "$orig_ld" ] && dirs+=("$orig_ld")
  compat=no
  if [ -n "$lib_dir" ]; then
    PW_LD_PATH=$(join_path "$lib_dir" "${dirs[@]}")
    # lib/compat (this bundle's libstdc++ and libgcc_s) only where the machine's are too old.
    if [ -d "$lib_dir/compat" ] && needs_compat "$PW_LD_PATH"; then
      compat=yes
      PW_LD_PATH=$(join_path "$lib_dir" "$lib_dir/compat" "${dirs[@]}")
    fi
  else
    PW_LD_PATH=$(join_path "${dirs[@]}")
  fi
  PWENV=(env "LD_LIBRARY_PATH=$PW_LD_PATH")
  export PW_SOURCE_DIR=$root PW_BIN_DIR=$bin_dir
}

# ---------------------------------------------------------------------------------------------
# Arguments.
dry=0 only="" budget=$DEFAULT_BUDGET outdir=""
case ${1:-} in
  --run) shift; [ $# -ge 1 ] || die "--run needs a command"; setup_env
         export LD_LIBRARY_PATH=$PW_LD_PATH; exec "$@" ;;
  --print-env) setup_env
         printf 'export LD_LIBRARY_PATH=%q\nexport PW_SOURCE_DIR=%q\nexport PW_BIN_DIR=%q\n# libstdc++ from lib/compat: %s\n' \
           "$PW_LD_PATH" "$PW_SOURCE_DIR" "$PW_BIN_DIR" "$compat"; exit 0 ;;
  --list-binaries) list_binaries; exit 0 ;;
  --list-steps) for s in "${STEPS[@]}"; do echo "${s%%:*} (limit ${s##*:} s)"; done; exit 0 ;;
esac
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --only) [ $# -ge 2 ] || die "--only needs a list, e.g. checks or training or ops_cuda,nccl"; only=$2; shift ;;
    --budget) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--budget needs whole seconds, got '${2:-}'"; budget=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option '$1' (accepted: --dry-run, --only LIST, --budget SECONDS, --run, --print-env, --list-steps, --list-binaries)" ;;
    *) [ -z "$outdir" ] || die "one OUTDIR only (got '$outdir' and '$1')"; outdir=$1 ;;
  esac
  shift
done
[ -n "$outdir" ] || die "usage: gpu_check.sh [--dry-run] [--only STEPS] [--budget SECONDS] OUTDIR"
selected="$ALWAYS_STEPS"
if [ -z "$only" ]; then
  for s in "${STEPS[@]}"; do selected="$selected${s%%:*} "; done
else
  for s in ${only//,/ }; do
    case $s in
      checks) selected="$selected$GROUP_checks " ;;
      training) selected="$selected$GROUP_training " ;;
      *) printf '%s\n' "${STEPS[@]}" | grep -q "^$s:" || die "unknown step '$s' (see --list-steps; groups: checks, training)"
         selected="$selected$s " ;;
    esac
  done
fi

# Pythons, resolved to their executables (no shims): one for the report (standard library only)
# and one that imports torch for the PyTorch peer.
find_python() {   # find_python MODULE CANDIDATES...
  local m=$1 p; shift
  for p in "$@"; do
    command -v "$p" >/dev/null 2>&1 || continue
    timeout 120 "$p" -c "import sys, $m; print(sys.executable)" 2>/dev/null | tail -1 && return 0
  done
  return 1
}
pyr=$(find_python json ${PW_PYTHON:-} /usr/bin/python3 python3 /opt/torch/.venv/bin/python3) \
  || die "needs python3 (standard library only) to write report.json"
torch_py=$(find_python torch ${TORCH_PYTHON:-} python3 /opt/torch/.venv/bin/python3 /usr/bin/python3) || torch_py=""

mkdir -p "$outdir" || die "cannot create $outdir"
outdir=$(cd "$outdir" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || die "cannot create a work folder"
logs=$work/logs
mkdir -p "$logs" "$work/steps"
trap '[ "${PW_GPU_CHECK_KEEP_WORK:-0}" = 1 ] || rm -rf "$work"' EXIT
setup_env
script_start=$(date +%s)
deadline=$((script_start + budget))
gpu_present=no   # a GPU suite that passes where there is none did not skip visibly
if { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } \
   || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  gpu_present=yes
fi

# ---------------------------------------------------------------------------------------------
# The report writer and the small parsers (standard-library Python).
helper=$work/helper.py
cat >"$helper" <<'PY'
import glob, json, math, os, re, sys

def kv(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if "\t" not in line:
            continue
        k, v = line.split("\t", 1)
        try:
            out[k] = json.loads(v)   # numbers, lists, quoted strings
        except ValueError:
            out[k] = v               # plain text
    return out

def tail(path, n=40):
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return []
    return [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in lines[-n:]]

def cmd_record(name, status, seconds, limit, note_file, fig_file, log_file, index):
    note = open(note_file, encoding="utf-8", errors="replace").read().strip() if os.path.exists(note_file) else ""
    rec = {"name": name, "status": status, "seconds": round(float(seconds), 1), "limit_seconds": int(limit),
           "note": note, "figures": kv(fig_file), "log": "logs/" + os.path.basename(log_file)}
    if status == "FAIL":
        rec["log_tail"] = tail(log_file)
    with open(os.path.join(os.environ["GC_WORK"], "steps", "%02d_%s.json" % (int(index), name)), "w") as f:
        json.dump(rec, f)

def fmt(v):
    if isinstance(v, float):
        return "%.4g" % v
    if isinstance(v, (list, dict)):
        s = json.dumps(v)
        return s if len(s) <= 90 else s[:87] + "..."
    return str(v)

def cmd_render(outdir, running=""):
    work = os.environ["GC_WORK"]
    steps = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(work, "steps", "*.json")))]
    if running:
        steps.append({"name": running, "status": "RUNNING", "seconds": 0, "note": "the run ended inside this step",
                      "figures": {}, "log": "logs/%s.log" % running})
    counts = {s: sum(1 for x in steps if x["status"] == s) for s in ("PASS", "FAIL", "SKIP", "RUNNING")}
    result = "FAIL" if counts["FAIL"] or counts["RUNNING"] else "PASS"
    head = kv(os.path.join(work, "head.tsv"))
    report = {"tool": "pipewright gpu_check", "format": 1, **head, "result": result, "counts": counts,
              "comparison_rule": {"first_steps": int(os.environ["GC_FIRST_STEPS"]),
                                  "first_steps_max_rel_diff": float(os.environ["GC_FIRST_RTOL"]),
                                  "final_loss_at_most_of_first": float(os.environ["GC_LEARN_RATIO"])},
              "steps": steps}
    tmp = os.path.join(outdir, ".report.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, os.path.join(outdir, "report.json"))
    lines = ["pipewright gpu_check: %s (%d pass, %d fail, %d skip%s)" % (
        result, counts["PASS"], counts["FAIL"], counts["SKIP"], ", 1 running" if counts["RUNNING"] else "")]
    for k in ("mode", "layout", "started", "budget_seconds", "gpu", "bundle_commit", "ld_library_path", "libstdcxx_compat",
              "torch_python"):
        if k in head:
            lines.append("  %-16s %s" % (k, head[k]))
    lines.append("  rule: CPU vs CUDA losses PASS if the first %s steps agree within %s relative and each final loss is at most %s of its first"
                 % (os.environ["GC_FIRST_STEPS"], os.environ["GC_FIRST_RTOL"], os.environ["GC_LEARN_RATIO"]))
    lines.append("")
    for s in steps:
        lines.append("%-7s %-18s %6.1fs  %s" % (s["status"], s["name"], s.get("seconds", 0), s.get("note", "")))
        for k, v in s.get("figures", {}).items():
            lines.append("          %-34s %s" % (k, fmt(v)))
        if s["status"] == "FAIL" and s.get("log_tail"):
            lines.append("          last lines of %s:" % s["log"])
            lines += ["          | " + l for l in s["log_tail"][-25:]]
    with open(os.path.join(outdir, ".report.txt.tmp"), "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(os.path.join(outdir, ".report.txt.tmp"), os.path.join(outdir, "report.txt"))

def emit(figs):
    for k, v in figs.items():
        print("%s\t%s" % (k, json.dumps(v)))

def load_summary(path):
    s = json.load(open(path))
    hist = s.get("loss_history")
    if not isinstance(hist, list) or not hist:
        raise SystemExit("%s has no loss_history" % path)
    return s

def cmd_summary(path, *keys):
    s = load_summary(path)
    emit({k: s[k] for k in keys if k in s})

def cmd_compare(ref_path, run_path, ref_label, run_label):
    ref, run = load_summary(ref_path)["loss_history"], load_summary(run_path)["loss_history"]
    first, first_tol, learn = int(os.environ["GC_FIRST_STEPS"]), float(os.environ["GC_FIRST_RTOL"]), float(os.environ["GC_LEARN_RATIO"])
    figs = {"reference": ref_label, "compared": run_label, "steps": [len(ref), len(run)]}
    bad = [i + 1 for i, (a, b) in enumerate(zip(ref, run)) if a is None or b is None or not math.isfinite(a) or not math.isfinite(b)]
    if len(ref) != len(run) or bad:
        figs["non_finite_or_skipped_steps"] = bad[:10]
        emit(figs)
        print("FAIL\tthe loss histories differ in length or hold skipped/non-finite steps")
        return 1
    rel = [abs(b - a) / max(abs(a), 1e-12) for a, b in zip(ref, run)]
    figs.update({"first_loss": [ref[0], run[0]], "first_step_rel_diff": rel[0],
                 "max_rel_diff_first_%d" % first: max(rel[:first]), "max_rel_diff_all": max(rel),
                 "step_of_max_rel_diff": rel.index(max(rel)) + 1,
                 "rel_diff_by_step": [float("%.3g" % r) for r in rel[:10]],
                 "final_loss": [ref[-1], run[-1]], "final_rel_diff": rel[-1]})
    emit(figs)
    learns = run[-1] <= learn * run[0] and ref[-1] <= learn * ref[0]
    # The first step (the forward alone, before any update) may have a limit of its own, tighter
    # than the first steps' (GC_FIRST_STEP_RTOL; bf16).
    step1_tol = float(os.environ.get("GC_FIRST_STEP_RTOL") or first_tol)
    ok = max(rel[:first]) <= first_tol and rel[0] <= step1_tol and learns
    step1 = "" if step1_tol == first_tol else "step 1 rel diff %.2e (limit %g); " % (rel[0], step1_tol)
    print("%s\t%sfirst %d steps max rel diff %.2e (limit %g); final loss %.4g against the reference's %.4g (each must be at most %g of its first)" % (
        "PASS" if ok else "FAIL", step1, min(first, len(rel)), max(rel[:first]), first_tol, run[-1], ref[-1], learn))
    return 0 if ok else 1

def read_safetensors(path):
    import array, struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit("%s: tensor %s is %s; the gradient check reads F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        v = array.array("f")
        v.frombytes(data[a:b])
        if sys.byteorder != "little":
            v.byteswap()
        out[name] = v
    return out

def per_tensor_diffs(ref1, ref2, base, other):
    # w(lr) = w0 - lr*g: the reference's gradient is w(1) - w(2), and two runs' gradients differ
    # by w_other(1) - w_base(1). Tensors an SGD step does not move (batch-norm running
    # statistics) have no gradient and are compared as values.
    rows = []
    for name in sorted(ref1):
        a, b, c = ref1[name], ref2[name], other[name]
        if not all(math.isfinite(x) for x in c):
            return None, name
        g = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
        d = math.sqrt(sum((x - y) ** 2 for x, y in zip(c, base[name])))
        denom = g if g > 0 else math.sqrt(sum(x * x for x in a))
        rows.append((d / denom if denom > 0 else d, name))
    rows.sort(reverse=True)
    return rows, None

def cmd_gradients(ref_lr1, ref_lr2, run_lr1, tol, spread_lr1=None):
    """The compared run's per-tensor gradient difference from the reference; with spread_lr1 (the
    compared device with its other algorithms), the same figure between the device's two runs:
    how far two valid fp32 algorithm choices there lie apart."""
    ref1, ref2, run1 = read_safetensors(ref_lr1), read_safetensors(ref_lr2), read_safetensors(run_lr1)
    runs = [run1] + ([read_safetensors(spread_lr1)] if spread_lr1 else [])
    if any(set(r) != set(ref1) for r in [ref2] + runs):
        print("FAIL\tthe saved tensors differ by name")
        return 1
    rows, bad = per_tensor_diffs(ref1, ref2, ref1, run1)
    if rows is None:
        print("FAIL\t%s holds non-finite values after one step" % bad)
        return 1
    worst, worst_name = rows[0]
    # The part of the difference that is one factor on the whole gradient (a loss or learning-rate
    # scale) and what is left once it is taken out.
    gg = gr = rr = 0.0
    for name in ref1:
        for a, b, c in zip(ref1[name], ref2[name], run1[name]):
            g, r = a - b, (2 * a - b) - c
            gg, gr, rr = gg + g * g, gr + g * r, rr + r * r
    scale = gr / gg if gg > 0 else float("nan")
    rest = math.sqrt(max(rr - 2 * scale * gr + scale * scale * gg, 0.0) / gg) if gg > 0 else float("nan")
    figs = {"tensors": len(rows), "max_gradient_rel_diff": float("%.3g" % worst), "worst_tensor": worst_name,
            "whole_gradient_scale": float("%.7g" % scale), "whole_gradient_rel_diff_after_scale": float("%.3g" % rest),
            "median_gradient_rel_diff": float("%.3g" % rows[len(rows) // 2][0]),
            "worst_five": ["%s %.2e" % (n, e) for e, n in rows[:5]]}
    if spread_lr1:
        srows, bad = per_tensor_diffs(ref1, ref2, run1, runs[1])
        if srows is None:
            print("FAIL\t%s holds non-finite values after one step" % bad)
            return 1
        figs.update({"device_spread_max": float("%.3g" % srows[0][0]), "device_spread_worst_tensor": srows[0][1],
                     "device_spread_median": float("%.3g" % srows[len(srows) // 2][0])})
    emit(figs)
    ok = worst <= float(tol)
    print("%s\tworst per-tensor gradient difference %.2e (%s; limit %s)" % ("PASS" if ok else "FAIL", worst, worst_name, tol))
    return 0 if ok else 1

def cmd_identical(a_path, b_path):
    a, b = load_summary(a_path)["loss_history"], load_summary(b_path)["loss_history"]
    diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0) if len(a) == len(b) else float("inf")
    emit({"steps": len(a), "max_abs_diff": diff if math.isfinite(diff) else "length differs", "bitwise_equal": a == b})
    return 0 if a == b else 1

def cmd_boost(log):
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(log, encoding="utf-8", errors="replace").read())
    figs = {}
    for key, pat in (("test_cases_passed", r"(\d+) test cases? out of (\d+) passed"),
                     ("test_cases_failed", r"(\d+) test cases? out of (\d+) failed"),
                     ("test_cases_skipped", r"(\d+) test cases? out of (\d+) skipped"),
                     ("assertions_passed", r"(\d+) assertions? out of (\d+) passed"),
                     ("assertions_failed", r"(\d+) assertions? out of (\d+) failed")):
        m = re.search(pat, text)
        if m:
            figs[key] = "%s/%s" % m.groups()
    if "*** No errors detected" in text:
        figs["boost"] = "no errors detected"
    skip = re.search(r"^skipped: .*$", text, re.M)
    if skip:
        figs["skip_line"] = skip.group(0)
    emit(figs)

def cmd_info(log):
    figs = {}
    for line in open(log, encoding="utf-8", errors="replace"):
        m = re.match(r"^\s*([A-Za-z][A-Za-z0-9 .+/_-]*?):\s+(.*\S)\s*$", line)
        if m:
            figs[re.sub(r"[^a-z0-9]+", "_", m.group(1).lower()).strip("_")] = m.group(2)
    emit(figs)

def cmd_prof(path):
    p = json.load(open(path))
    figs = {k: p[k] for k in ("step_ms", "analytic_bubble", "measured_bubble", "imbalance", "slowest_stage") if k in p}
    for r in p.get("ranks", []):
        figs["stage%d_busy_bubble_comm" % r.get("stage", 0)] = [round(r.get(k, 0.0), 4) for k in ("busy", "bubble", "communication")]
    emit(figs)

def cmd_trace(path):
    t = json.load(open(path))
    events = t.get("traceEvents", t) if isinstance(t, dict) else t
    if not isinstance(events, list) or not events:
        raise SystemExit("%s holds no trace events" % path)
    emit({"trace_events": len(events), "trace_bytes": os.path.getsize(path)})

def cmd_throughput(pw_path, torch_path, label):
    pw = json.load(open(pw_path))
    lines = [l for l in open(torch_path).read().splitlines() if l.strip().startswith("{")]
    if not lines:
        raise SystemExit("the PyTorch peer printed no JSON line")
    th = json.loads(lines[-1])
    pw_sps, th_sps = pw["steady_samples_per_second"], th["steady_samples_per_second"]
    figs = {"setting": label,
            "pipewright_median_step_ms": round(pw["median_step_ms"], 3),
            "pipewright_samples_per_second": round(pw_sps, 1),
            "pytorch_median_step_ms": round(th["median_step_ms"], 3),
            "pytorch_samples_per_second": round(th_sps, 1),
            "ratio_pipewright_over_pytorch": round(pw_sps / th_sps, 3) if th_sps else None,
            "pytorch_median_gpu_step_ms": round(th["median_gpu_step_ms"], 3) if "median_gpu_step_ms" in th else None,
            "parameters": [pw.get("params"), th.get("parameters")],
            "peak_memory_bytes": [pw.get("peak_memory_bytes"), th.get("peak_memory_bytes")],
            "pytorch": "%s cudnn %s tf32 %s" % (th.get("torch_version"), th.get("cudnn_version"), json.dumps(th.get("tf32")))}
    emit({k: v for k, v in figs.items() if v is not None})
    if pw.get("params") != th.get("parameters"):
        print("FAIL\tthe models differ: pipewright %s parameters, PyTorch %s" % (pw.get("params"), th.get("parameters")))
        return 1
    return 0

def json_lines(path):
    out = []
    for l in open(path, encoding="utf-8", errors="replace"):
        l = l.strip()
        if l.startswith("{"):
            try:
                out.append(json.loads(l))
            except ValueError:
                pass
    return out

def cmd_host_benches(transport_out, ps_out, text=None):
    t = [r for r in json_lines(transport_out) if r.get("bench") == "transport"]
    big = max(t, key=lambda r: r["size_bytes"]) if t else {}
    p = [r for r in json_lines(ps_out) if r.get("bench") == "ps_pull_push"]
    figs = {"transport_size_bytes": big.get("size_bytes"), "transport_transfers": big.get("transfers"),
            "transport_thrift_MBps": big.get("thrift_MBps"), "transport_socket_MBps": big.get("socket_MBps"),
            "transport_bandwidth_ratio": big.get("bandwidth_ratio"),
            "ps_new_keys_push_ratio": p[0].get("new_keys_push_ratio") if p else None,
            "ps_push_ratio": p[0].get("push_ratio") if p else None,
            "ps_new_keys_pull_ratio": p[0].get("new_keys_pull_ratio") if p else None}
    figs = {k: v for k, v in figs.items() if v is not None}
    if text:
        print("transport %s B: %.2fx of the socket (target 0.9); ps new-key push %.2fx (target 0.5)" % (
            figs.get("transport_size_bytes", "?"), figs.get("transport_bandwidth_ratio", float("nan")),
            figs.get("ps_new_keys_push_ratio", float("nan"))))
    else:
        emit(figs)
    return 0

KINDS = ("parameters", "gradients", "master_weights", "optimizer_state", "activations", "communication", "workspace")

def device_kinds(summary, shared):
    # Ranks sharing one device report that device's allocator (the same figures); ranks on their
    # own CPU devices report their own: the job's total is the one or the sum.
    mem = summary["memory"]
    if shared:
        return {k: max(r["by_kind"][k] for r in mem) for k in KINDS}, max(r.get("host_bytes", 0) for r in mem)
    return {k: sum(r["by_kind"][k] for r in mem) for k in KINDS}, sum(r.get("host_bytes", 0) for r in mem)

def cmd_memory(what, cpu_path, gpu_path, base_path):
    cpu = json.load(open(cpu_path)); gpu = json.load(open(gpu_path)); base = json.load(open(base_path))
    shared = len(set(gpu.get("devices", []))) == 1
    c, c_host = device_kinds(cpu, False)
    g, g_host = device_kinds(gpu, shared)
    b, _ = device_kinds(base, shared)
    figs = {"cpu_by_kind": c, "gpu_by_kind": g, "cpu_host_bytes": c_host, "gpu_host_bytes": g_host,
            "gpu_peak_bytes": max(r["peak_bytes"] for r in gpu["memory"])}
    bad = []
    # What the job keeps from step to step is the same bytes on either device; activations and
    # workspace are the devices' own business. Two ranks sharing one GPU share its allocator: a
    # block one rank freed may serve the other's request up to 1.25x its size (2x under 1 MiB),
    # and counts whole, so on a shared device the figures may run up to a quarter over.
    top = 1.3 if shared else 1.05
    for k in ("parameters", "master_weights", "optimizer_state"):
        if c[k] == 0 and g[k] == 0:
            continue
        r = g[k] / c[k] if c[k] else float("inf")
        figs["gpu_over_cpu_" + k] = round(r, 4)
        if not 0.99 <= r <= top:
            bad.append("%s %.3fx" % (k, r))
    if what == "shard":
        r = g["optimizer_state"] / b["optimizer_state"] if b["optimizer_state"] else float("nan")
        figs["sharded_over_plain_optimizer_state"] = round(r, 4)
        if not 0.45 <= r <= (0.65 if shared else 0.55):
            bad.append("sharded/plain optimizer state %.3fx (expected 0.5)" % r)
    else:
        figs["gpu_host_over_cpu_host"] = round(g_host / c_host, 4) if c_host else None
        if g["optimizer_state"] > 0:
            bad.append("%d bytes of optimizer state on the device" % g["optimizer_state"])
        # On a GPU the update also copies each slice's weights and gradient through pinned host
        # buffers (models/host_offload.cpp), counted with the state; on CPU devices it runs in place.
        if not c_host or not 0.99 <= g_host / c_host <= 2.2:
            bad.append("host bytes %d on the GPU job against %d on the CPU (expected 1-2.2x)" % (g_host, c_host))
    emit({k: v for k, v in figs.items() if v is not None})
    if bad:
        print("FAIL\t" + "; ".join(bad))
        return 1
    print("PASS\tparameters, masters and optimizer state as on the CPU%s" % (
        "; optimizer state half of plain" if what == "shard" else "; optimizer state on the host, none on the device"))
    return 0

def cmd_schedule(prof_path, summary_path, text=None):
    p = json.load(open(prof_path))
    s = json.load(open(summary_path))
    figs = {"step_ms": round(p["step_ms"], 3), "simulated_step_ms": round(p.get("simulated_step_ms", 0), 3),
            "measured_over_simulated": round(p.get("measured_over_simulated", 0), 3),
            "measured_bubble": round(p["measured_bubble"], 3), "analytic_bubble": round(p["analytic_bubble"], 3),
            "median_step_ms": round(s.get("median_step_ms", 0), 3), "final_loss": s.get("final_loss")}
    if text:
        print("step %.2f ms, simulated %.2f ms (%.2fx)" % (figs["step_ms"], figs["simulated_step_ms"], figs["measured_over_simulated"]))
    else:
        emit(figs)
    return 0

def cmd_kernel_profile(short_path, long_path, steps, summary_path, text=None):
    a, b = json.load(open(short_path)), json.load(open(long_path))
    n = float(steps)
    def per_step(key):
        before = {e["name"]: e for e in a.get(key, [])}
        rows = []
        for e in b.get(key, []):
            o = before.get(e["name"], {"total_ns": 0.0, "count": 0})
            rows.append((e["name"], (e["total_ns"] - o["total_ns"]) / n / 1e6, (e["count"] - o["count"]) / n))
        return sorted(rows, key=lambda r: -r[1])
    kernels, runtime, driver, copies = per_step("kernels"), per_step("runtime_api"), per_step("driver_api"), per_step("copies")
    calls = lambda rows, pred: sum(c for name, _, c in rows if pred(name))
    busy = (b["gpu_busy_ns"] - a["gpu_busy_ns"]) / n / 1e6
    step = load_summary(summary_path).get("median_step_ms") or 0.0
    launches = calls(runtime, lambda s: s.startswith("cudaLaunchKernel")) + calls(driver, lambda s: s.startswith("cuLaunchKernel"))
    waits = calls(runtime, lambda s: "Synchronize" in s) + calls(driver, lambda s: "Synchronize" in s)
    to_host = calls(copies, lambda s: s.startswith("device to host"))
    top = [[round(ms, 3), name[:100]] for name, ms, _ in kernels[:10]]
    figs = {"median_step_ms": round(step, 3), "gpu_busy_ms_per_step": round(busy, 3),
            "gpu_busy_fraction": round(busy / step, 3) if step > 0 else None,
            "kernel_ms_per_step": round(sum(ms for _, ms, _ in kernels), 3),
            "kernel_launches_per_step": round(launches, 1), "host_waits_per_step": round(waits, 1),
            "device_to_host_copies_per_step": round(to_host, 1),
            "host_api_ms_per_step": [[round(ms, 3), name] for name, ms, _ in runtime[:6]],
            "top_kernels_ms_per_step": top}
    if text:
        print("GPU busy %.1f of a %.1f ms step (%.0f%%), %d launches and %d host waits a step, top kernel %.2f ms" % (
            busy, step, 100 * busy / step if step > 0 else 0, launches, waits, top[0][0] if top else 0))
    else:
        emit(figs)
    return 0

if __name__ == "__main__":
    fn = globals()["cmd_" + sys.argv[1]]
    sys.exit(fn(*sys.argv[2:]) or 0)
PY
export GC_WORK=$work GC_FIRST_STEPS=$FIRST_STEPS GC_FIRST_RTOL=$FIRST_RTOL GC_LEARN_RATIO=$LEARN_RATIO
helper() { "$pyr" "$helper" "$@"; }

json_str() { local v; v=$(printf '%s' "$1" | tr '\n\t\r' '   '); v=${v//\\/\\\\}; printf '"%s"' "${v//\"/\\\"}"; }
head_kv() { printf '%s\t%s\n' "$1" "$(json_str "$2")" >>"$work/head.tsv"; }
head_kv mode "$([ $dry = 1 ] && echo dry-run || echo gpu)"
head_kv layout "$layout"
head_kv root "$root"
head_kv started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf "budget_seconds\t%d\n" "$budget" >>"$work/head.tsv"
head_kv selected_steps "$(for s in "${STEPS[@]}"; do case $selected in *" ${s%%:*} "*) printf '%s ' "${s%%:*}" ;; esac; done | sed 's/ $//')"
head_kv ld_library_path "$PW_LD_PATH"
head_kv libstdcxx_compat "$compat"
head_kv torch_python "${torch_py:-none (no python3 that imports torch)}"
head_kv gpu_present "$gpu_present"

pack_logs() {
  local f size
  for f in "$logs"/*; do
    [ -f "$f" ] || continue
    size=$(stat -c %s "$f")
    if [ "$size" -gt 4194304 ]; then   # keep the report small enough to come back (16 MiB a file)
      { head -c 1048576 "$f"; printf '\n... [%s bytes cut by gpu_check] ...\n' "$((size - 3145728))"; tail -c 2097152 "$f"; } >"$f.cut"
      mv "$f.cut" "$f"
    fi
  done
  tar -czf "$outdir/.logs.tar.gz.tmp" -C "$work" logs && mv "$outdir/.logs.tar.gz.tmp" "$outdir/logs.tar.gz"
}

# ---------------------------------------------------------------------------------------------
# Step machinery: a step function returns 0 (PASS), 77 (SKIP) or anything else (FAIL); it adds
# a note with `note` and figures with `fig KEY VALUE`, and runs commands with `run_to LOG CMD...`
# (time-limited by the step's deadline; output appended to LOG).
step_index=0
failed=0
note() { printf '%s ' "$*" >>"$work/cur.note"; }
fig() { printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\n\t\r' '   ')" >>"$work/cur.fig"; }   # a number or list if it parses as JSON
figt() { printf '%s\t%s\n' "$1" "$(json_str "$2")" >>"$work/cur.fig"; }                     # always text
figs_from() { cat >>"$work/cur.fig"; }   # "key<TAB>json" lines from the helper
run_to() {
  local log=$1; shift
  local left=$((step_deadline - $(date +%s)))
  [ $left -ge 1 ] || { echo "[gpu_check: no time left for: $*]" >>"$log"; note "no time left"; return 124; }
  echo "\$ $*" >>"$log"
  timeout -k 10 "$left" "$@" >>"$log" 2>&1
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "[gpu_check: timed out after ${left}s]" >>"$log"
    note "timed out after ${left}s."
  fi
  echo "[exit $rc]" >>"$log"
  return $rc
}
run_to_out() {   # run_to_out OUT LOG CMD...: as run_to, stdout to OUT
  local out=$1 log=$2; shift 2
  local left=$((step_deadline - $(date +%s)))
  [ $left -ge 1 ] || { note "no time left"; return 124; }
  echo "\$ $* >$(basename "$out")" >>"$log"
  timeout -k 10 "$left" "$@" >"$out" 2>>"$log"
  local rc=$?
  echo "[exit $rc]" >>"$log"
  return $rc
}
run_step() {
  local name=$1 limit=$2 fn=step_$1 status rc start
  case $selected in *" $name "*) ;; *) return 0 ;; esac
  step_index=$((step_index + 1))
  : >"$work/cur.note"; : >"$work/cur.fig"
  log=$logs/$name.log
  : >"$log"
  start=$(date +%s)
  local start_ns; start_ns=$(date +%s%N)
  local left=$((deadline - start))
  echo "gpu_check: $name ..." >&2
  helper render "$outdir" "$name"
  if [ $left -lt 15 ]; then
    note "not run: less than 15 s of the time budget (${budget}s) left"
    rc=77
  else
    [ $limit -gt $left ] && limit=$left
    step_deadline=$((start + limit))
    ( "$fn" ) </dev/null
    rc=$?
  fi
  case $rc in
    0) status=PASS ;;
    77) status=SKIP ;;
    *) status=FAIL; failed=1 ;;
  esac
  local tenths=$((($(date +%s%N) - start_ns) / 100000000))
  local secs=$((tenths / 10)).$((tenths % 10))
  echo "gpu_check: $name $status (${secs}s) $(cat "$work/cur.note")" >&2
  echo "$status" >"$work/status.$name"
  helper record "$name" "$status" "$secs" "$limit" "$work/cur.note" "$work/cur.fig" "$log" "$step_index"
  helper render "$outdir"
  pack_logs
}
dry_skip() { if [ $dry = 1 ]; then note "dry run: needs a GPU${1:+; $1}"; return 0; fi; return 1; }
summary_figs() { helper summary "$@" | figs_from; }

# ---------------------------------------------------------------------------------------------
# The steps.
step_host() {
  local rc=0
  {
    echo "== uname"; uname -a
    echo "== os"; cat /etc/os-release 2>/dev/null | head -4
    echo "== glibc"; ldd --version 2>&1 | head -1
    echo "== cpus"; nproc
    echo "== layout $layout, root $root"
    [ -f "$root/MANIFEST.txt" ] && { echo "== bundle MANIFEST.txt"; cat "$root/MANIFEST.txt"; }
  } >>"$log" 2>&1
  figt glibc "$(ldd --version 2>&1 | head -1 | grep -oE '[0-9]+\.[0-9]+$')"
  figt os "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
  fig cpus "$(nproc)"
  if [ -f "$root/MANIFEST.txt" ]; then
    local k
    for k in commit dirty built needs_glibc needs_glibcxx cuda_architectures; do
      local v; v=$(sed -n "s/^$k: //p" "$root/MANIFEST.txt" | head -1)
      [ -n "$v" ] && figt "bundle_$k" "$v"
    done
    head_kv bundle_commit "$(sed -n 's/^commit: //p' "$root/MANIFEST.txt" | head -1)"
  elif command -v git >/dev/null 2>&1 && git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
    figt source_commit "$(git -C "$root" rev-parse --short HEAD)"
    head_kv bundle_commit "source tree $(git -C "$root" rev-parse --short HEAD)"
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    run_to "$log" nvidia-smi
    run_to "$log" nvidia-smi -q
    local q
    q=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1)
    if [ -n "$q" ]; then
      figt gpu "$q"
      head_kv gpu "$q"
    else
      note "nvidia-smi lists no GPU."
    fi
  else
    note "no nvidia-smi."
  fi
  if [ $dry = 0 ] && [ $gpu_present = no ]; then note "no GPU here (nvidia-smi, /dev/nvidia*)."; rc=1; fi
  local nvcc=""
  command -v nvcc >/dev/null 2>&1 && nvcc=nvcc
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  [ -n "$nvcc" ] && { echo "== nvcc" >>"$log"; $nvcc --version >>"$log" 2>&1; figt nvcc "$($nvcc --version 2>&1 | grep -oE 'release [0-9.]+' | head -1)"; }
  local cs; cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$cs" ] && figt compute_sanitizer "$("$cs" --version 2>&1 | grep -oE 'Version [0-9.]+' | head -1)"
  if [ -n "$torch_py" ]; then
    echo "== torch ($torch_py)" >>"$log"
    local t
    t=$(timeout 120 "$torch_py" -c 'import torch
c = torch.cuda.is_available()
print("torch %s (CUDA %s), cuda available %s, cuDNN %s, devices %d" % (torch.__version__, torch.version.cuda, c,
      torch.backends.cudnn.version() if c else "-", torch.cuda.device_count() if c else 0))' 2>>"$log")
    echo "$t" >>"$log"
    figt torch "$t"
  else
    note "no python3 that imports torch: the throughput steps cannot run the PyTorch peer."
  fi
  return $rc
}

step_ldd() {
  local b f out missing=0 n=0 rc=0
  local -A from=()
  {
    echo "LD_LIBRARY_PATH=$PW_LD_PATH"
    echo "libstdc++/libgcc_s from lib/compat: $compat"
  } >>"$log"
  while IFS= read -r b; do
    case $b in bin/*) f=$bin_dir/${b#bin/} ;; tests/*) f=$test_dir/${b#tests/} ;; esac
    n=$((n + 1))
    if [ ! -f "$f" ]; then
      echo "MISSING BINARY: $f" >>"$log"; note "missing: $f."; rc=1; continue
    fi
    echo "== ldd $f" >>"$log"
    out=$(LD_LIBRARY_PATH=$PW_LD_PATH ldd "$f" 2>&1)
    echo "$out" >>"$log"
    if grep -q "not found" <<<"$out"; then
      missing=$((missing + 1))
      note "$(basename "$f"): $(grep "not found" <<<"$out" | sed 's/^[[:space:]]*//' | sort -u | tr '\n' ';')"
      rc=1
    fi
    local lib
    for lib in libcudart libcublas libcublasLt libcudnn libnccl libstdc++ libdnnl; do
      local p; p=$(grep -E "^\s*$lib\.so" <<<"$out" | awk '{print $3}' | head -1)
      [ -n "$p" ] && from[$lib]=$p
    done
  done < <(list_binaries)
  fig binaries "$n"
  fig binaries_with_missing_libraries "$missing"
  local lib
  for lib in $(printf '%s\n' "${!from[@]}" | sort); do figt "$lib" "${from[$lib]}"; done
  figt libstdcxx_compat "$compat"
  local cuda_drv; cuda_drv=$(ldconfig -p 2>/dev/null | grep -m1 'libcuda\.so\.1 ' | awk '{print $NF}')
  figt libcuda_so_1 "${cuda_drv:-not in the ld.so cache}"
  [ $rc = 0 ] && note "every library resolves."
  return $rc
}

step_info() {
  run_to "$log" "${PWENV[@]}" "$pw" info || { note "pipewright info failed."; return 1; }
  helper info "$log" | figs_from
  local devices; devices=$(sed -n 's/^CUDA devices:[[:space:]]*\([0-9]*\).*/\1/p' "$log" | head -1)
  note "CUDA devices: ${devices:-?}."
  if [ $dry = 0 ] && [ "${devices:-0}" -lt 1 ]; then note "pipewright sees no CUDA device."; return 1; fi
  return 0
}

step_flags() {
  local help missing=() f rc=0
  help=$(LD_LIBRARY_PATH=$PW_LD_PATH timeout 60 "$pw" train --help 2>&1) || { echo "$help" >>"$log"; note "pipewright train --help failed."; return 1; }
  echo "$help" >>"$log"
  for f in "${PW_FLAGS_USED[@]}"; do grep -q -- "$f" <<<"$help" || missing+=("$f"); done
  if [ ${#missing[@]} -gt 0 ]; then note "pipewright train lacks ${missing[*]}."; rc=1; fi
  if [ -n "$torch_py" ]; then
    help=$(timeout 120 "$torch_py" "$peer" --help 2>&1)
    echo "$help" >>"$log"
    missing=()
    for f in --device --tf32 --precision --input-shape --json; do grep -q -- "$f" <<<"$help" || missing+=("$f"); done
    if [ ${#missing[@]} -gt 0 ]; then note "bench/torch_train.py lacks ${missing[*]}."; rc=1; fi
  fi
  [ $rc = 0 ] && note "every flag the steps use is accepted."
  return $rc
}

boost_args=(--color_output=no --log_level=test_suite --report_level=short)
gpu_suite() {   # gpu_suite BINARY [ENV=VALUE...]
  local exe=$test_dir/$1; shift
  [ -x "$exe" ] || { note "missing test binary $exe."; return 1; }
  run_to "$log" env "$@" LD_LIBRARY_PATH="$PW_LD_PATH" "$exe" "${boost_args[@]}"
  local rc=$?
  helper boost "$log" | figs_from
  fig exit_code "$rc"
  case $rc in
    0) if [ $gpu_present = no ]; then note "passed without a GPU: a GPU suite must exit 77 here."; return 1; fi
       return 0 ;;
    77) if [ $dry = 1 ] || [ $gpu_present = no ]; then
          note "exit 77: $(grep -m1 '^skipped:' "$log" | cut -c1-200)"
          [ $dry = 1 ] && return 77
        fi
        note "the suite skipped on a GPU run."
        return 1 ;;
    *) return 1 ;;
  esac
}
step_ops_cuda() { gpu_suite test_ops_cuda; }
step_ops_cuda_blocking() {
  dry_skip && return 77
  if [ "$(cat "$work/status.ops_cuda" 2>/dev/null)" != FAIL ]; then
    note "run only when the op suite fails (it did not)."; return 77
  fi
  note "rerun of the op suite with CUDA_LAUNCH_BLOCKING=1 (an error shows at the launch that caused it)."
  gpu_suite test_ops_cuda CUDA_LAUNCH_BLOCKING=1
}
step_nccl() { gpu_suite test_nccl_transport NCCL_DEBUG=INFO; }
step_gpu_training() { gpu_suite test_gpu_training; }

step_memcheck() {
  dry_skip && return 77
  local cs; cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$cs" ] || { note "no compute-sanitizer on this machine."; return 1; }
  run_to "$log" env LD_LIBRARY_PATH="$PW_LD_PATH" "$cs" --tool memcheck --leak-check no --print-limit 100 \
    --error-exitcode 86 "$test_dir/test_ops_cuda" "${boost_args[@]}"
  local rc=$?
  local errors; errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
  fig exit_code "$rc"
  [ -n "$errors" ] && fig memcheck_errors "$errors"
  helper boost "$log" | figs_from
  if [ $rc -ne 0 ] && grep -qiE 'device (is )?not supported|not supported on this (device|platform)|unsupported (device|platform)' "$log"; then
    note "compute-sanitizer: not supported on this machine ($(grep -m1 -iE 'not supported|unsupported' "$log" | cut -c1-160))."
    return 77
  fi
  [ $rc -eq 0 ] && [ "${errors:-0}" = 0 ] && { note "no memcheck errors."; return 0; }
  return 1
}

train_run() {   # train_run LABEL STEPS ARGS... -> $work/LABEL.json
  local label=$1 steps=$2; shift 2
  rm -f "$work/$label.json"
  run_to "$log" "${PWENV[@]}" "$pw" train "$@" --steps "$steps" --summary "$work/$label.json"
  local rc=$?
  [ $rc -eq 0 ] && [ -s "$work/$label.json" ] || { note "pipewright train failed (exit $rc)."; return 1; }
  summary_figs "$work/$label.json" final_loss median_step_ms steady_samples_per_second peak_memory_bytes wall_seconds
}
r18_steps() { if [ $dry = 1 ]; then echo "${PW_DRY_STEPS:-2}"; else echo $R18_STEPS; fi; }
step_resnet18_cuda() {
  dry_skip && return 77
  train_run r18_cuda "$(r18_steps)" "${R18[@]}" --synthetic-size $((32 * R18_STEPS)) --device cuda:0
}
step_resnet18_cpu() {
  local s; s=$(r18_steps)
  [ $dry = 1 ] && note "dry run: $s steps."
  train_run r18_cpu "$s" "${R18[@]}" --synthetic-size $((32 * R18_STEPS)) --device cpu:0
}
compare_step() {   # compare_step REF RUN REF_LABEL RUN_LABEL
  [ -s "$work/$1.json" ] || { note "no $3 summary (its step failed or was not selected)."; return 1; }
  if [ $dry = 1 ]; then
    helper compare "$work/$1.json" "$work/$1.json" "$3" "$3" >"$work/cmp.out"
    grep -v $'^PASS\t\|^FAIL\t' "$work/cmp.out" | figs_from
    note "dry run: no $4 history; the comparison ran on the $3 history against itself."
    return 77
  fi
  [ -s "$work/$2.json" ] || { note "no $4 summary (its step failed or was not selected)."; return 1; }
  helper compare "$work/$1.json" "$work/$2.json" "$3" "$4" >"$work/cmp.out"
  local rc=$?
  grep -v $'^PASS\t\|^FAIL\t' "$work/cmp.out" | figs_from
  note "$(grep -E $'^(PASS|FAIL)\t' "$work/cmp.out" | cut -f2)"
  cat "$work/cmp.out" >>"$log"
  return $rc
}
step_resnet18_compare() { compare_step r18_cpu r18_cuda cpu:0 cuda:0; }

# One step on the CPU (lr 1 and 2) and on the GPU (lr 1, with cuDNN's heuristic algorithms and
# with --deterministic ones): per-tensor gradient differences, GPU against CPU and GPU against GPU.
step_gradients() {
  local dev=cuda:0 r m rc=0 j
  [ $dry = 1 ] && dev=cpu:0
  for j in "${!GRAD_MODELS[@]}"; do
    m=${GRAD_MODELS[$j]}
    local tag; tag=$(set -- $m; echo "$2")
    for r in "ref1 cpu:0 1" "ref2 cpu:0 2" "run1 $dev 1" "det1 $dev 1 --deterministic"; do
      set -- $r
      rm -f "$work/grad_$1.safetensors"
      run_to "$log" "${PWENV[@]}" "$pw" train $m "${GRAD[@]}" --lr "$3" --device "$2" --save "$work/grad_$1.safetensors" ${4:+"$4"} \
        || { note "pipewright train $tag --steps 1 on $2 failed."; return 1; }
    done
    helper gradients "$work/grad_ref1.safetensors" "$work/grad_ref2.safetensors" "$work/grad_run1.safetensors" \
      "${GRAD_RTOLS[$j]}" "$work/grad_det1.safetensors" >"$work/grad.out" 2>>"$log" || rc=1
    cat "$work/grad.out" >>"$log"
    grep -v $'^PASS\t\|^FAIL\t' "$work/grad.out" | sed "s/^/${tag}_/" | figs_from
    note "$tag: $(grep -E $'^(PASS|FAIL)\t' "$work/grad.out" | cut -f2)."
    if [ -n "${PW_KEEP_GRADIENTS:-}" ]; then   # keep the weights for a closer look elsewhere
      mkdir -p "$PW_KEEP_GRADIENTS"
      for r in ref1 ref2 run1; do cp "$work/grad_$r.safetensors" "$PW_KEEP_GRADIENTS/grad_${tag}_$r.safetensors"; done
    fi
  done
  if [ $dry = 1 ]; then note "dry run: cpu:0 against itself."; return 77; fi
  return $rc
}

pipe_run() {   # pipe_run LABEL DEVICES
  local label=$1 devices=$2 s=$PIPE_STEPS
  [ $dry = 1 ] && s=${PW_DRY_STEPS:-2}
  train_run "$label" "$s" "${R18[@]}" --synthetic-size $((32 * PIPE_STEPS)) "${PIPE[@]}" --devices "$devices" \
    --trace "$logs/$label.trace.json" || return 1
  summary_figs "$work/$label.json" stages devices split stage_busy_fraction stage_peak_memory_bytes
  helper trace "$logs/$label.trace.json" | figs_from || { note "the trace is missing or malformed."; return 1; }
  run_to_out "$work/$label.prof.json" "$log" "${PWENV[@]}" "$pw" prof --json "$logs/$label.trace.json"
  local rc=$?
  cat "$work/$label.prof.json" >>"$log"
  run_to "$log" "${PWENV[@]}" "$pw" prof --svg "$logs/$label.timeline.svg" "$logs/$label.trace.json" >/dev/null
  if [ $rc -eq 0 ] && helper prof "$work/$label.prof.json" >"$work/prof.out" 2>>"$log"; then
    figs_from <"$work/prof.out"
  else
    note "pipewright prof failed on the trace."; return 1
  fi
  [ $dry = 1 ] && note "dry run: $s steps."
  return 0
}
step_pipeline_cuda() { dry_skip && return 77; pipe_run pipe_cuda cuda:0,cuda:0; }
step_pipeline_cpu() { pipe_run pipe_cpu cpu:0,cpu:1; }
step_pipeline_compare() { compare_step pipe_cpu pipe_cuda "2 stages on cpu:0,cpu:1" "2 stages on cuda:0,cuda:0"; }

throughput() {   # throughput LABEL PW_EXTRA TORCH_TF32 DEVICE TORCH_DEVICE MODEL WIDTH SHAPE BATCH STEPS WARMUP [PRECISION]
  local label=$1 extra=$2 tf32=$3 dev=$4 tdev=$5 model=$6 width=$7 shape=$8 batch=$9 steps=${10} warmup=${11}
  local precision=${12:-fp32}
  [ -n "$torch_py" ] || { note "no python3 that imports torch: no PyTorch peer."; return 1; }
  local pwargs=(--model "$model" --width "$width" --dataset synthetic --synthetic-shape "$shape"
                --synthetic-size $((batch * (steps + warmup))) --batch-size "$batch" --warmup-steps "$warmup"
                --optimizer sgd --lr 0.01 --momentum 0.9 --seed 1 --eval-batches 0 --log-every 10 --device "$dev")
  [ -n "$extra" ] && pwargs+=("$extra")
  [ "$precision" != fp32 ] && pwargs+=(--precision "$precision")
  train_run "tp_$label" $((steps + warmup)) "${pwargs[@]}" || return 1
  : >"$work/tp_$label.torch"
  echo "\$ $torch_py $peer ... (PyTorch peer)" >>"$log"
  local left=$((step_deadline - $(date +%s)))
  [ $left -ge 5 ] || { note "no time left for the PyTorch peer."; return 1; }
  timeout -k 10 "$left" "$torch_py" "$peer" --device "$tdev" --model "$model" --width "$width" --input-shape "$shape" \
    --batch-size "$batch" --steps "$steps" --warmup "$warmup" --tf32 "$tf32" --precision "$precision" --threads "$(nproc)" --json \
    >"$work/tp_$label.torch" 2>>"$log"
  local rc=$?
  cat "$work/tp_$label.torch" >>"$log"
  [ $rc -eq 0 ] || { note "the PyTorch peer failed (exit $rc)."; return 1; }
  helper throughput "$work/tp_$label.json" "$work/tp_$label.torch" "$label" >"$work/tp.out" 2>>"$log"
  rc=$?
  grep -v $'^FAIL\t' "$work/tp.out" | figs_from
  grep -q $'^FAIL\t' "$work/tp.out" && note "$(grep $'^FAIL\t' "$work/tp.out" | cut -f2)"
  return $rc
}
# In a dry run the throughput and determinism steps rehearse their code path on cpu:0 at a size a
# CPU finishes in seconds (resnet50 keeps its ImageNet form at 72x72, as at 224x224): a broken
# command, summary or peer fails the step; the figures themselves mean nothing and it stays SKIP.
rehearse_note="dry run: needs a GPU; rehearsed on cpu:0"
throughput_step() {   # throughput_step LABEL PW_EXTRA TORCH_TF32 [PRECISION]
  if [ $dry = 1 ]; then
    throughput "$1" "$2" "$3" cpu:0 cpu resnet50 8 3x72x72 2 2 1 "${4:-fp32}" || return 1
    note "$rehearse_note (resnet50 width 8, 3x72x72, batch 2) against PyTorch."
    return 77
  fi
  throughput "$1" "$2" "$3" cuda:0 cuda "$TP_MODEL" "$TP_WIDTH" "$TP_SHAPE" "$TP_BATCH" "$TP_STEPS" "$TP_WARMUP" "${4:-fp32}"
}
step_throughput_fp32() { throughput_step fp32 "" off; }
step_throughput_tf32() { throughput_step tf32 --allow-tf32 on; }
step_throughput_bf16() { throughput_step bf16 "" off bf16; }   # mixed precision: bf16 activations, fp32 weights
step_determinism() {
  local a dev=cuda:0 steps=$DET_STEPS
  [ $dry = 1 ] && { dev=cpu:0; steps=${PW_DRY_STEPS:-2}; }
  for a in det_a det_b; do
    train_run "$a" "$steps" "${R18[@]}" --synthetic-size $((32 * DET_STEPS)) --device "$dev" --deterministic || return 1
  done
  helper identical "$work/det_a.json" "$work/det_b.json" >"$work/det.out"
  local rc=$?
  figs_from <"$work/det.out"
  if [ $rc -eq 0 ]; then note "two --deterministic runs on $dev gave bitwise equal losses."
  else note "two --deterministic runs on $dev differ."; fi
  if [ $dry = 1 ]; then note "($rehearse_note, $steps steps.)"; return 77; fi
  return $rc
}

# The host-memory targets want a freshly booted machine: this step runs before anything else has
# touched much memory. Figures only (benchmarks are not asserted); the machine's uptime beside them.
step_host_benches() {
  local tb=() pb=(--shards 1)
  [ $dry = 1 ] && { tb=(--sizes 1048576 --scale 0.2); pb+=(--keys 1024 --zipf-steps 2 --batch-samples 0); }
  figt uptime_seconds "$(cut -d' ' -f1 /proc/uptime)"
  run_to_out "$work/transport.out" "$log" "${PWENV[@]}" "$bin_dir/transport_bench" "${tb[@]}" || { note "transport_bench failed."; return 1; }
  run_to_out "$work/ps.out" "$log" "${PWENV[@]}" "$bin_dir/ps_bench" "${pb[@]}" || { note "ps_bench failed."; return 1; }
  cat "$work/transport.out" "$work/ps.out" >>"$log"
  helper host_benches "$work/transport.out" "$work/ps.out" | figs_from
  note "$(helper host_benches "$work/transport.out" "$work/ps.out" --text)"
  [ $dry = 1 ] && { note "(dry run: small sizes, figures mean nothing.)"; return 77; }
  return 0
}

# zero_run LABEL DEVICES ARGS...: the two-replica Adam job.
zero_run() {
  local label=$1 devices=$2 s=$ZERO_STEPS; shift 2
  [ $dry = 1 ] && s=${PW_DRY_STEPS:-2}
  train_run "$label" "$s" "${ZERO[@]}" --synthetic-size $((32 * ZERO_STEPS)) --devices "$devices" "$@" >/dev/null || return 1
  helper summary "$work/$label.json" final_loss median_step_ms | sed "s/^/${label}_/" | figs_from
}
# zero_checks PRECISION WHAT: WHAT is shard (sharded against plain, both on the GPU, and against the
# CPU) or offload (sharded + offloaded on the GPU against sharded on the GPU, and against the CPU).
zero_checks() {
  local p=$1 what=$2 dev=cuda:0,cuda:0 rc=0 rtol=$FIRST_RTOL extra=()
  [ "$p" = bf16 ] && rtol=$BF16_FIRST_RTOL
  [ $dry = 1 ] && dev=cpu:2,cpu:3
  if [ "$what" = shard ]; then
    zero_run "plain_$p" "$dev" --precision "$p" --deterministic || return 1
    extra=(--shard-optimizer)
  else
    [ -s "$work/shard_${p}.json" ] || zero_run "shard_$p" "$dev" --precision "$p" --deterministic --shard-optimizer || return 1
    extra=(--shard-optimizer --offload-optimizer)
  fi
  zero_run "${what}_$p" "$dev" --precision "$p" --deterministic "${extra[@]}" || return 1
  zero_run "${what}_${p}_cpu" cpu:0,cpu:1 --precision "$p" "${extra[@]}" || return 1
  local base=plain_$p
  [ "$what" = offload ] && base=shard_$p
  # Sharded against plain (or offloaded against on-device) on the GPU: the same sums in the same
  # order (two replicas) and the same elementwise update, so the same bits, or within rounding.
  helper identical "$work/$base.json" "$work/${what}_$p.json" | sed "s/^/${what}_${p}_vs_${base}_/" | figs_from
  if helper identical "$work/$base.json" "$work/${what}_$p.json" >/dev/null; then
    note "$p: ${what} on the GPU bitwise equal to $base."
  elif [ "$what" = shard ]; then
    note "$p: sharded and plain differ on the GPU."; rc=1
  else
    note "$p: offloaded (CPU update) and on-device (CUDA update) not bitwise equal;"
  fi
  local step1=""
  [ "$p" = bf16 ] && step1=$BF16_FIRST_STEP_RTOL
  GC_FIRST_RTOL=$rtol GC_FIRST_STEP_RTOL=$step1 helper compare "$work/${what}_${p}_cpu.json" "$work/${what}_$p.json" cpu cuda >"$work/cmp.out"
  [ $? -eq 0 ] || [ $dry = 1 ] || rc=1   # a dry run's few steps need not learn
  grep -v $'^PASS\t\|^FAIL\t' "$work/cmp.out" | sed "s/^/${what}_${p}_/" | figs_from
  note "$p against the CPU: $(grep -E $'^(PASS|FAIL)\t' "$work/cmp.out" | cut -f2);"
  helper memory "$what" "$work/${what}_${p}_cpu.json" "$work/${what}_$p.json" "$work/$base.json" >"$work/mem.out"
  [ $? -eq 0 ] || rc=1
  grep -v $'^PASS\t\|^FAIL\t' "$work/mem.out" | sed "s/^/${what}_${p}_/" | figs_from
  note "$p memory: $(grep -E $'^(PASS|FAIL)\t' "$work/mem.out" | cut -f2)."
  cat "$work/cmp.out" "$work/mem.out" >>"$log"
  return $rc
}
zero_step() {
  local rc=0 p
  for p in fp32 bf16; do zero_checks "$p" "$1" || rc=1; done
  if [ $dry = 1 ]; then note "(dry run: cpu:2,cpu:3 in place of cuda:0,cuda:0, ${PW_DRY_STEPS:-2} steps; the loss rule is not applied.)"; [ $rc = 0 ] && return 77; fi
  return $rc
}
step_shard_optimizer() { zero_step shard; }
step_offload_optimizer() { zero_step offload; }

# 1F1B, ZB-H1 and ZB-V on two stages of one GPU, traced: pipewright prof's measured step against
# the simulator's makespan with the traced op times (CUDA events).
step_schedules_cuda() {
  local dev=cuda:0,cuda:0 k s=$ZB_STEPS rc=0
  [ $dry = 1 ] && { dev=cpu:0,cpu:1; s=$((${PW_DRY_STEPS:-2} + 1)); }
  for k in "${ZB_KINDS[@]}"; do
    train_run "zb_$k" "$s" "${R18[@]}" --synthetic-size $((32 * ZB_STEPS)) --stages 2 --micro-batches 8 --schedule "$k" \
      --devices "$dev" --trace "$logs/zb_$k.trace.json" --trace-steps "2:$s" >/dev/null || { note "$k: train failed."; rc=1; continue; }
    run_to_out "$work/zb_$k.prof.json" "$log" "${PWENV[@]}" "$pw" prof --json "$logs/zb_$k.trace.json" \
      || { note "$k: prof failed."; rc=1; continue; }
    helper schedule "$work/zb_$k.prof.json" "$work/zb_$k.json" | sed "s/^/${k}_/" | figs_from
    note "$k: $(helper schedule "$work/zb_$k.prof.json" "$work/zb_$k.json" --text);"
  done
  if [ $dry = 1 ]; then note "(dry run: cpu:0,cpu:1, $s steps.)"; [ $rc = 0 ] && return 77; fi
  return $rc
}

# The throughput workload (resnet50, bf16 and TF32) under CUPTI: where one steady step's GPU time
# goes, by kernel, and what the host does meanwhile (launches, waits, copies back).
step_kernel_profile() {
  dry_skip "CUPTI records a CUDA device" && return 77
  [ -f "$profile_lib" ] || { note "no $profile_lib (the bundle or build lacks pw_cuda_kernel_profile)."; return 1; }
  local label s rc=0
  for label in bf16 tf32; do
    local extra=(--precision bf16)
    [ $label = tf32 ] && extra=(--allow-tf32)
    for s in $KP_SHORT $KP_LONG; do
      local out=$work/kp_${label}_$s
      rm -f "$out.json" "$out.cupti.json"
      run_to "$log" "${PWENV[@]}" env "CUDA_INJECTION64_PATH=$profile_lib" "PW_KERNEL_PROFILE_OUT=$out.cupti.json" \
        "$pw" train --model "$TP_MODEL" --width "$TP_WIDTH" --dataset synthetic --synthetic-shape "$TP_SHAPE" \
        --synthetic-size $((TP_BATCH * s)) --batch-size "$TP_BATCH" --warmup-steps 3 --optimizer sgd --lr 0.01 \
        --momentum 0.9 --seed 1 --eval-batches 0 --log-every 10 --device cuda:0 "${extra[@]}" --steps "$s" \
        --summary "$out.json"
      local trc=$?
      [ $trc -eq 0 ] && [ -s "$out.json" ] && [ -s "$out.cupti.json" ] \
        || { note "$label, $s steps: pipewright train exited $trc, or left no summary or no CUPTI record."; rc=1; continue 2; }
    done
    helper kernel_profile "$work/kp_${label}_$KP_SHORT.cupti.json" "$work/kp_${label}_$KP_LONG.cupti.json" \
      $((KP_LONG - KP_SHORT)) "$work/kp_${label}_$KP_LONG.json" | sed "s/^/${label}_/" | figs_from
    note "$label: $(helper kernel_profile "$work/kp_${label}_$KP_SHORT.cupti.json" "$work/kp_${label}_$KP_LONG.cupti.json" \
      $((KP_LONG - KP_SHORT)) "$work/kp_${label}_$KP_LONG.json" --text);"
    cp "$work/kp_${label}_$KP_SHORT.cupti.json" "$work/kp_${label}_$KP_LONG.cupti.json" "$logs/" 2>/dev/null
  done
  return $rc
}

# ---------------------------------------------------------------------------------------------
echo "gpu_check: $([ $dry = 1 ] && echo dry run || echo GPU run), $layout layout, binaries in $bin_dir and $test_dir; report in $outdir" >&2
for s in "${STEPS[@]}"; do run_step "${s%%:*}" "${s##*:}"; done
head_kv finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf "seconds\t%d\n" "$(($(date +%s) - script_start))" >>"$work/head.tsv"
helper render "$outdir"
pack_logs
cat "$outdir/report.txt"
exit $failed
