#!/usr/bin/env bash
# Builds the CUDA path for Hopper (sm_90) into build-gpu/ and gathers what a GPU machine without
# our Debian packages needs to run it: the test and tool binaries plus the non-CUDA shared
# libraries they link (oneDNN, oneTBB, Boost.Test, Thrift, zlib, ...). CUDA, cuDNN and NCCL come
# from the GPU machine itself. See ../shared/device/GPU.md.
#   scripts/gpu_bundle.sh            -> build-gpu/bundle/{bin,tests,lib,run.sh}
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPW_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build-gpu --parallel "$(nproc)"
bundle=build-gpu/bundle
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/tests" "$bundle/lib" "$bundle/tests/golden"
cp build-gpu/bin/pipewright "$bundle/bin/"
cp build-gpu/tests/* "$bundle/tests/" 2>/dev/null || true
cp tests/golden/*.safetensors "$bundle/tests/golden/"
for exe in "$bundle"/bin/* "$bundle"/tests/*; do
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  ldd "$exe" | awk '/=> \// {print $3}' | grep -vE 'libcuda|libcudart|libcublas|libcudnn|libnccl|libc\.so|libm\.so|libstdc|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so' \
    | xargs -r -I{} cp -n {} "$bundle/lib/"
done
cat > "$bundle/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine: run.sh <command...>, e.g. run.sh tests/test_ops_cuda
here=$(cd "$(dirname "$0")" && pwd)
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
extra=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${extra}${LD_LIBRARY_PATH:-}"
export PW_SOURCE_DIR="$here" PW_BIN_DIR="$here/bin"
cd "$here" && exec "$@"
RUN
chmod +x "$bundle/run.sh"
du -sh "$bundle"
