#!/bin/bash
# Emulated bandwidth-limited cluster: zipccl against Open MPI on the same links (issue 6).
#
#   sudo bench/cluster/cluster.sh [--build DIR] [--hosts H] [--ranks-per-host R]
#        [--topologies flat,shards,leader,auto] [--rates 100mbit,1gbit,5gbit]
#        [--latency 0|1ms|...] [--sizes 64K,1M,16M,64M | --full] [--methods LIST]
#        [--algos fixed,auto] [--budget S] [--out DIR] [--plots DIR] [--no-plots]
#        [--exec CMD]
#
# Each of the H "hosts" is a network namespace zc<pid>h<i> with one interface zc0
# (10.77.<n>.<i+1>/24) on a veth pair to a bridge in a namespace zc<pid>sw of its own; each link
# is limited by a token bucket (tc tbf, and netem delay when --latency is given) on both of its
# directions. Nothing is added to the machine's own namespace, and every namespace of the run
# is deleted on exit, Ctrl-C, or failure (trap). Names carry the script's pid, so parallel runs
# and leftovers of a killed run do not collide.
#
# For each rate, one mpirun (inside host 0's namespace, the rsh agent bench/cluster/netns-rsh
# entering the namespace of each other host) starts --ranks-per-host ranks of cluster_rank per
# host (ranks 0..R-1 on host 0, and so on). Open MPI is restricted to its tcp btl on the test
# subnet (no shared memory: every emulated host has the machine's hostname, so its vader btl
# would join ranks of different hosts, and crashed doing so; no UCX pml) and zipccl's UCX
# to tcp on zc0, so both only talk over the emulated links. cluster_rank measures MPI_Allreduce
# and every zipccl method in the same processes, checks every result against the exact sum and
# writes one JSON line per measurement; bench/cluster/report.py then prints the table, writes
# results.json, results.md and the plots (gnuplot).
#
# --exec CMD runs CMD (bash -c, in the machine's namespace) once per rate instead of mpirun and
# the report, with ZC_CLUSTER_PREFIX, ZC_CLUSTER_SUBNET, ZC_CLUSTER_HOSTS, ZC_CLUSTER_RATE and
# ZC_CLUSTER_OUT set: host i is namespace ${ZC_CLUSTER_PREFIX}h$i, address
# $ZC_CLUSTER_SUBNET.$((i + 1)) on its interface zc0 (bench/torch_ddp_table.py uses it).
#
# Root is required (namespaces, tc). Exit status: 0 when every measurement passed its check
# and no namespace is left, 1 otherwise, 2 for bad arguments, 77 (meson's "skipped") without
# root.
# shellcheck disable=SC2317 # teardown and on_exit run from traps
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

build="$repo/build"
hosts=4
ranks_per_host=1
topologies="flat"
rates="100mbit,1gbit,5gbit"
latency=""
sizes="64K,1M,16M,64M"
methods="mpi,raw,fp16,qsgd8,qsgd4,qsgd2,topk,gradiveq,auto"
algos="fixed,auto"
budget=3
out=""
plots=""
no_plots=0
exec_cmd=""

usage() {
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF
  --build DIR     meson build directory holding bench/cluster/cluster_rank ($build)
  --hosts H       hosts ($hosts)
  --ranks-per-host R  ranks (processes) in each host's namespace ($ranks_per_host); within a
                  host Open MPI and flat zipccl talk tcp over the namespace's loopback
  --topologies L  ZIPCCL_TOPOLOGY values each zipccl method runs with ($topologies): flat,
                  hierarchical, shards, leader, auto; the records' algorithm is prefixed
                  "hier-" (hierarchical) or the topology's name and "-" unless flat
  --rates LIST    link rates in tc units, each a separate run on the same hosts ($rates)
  --latency D     netem delay on each direction of each link; host to host one way: 2 D (none)
  --sizes LIST    message sizes, bytes of f32 with K/M/G suffixes ($sizes)
  --full          the issue's full sweep: 64K,256K,1M,4M,16M,64M,256M (about 2 h at 100mbit)
  --methods LIST  mpi raw fp16 bf16 qsgd8 qsgd4 qsgd2 topk gradiveq auto ($methods)
  --algos LIST    fixed: every algorithm the codec runs; auto: ZIPCCL_ALGO=auto; or the
                  fixed algorithms to run by name, e.g. allgather ($algos)
  --budget S      seconds of timed calls per measurement, at least 3 calls ($budget)
  --out DIR       results: <rate>.jsonl, results.json, results.md, logs (a new temporary dir)
  --plots DIR     where the PNGs go (--out)
  --no-plots      no gnuplot
  --exec CMD      run CMD per rate on the hosts instead of cluster_rank (see the header)
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) ranks_per_host=$2; shift 2 ;;
    --topologies) topologies=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --full) sizes="64K,256K,1M,4M,16M,64M,256M"; shift ;;
    --methods) methods=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --plots) plots=$2; shift 2 ;;
    --no-plots) no_plots=1; shift ;;
    --exec) exec_cmd=$2; no_plots=1; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "cluster.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" -ne 0 ]; then
    echo "cluster.sh: root is required (it creates network namespaces and tc qdiscs);" \
        "run it with sudo" >&2
    exit 77
