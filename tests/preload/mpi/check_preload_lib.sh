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
#   check_preload_lib.sh cli RUN LIB            zipccl-run: --help, --print-env (variables,
#                                               LD_PRELOAD appended once), errors for unknown
#                                               options, a missing --lib, a missing command
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
    echo "usage: $0 no-mpi-refs|loads|cli ..." >&2
    exit 2
    ;;
esac
[[ $fails == 0 ]] && echo "$what: ok"
exit $((fails > 0))
