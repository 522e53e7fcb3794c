#!/bin/bash
# bench/preload_mpi_bench on the emulated cluster, for cluster.sh --exec (one run per rate):
# Open MPI's MPI_Allreduce (ob1 + tcp btl on the test subnet, as cluster.sh runs it) against
# MPI_Allreduce through libzipccl-preload.so (UCX tcp on zc0), in the same processes.
#
#   sudo bench/cluster/cluster.sh --rates 1gbit --exec bench/cluster/preload_mpi_exec.sh
#
# ZC_PRELOAD_RUN_ARGS: zipccl-run's options (default: --codec none, with ZIPCCL_PRELOAD_RAW=1
# exported, the raw ring); ZC_PRELOAD_BENCH_ARGS: the bench's (default: 64K, 1M, 16M, 5 calls);
# each of f32 and f64 is run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${ZC_PRELOAD_BUILD:-$repo/build}
net=$ZC_CLUSTER_SUBNET
hostlist=""
for ((i = 0; i < ZC_CLUSTER_HOSTS; i++)); do
    hostlist="$hostlist${hostlist:+,}$net.$((i + 1)):1"
done
read -r -a run_args <<< "${ZC_PRELOAD_RUN_ARGS:---codec none}"
read -r -a bench_args <<< "${ZC_PRELOAD_BENCH_ARGS:--b 64KiB -e 16MiB -f 16 -n 5 -w 1}"
for t in f32 f64; do
    ip netns exec "${ZC_CLUSTER_PREFIX}h0" env ZC_CLUSTER_PREFIX="$ZC_CLUSTER_PREFIX" \
        ZC_CLUSTER_SUBNET="$net" ZIPCCL_PRELOAD_RAW="${ZIPCCL_PRELOAD_RAW:-1}" \
        mpirun --allow-run-as-root -np "$ZC_CLUSTER_HOSTS" --host "$hostlist" --map-by node \
        --mca plm_rsh_agent "$here/netns-rsh" --mca plm_rsh_no_tree_spawn 1 \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
        --mca oob_tcp_if_include "$net.0/24" --mca coll ^hcoll --mca osc ^ucx \
        -x UCX_TLS=tcp -x UCX_NET_DEVICES=zc0 -x OPENBLAS_NUM_THREADS=1 -x PATH \
        -x ZIPCCL_PRELOAD_RAW \
        "$build/tools/zipccl-run" "${run_args[@]}" -- "$build/bench/preload_mpi_bench" \
        "${bench_args[@]}" -t "$t"
done
