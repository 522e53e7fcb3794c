#!/usr/bin/env python3
"""Runs a test worker on N local ranks under torchrun (suites 'integration' and 'slow').

usage: run_torchrun.py PYTHONDIR LIBRARY NPROC DEADLINE_S WORKER [ARGS...]

PYTHONDIR is the source tree's python/ (the zipccl package), LIBRARY the libzipccl.so the
package must load (LIBZIPCCL_PATH). The workers run as `python3 -m zipccl.torchrun --nnodes 1
--master_addr 127.0.0.1 --master_port P --nproc_per_node NPROC WORKER ARGS` (torch's torchrun,
fixed for Python 3.11: zipccl/torchrun.py) with this interpreter. Exit status: 77 (skipped) only when torch cannot be imported; else the
launcher's (non-zero when any rank failed), or 1 when the deadline passed.
"""
import os
import socket
import subprocess
import sys


def need_torch():
    """Exits 77 (meson: skipped) when torch cannot be imported; fails when it lacks gloo."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f'skipped: torch is not importable by {sys.executable} ({e}); '
              'apt-get install python3-torch', flush=True)
        sys.exit(77)
    if not dist.is_available() or not dist.is_gloo_available():
        sys.exit(f'torch {torch.__version__} has no gloo backend')


def free_port_pair():
    """A loopback port P such that P and P + 1 are both free now."""
    for _ in range(100):
        with socket.socket() as a, socket.socket() as b:
            a.bind(('127.0.0.1', 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            try:
                b.bind(('127.0.0.1', port + 1))
            except OSError:
                continue
            return port
    sys.exit('no two free loopback ports in a row')


def torchrun(pydir, library, nproc, deadline, argv, capture=False):
    """Runs argv (a script and its arguments) on nproc ranks; the CompletedProcess."""
    env = dict(os.environ, LIBZIPCCL_PATH=library, OPENBLAS_NUM_THREADS='1',
               OMP_NUM_THREADS='1',
               PYTHONPATH=pydir + (os.pathsep + os.environ['PYTHONPATH']
                                   if os.environ.get('PYTHONPATH') else ''))
    # --monitor_interval: the agent notices finished workers after 0.5 s, not 5. A static
    # rendezvous on a port whose successor is free too (zipccl listens on MASTER_PORT + 1):
    # --standalone picks any free port, and tests running beside this one held its successor.
    cmd = [sys.executable, '-m', 'zipccl.torchrun', '--nnodes', '1', '--master_addr', '127.0.0.1',
           '--master_port', str(free_port_pair()), '--monitor_interval', '0.5',
           '--nproc_per_node', str(nproc)] + list(argv)
    print('+', ' '.join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, env=env, timeout=float(deadline), capture_output=capture,
                           text=True)
    except subprocess.TimeoutExpired:
        sys.exit(f'{argv[0]} on {nproc} ranks passed its deadline of {deadline} s')
    if capture:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    return p


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    pydir, library, nproc, deadline = sys.argv[1:5]
    need_torch()
    sys.exit(torchrun(pydir, library, nproc, deadline, sys.argv[5:]).returncode)


if __name__ == '__main__':
    main()
