#!/usr/bin/env bash
# Chaos soak (docs/running_safely.md#the-chaos-soak): a 2-stage x 2-replica DLRM job with 2 parameter
# servers under `pipewright launch --max-restarts`, a random rank or server killed (SIGKILL) every
# --fault-every seconds, checked at the end against an undisturbed run of the same job: the saved
# weights, the loss history and the last checkpoint (every stage's file and every server's tables)
# must be bitwise equal, and no process of the job may be left. Prints what it did as JSON lines and
# exits 1 when the results differ, a process is left or the job failed.
#
#   bench/chaos.sh --minutes N [--fault-every S] [--seed K] [--require-faults F] [--keep]
#
# --minutes: how long the undisturbed job trains (its steps are calibrated on this machine first);
# --fault-every: seconds between faults (default 30); --seed: which ranks and servers are hit, in
# which order (default 1); --require-faults: fail unless at least F faults were injected (default 0);
# --keep: keep the work folder. Where the kernel allows it (root or user namespaces, and the netem
# queueing discipline), the disturbed job runs in a network namespace of its own whose loopback
# delays and drops packets (tc netem); otherwise the line "netem" says why it was skipped.
# Builds nothing: it runs build/bin/pipewright (or $PW_BIN).
set -euo pipefail

minutes=1
fault_every=30
seed=1
require_faults=0
keep=0
usage() { echo "usage: $0 --minutes N [--fault-every S] [--seed K] [--require-faults F] [--keep]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=${2:?}; shift 2 ;;
    --fault-every) fault_every=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --require-faults) require_faults=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    *) usage ;;
  esac
