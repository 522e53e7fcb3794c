#!/usr/bin/env bash
# libzipccl-preload.so and zipccl-run without an MPI job (suite 'preload'):
#
#   check_preload_lib.sh no-mpi-refs LIB NM     the library has no undefined reference to an
#                                               MPI or Open MPI symbol (it resolves them with
#                                               dlsym), so it loads where libmpi is absent
#   check_preload_lib.sh loads LIB PYTHON       it loads into programs without MPI (/bin/true, a
#                                               python that never imports mpi4py) and they run
#                                               as before; mpi4py imported later, as a singleton
#                                               MPI job, all-reduces exactly (the single rank
#                                               passes through: size 1)
#   check_preload_lib.sh light LIB READELF      the library needs none of zipccl's heavy
#                                               dependencies (UCX, OpenBLAS, LAPACKE, hwloc:
#                                               libzipccl.so.0 is dlopen'ed at the first
#                                               eligible call), and a process it is preloaded
#                                               into is untouched: one thread, the same caught
#                                               signals (SigCgt) as without it
#   check_preload_lib.sh no-engine LIB MPIRUN RUN PROG STATS
#                                               libzipccl.so.0 cannot be loaded (the library
#                                               copied alone into a folder): on every rank, or on
#                                               rank 1 only, every rank passes through (PROG's
#                                               'unchanged' case, 2 ranks), the error logged once
#   check_preload_lib.sh cli RUN LIB            zipccl-run: --help, --print-env (variables,
#                                               LD_PRELOAD appended once), errors for unknown
#                                               options, a missing --lib, a missing command,
#                                               '=' on an option without a value
set -u
what=$1
shift
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

case $what in
no-mpi-refs)
    lib=$1 nm=$2
    refs=$("$nm" -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^(P?MPI_|ompi_|opal_|orte_|mca_)' || true)
    [[ -z $refs ]] || fail "$lib references MPI symbols at link time: $refs"
    defs=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -E '^P?MPI_' | sed 's/@.*//' | sort | tr '\n' ' ')
    [[ $defs == "MPI_Allreduce MPI_Finalize MPI_Iallreduce MPI_Init MPI_Init_thread " ]] ||
        fail "MPI symbols exported: '$defs'"
    ;;
loads)
    lib=$1 python=$2
    LD_PRELOAD=$lib /bin/true || fail "LD_PRELOAD=$lib /bin/true failed"
    out=$(LD_PRELOAD=$lib /bin/echo hello)
    [[ $out == hello ]] || fail "echo under the preload: '$out'"
    out=$(LD_PRELOAD=$lib "$python" -c 'print(sum(range(10)))' 2>&1)
    [[ $out == 45 ]] || fail "python without mpi4py under the preload printed '$out'"
    out=$(LD_PRELOAD=$lib ZIPCCL_CODEC=qsgd ZIPCCL_MIN_BYTES=0 "$python" -c '
import sys
assert "mpi4py" not in sys.modules
from mpi4py import MPI
import numpy as np
a = np.arange(100000, dtype=np.float32)
MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
print(MPI.COMM_WORLD.Get_size(), bool((a == np.arange(100000, dtype=np.float32)).all()))
' 2>&1)
    [[ $out == "1 True" ]] || fail "singleton mpi4py under the preload printed '$out'"
    ;;
light)
    lib=$1 readelf=$2
    needed=$("$readelf" -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    heavy=$(grep -E '^lib(ucp|ucs|uct|ucm|openblas|blas|lapack|lapacke|hwloc|zipccl)\b' <<<"$needed" || true)
    [[ -z $heavy ]] || fail "$lib needs $(tr '\n' ' ' <<<"$heavy")"
    # /proc/PID/status of a sleeping process with and without the preload
    status_of() {
        "$@" sleep 5 &
        local pid=$! i
        for ((i = 0; i < 100; i++)); do
            [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */sleep ]] && break
            sleep 0.02
        done
        sleep 0.3 # let load-time initialisers, had there been any, start their threads
        grep -E '^(Threads|SigCgt):' "/proc/$pid/status"
        kill "$pid"
        wait "$pid" 2>/dev/null
    }
    plain=$(status_of env)
    preloaded=$(status_of env LD_PRELOAD="$lib" ZIPCCL_CODEC=qsgd)
    threads=$(awk '$1 == "Threads:" {print $2}' <<<"$preloaded")
    [[ $threads == 1 ]] || fail "a preloaded sleep has ${threads:-?} threads, not 1"
    [[ $preloaded == "$plain" ]] || fail "a preloaded sleep differs:
