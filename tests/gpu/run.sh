#!/usr/bin/env bash
# The GPU checks in one go: builds (or takes a prepared build dir), runs the
# 'gpu' test suite (CUDA codecs: device payloads against the host's, decoders,
# corrupt payloads; the real NCCL with the plugin, nccl_real.sh, and with the
# preload library, preload_nccl.sh) and the GPU codec benchmark, then prints a
# summary. Meant for a machine with a CUDA device; elsewhere both parts say
# "no CUDA device" and the script exits 77 (skipped).
#
#   tests/gpu/run.sh [BUILD_DIR]      default build-gpu, set up with -Dcuda=enabled
#
# Environment: BENCH_MIB (default 256) and BENCH_REPS (default 5) size the
# benchmark; BENCH=0 skips it. Exit: 0 passed, 77 no device, 1 failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
bench_mib=${BENCH_MIB:-256}
bench_reps=${BENCH_REPS:-5}

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$root" -Dcuda=enabled || exit 1
fi
ninja -C "$build" || exit 1  # the plugin and the preload library too (nccl-real, preload-nccl)

echo "== gpu test suite"
tests_out=$("$root/scripts/run-tests.sh" "$build" --suite gpu 2>&1)
tests_rc=$?
echo "$tests_out"
tests_line=$(echo "$tests_out" | tail -n 1)
# the test program's own line when it skipped ("no CUDA device: skipping N gpu tests")
skip_line=$(grep -h "no CUDA device" "$build/meson-logs/testlog.txt" 2>/dev/null | head -n 1)

bench_rc=0
bench_out="not run (BENCH=0)"
if [ "${BENCH:-1}" != 0 ]; then
  echo "== codec_bench --device cuda --size-mib $bench_mib --reps $bench_reps"
  bench_out=$("$build/bench/codec_bench" --device cuda --size-mib "$bench_mib" \
    --reps "$bench_reps" 2>&1)
  bench_rc=$?
  echo "$bench_out"
fi

echo "== summary"
echo "gpu tests: $tests_line${skip_line:+ ($skip_line)}"
case $bench_rc in
  0) echo "benchmark: $(echo "$bench_out" | grep -c ' met$') targets met, $(echo "$bench_out" |
    grep -c 'MISSED$') missed" ;;
  77) echo "benchmark: skipped ($(echo "$bench_out" | head -n 1))" ;;
  *) echo "benchmark: failed (exit $bench_rc)" ;;
esac

if [ "$tests_rc" -ne 0 ] || { [ "$bench_rc" -ne 0 ] && [ "$bench_rc" -ne 77 ]; }; then
  exit 1
fi
if [ -n "$skip_line" ] || [ "$bench_rc" -eq 77 ]; then
  exit 77
fi
exit 0
