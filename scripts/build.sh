#!/usr/bin/env bash
# Configures and builds pipewright into build/ (executables in build/bin/).
# The CUDA path is built whenever nvcc is present (no GPU is needed to compile it).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${PW_BUILD_DIR:-build}
cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
cuda=${PW_WITH_CUDA:-$cuda}
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPW_WITH_CUDA="$cuda"
fi
cmake --build "$build_dir" --parallel "$(nproc)"
