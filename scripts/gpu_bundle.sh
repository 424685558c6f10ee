#!/usr/bin/env bash
# Builds the CUDA path for Hopper (sm_90, -lineinfo) and packs what a GPU machine without our
# Debian packages needs into one archive, build-gpu/pipewright-gpu.tar.xz (xz -9, under 50 MiB):
#
#   pipewright-gpu/bin/      pipewright and the benchmarks (stripped)
#   pipewright-gpu/tests/    the GPU test binaries (stripped); tests/golden/ the golden files
#   pipewright-gpu/lib/      the non-CUDA shared libraries they link (oneDNN, oneTBB, Boost.Test,
#                            Thrift, Gloo, ...); lib/compat/ this machine's libstdc++ and libgcc_s
#   pipewright-gpu/bench/    the PyTorch peer (torch_train.py) and the input-pipeline run on the GPU
#                            (gpu_input.sh: shards against torchvision's DataLoader)
#   pipewright-gpu/gpu_check.sh, run.sh, MANIFEST.txt, README.md (docs/gpu.md)
#
# CUDA, cuDNN and NCCL are not shipped: they come from the GPU machine (its toolkit and the
# nvidia/*/lib folders of its Python packages). glibc is not shipped either.
#
#   scripts/gpu_bundle.sh [--no-build] [--no-verify]
#     --no-build    ship the binaries as they are in the build folder (no cmake --build)
#     --no-verify   skip the dry run of gpu_check.sh from the unpacked archive
#   PW_BUILD_DIR    the build folder (default build; configured for CUDA sm_90 if it has no cache)
#
# Before it prints the archive's size, it checks the archive here: every binary's ldd with only the
# bundle's lib/ and the CUDA libraries on LD_LIBRARY_PATH finds everything, in the bundle or among
# the libraries the GPU machine brings (CUDA, glibc), and (unless --no-verify) gpu_check.sh
# --dry-run passes from the unpacked archive. See docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

build=1 verify=1
for a in "$@"; do
  case $a in
    --no-build) build=0 ;;
    --no-verify) verify=0 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle: unknown argument '$a' (accepted: --no-build, --no-verify)" >&2; exit 2 ;;
  esac
done
die() { echo "gpu_bundle: $*" >&2; exit 1; }
limit_bytes=$((50 * 1024 * 1024))

build_dir=${PW_BUILD_DIR:-build}
case $build_dir in /*) ;; *) build_dir=$src/$build_dir ;; esac
out_dir=$src/build-gpu
archive=$out_dir/pipewright-gpu.tar.xz

# --- The build: CUDA on, sm_90 among the architectures, -lineinfo. --------------------------
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  [ $build = 1 ] || die "$build_dir has no CMakeCache.txt; run without --no-build to configure and build it"
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPW_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
fi
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" | head -1; }
cuda=$(cache PW_WITH_CUDA)
case ${cuda^^} in ON|TRUE|1|YES) ;; *) die "$build_dir is not a CUDA build (PW_WITH_CUDA=${cuda:-unset}); configure it with -DPW_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 or set PW_BUILD_DIR" ;; esac
# CMAKE_CUDA_ARCHITECTURES is in the cache only when given on the command line; otherwise
# cmake/PwDependencies.cmake sets 90. Either way the generated build files must compile for sm_90.
archs=$(cache CMAKE_CUDA_ARCHITECTURES)
case ";${archs:-90};" in
  *";90;"*|*";90-real;"*|*";90a;"*|*";90a-real;"*|*";all;"*|*";all-major;"*) ;;
  *) die "$build_dir builds CUDA for '${archs}', not sm_90 (H100/H200); reconfigure with -DCMAKE_CUDA_ARCHITECTURES=90" ;;
esac
build_files=("$build_dir/build.ninja")
[ -f "$build_dir/build.ninja" ] || mapfile -t build_files < <(find "$build_dir" -name flags.make)
grep -qsE 'sm_90|compute_90' "${build_files[@]}" || die "$build_dir's build files do not compile for sm_90; reconfigure with -DCMAKE_CUDA_ARCHITECTURES=90"
grep -qs -- '-lineinfo' "${build_files[@]}" || die "$build_dir's CUDA code is built without -lineinfo; reconfigure with -DPW_CUDA_LINEINFO=ON"

mapfile -t shipped < <(scripts/gpu_check.sh --list-binaries)   # the one list: bin/X, tests/X
profile_lib=$build_dir/lib/libpw_cuda_kernel_profile.so   # gpu_check.sh's kernel_profile step
if [ $build = 1 ]; then
  cmake --build "$build_dir" --parallel "$(nproc)" --target "${shipped[@]##*/}"
  cmake --build "$build_dir" --parallel "$(nproc)" --target pw_cuda_kernel_profile \
    || die "cannot build pw_cuda_kernel_profile (bench/CMakeLists.txt builds it where CMake finds CUPTI: CUDA::cupti)"
