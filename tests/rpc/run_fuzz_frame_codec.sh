#!/usr/bin/env bash
# Builds the frame decoder's libFuzzer target with clang and runs it for a bounded number of inputs.
# Usage: run_fuzz_frame_codec.sh <source dir> <generated thrift dir> <work dir> <runs>
# Exits 77 (ctest: skipped) when clang++ with libFuzzer is not available.
set -euo pipefail
src=$1 gen=$2 work=$3 runs=$4
clang=$(command -v clang++ || true)
if [[ -z "$clang" ]]; then
  echo "skipped: clang++ with libFuzzer not found"
  exit 77
fi
mkdir -p "$work/corpus"
probe="$work/probe.cpp"
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe"
if ! "$clang" -fsanitize=fuzzer,address "$probe" -o "$work/probe" 2>/dev/null; then
  echo "skipped: clang++ with libFuzzer not found ($clang cannot link -fsanitize=fuzzer)"
  exit 77
fi
target="$work/fuzz_frame_codec"
# -fno-sanitize=enum: Thrift's own skip() loads wire bytes into its TType enum; that is Thrift's
# business, not the decoder's.
"$clang" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize=enum -fno-sanitize-recover=undefined \
  -I"$src" -I"$src/include" -I"$gen" \
  "$src/tests/rpc/fuzz_frame_codec.cpp" "$src/rpc/frame_check.cpp" "$src/kernels/device.cpp" "$src/core/error.cpp" \
  "$gen/pw_thrift/pipewright_types.cpp" -lthrift -o "$target"
PW_FUZZ_WRITE_SEED="$work/corpus/valid_frame" "$target"
"$target" -runs="$runs" -seed=1 -max_len=4096 -rss_limit_mb=1024 -artifact_prefix="$work/" "$work/corpus"
echo "fuzzed the frame decoder with $runs inputs: no crash"
