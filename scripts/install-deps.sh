#!/usr/bin/env bash
# Installs the Debian packages zipccl needs to build, test and run its demo.
# Idempotent: installs only what is missing, and says what it installs.
set -euo pipefail

packages=(
  build-essential pkg-config meson ninja-build python3 clang llvm clang-format
  libclang-rt-dev
  libucx-dev ucx-utils libhwloc-dev hwloc libsodium-dev
  libcriterion-dev zlib1g-dev
  libopenblas-dev liblapacke-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist gnuplot-nox
  python3-numpy python3-mpi4py python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
