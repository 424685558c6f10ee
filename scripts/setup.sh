#!/usr/bin/env bash
# Installs every Debian package that pipewright's build, tests, benchmarks and demo need.
# Idempotent: packages already present are skipped. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libthrift-dev thrift-compiler
  libssl-dev openssl
  libtbb-dev
  zlib1g-dev
  libturbojpeg0-dev libpng-dev libarchive-dev
  libboost-test-dev
  libdnnl-dev
  libgloo-dev
  nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler python3-protobuf
  libcli11-dev
  dataset-fashion-mnist
  python3 python3-torch python3-numpy python3-torchvision python3-pil
  mate-backgrounds
  clang libclang-rt-14-dev
  stress-ng
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
