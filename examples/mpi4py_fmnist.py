#!/usr/bin/env python3
"""Data-parallel training of an MLP on Fashion-MNIST with mpi4py and numpy.

A plain MPI program with no zipccl code: run it under zipccl-run (docs/preload.md) and its
gradient all-reduces are compressed by libzipccl-preload.so; run it without and they are
Open MPI's.

    mpirun -np 4 /usr/bin/python3 examples/mpi4py_fmnist.py
    mpirun -np 4 build/tools/zipccl-run --codec qsgd --bits 4 -- \\
        /usr/bin/python3 examples/mpi4py_fmnist.py

Every rank holds the whole model (784-256-10, ReLU, softmax cross-entropy, SGD with
momentum) and computes the gradient of its shard of each global batch (rank r of N takes
examples [r B/N, (r+1) B/N) of the batch). The gradients live in one flat float32 buffer,
as a framework's gradient bucket: one comm.Allreduce(MPI.IN_PLACE, bucket, op=MPI.SUM) per
step, then a division by N. The all-reduce gives every rank the same sum (bit-identical with
zipccl too), so the models stay identical without being broadcast; the program checks that
at the end. Rank 0 prints the test accuracy after each epoch and, at the end, one line:

    final: test accuracy 0.8412, all-reduced 123456789 bytes in 938 calls, 12.3 s

The bytes are what the program handed to MPI_Allreduce (count * 4 summed over calls): the
raw volume. What went on the wire with zipccl is in its statistics (zipccl-run --stats or
--stats-file F). Use /usr/bin/python3: it has numpy and mpi4py (python3-numpy,
python3-mpi4py).
"""
import argparse
import hashlib
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from fmnist_idx import add_training_args, load  # next to this file


class MLP:
    """784-H-10 with ReLU; parameters and gradients are views of two flat float32 buffers."""

    def __init__(self, hidden, rng):
        shapes = [(784, hidden), (hidden,), (hidden, 10), (10,)]
        sizes = [int(np.prod(s)) for s in shapes]
        self.params = np.zeros(sum(sizes), dtype=np.float32)
        self.grads = np.zeros_like(self.params)  # the bucket that is all-reduced
        self.velocity = np.zeros_like(self.params)
        views, gviews, off = [], [], 0
        for shape, size in zip(shapes, sizes):
            views.append(self.params[off:off + size].reshape(shape))
            gviews.append(self.grads[off:off + size].reshape(shape))
            off += size
        self.w1, self.b1, self.w2, self.b2 = views
        self.gw1, self.gb1, self.gw2, self.gb2 = gviews
        # He initialization, identical on every rank (same seed)
        self.w1[...] = rng.standard_normal((784, hidden)).astype(np.float32) * np.sqrt(2 / 784)
        self.w2[...] = rng.standard_normal((hidden, 10)).astype(np.float32) * np.sqrt(2 / hidden)

    def logits(self, x):
        h = np.maximum(x @ self.w1 + self.b1, 0)
        return h, h @ self.w2 + self.b2

    def gradient(self, x, y, scale):
        """Writes scale * the summed gradient of the loss over (x, y) into the bucket."""
        h, z = self.logits(x)
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1  # d loss / d logits, summed over the examples
        p *= scale
        self.gw2[...] = h.T @ p
        self.gb2[...] = p.sum(axis=0)
        dh = (p @ self.w2.T) * (h > 0)
        self.gw1[...] = x.T @ dh
        self.gb1[...] = dh.sum(axis=0)

    def step(self, lr, momentum):
        self.velocity *= momentum
        self.velocity += self.grads
        self.params -= lr * self.velocity


def evaluate(model, x, y, comm):
    """Test accuracy over every rank's shard of the test set (an integer sum: exact)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    lo, hi = rank * len(x) // size, (rank + 1) * len(x) // size
    _, z = model.logits(x[lo:hi])
    correct = np.array([np.sum(z.argmax(axis=1) == y[lo:hi])], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, correct, op=MPI.SUM)
    return int(correct[0]) / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_training_args(ap)
    ap.add_argument('--hidden', type=int, default=256)
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.batch < size:
        sys.exit(f'mpi4py_fmnist: --batch {args.batch} is smaller than the {size} ranks')
    x_train, y_train = load(args.data, 'train', args.train_limit)
    x_test, y_test = load(args.data, 'test', args.test_limit)
    rng = np.random.default_rng(args.seed)  # same stream on every rank: same model, same order
    model = MLP(args.hidden, rng)
    lo, hi = rank * args.batch // size, (rank + 1) * args.batch // size

    if rank == 0:
        print(f'mpi4py_fmnist: {size} ranks, {len(x_train)} training and {len(x_test)} test '
              f'images, 784-{args.hidden}-10 ({model.params.size} parameters), batch '
              f'{args.batch}, {args.epochs} epochs, preload '
              f'{"on" if "libzipccl-preload" in os.environ.get("LD_PRELOAD", "") else "off"}',
              flush=True)
    raw_bytes, calls, accuracy = 0, 0, 0.0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        for b in range(len(x_train) // args.batch):
            idx = order[b * args.batch:(b + 1) * args.batch][lo:hi]
            # scaled by 1/B: the sum over ranks is the gradient of the batch mean
            model.gradient(x_train[idx], y_train[idx], 1.0 / args.batch)
            comm.Allreduce(MPI.IN_PLACE, model.grads, op=MPI.SUM)
            raw_bytes += model.grads.nbytes
            calls += 1
            model.step(args.lr, args.momentum)
        accuracy = evaluate(model, x_test, y_test, comm)
        if rank == 0:
            print(f'epoch {epoch}: test accuracy {accuracy:.4f}, '
                  f'{time.perf_counter() - start:.1f} s', flush=True)

    # the ranks' models must be identical: the all-reduce gave everyone the same sums
    sha = hashlib.sha256(model.params.tobytes()).digest()
    digest = np.array([int.from_bytes(sha[:8], 'little') >> 1], dtype=np.int64)
    lo_d, hi_d = np.empty_like(digest), np.empty_like(digest)
    comm.Allreduce(digest, lo_d, op=MPI.MIN)
    comm.Allreduce(digest, hi_d, op=MPI.MAX)
    if lo_d[0] != hi_d[0]:
        sys.exit(f'mpi4py_fmnist: rank {rank}: the ranks\' models differ')
    if rank == 0:
        print(f'final: test accuracy {accuracy:.4f}, all-reduced {raw_bytes} bytes in {calls} '
              f'calls, {time.perf_counter() - start:.1f} s', flush=True)


if __name__ == '__main__':
    main()