$preloaded
without the preload:
$plain"
    ;;
no-engine)
    lib=$1 mpirun=$2 run=$3 prog=$4 stats=$5
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cp "$lib" "$tmp/libzipccl-preload.so"
    for who in all 1; do
        out=$("$mpirun" --allow-run-as-root --oversubscribe -np 2 bash -c '
            lib=$1
            [[ $2 == 1 && $OMPI_COMM_WORLD_RANK != 1 ]] && lib=$3
            exec "$4" --lib "$lib" --codec qsgd --algo allgather --stats-file "$5" -- "$6" unchanged
            ' - "$tmp/libzipccl-preload.so" "$who" "$lib" "$run" "$stats" "$prog" 2>&1)
        rc=$?
        [[ $rc == 0 ]] || fail "engine missing on rank(s) $who: exit status $rc: $out"
        n=$(grep -c "cannot load the zipccl engine" <<<"$out")
        want=$([[ $who == all ]] && echo 2 || echo 1)
        [[ $n == "$want" ]] || fail "engine missing on rank(s) $who: logged $n times, not $want: $out"
    done
    ;;
cli)
    run=$1 lib=$2
    out=$("$run" --help) || fail "--help exit status $?"
    [[ $out == *"usage: zipccl-run"* && $out == *"--codec"* ]] || fail "--help text: $out"
    out=$("$run" --bogus -- true 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"unknown option '--bogus'"* ]] || fail "unknown option: rc $rc, '$out'"
    out=$("$run" --lib /nonexistent/libzipccl-preload.so -- true 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"no such file"* ]] || fail "missing --lib: rc $rc, '$out'"
    out=$("$run" --codec qsgd 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"no command"* ]] || fail "no command: rc $rc, '$out'"
    out=$("$run" --codec 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"needs a value"* ]] || fail "--codec without value: rc $rc, '$out'"
    # '=' only on options that take a value: never shifted into the command
    out=$("$run" --stats=1 --print-env 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"takes no value"* ]] || fail "--stats=1: rc $rc, '$out'"
    out=$("$run" --no-mpi=yes -- true 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"takes no value"* ]] || fail "--no-mpi=yes: rc $rc, '$out'"
    out=$("$run" --bogus=1 -- true 2>&1)
    rc=$?
    [[ $rc == 2 && $out == *"unknown option '--bogus'"* ]] || fail "--bogus=1: rc $rc, '$out'"
    real=$(readlink -f "$lib")
    out=$(LD_PRELOAD=libm.so.6 "$run" --codec qsgd --bits=8 --min-bytes 1MiB --stats \
        --stats-file /tmp/s.%r.json --algo scatter --print-env)
    want="ZIPCCL_CODEC=qsgd
ZIPCCL_QSGD_BITS=8
ZIPCCL_MIN_BYTES=1MiB
ZIPCCL_STATS=1
ZIPCCL_STATS_FILE=/tmp/s.%r.json
ZIPCCL_ALGO=scatter
LD_PRELOAD=libm.so.6:$real"
    [[ $out == "$want" ]] || fail "--print-env printed:
$out
expected:
$want"
    # the command runs with the variables; a preload already there is not added twice
    out=$(LD_PRELOAD=$real "$run" --codec fp16 -- sh -c 'echo "$ZIPCCL_CODEC $LD_PRELOAD"')
    [[ $out == "fp16 $real" ]] || fail "exec: '$out'"
    out=$("$run" --lib "$lib" -- sh -c 'exit 7')
    rc=$?
    [[ $rc == 7 ]] || fail "the command's exit status 7 came back as $rc"
    ;;
*)
    echo "usage: $0 no-mpi-refs|loads|light|no-engine|cli ..." >&2
    exit 2
    ;;
esac
[[ $fails == 0 ]] && echo "$what: ok"
exit $((fails > 0))
