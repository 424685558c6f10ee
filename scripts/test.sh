#!/usr/bin/env bash
# Sets up, builds, and runs every test (GPU suites report Skipped where no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir "${PW_BUILD_DIR:-build}" --output-on-failure --timeout 1200 "$@"
