#!/usr/bin/env python3
"""Runs a test worker on N local ranks under torchrun (suites 'integration' and 'slow').

usage: run_torchrun.py PYTHONDIR LIBRARY NPROC DEADLINE_S WORKER [ARGS...]

PYTHONDIR is the source tree's python/ (the zipccl package), LIBRARY the libzipccl.so the
package must load (LIBZIPCCL_PATH). The workers run as `python3 -m zipccl.torchrun --standalone
--nproc_per_node NPROC WORKER ARGS` (torch's torchrun, fixed for Python 3.11: zipccl/torchrun.py)
with this interpreter. Exit status: 77 (skipped) only when torch cannot be imported; else the
launcher's (non-zero when any rank failed), or 1 when the deadline passed.
"""
import os
import subprocess
import sys


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    pydir, library, nproc, deadline, worker = sys.argv[1:6]
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
    except ImportError as e:
        print(f'skipped: torch is not importable by {sys.executable} ({e}); '
              'apt-get install python3-torch', flush=True)
        sys.exit(77)
    if not dist.is_available() or not dist.is_gloo_available():
        sys.exit(f'torch {torch.__version__} has no gloo backend')
    env = dict(os.environ, LIBZIPCCL_PATH=library, OPENBLAS_NUM_THREADS='1',
               OMP_NUM_THREADS='1',
               PYTHONPATH=pydir + (os.pathsep + os.environ['PYTHONPATH']
                                   if os.environ.get('PYTHONPATH') else ''))
    cmd = [sys.executable, '-m', 'zipccl.torchrun', '--standalone', '--monitor_interval', '0.5',
           '--nproc_per_node', nproc,
           worker] + sys.argv[6:]
    print('+', ' '.join(cmd), flush=True)
    try:
        rc = subprocess.run(cmd, env=env, timeout=float(deadline)).returncode
    except subprocess.TimeoutExpired:
        sys.exit(f'{worker} on {nproc} ranks passed its deadline of {deadline} s')
    sys.exit(rc)


if __name__ == '__main__':
    main()