done
for n in "$minutes" "$fault_every" "$seed" "$require_faults"; do
  [[ "$n" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
done

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${PW_BIN:-$root/build/bin/pipewright}
[ -x "$bin" ] || { echo "chaos: $bin is not built (scripts/build.sh)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/pw-chaos.XXXXXX")
# The launcher writes its servers' config files under TMPDIR: every process of the job then names
# $work on its command line, which is how leftovers are found.
mkdir -p "$work/tmp"
export TMPDIR=$work/tmp

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "chaos: $*" >&2; }
json_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

launcher=""
fault_loop=""
cleanup() {
  local status=$?
  [ -n "$fault_loop" ] && kill "$fault_loop" 2>/dev/null || true
  [ -n "$launcher" ] && kill -TERM "$launcher" 2>/dev/null || true
  if [ "$keep" = 1 ] || [ "$status" != 0 ]; then say "work folder kept: $work"; else rm -rf "$work"; fi
  exit "$status"
}
trap cleanup EXIT

# The job: DLRM on synthetic clicks, 2 stages x 2 replicas (4 ranks), its 3 tables on 2 servers
# (sync), one thread per rank.
job=(--model dlrm --dataset synthetic-clicks --synthetic-size 20000 --batch-size 64 --threads 1
     --stages 2 --replicas 2 --micro-batches 2 --eval-batches 4 --seed "$seed" --log-every 100000)
launch=(launch --ps 2 --nproc-per-node 4 --max-restarts 100000 --grace 2)

# Processes of this job still alive (the launcher excluded).
leftovers() { pgrep -f -- "$work" | grep -vx "${launcher:-0}" || true; }

# Runs the job under the launcher: NAME STEPS EVERY [in the namespace]. Sets $launcher while it runs
# and $status after.
run_job() {
  local name=$1 steps=$2 every=$3 wrap=${4:-}
  mkdir -p "$work/$name"
  local cmd=("$bin" "${launch[@]}" -- "${job[@]}" --steps "$steps" --checkpoint-dir "$work/$name/ckpt"
             --checkpoint-every "$every" --summary "$work/$name/summary.json" --save "$work/$name/weights.safetensors")
  if [ -n "$wrap" ]; then
    unshare -rn sh -c "ip link set lo up && tc qdisc add dev lo root netem $netem_spec && exec \"\$@\"" sh "${cmd[@]}" \
      > "$work/$name/launch.log" 2>&1 &
  else
    "${cmd[@]}" > "$work/$name/launch.log" 2>&1 &
  fi
  launcher=$!
}

# Calibration: how long a step takes here, so that the reference trains about --minutes.
run_job calibrate 40 1000
wait "$launcher" || { say "the calibration run failed:"; tail -20 "$work/calibrate/launch.log" >&2; exit 1; }
launcher=""
step_ms=$(json_of "$work/calibrate/summary.json" "['median_step_ms']")
steps=$(awk -v m="$minutes" -v s="$step_ms" 'BEGIN { n = int(m * 60000 / (s * 1.2)); print (n < 50 ? 50 : n) }')
# A checkpoint about every 3 s of training.
every=$(awk -v s="$step_ms" 'BEGIN { n = int(3000 / (s * 1.2)); print (n < 5 ? 5 : n) }')
say "a step takes ${step_ms} ms: $steps steps, a checkpoint every $every steps"

# The network: netem on a namespace's loopback, if this machine has it.
netem_spec="delay 1ms 500us loss 0.2%"
netem="skipped"
if ! command -v unshare > /dev/null || ! command -v tc > /dev/null || ! command -v ip > /dev/null; then
  netem_why="unshare, tc or ip (iproute2) is not installed"
elif ! why=$(unshare -rn sh -c "ip link set lo up && tc qdisc add dev lo root netem $netem_spec" 2>&1); then
  netem_why="tc qdisc add dev lo root netem $netem_spec in a new network namespace failed: $(echo "$why" | head -1)"
else
  netem="on"
  netem_why="loopback of the disturbed job's own network namespace: $netem_spec"
fi
say "netem $netem: $netem_why"

# The reference: the same job, undisturbed.
t0=$(now)
run_job reference "$steps" "$every"
ref_status=0
wait "$launcher" || ref_status=$?
ref_seconds=$(seconds_since "$t0")
launcher=""
ref_left=$(leftovers)
if [ "$ref_status" != 0 ]; then say "the reference run failed ($ref_status):"; tail -20 "$work/reference/launch.log" >&2; exit 1; fi
say "reference: ${ref_seconds} s"

# The disturbed run, and the faults: every --fault-every seconds SIGKILL to one of rank 0-3 or
# server 0-1, in an order that follows --seed (a target between attempts is skipped).
t0=$(now)
run_job disturbed "$steps" "$every" "$([ "$netem" = on ] && echo netns)"
faults_log=$work/disturbed/faults.log
: > "$faults_log"
(
  RANDOM=$seed
  while kill -0 "$launcher" 2> /dev/null; do
    sleep "$fault_every"
    target=$((RANDOM % 6))
    pid=""
    for child in $(pgrep -P "$launcher"); do
      args=$(tr '\0' ' ' < "/proc/$child/cmdline" 2> /dev/null) || continue
      if [ "$target" -lt 4 ]; then
        case "$args" in *" train "*) ;; *) continue ;; esac
        rank=$(tr '\0' '\n' < "/proc/$child/environ" 2> /dev/null | sed -n 's/^RANK=//p')
        [ "$rank" = "$target" ] && pid=$child
      else
        case "$args" in *"/shard$((target - 4)).json"*) pid=$child ;; esac
      fi
    done
    what=$([ "$target" -lt 4 ] && echo "rank $target" || echo "server $((target - 4))")
    if [ -n "$pid" ] && kill -KILL "$pid" 2> /dev/null; then
      echo "$(seconds_since "$t0") s: SIGKILL to $what (pid $pid)" >> "$faults_log"
    else
      echo "$(seconds_since "$t0") s: $what not running (skipped)" >> "$faults_log"
    fi
  done
) &
fault_loop=$!
# A hang is a failure too: the disturbed run gets 5 times the reference's time and 10 minutes more.
limit=$(awk -v r="$ref_seconds" 'BEGIN { print int(r * 5 + 600) }')
dis_status=0
deadline=$(( $(date +%s) + limit ))
while kill -0 "$launcher" 2> /dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
if kill -0 "$launcher" 2> /dev/null; then
  say "the disturbed run still runs after $limit s: a hang"
  kill -TERM "$launcher"
  dis_status=124
  wait "$launcher" || true