fi
# check_range OPTION VALUE MIN MAX: exits 2 unless VALUE is a number in MIN..MAX
check_range() {
    case "$2" in
    '' | *[!0-9]*) echo "cluster.sh: $1 must be a number, not '$2'" >&2; exit 2 ;;
    esac
    if [ "$2" -lt "$3" ] || [ "$2" -gt "$4" ]; then
        echo "cluster.sh: $1 must be $3..$4" >&2
        exit 2
    fi
}
check_range --hosts "$hosts" 2 64
check_range --ranks-per-host "$ranks_per_host" 1 16
nranks=$((hosts * ranks_per_host))
rank_bin="$build/bench/cluster/cluster_rank"
if [ -z "$exec_cmd" ] && [ ! -x "$rank_bin" ]; then
    echo "cluster.sh: $rank_bin not found: build it (meson setup $build && ninja -C $build)," \
        "Open MPI (libopenmpi-dev) is needed" >&2
    exit 2
fi
tools="ip tc python3"
[ -z "$exec_cmd" ] && tools="$tools mpirun"
for tool in $tools; do
    if ! command -v "$tool" >/dev/null; then
        echo "cluster.sh: '$tool' is not installed (scripts/install-deps.sh)" >&2
        exit 2
    fi
done
if [ "$no_plots" -eq 0 ] && ! command -v gnuplot >/dev/null; then
    echo "cluster.sh: gnuplot is not installed (apt-get install gnuplot-nox); or --no-plots" >&2
    exit 2
fi

prefix="zc$$"
net="10.77.$(($$ % 250))"
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/zipccl-cluster.XXXXXX")}
mkdir -p "$out"
out=$(cd "$out" && pwd)
plots=${plots:-$out}

# ---- teardown ---------------------------------------------------------------------------------

# Every namespace of this run, host and switch: ends the processes still in them (ranks of an
# interrupted run; only ours: the namespaces are this run's) and deletes them with their links.
teardown() {
    local ns pids
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}(h[0-9]+|sw)\$" || true); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            sleep 1
            # shellcheck disable=SC2086,SC2046
            kill -KILL $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || echo "cluster.sh: cannot delete namespace $ns" >&2
    done
}

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    teardown
    local left
    left=$(ip netns list | awk '{print $1}' | grep -cE "^${prefix}(h[0-9]+|sw)\$" || true)
    if [ "$left" -ne 0 ]; then
        echo "cluster.sh: $left namespaces of $prefix are left" >&2
        rc=1
    else
        echo "# teardown: every namespace of $prefix is gone"
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'echo "cluster.sh: interrupted" >&2; exit 130' INT
trap 'echo "cluster.sh: terminated" >&2; exit 143' TERM

# ---- setup ------------------------------------------------------------------------------------

# One direction of one link: tbf at the rate (burst: 1 ms of it, at least a few jumbo frames;
# tbf cuts GSO packets larger than the burst), under netem when a latency is given.
shape() {
    local ns=$1 dev=$2 rate=$3 bps burst
    bps=$(python3 -c "import sys; from report import parse_rate; print(int(parse_rate(sys.argv[1])))" "$rate")
    burst=$((bps / 8000))
    [ "$burst" -lt 32768 ] && burst=32768
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
    if [ -n "$latency" ]; then
        if ! ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$latency"; then
            echo "cluster.sh: cannot add a netem delay of '$latency' on $dev: is sch_netem" \
                "available (modprobe sch_netem)? Without --latency no netem is needed" >&2
            exit 1
        fi
        ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: \
            tbf rate "$rate" burst "$burst" latency 100ms
    else
        ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: \
            tbf rate "$rate" burst "$burst" latency 100ms
    fi
}

export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
# The emulated hosts share the machine's cores, which real hosts do not: a rank that busy-polls
# (Open MPI inside MPI_Allreduce and in the barrier before every timed call) holds a core that
# another host's rank needs until the scheduler's tick (4 ms at HZ=250) takes it away, and every
# small call's median then sat on a multiple of about 4 ms, Open MPI's and zipccl's alike. Open
# MPI's setting for oversubscribed nodes makes its idle polling yield the core. 0 measures the
# spinning (docs/results.md, "Idle polling that yields").
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
echo "# cluster: $hosts hosts ($prefix, $net.0/24), rates $rates, latency ${latency:-0}," \
    "sizes $sizes, results in $out"