else
  echo "gpu_bundle: --no-build: shipping the binaries of $build_dir as they are" >&2
fi
missing=()
for b in "${shipped[@]}"; do [ -x "$build_dir/$b" ] || missing+=("$build_dir/$b"); done
[ -f "$profile_lib" ] || missing+=("$profile_lib (CMake builds it with the CUDA path where it finds CUPTI)")
[ ${#missing[@]} -eq 0 ] || die "missing binaries: ${missing[*]}"

# --- Stage. --------------------------------------------------------------------------------
stage_root=$out_dir/stage
stage=$stage_root/pipewright-gpu
rm -rf "$stage_root"
mkdir -p "$stage/bin" "$stage/tests/golden" "$stage/lib/compat" "$stage/bench"
for b in "${shipped[@]}"; do strip --strip-unneeded -o "$stage/$b" "$build_dir/$b"; done
cp tests/golden/*.safetensors "$stage/tests/golden/"
cp bench/torch_train.py bench/gpu_input.sh "$stage/bench/"
# The CUPTI injection library, with the CUPTI it was built against beside it (its runpath is
# $ORIGIN): the GPU machine's toolkit has one, but not always on the library path.
strip --strip-unneeded -o "$stage/bench/libpw_cuda_kernel_profile.so" "$profile_lib"
cupti=$(ldd "$profile_lib" | awk '$1 ~ /^libcupti\.so/ {print $3; exit}')
[ -f "$cupti" ] || die "$profile_lib: its CUPTI library was not found (ldd)"
cp -L "$cupti" "$stage/bench/"
cp scripts/gpu_check.sh "$stage/gpu_check.sh"
cp docs/gpu.md "$stage/README.md"
cat >"$stage/run.sh" <<'RUN'
#!/usr/bin/env bash
# run.sh COMMAND [ARGS...]: runs COMMAND in this bundle's environment (the bundle's lib/, then the
# machine's CUDA toolkit and the nvidia/*/lib folders of its Python packages on LD_LIBRARY_PATH;
# lib/compat only where the machine's libstdc++ is too old; PW_SOURCE_DIR and PW_BIN_DIR set),
# e.g. ./run.sh bin/pipewright info
exec "$(cd "$(dirname "$0")" && pwd)/gpu_check.sh" --run "$@"
RUN
chmod +x "$stage/run.sh" "$stage/gpu_check.sh" "$stage/bench/torch_train.py" "$stage/bench/gpu_input.sh"

# Libraries: everything ldd lists except CUDA's (the GPU machine's) and glibc's.
glibc_re='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libanl\.so)'
cuda_re='^(libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libcudnn[a-z_]*\.so|libnccl\.so|libnvrtc|libnvJitLink|libcupti)'
compat_re='^(libstdc\+\+\.so|libgcc_s\.so)'
for b in "${shipped[@]}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ "$path" = "not" ] && die "$b: $name not found on this machine, so it cannot be shipped"
    [[ $name =~ $glibc_re || $name =~ $cuda_re ]] && continue
    dest=$stage/lib
    [[ $name =~ $compat_re ]] && dest=$stage/lib/compat
    [ -f "$dest/$name" ] || cp -L "$path" "$dest/$name"
  done < <(ldd "$build_dir/$b")
done
for f in "$stage"/lib/*.so* "$stage"/lib/compat/*.so*; do strip --strip-unneeded "$f" 2>/dev/null || true; done

# --- Check the stage: every dependency resolves to the bundle, CUDA or glibc. ----------------
cuda_dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && cuda_dirs+=("$d"); done
check_ldd() {   # check_ldd BUNDLE_DIR: prints problems, one a line
  local dir=$1 b name arrow path
  local ld; ld=$(IFS=:; echo "$dir/lib:$dir/lib/compat:${cuda_dirs[*]}")
  for b in "${shipped[@]}"; do
    while read -r name arrow path _; do
      [ "$arrow" = "=>" ] || continue
      if [ "$path" = "not" ]; then echo "$b: $name not found"; continue; fi
      [[ $name =~ $glibc_re ]] && continue
      case $path in "$dir"/lib/*) continue ;; esac
      if [[ $name =~ $cuda_re ]]; then
        local c ok=0
        for c in "${cuda_dirs[@]}"; do case $path in "$c"/*) ok=1 ;; esac; done
        [ $ok = 1 ] && continue
      fi
      echo "$b: $name resolves outside the bundle and CUDA: $path"
    done < <(env -i PATH="$PATH" LD_LIBRARY_PATH="$ld" ldd "$dir/$b" 2>&1)
  done
}
problems=$(check_ldd "$stage")
[ -z "$problems" ] || die "the bundle is not self-contained:
$problems"

# What the GPU machine must provide: the newest glibc / libstdc++ symbol versions any file needs.
elf_files=("$stage"/bin/* "$stage"/tests/test_* "$stage"/lib/*.so*)
versions=$(for f in "${elf_files[@]}"; do objdump -T "$f" 2>/dev/null; done)
needs_glibc=$(grep -oE 'GLIBC_[0-9]+(\.[0-9]+)*' <<<"$versions" | sort -uV | tail -1)
needs_glibcxx=$(grep -oE 'GLIBCXX_[0-9]+(\.[0-9]+)*' <<<"$versions" | sort -uV | tail -1)
needs_cxxabi=$(grep -oE 'CXXABI_[0-9]+(\.[0-9]+)*' <<<"$versions" | sort -uV | tail -1)

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo yes || echo no)
{
  echo "pipewright GPU bundle"
  echo "commit: $commit"
  echo "dirty: $dirty"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "build_dir: $build_dir (rebuilt: $([ $build = 1 ] && echo yes || echo no))"
  echo "cuda_architectures: ${archs:-90 (the project default)}; -lineinfo"
  echo "cuda_toolkit: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -oE 'release [0-9.]+' || echo unknown)"
  echo "needs_glibc: $needs_glibc"
  echo "needs_glibcxx: $needs_glibcxx (lib/compat has the libstdc++ that provides it)"
  echo "needs_cxxabi: $needs_cxxabi"
  echo "from the GPU machine: libcudart.so.13, libcublas(Lt).so.13, libcudnn*.so.9, libnccl.so.2, libcuda.so.1, glibc"
  echo "files:"
  (cd "$stage" && find . -type f ! -name MANIFEST.txt -printf '  %P %s\n' | sort)
} >"$stage/MANIFEST.txt"

# --- Archive. ------------------------------------------------------------------------------
rm -f "$archive"
tar -C "$stage_root" --sort=name --owner=0 --group=0 --numeric-owner -cf - pipewright-gpu \
  | xz -9 -T"$(nproc)" >"$archive.tmp"
mv "$archive.tmp" "$archive"
size=$(stat -c %s "$archive")
raw=$(du -sb "$stage" | cut -f1)

# --- Verify the archive itself. ---------------------------------------------------------------
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
tar -C "$check" -xJf "$archive"
# The GPU machine may lack xz; Python's tarfile reads the archive too (docs/gpu.md).
python3 -c 'import sys, tarfile; n = len(tarfile.open(sys.argv[1]).getnames()); print(n)' "$archive" >/dev/null \
  || die "Python's tarfile cannot read $archive"
problems=$(check_ldd "$check/pipewright-gpu")
[ -z "$problems" ] || die "the unpacked archive is not self-contained:
$problems"
"$check/pipewright-gpu/bench/gpu_input.sh" --help >/dev/null || die "bench/gpu_input.sh --help fails in the unpacked archive"
if [ $verify = 1 ]; then
  echo "gpu_bundle: dry run of gpu_check.sh from the unpacked archive ..." >&2
  (cd "$check/pipewright-gpu" && env -u PW_BIN_DIR -u PW_TEST_BIN_DIR -u PW_SOURCE_DIR -u PW_BUILD_DIR \
     ./gpu_check.sh --dry-run "$check/report" >/dev/null 2>"$check/dry-run.err") \
    || { cat "$check/dry-run.err" "$check/report/report.txt" >&2 2>/dev/null
         die "gpu_check.sh --dry-run failed from the unpacked archive"; }
  grep -q '"layout": "bundle"' "$check/report/report.json" || die "the dry run did not use the bundle layout"
  cp "$check/report/report.txt" "$out_dir/dry-run-report.txt"
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
libs=$(du -sb "$stage/lib" | cut -f1)
bins=$(du -sbc "$stage/bin" "$stage/tests" | tail -1 | cut -f1)
echo "gpu_bundle: $archive: $size bytes ($(mib "$size")); unpacked $(mib "$raw"): libraries $(mib "$libs"), binaries $(mib "$bins")"
echo "gpu_bundle: commit $commit$([ "$dirty" = yes ] && echo ' (with uncommitted changes)'); needs $needs_glibc, $needs_glibcxx"
[ $verify = 1 ] && echo "gpu_bundle: the dry run from the unpacked archive passed ($out_dir/dry-run-report.txt)"
[ "$size" -lt $limit_bytes ] || die "the archive is $(mib "$size"), over the 50 MiB limit"