else
  wait "$launcher" || dis_status=$?
fi
dis_seconds=$(seconds_since "$t0")
kill "$fault_loop" 2> /dev/null || true
wait "$fault_loop" 2> /dev/null || true
fault_loop=""
launcher=""
dis_left=$(leftovers)

faults=$(grep -c "SIGKILL" "$faults_log" || true)
rank_kills=$(grep -c "SIGKILL to rank" "$faults_log" || true)
server_kills=$(grep -c "SIGKILL to server" "$faults_log" || true)
restarts=$(grep -c "; restart [0-9]* of" "$work/disturbed/launch.log" || true)
server_restarts=$(grep -c "parameter server [0-9] starts again" "$work/disturbed/launch.log" || true)

# Bitwise: the saved weights, the loss history, and the last checkpoint's files (every stage's part
# and every server's tables, by name, size and checksum).
same="no"
why_not=""
if [ "$dis_status" != 0 ]; then
  why_not="the disturbed run ended with status $dis_status"
elif ! cmp -s "$work/reference/weights.safetensors" "$work/disturbed/weights.safetensors"; then
  why_not="the saved weights differ"
else
  why_not=$(python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
def last_manifest(run):
    ckpt = os.path.join(work, run, "ckpt")
    step = max(d for d in os.listdir(ckpt) if d.startswith("step-") and os.path.exists(os.path.join(ckpt, d, "manifest.json")))
    return step, json.load(open(os.path.join(ckpt, step, "manifest.json")))
ref, dis = (json.load(open(os.path.join(work, r, "summary.json"))) for r in ("reference", "disturbed"))
if ref["loss_history"] != dis["loss_history"]:
    print("the loss histories differ"); sys.exit()
for key in ("test_loss", "test_auc"):
    if ref.get(key) != dis.get(key):
        print(f"{key} differs: {ref.get(key)} and {dis.get(key)}"); sys.exit()
(rs, rm), (ds, dm) = last_manifest("reference"), last_manifest("disturbed")
files = lambda m: sorted((f["name"], f["bytes"], f["checksum"]) for f in m["files"] + m["parameter_servers"]["files"])
if rs != ds: print(f"the last checkpoints are {rs} and {ds}")
elif files(rm) != files(dm): print(f"the files of {rs} differ")
EOF
)
  [ -z "$why_not" ] && same="yes"
fi

cat <<EOF
{"minutes": $minutes, "fault_every_s": $fault_every, "seed": $seed, "steps": $steps, "checkpoint_every": $every, "step_ms": $step_ms}
{"faults_injected": $faults, "rank_kills": $rank_kills, "server_kills": $server_kills, "restarts": $restarts, "server_restarts": $server_restarts}
{"reference_seconds": $ref_seconds, "disturbed_seconds": $dis_seconds, "time_lost_seconds": $(awk -v a="$dis_seconds" -v b="$ref_seconds" 'BEGIN { printf "%.1f", a - b }')}
{"netem": "$netem", "netem_detail": $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$netem_why")}
{"bitwise_equal": "$same", "leftover_processes": $(echo "$ref_left $dis_left" | wc -w), "disturbed_status": $dis_status}
EOF
[ -n "$why_not" ] && say "not bitwise equal: $why_not"
if [ -n "$ref_left$dis_left" ]; then
  say "processes left behind:"
  for pid in $ref_left $dis_left; do ps -o pid=,args= -p "$pid" >&2 || true; done
  # shellcheck disable=SC2086
  kill -KILL $ref_left $dis_left 2> /dev/null || true
fi
say "faults: $(tr '\n' ';' < "$faults_log")"
failed=0
[ "$same" = yes ] || failed=1
[ -z "$ref_left$dis_left" ] || failed=1
[ "$faults" -ge "$require_faults" ] || { say "only $faults faults injected; --require-faults $require_faults"; failed=1; }
exit "$failed"