ip netns add "${prefix}sw"
ip -n "${prefix}sw" link set lo up
ip -n "${prefix}sw" link add br0 type bridge stp_state 0 forward_delay 0
ip -n "${prefix}sw" link set br0 up
for ((i = 0; i < hosts; i++)); do
    ns="${prefix}h$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add zc0 netns "$ns" type veth peer name "h$i" netns "${prefix}sw"
    ip -n "$ns" addr add "$net.$((i + 1))/24" dev zc0
    ip -n "$ns" link set zc0 up
    ip -n "${prefix}sw" link set "h$i" master br0
    ip -n "${prefix}sw" link set "h$i" up
done
# reachability (when ping is installed; otherwise mpirun reports an unreachable host)
for ((i = 1; i < hosts; i++)); do
    command -v ping >/dev/null || break
    if ! ip netns exec "${prefix}h0" ping -c 1 -W 5 "$net.$((i + 1))" >/dev/null; then
        echo "cluster.sh: host 0 cannot reach host $i ($net.$((i + 1))) over the bridge" >&2
        exit 1
    fi
done

hostlist=""
for ((i = 0; i < hosts; i++)); do
    hostlist="$hostlist${hostlist:+,}$net.$((i + 1)):$ranks_per_host"
done

# ---- runs -------------------------------------------------------------------------------------

status=0
IFS=',' read -r -a rate_list <<<"$rates"
for rate in "${rate_list[@]}"; do
    for ((i = 0; i < hosts; i++)); do
        shape "${prefix}h$i" zc0 "$rate"
        shape "${prefix}sw" "h$i" "$rate"
    done
    if [ -n "$exec_cmd" ]; then
        echo "# rate $rate: $exec_cmd"
        ZC_CLUSTER_PREFIX="$prefix" ZC_CLUSTER_SUBNET="$net" ZC_CLUSTER_HOSTS="$hosts" \
            ZC_CLUSTER_RATE="$rate" ZC_CLUSTER_OUT="$out" bash -c "$exec_cmd" &
        if ! wait $!; then
            echo "cluster.sh: --exec at $rate failed" >&2
            status=1
        fi
        continue
    fi
    echo "# rate $rate: mpirun -np $nranks ($hosts hosts x $ranks_per_host) cluster_rank" \
        "--sizes $sizes --methods $methods --topologies $topologies"
    # the caller's ZIPCCL_* settings (log level, chunk size, statistics) reach every rank;
    # cluster_rank sets each method's own (codec, algorithm, parameters) over them
    zipccl_env=()
    for v in $(compgen -e | grep '^ZIPCCL_' || true); do zipccl_env+=(-x "$v"); done
    rm -f "$out/$rate.jsonl"
    # Open MPI: tcp btl and ob1 only (vader's shared memory and the UCX pml would bypass the
    # links), out-of-band traffic on the test subnet too. zipccl: UCX over tcp on zc0.
    # In the background: bash runs a trap only once the foreground command has ended, while
    # wait returns at once on a signal, so that SIGTERM tears everything down immediately.
    ip netns exec "${prefix}h0" env ZC_CLUSTER_PREFIX="$prefix" ZC_CLUSTER_SUBNET="$net" \
        mpirun --allow-run-as-root -np "$nranks" --host "$hostlist" --map-by slot \
        --mca plm_rsh_agent "$here/netns-rsh" --mca plm_rsh_no_tree_spawn 1 \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
        --mca oob_tcp_if_include "$net.0/24" --mca coll ^hcoll --mca osc ^ucx \
        -x UCX_TLS=tcp -x UCX_NET_DEVICES=zc0 -x OPENBLAS_NUM_THREADS=1 -x PATH \
        ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} ${zipccl_env[@]+"${zipccl_env[@]}"} \
        "$rank_bin" --sizes "$sizes" --methods "$methods" --algos "$algos" \
        --budget "$budget" --topologies "$topologies" --json "$out/$rate.jsonl" 2> >(tee "$out/$rate.stderr" >&2) &
    if ! wait $!; then
        echo "cluster.sh: the run at $rate failed (see above, $out/$rate.stderr)" >&2
        status=1
    fi
done

[ -n "$exec_cmd" ] && exit "$status"
report_args=(--hosts "$hosts" --out "$out" --rates "$rates")
[ "$no_plots" -eq 0 ] && report_args+=(--plots "$plots")
python3 "$here/report.py" "${report_args[@]}" || status=1
exit "$status"
