#!/usr/bin/env bash
# libzipccl-preload.so under a real NCCL on one GPU: SIZE processes (default 2), each its own
# NCCL "node" (NCCL_HOSTID=nodeR, so that NCCL accepts ranks sharing the GPU; sockets over lo),
# run tests/gpu/preload_nccl.cu (it says what it checks) twice:
#   zipccl   LD_PRELOAD, ZIPCCL_CODEC=qsgd ZIPCCL_ALGO=allgather: eligible calls staged through
#            zipccl in stream order, within QSGD's bound; int32 and graph capture left to NCCL
#   exact    LD_PRELOAD, ZIPCCL_CODEC=none: every call NCCL's, exact
#
#   tests/gpu/preload_nccl.sh [BUILD_DIR]     default build-gpu (libzipccl-preload.so is built)
#
# Environment: SIZE (ranks, 2..4), GPU_RUNTIME (a folder of scripts/gpu-runtime.sh: its env.sh
# is sourced for UCX, hwloc and OpenBLAS), CUDA_HOME (default /usr/local/cuda: nvcc, nccl.h,
# libnccl). Exit: 0 passed, 77 no CUDA device (or no nvcc), 1 failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
size=${SIZE:-2}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=$cuda/bin/nvcc
lib=$build/plugin/preload/libzipccl-preload.so

if [ ! -x "$nvcc" ]; then
  echo "no nvcc in $cuda/bin: skipping"
  exit 77
fi
if [ -n "${GPU_RUNTIME:-}" ]; then
  # shellcheck disable=SC1091
  source "$GPU_RUNTIME/env.sh"
fi
if [ ! -f "$lib" ]; then
  ninja -C "$build" plugin/preload/libzipccl-preload.so || exit 1
fi
work=$(mktemp -d /tmp/zc-preload-nccl-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
libdir=$cuda/lib64
[ -e "$libdir/libnccl.so" ] || libdir=$cuda/lib
# the shared libcudart, as frameworks load it (the preload library finds the loaded one)
"$nvcc" -O2 -std=c++17 -cudart shared -o "$work/preload_nccl" "$root/tests/gpu/preload_nccl.cu" \
  -I"$cuda/include" -L"$libdir" -lnccl -Xlinker -rpath,"$libdir" || exit 1
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# the program skips by itself (77) without a device
"$work/preload_nccl" probe >/dev/null 2>&1
if [ $? -eq 77 ]; then
  echo "no CUDA device: skipping"
  exit 77
fi

status=0
run_case() { # name, ZIPCCL_CODEC
  local name=$1 codec=$2 pids=() rc=0
  rm -f "$work/id"
  for ((r = 0; r < size; r++)); do
    env RANK=$r SIZE=$size ID_FILE="$work/id" NCCL_HOSTID=node$r NCCL_SOCKET_IFNAME=lo \
      NCCL_DEBUG=${NCCL_DEBUG:-WARN} LD_PRELOAD="$lib" ZIPCCL_CODEC="$codec" \
      ZIPCCL_ALGO=allgather ZIPCCL_QSGD_BITS=4 ZIPCCL_MIN_BYTES=64KiB ZIPCCL_TIMEOUT_S=120 \
      ZIPCCL_STATS_FILE="$work/stats-$name-%r.json" OPENBLAS_NUM_THREADS=1 \
      timeout 300 "$work/preload_nccl" "$name" >"$work/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < size; r++)); do
    wait "${pids[$r]}" || { echo "rank $r of $name: exit status $?"; rc=1; }
  done
  cat "$work/$name.0.log"
  if [ $rc -ne 0 ]; then
    for ((r = 1; r < size; r++)); do sed "s/^/[rank $r] /" "$work/$name.$r.log"; done
    echo "== $name ($size ranks): FAILED"
    status=1
  else
    echo "== $name ($size ranks): passed"
  fi
}

run_case zipccl qsgd
run_case exact none
exit $status
