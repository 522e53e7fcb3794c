#!/usr/bin/env python3
"""examples/torch_ddp_fmnist.py with gloo and with zipccl's hook (suite 'integration').

usage: test_torch_ddp_fmnist.py PYTHONDIR LIBRARY EXAMPLE

Two short trainings on 2 ranks under torchrun, the same seed: one epoch of the first 12000
training images in global batches of 128 (93 steps), 2000 test images:
  - --hook gloo: DDP's own all-reduce; it sends 93 steps x 535818 values x 4 bytes x 2(N-1)/N;
  - --hook zipccl --codec qsgd --bits 4 --algo allgather: every bucket compressed, each rank
    sends its payload to the other: 4 + 32/512 bits a value plus headers, so at least 7x fewer
    bytes than gloo (7.88x without headers).
Both must learn (test accuracy >= 0.70; chance is 0.10) and end with identical models on the
ranks (the example checks it and fails otherwise). Exit 77 only without torch.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_torchrun import need_torch, torchrun  # noqa: E402

PARAMS = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
STEPS = 12000 // 128
FLOOR = 0.70
MIN_RATIO = 7.0


def run(pydir, library, example, hook_args):
    argv = [example, '--epochs', '1', '--train-limit', '12000', '--test-limit', '2000',
            '--batch', '128', '--seed', '1'] + hook_args
    p = torchrun(pydir, library, 2, 240, argv, capture=True)
    if p.returncode != 0:
        sys.exit(f'exit status {p.returncode}')
    m = re.search(r'^final: test accuracy ([0-9.]+), sent (\d+) bytes per rank', p.stdout, re.M)
    if not m:
        sys.exit('no "final:" line in the output')
    return float(m.group(1)), int(m.group(2))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    pydir, library, example = sys.argv[1:]
    need_torch()
    acc_gloo, sent_gloo = run(pydir, library, example, ['--hook', 'gloo'])
    acc_zc, sent_zc = run(pydir, library, example, ['--hook', 'zipccl', '--codec', 'qsgd',
                                                    '--bits', '4', '--algo', 'allgather'])
    want = STEPS * PARAMS * 4  # 2 ranks: 2(N-1)/N = 1
    bad = []
    if sent_gloo != want:
        bad.append(f'gloo sent {sent_gloo} bytes per rank, expected {want}')
    if sent_zc * MIN_RATIO > sent_gloo:
        bad.append(f'zipccl qsgd 4 bits sent {sent_zc} bytes, not {MIN_RATIO}x fewer than '
                   f'{sent_gloo}')
    for name, acc in (('gloo', acc_gloo), ('zipccl', acc_zc)):
        if acc < FLOOR:
            bad.append(f'{name}: test accuracy {acc} below {FLOOR}')
    print(f'gloo: accuracy {acc_gloo:.4f}, {sent_gloo} bytes; zipccl qsgd 4 bits: accuracy '
          f'{acc_zc:.4f}, {sent_zc} bytes ({sent_gloo / max(sent_zc, 1):.2f}x fewer)')
    if bad:
        sys.exit('; '.join(bad))


if __name__ == '__main__':
    main()
