#!/usr/bin/env bash
# The failure soak (tests/integration/soak.c, docs/failures.md), run for many seeds: each run
# has 4 ranks, one of them stopped or killed at a random time, and a wall-clock bound (a run
# still going at the bound is a hang). Prints one line per run and the survivors' errors, then
# a summary: runs, passed, failed, hangs, the longest run.
#
#   scripts/soak.sh [--build DIR] [--runs N] [--first SEED] [--log FILE]
set -u
build=build runs=20 first=1 log=
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --first) first=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--runs N] [--first SEED] [--log FILE]" >&2; exit 2 ;;
    esac
done
soak=$build/tests/integration/soak
[ -x "$soak" ] || { echo "$soak not built (meson compile -C $build)" >&2; exit 2; }
log=${log:-$build/soak.log}
: > "$log"
# the harness's own deadline is at most 170 + 4 * 25 + 60 s; past this bound the run hung
bound=360
passed=0 failed=0 hangs=0 longest=0
for ((seed = first; seed < first + runs; seed++)); do
    start=$(date +%s)
    out=$(timeout -k 10 "$bound" "$soak" "$seed" 2>&1)
    rc=$?
    secs=$(($(date +%s) - start))
    [ "$secs" -gt "$longest" ] && longest=$secs
    { echo "=== seed $seed: rc $rc, ${secs} s"; echo "$out"; } >> "$log"
    what=$(echo "$out" | grep -m1 "^soak $seed: rank")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        hangs=$((hangs + 1)) result=HANG
    elif [ "$rc" -eq 0 ]; then
        passed=$((passed + 1)) result=passed
    else
        failed=$((failed + 1)) result=FAILED
    fi
    echo "seed $seed: $result in ${secs} s (${what#soak $seed: })"
    echo "$out" | grep "^soak: rank" | sed 's/^/    /'
done
echo "soak: $runs runs, $passed passed, $failed failed, $hangs hangs, longest ${longest} s (log: $log)"
[ "$failed" -eq 0 ] && [ "$hangs" -eq 0 ]
