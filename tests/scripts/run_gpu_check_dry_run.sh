#!/usr/bin/env bash
# Runs scripts/gpu_check.sh --dry-run against a build tree and checks its report: report.json is
# there and well formed, every step of the script is in it once, no step failed, and without a
# GPU the GPU suites were skipped visibly (SKIP, exit 77). See docs/gpu.md.
# Usage: run_gpu_check_dry_run.sh <source dir> <build dir> <work dir>
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
set +e
env -u PW_BIN_DIR -u PW_TEST_BIN_DIR PW_BUILD_DIR="$build" "$src/scripts/gpu_check.sh" --dry-run "$work/report"
rc=$?
set -e
"$src/scripts/gpu_check.sh" --list-steps | cut -d' ' -f1 >"$work/steps.txt"
python3 - "$work/report" "$work/steps.txt" "$rc" <<'PY'
import json, os, sys
report_dir, steps_file, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
problems = []
path = os.path.join(report_dir, "report.json")
try:
    report = json.load(open(path))
except (OSError, ValueError) as e:
    sys.exit("report.json missing or malformed: %s" % e)
expected = [l.strip() for l in open(steps_file) if l.strip()]
steps = report.get("steps")
if not isinstance(steps, list):
    sys.exit("report.json has no steps list")
names = [s.get("name") for s in steps]
if names != expected:
    problems.append("steps %s, expected %s" % (names, expected))
if report.get("mode") != "dry-run":
    problems.append("mode %r, expected dry-run" % report.get("mode"))
for s in steps:
    if s.get("status") not in ("PASS", "FAIL", "SKIP") or not isinstance(s.get("seconds"), (int, float)) \
            or not isinstance(s.get("figures"), dict):
        problems.append("malformed step %r" % s)
    elif s["status"] == "FAIL":
        problems.append("step %s failed: %s\n    %s" % (s["name"], s.get("note"), "\n    ".join(s.get("log_tail", []))))
if report.get("gpu_present") == "no":
    for name in ("ops_cuda", "nccl", "gpu_training"):
        s = next((x for x in steps if x.get("name") == name), {})
        if s.get("status") != "SKIP" or s.get("figures", {}).get("exit_code") != 77:
            problems.append("%s without a GPU: %s, exit %s (expected SKIP, exit 77)" % (
                name, s.get("status"), s.get("figures", {}).get("exit_code")))
want = "FAIL" if any(s.get("status") == "FAIL" for s in steps) else "PASS"
if report.get("result") != want or (rc == 0) != (want == "PASS"):
    problems.append("result %r and exit %d disagree with the steps (%s)" % (report.get("result"), rc, want))
for f in ("report.txt", "logs.tar.gz"):
    if not os.path.isfile(os.path.join(report_dir, f)):
        problems.append("no %s" % f)
if problems:
    sys.exit("gpu_check dry run:\n  " + "\n  ".join(problems))
print("gpu_check dry run: report.json well formed, %d steps, %d skipped, none failed" % (
    len(steps), sum(1 for s in steps if s["status"] == "SKIP")))
PY
