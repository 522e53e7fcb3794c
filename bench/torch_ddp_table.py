#!/usr/bin/env python3
"""The DDP table of docs/results.md: examples/torch_ddp_fmnist.py on N ranks with gloo,
PyTorch's fp16_compress_hook and powerSGD_hook, and zipccl's hook, in one run.

    PYTHONPATH=python /usr/bin/python3 bench/torch_ddp_table.py [--nproc 4] [--epochs 5]
        [--train-limit 20000] [--test-limit 0]
        [--methods gloo,fp16,powersgd,qsgd8,qsgd4,topk,zpowersgd]
        [--out DIR]

Each method is one training of the same model from the same seed on the same data order; the
table gives the final test accuracy, the bytes one rank sent in gradient all-reduces (the
example's "sent", see its docstring) and the seconds per epoch of training, each also as a
ratio to gloo's of the same run (the machine is shared: ratios say more than the absolute
times), and the CPU seconds per epoch of all ranks' threads together, under the machine's
1-minute load average at the start and end of each training. JSON of every run and the table
(<tag>-table.md) go to --out.

Local (default): the N ranks on this machine under `python3 -m zipccl.torchrun --standalone`,
over loopback. Emulated cluster: under bench/cluster/cluster.sh --exec (root), which sets up
its network namespaces and rate-limited links and runs this script once per rate with
ZC_CLUSTER_PREFIX, ZC_CLUSTER_SUBNET, ZC_CLUSTER_HOSTS and ZC_CLUSTER_RATE set; rank i then runs
in host i's namespace with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR = host 0 ...),
gloo and UCX on the emulated interface zc0 only:

    sudo bench/cluster/cluster.sh --rates 1gbit --exec \\
        "env PYTHONPATH=$PWD/python /usr/bin/python3 $PWD/bench/torch_ddp_table.py --out DIR"
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLE = os.path.join(REPO, 'examples', 'torch_ddp_fmnist.py')

METHODS = {
    'gloo': ('gloo all-reduce (DDP, no hook)', ['--hook', 'gloo']),
    'fp16': ('PyTorch fp16_compress_hook', ['--hook', 'fp16']),
    'powersgd': ('PyTorch powerSGD_hook, rank 4', ['--hook', 'powersgd', '--rank', '4']),
    'qsgd8': ('zipccl hook, QSGD 8 bits', ['--hook', 'zipccl', '--codec', 'qsgd', '--bits',
                                            '8']),
    'qsgd4': ('zipccl hook, QSGD 4 bits', ['--hook', 'zipccl', '--codec', 'qsgd', '--bits',
                                            '4']),
    'topk': ('zipccl hook, top-k 1% + error feedback', ['--hook', 'zipccl', '--codec', 'topk',
                                                        '--density', '0.01']),
    'zpowersgd': ('zipccl hook, PowerSGD rank 4', ['--hook', 'zipccl', '--codec', 'powersgd',
                                                   '--rank', '4']),
    'fp16z': ('zipccl hook, fp16', ['--hook', 'zipccl', '--codec', 'fp16']),
    'auto': ('zipccl hook, auto', ['--hook', 'zipccl', '--codec', 'auto']),
}


def loadavg():
    """The machine's 1-minute load average (what else ran beside the ranks)."""
    with open('/proc/loadavg') as f:
        return float(f.read().split()[0])


def cluster():
    """(prefix, subnet, hosts, rate) from cluster.sh --exec, or None when local."""
    if 'ZC_CLUSTER_PREFIX' not in os.environ:
        return None
    return (os.environ['ZC_CLUSTER_PREFIX'], os.environ['ZC_CLUSTER_SUBNET'],
            int(os.environ['ZC_CLUSTER_HOSTS']), os.environ.get('ZC_CLUSTER_RATE', '?'))


def run_local(args, argv, log):
    cmd = [sys.executable, '-m', 'zipccl.torchrun', '--standalone', '--monitor_interval', '0.5',
           '--nproc_per_node', str(args.nproc), EXAMPLE] + argv
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.deadline,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS='1', OMP_NUM_THREADS='1'))


def run_cluster(args, argv, log, port):
    prefix, subnet, hosts, _ = cluster()
    procs = []
    for i in range(hosts):
        env = {'RANK': str(i), 'WORLD_SIZE': str(hosts), 'LOCAL_RANK': '0',
               'LOCAL_WORLD_SIZE': '1', 'GROUP_RANK': str(i), 'MASTER_ADDR': f'{subnet}.1',
               'MASTER_PORT': str(port), 'GLOO_SOCKET_IFNAME': 'zc0', 'UCX_TLS': 'tcp',
               'UCX_NET_DEVICES': 'zc0', 'OPENBLAS_NUM_THREADS': '1', 'OMP_NUM_THREADS': '1'}
        cmd = ['ip', 'netns', 'exec', f'{prefix}h{i}', 'env'] + \
            [f'{k}={v}' for k, v in env.items()] + [sys.executable, EXAMPLE] + argv
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + args.deadline
    rc = 0
    for p in procs:
        try:
            rc = rc or p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            rc = 124
    return subprocess.CompletedProcess(procs[0].args, rc)


