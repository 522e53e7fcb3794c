#!/usr/bin/env bash
# The NCCL plugin under the real NCCL: ncclAllReduce across 2 and 4 processes on
# ONE GPU, each its own "node" (NCCL_HOSTID=nodeN, so all traffic goes through
# the net plugin and NCCL's CollNet Chain through zipccl's CollNet). Checks that
# NCCL loaded zipccl's net and CollNet (from NCCL_DEBUG=INFO logs), that zipccl's
# CollNet all-reduced (its statistics files), and the results: exact with
# ZIPCCL_COLLNET_CODEC=none (sums of small integers), within the QSGD bound and
# compressed with qsgd.
#
# NCCL 2.30 semantics (the version comes from nccl.h): the net and CollNet
# tables NCCL reports loading must be v12 (v11 before 2.30); runs of several
# communicators in a row (ZC_REAL_ROUNDS: NCCL unloads and reloads the plugin
# between them) and of two at once (ZC_REAL_PAIR); and a run without
# NCCL_ALGO where the plugin's tuner (found in the net plugin's library) must
# steer the 16 MiB all-reduce to CollNet (NCCL_BUFFSIZE=16 MiB lets its 2 MiB
# chunks through on 2.30).
#
#   tests/gpu/nccl_real.sh [BUILD_DIR [RUNTIME_DIR]]
#
# BUILD_DIR (default build) holds plugin/nccl/libnccl-net-zipccl.so; RUNTIME_DIR
# (default BUILD_DIR/gpu-runtime, made by scripts/gpu-runtime.sh) the UCX, hwloc
# and OpenBLAS libraries for a machine without them. Compiles nccl_allreduce.cu
# with nvcc first (so that it runs up to there on a machine without a GPU), then
# exits 77 (skipped) when no CUDA device is usable. Exit 0 when every run passed,
# 1 otherwise; logs stay in the work folder it prints.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd) || exit 1
runtime=${2:-$build/gpu-runtime}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda/bin/nvcc}
plugin=$build/plugin/nccl/libnccl-net-zipccl.so
timeout_s=${NCCL_REAL_TIMEOUT_S:-180}

[ -f "$plugin" ] || { echo "nccl_real: no plugin at $plugin (build first)"; exit 1; }
[ -x "$nvcc" ] || { echo "nccl_real: no nvcc at $nvcc: skipped"; exit 77; }

work=$(mktemp -d /tmp/zc-nccl-real-XXXXXX)
echo "nccl_real: work folder $work"

# NCCL's library: next to nvcc's CUDA, or the system's
ncclib=
for d in "$cuda/lib64" "$cuda/lib" /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu; do
  if [ -e "$d/libnccl.so" ] || [ -e "$d/libnccl.so.2" ]; then ncclib=$d; break; fi
done
[ -n "$ncclib" ] || { echo "nccl_real: no libnccl.so found: skipped"; exit 77; }

if ! "$nvcc" -O2 -o "$work/nccl_allreduce" "$here/nccl_allreduce.cu" -I"$cuda/include" \
     -L"$ncclib" -l:libnccl.so.2 -Xlinker -rpath -Xlinker "$ncclib" > "$work/nvcc.log" 2>&1; then
  cat "$work/nvcc.log"
  echo "nccl_real: nccl_allreduce.cu does not compile"
  exit 1
fi
echo "nccl_real: built $work/nccl_allreduce against $ncclib"

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "nccl_real: no CUDA device: skipped"
  rm -rf "$work"
  exit 77
fi
[ -f "$runtime/env.sh" ] && source "$runtime/env.sh"

ver=$(awk '/define NCCL_VERSION_CODE/ {print $3}' "$cuda/include/nccl.h" 2>/dev/null)
want_ver=v11
[ "${ver:-0}" -ge 23000 ] 2>/dev/null && want_ver=v12
echo "nccl_real: NCCL_VERSION_CODE ${ver:-unknown}: expecting the $want_ver tables"

