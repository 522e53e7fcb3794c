#!/usr/bin/env python3
"""examples/mpi4py_fmnist.py with and without libzipccl-preload.so (suite 'preload').

usage: test_mpi4py_fmnist.py PYTHON MPIRUN ZIPCCL_RUN EXAMPLE OUTDIR

PYTHON is an interpreter with numpy and mpi4py (/usr/bin/python3).

Two short trainings on 2 ranks (one epoch of the first 6000 training images in global batches
of 128: 46 steps, each one MPI_Allreduce of the 203530-float gradient bucket; 2000 test
images), the same seed:
  - plain mpirun: Open MPI's all-reduce; no statistics file appears;
  - mpirun zipccl-run --codec qsgd --bits 4 --algo allgather: every gradient all-reduce goes
    through zipccl, compressed (each rank's ZIPCCL_STATS_FILE counts 46 calls, all
    compressed), and sends at least 7x fewer bytes than the raw ring would: QSGD with 4 bits
    and buckets of 512 codes 4 + 32/512 bits a value (7.88x), headers take the rest.
Both must learn: test accuracy at least 0.70 (chance is 0.10; 0.79 seen for both), and both
print the same raw volume, 46 * 203530 * 4 bytes. The ranks' models are identical in both
(the example itself checks and fails otherwise).
"""
import json
import os
import re
import subprocess
import sys

STEPS = 6000 // 128
PARAMS = 784 * 256 + 256 + 256 * 10 + 10
ACCURACY_FLOOR = 0.70
MIN_RATIO = 7.0


def run(cmd, env):
    print('+', ' '.join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        sys.exit(f'exit status {p.returncode}')
    m = re.search(r'^final: test accuracy ([0-9.]+), all-reduced (\d+) bytes in (\d+) calls',
                  p.stdout, re.M)
    if not m:
        sys.exit('no "final:" line in the output')
    return float(m.group(1)), int(m.group(2)), int(m.group(3))


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    python, mpirun, zipccl_run, example, outdir = sys.argv[1:]
    os.makedirs(outdir, exist_ok=True)
    stats = os.path.join(outdir, 'fmnist-stats.%r.json')
    names = [stats.replace('%r', str(r)) for r in range(2)]
    for n in names:
        if os.path.exists(n):
            os.unlink(n)
    env = dict(os.environ, ZIPCCL_STATS_FILE=stats, OPENBLAS_NUM_THREADS='1')
    train = [python, example, '--epochs', '1', '--train-limit', '6000',
             '--test-limit', '2000', '--batch', '128', '--seed', '1']
    mpi = [mpirun, '--allow-run-as-root', '--oversubscribe', '-np', '2']

    acc_plain, bytes_plain, calls_plain = run(mpi + train, env)
    leftover = [n for n in names if os.path.exists(n)]
    if leftover:
        sys.exit(f'statistics written without the preload: {leftover}')
    acc_zc, bytes_zc, calls_zc = run(
        mpi + [zipccl_run, '--codec', 'qsgd', '--bits', '4', '--algo', 'allgather', '--'] + train,
        env)

    ok = True
    for label, acc, nbytes, calls in (('plain', acc_plain, bytes_plain, calls_plain),
                                      ('zipccl', acc_zc, bytes_zc, calls_zc)):
        print(f'{label}: accuracy {acc:.4f}, {calls} all-reduces of {nbytes} bytes in all')
        if acc < ACCURACY_FLOOR:
            print(f'FAIL: {label} test accuracy {acc:.4f} is below {ACCURACY_FLOOR}')
            ok = False
        if calls != STEPS or nbytes != STEPS * PARAMS * 4:
            print(f'FAIL: {label}: {calls} calls of {nbytes} bytes, expected {STEPS} of '
                  f'{STEPS * PARAMS * 4}')
            ok = False
    for n in names:
        with open(n, encoding='utf-8') as f:
            total = json.load(f)['total']
        ratio = total['bytes_wire_raw'] / max(total['bytes_wire'], 1)
        print(f'{n}: {total["calls"]} calls, {total["calls_compressed"]} compressed, '
              f'{total["bytes_wire"]} bytes sent for {total["bytes_wire_raw"]} raw ({ratio:.2f}x)')
        if total['calls'] != STEPS or total['calls_compressed'] != STEPS:
            print(f'FAIL: {n}: expected {STEPS} calls, all compressed')
            ok = False
        if total['bytes_wire'] * MIN_RATIO > total['bytes_wire_raw']:
            print(f'FAIL: {n}: compression {ratio:.2f}x is below {MIN_RATIO}x')
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