def table(rows, title):
    base = rows.get('gloo')
    lines = [title, '',
             '| method | test accuracy | MB sent per rank | vs gloo | s per epoch | vs gloo | '
             'CPU s per epoch |',
             '|---|---|---|---|---|---|---|']
    for key, r in rows.items():
        mb = r['bytes_per_rank'] / 1e6
        vs_b = f'{r["bytes_per_rank"] / base["bytes_per_rank"]:.3f}' if base else '-'
        vs_t = f'{r["seconds_per_epoch"] / base["seconds_per_epoch"]:.2f}' if base else '-'
        lines.append(f'| {METHODS[key][0]} | {r["accuracy"]:.4f} | {mb:.1f} | {vs_b} | '
                     f'{r["seconds_per_epoch"]:.2f} | {vs_t} | '
                     f'{r.get("cpu_seconds_per_epoch", float("nan")):.1f} |')
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--nproc', type=int, default=4, help='local ranks (cluster: one per host)')
    ap.add_argument('--epochs', type=int, default=5)
    ap.add_argument('--train-limit', type=int, default=20000)
    ap.add_argument('--test-limit', type=int, default=0)
    ap.add_argument('--batch', type=int, default=128)
    ap.add_argument('--methods', default='gloo,fp16,powersgd,qsgd8,qsgd4,topk,zpowersgd',
                    help='comma-separated: ' + ', '.join(METHODS))
    ap.add_argument('--deadline', type=float, default=1200, help='seconds per training')
    ap.add_argument('--port', type=int, default=29500,
                    help='cluster: MASTER_PORT of the first method (then + 7 per method)')
    ap.add_argument('--out', default=None, help='folder for the JSON, logs and table.md')
    args = ap.parse_args()
    methods = args.methods.split(',')
    for m in methods:
        if m not in METHODS:
            sys.exit(f'torch_ddp_table: unknown method {m} (one of {", ".join(METHODS)})')
    cl = cluster()
    tag = f'cluster-{cl[3]}' if cl else 'local'
    out = args.out or os.path.join(REPO, 'build', 'torch_ddp_table')
    os.makedirs(out, exist_ok=True)
    ranks = cl[2] if cl else args.nproc
    common = ['--epochs', str(args.epochs), '--train-limit', str(args.train_limit),
              '--test-limit', str(args.test_limit), '--batch', str(args.batch), '--seed', '1']
    rows, failed = {}, []
    for k, m in enumerate(methods):
        js = os.path.join(out, f'{tag}-{m}.json')
        if os.path.exists(js):
            os.unlink(js)
        argv = common + METHODS[m][1] + ['--json', js]
        load = [loadavg()]
        print(f'# {tag}: {METHODS[m][0]} ({ranks} ranks, load average {load[0]:.1f})',
              flush=True)
        with open(os.path.join(out, f'{tag}-{m}.log'), 'w') as log:
            p = run_cluster(args, argv, log, args.port + 7 * k) if cl else \
                run_local(args, argv, log)
        if p.returncode != 0 or not os.path.exists(js):
            failed.append(m)
            print(f'# {m} failed (exit status {p.returncode}): {out}/{tag}-{m}.log', flush=True)
            continue
        with open(js) as f:
            rows[m] = json.load(f)
        r = rows[m]
        load.append(loadavg())
        r['load_average'] = load
        print(f'#   accuracy {r["accuracy"]:.4f}, {r["bytes_per_rank"]} bytes per rank, '
              f'{r["seconds_per_epoch"]:.2f} s per epoch, '
              f'{r.get("cpu_seconds_per_epoch", float("nan")):.1f} CPU s per epoch, '
              f'load average {load[0]:.1f} -> {load[1]:.1f}', flush=True)
    where = f'emulated cluster, {ranks} hosts at {cl[3]}' if cl else \
        f'{ranks} local ranks, loopback'
    title = (f'examples/torch_ddp_fmnist.py, {where}: {args.epochs} epochs of the first '
             f'{args.train_limit or 60000} training images, batch {args.batch}, test on '
             f'{args.test_limit or 10000} images')
    text = table(rows, title)
    if rows:
        text += '\n\nLoad average (1 minute) at the start and end of each training: ' + \
            ', '.join(f'{k} {r["load_average"][0]:.1f}-{r["load_average"][1]:.1f}'
                      for k, r in rows.items()) + f' ({os.cpu_count()} CPUs).'
    print(text)
    with open(os.path.join(out, f'{tag}-table.md'), 'w') as f:
        f.write(text + '\n')
    if failed:
        sys.exit(f'torch_ddp_table: failed: {", ".join(failed)}')


if __name__ == '__main__':
    main()