# One run: N ranks, codec, mode (exact | qsgd), count, then NAME=VALUE settings for every
# rank (ALGO=... replaces NCCL_ALGO=CollNetChain; ALGO= leaves the choice to NCCL and the
# tuner). Returns 0 when it passed.
run() {
  local n=$1 codec=$2 mode=$3 count=$4 pids=() rc=0
  shift 4
  local extra=("$@") algo=CollNetChain tag=""
  for kv in "${extra[@]}"; do
    case $kv in ALGO=*) algo=${kv#ALGO=} ;; esac
    tag="$tag-${kv%%=*}"
  done
  local name="n$n-$codec-$mode$tag"
  local dir="$work/$name"
  mkdir -p "$dir"
  for ((r = 0; r < n; r++)); do
    env NCCL_HOSTID="node$r" \
        NCCL_NET_PLUGIN="$plugin" NCCL_NET=zipccl \
        NCCL_COLLNET_ENABLE=1 ${algo:+NCCL_ALGO=$algo} \
        NCCL_SOCKET_IFNAME=lo ZIPCCL_NET_IFNAME=lo \
        NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL \
        ZIPCCL_COLLNET_CODEC="$codec" ZIPCCL_MIN_BYTES=4KiB ZIPCCL_TIMEOUT_S=60 \
        ZIPCCL_STATS_FILE="$dir/stats-$r-%r.json" "${extra[@]/#ALGO=*/ZC_REAL_ALGO=x}" \
        timeout "$timeout_s" "$work/nccl_allreduce" "$r" "$n" "$dir/id" "$mode" "$count" 8 \
        > "$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    if ! wait "${pids[$r]}"; then
      echo "nccl_real: $name: rank $r failed (log $dir/rank$r.log):"
      grep -v ' INFO ' "$dir/rank$r.log" | tail -5
      rc=1
    fi
  done
  for ((r = 0; r < n; r++)); do
    local log="$dir/rank$r.log"
    # the plugin's net carried the traffic, and its CollNet was connected
    if ! grep -qi 'zipccl' "$log" || ! grep -i 'collnet' "$log" | grep -qi 'zipccl'; then
      echo "nccl_real: $name: rank $r: the log does not show zipccl's CollNet in use ($log)"
      rc=1
    fi
    if ! grep -i 'plugin' "$log" | grep -qi "zipccl.*($want_ver)\|($want_ver).*zipccl"; then
      echo "nccl_real: $name: rank $r: NCCL did not report loading zipccl's $want_ver tables"
      grep -i 'plugin' "$log" | head -5
      rc=1
    fi
    if [ -z "$algo" ] && ! grep -i 'tuner' "$log" | grep -qi 'zipccl'; then
      echo "nccl_real: $name: rank $r: the log does not show zipccl's tuner loaded"
      rc=1
    fi
    if grep -qi 'Cannot initialize CollNet' "$log"; then
      echo "nccl_real: $name: rank $r: NCCL fell back to point to point:"
      grep -i -B2 'Cannot initialize CollNet' "$log" | tail -5
      rc=1
    fi
    grep -h '^rank' "$log" || true
  done
  # zipccl's CollNet all-reduced (and compressed with qsgd): its statistics, per head
  local stats calls comp
  stats=$(cat "$dir"/stats-*.json 2>/dev/null)
  calls=$(grep -o '"total": {"calls": [0-9]*' <<< "$stats" | grep -o '[0-9]*$' |
          awk '{s += $1} END {print s + 0}')
  comp=$(grep -o '"total": {"calls": [0-9]*, "calls_compressed": [0-9]*' <<< "$stats" |
         grep -o '[0-9]*$' | awk '{s += $1} END {print s + 0}')
  echo "nccl_real: $name: zipccl CollNet calls ${calls:-0}, compressed ${comp:-0}"
  if [ "${calls:-0}" -eq 0 ]; then
    echo "nccl_real: $name: zipccl's CollNet reduced nothing"
    rc=1
  fi
  if [ "$codec" = qsgd ] && [ "${comp:-0}" -eq 0 ]; then
    echo "nccl_real: $name: nothing was compressed"
    rc=1
  fi
  if [ "$codec" = none ] && [ "${comp:-0}" -ne 0 ]; then
    echo "nccl_real: $name: codec none compressed $comp calls"
    rc=1
  fi
  [ $rc -eq 0 ] && echo "nccl_real: $name: passed"
  return $rc
}

status=0
run 2 none exact $((1 << 20)) || status=1
run 2 qsgd qsgd $((1 << 20)) || status=1
run 4 none exact $((1 << 20)) || status=1
run 4 qsgd qsgd $((1 << 20)) || status=1
# the per-communicator lifecycle: 3 communicators in a row (unload, reload), two at once
run 2 qsgd qsgd $((1 << 20)) ZC_REAL_ROUNDS=3 NCCL_NET_PLUGIN_REF_COUNT=0 || status=1
run 2 none exact $((1 << 20)) ZC_REAL_ROUNDS=2 ZC_REAL_PAIR=1 || status=1
# no NCCL_ALGO: the tuner steers 16 MiB sums to CollNet, with 2 MiB chunks on 2.30
run 2 qsgd qsgd $((4 << 20)) ALGO= NCCL_BUFFSIZE=16777216 ZIPCCL_TUNER_MIN_BYTES=1MiB || status=1
if [ $status -eq 0 ]; then
  echo "nccl_real: all runs passed (logs in $work)"
else
  echo "nccl_real: FAILED (logs in $work)"
fi
exit $status
