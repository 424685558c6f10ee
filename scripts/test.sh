#!/usr/bin/env bash
# Sets up, builds, and runs every test (GPU suites report Skipped where no GPU is present).
#
#   scripts/test.sh [--under-load] [ctest arguments]
#     --under-load   run the suite beside a CPU hog on every core (stress-ng --cpu 0), as a
#                    loaded CI machine would: the tests assert what the design guarantees, never
#                    a timing, so they must pass this way too
set -euo pipefail
cd "$(dirname "$0")/.."
under_load=0
if [ "${1:-}" = "--under-load" ]; then
  under_load=1
  shift
fi
scripts/setup.sh
scripts/build.sh
if [ $under_load = 1 ]; then
  command -v stress-ng >/dev/null || { echo "test.sh: --under-load needs stress-ng (scripts/setup.sh installs it)" >&2; exit 2; }
  # One hog per online CPU, at the lowest priority the tests' threads would not get anyway: plain
  # busy loops at the same niceness as the tests, so every core is contended.
  stress-ng --cpu 0 --cpu-method int64 --timeout 3h --quiet &
  hog=$!
  trap 'kill $hog 2>/dev/null; wait $hog 2>/dev/null || true' EXIT
  echo "test.sh: running the suite beside stress-ng --cpu 0 (pid $hog, $(nproc) CPU hogs)"
fi
ctest --test-dir "${PW_BUILD_DIR:-build}" --output-on-failure --timeout 1200 "$@"
