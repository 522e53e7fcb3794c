#!/usr/bin/env python3
"""DistributedDataParallel on Fashion-MNIST, gradients all-reduced by gloo, by one of PyTorch's
compression hooks, or by zipccl's hook (zipccl.torch.comm_hook).

    PYTHONPATH=python python3 -m zipccl.torchrun --standalone --nproc_per_node 4 \\
        examples/torch_ddp_fmnist.py --hook zipccl --codec qsgd --bits 8

(zipccl.torchrun is torch's torchrun, fixed for Debian 12's Python 3.11; see docs/python.md.)
--hook: gloo (DDP's own all-reduce, no hook), fp16 (torch's fp16_compress_hook), powersgd
(torch's powerSGD_hook, --rank 4, --powersgd-start vanilla steps first), zipccl (--codec none,
fp16, bf16, qsgd (--bits), topk (--density), gradiveq, powersgd (--rank, --powersgd-start:
the same as torch's hook gets) or auto; --algo).

Every rank holds the model (784-512-256-10 MLP, ReLU, cross-entropy, SGD with momentum) and
takes its 1/N of each global batch (the same order on every rank). Rank 0 prints the test
accuracy and seconds of each epoch, then one line:

    final: test accuracy 0.8412, sent 123456789 bytes per rank, 12.34 s per epoch, 5 epochs

"sent" is what one rank sent in the gradient all-reduces: zipccl's counted bytes (headers
included, zc_comm_stats) for zipccl; for gloo and PyTorch's hooks, the bytes handed to each
all-reduce times 2 (N - 1) / N, what a ring all-reduce (gloo's for large tensors, and zipccl's
uncompressed one) sends per rank. The seconds per epoch are the training loop's (no test), the
slowest rank's; the CPU seconds per epoch (--json only) are those of every thread of every rank
in the training loop, summed (time.process_time: compute, gloo's threads, zipccl's progress and
waiter threads). At the end the ranks' parameters must be identical (every all-reduce gives
every rank the same result); the program fails otherwise. --json F writes the final figures.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fmnist_idx import add_training_args, load  # noqa: E402 (next to this file)


class Counting:
    """Counts the bytes of every dist.all_reduce (PyTorch's hooks call it through the module)."""

    def __init__(self):
        self.bytes = 0
        self.enabled = False  # set by setup_hook for PyTorch's hooks
        self.paused = False  # the example's own all-reduces (times, test accuracy)
        self._real = dist.all_reduce

    def __call__(self, tensor, *args, **kw):
        if self.enabled and not self.paused:
            self.bytes += tensor.numel() * tensor.element_size()
        return self._real(tensor, *args, **kw)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


def setup_hook(args, model, counting):
    """Registers the chosen hook; returns a function giving the bytes one rank sent so far."""
    n = dist.get_world_size()
    ring = 2 * (n - 1) / n
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    if args.hook == 'gloo':
        # DDP's own all-reduce (C++): every gradient once per step
        return lambda steps: int(steps * params * ring)
    if args.hook in ('fp16', 'powersgd'):
        if args.hook == 'fp16':
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        else:
            state = powersgd.PowerSGDState(process_group=None,
                                           matrix_approximation_rank=args.rank,
                                           start_powerSGD_iter=args.powersgd_start)
            model.register_comm_hook(state, powersgd.powerSGD_hook)
        dist.all_reduce = counting
        counting.enabled = True
        return lambda steps: int(counting.bytes * ring)
    import zipccl.torch
    settings = {'codec': args.codec}
    if args.codec == 'qsgd':
        settings['qsgd_bits'] = args.bits
    if args.codec == 'topk':
        settings['topk_density'] = args.density
    if args.codec == 'powersgd':
        # the same rank and vanilla steps as torch's hook gets (--rank, --powersgd-start)
        settings['powersgd_rank'] = args.rank
        settings['powersgd_warmup'] = args.powersgd_start
    if args.algo:
        settings['algo'] = args.algo
    if args.min_bytes is not None:
        settings['min_bytes'] = args.min_bytes
    state = zipccl.torch.register(model, settings=settings)
    args.zipccl_state = state
    return lambda steps: int(state.stats()['bytes_wire'])


def evaluate(model, x, y):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = rank * len(x) // n, (rank + 1) * len(x) // n
    with torch.no_grad():
        pred = model(x[lo:hi]).argmax(dim=1)
    correct = torch.tensor([int((pred == y[lo:hi]).sum())], dtype=torch.int64)
    dist.all_reduce(correct)
    return int(correct) / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--hook', choices=['gloo', 'fp16', 'powersgd', 'zipccl'], default='zipccl')
    ap.add_argument('--codec', default='qsgd', help='zipccl codec (ZIPCCL_CODEC)')
    ap.add_argument('--bits', type=int, default=8, help='QSGD bits (ZIPCCL_QSGD_BITS)')
    ap.add_argument('--density', type=float, default=0.01, help='top-k density')
    ap.add_argument('--algo', default=None, help='ZIPCCL_ALGO (default: the environment\'s)')
    ap.add_argument('--min-bytes', default=None, help='ZIPCCL_MIN_BYTES')
    ap.add_argument('--rank', type=int, default=4, help='PowerSGD matrix approximation rank')
    ap.add_argument('--powersgd-start', type=int, default=10,
                    help='PowerSGD: vanilla all-reduce steps before compressing')
    add_training_args(ap)
    ap.add_argument('--json', default=None, help='rank 0 writes the final figures here')
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    rank, n = dist.get_rank(), dist.get_world_size()
    if args.batch < n:
        sys.exit(f'torch_ddp_fmnist: --batch {args.batch} is smaller than the {n} ranks')
    x_train, y_train = (torch.from_numpy(a) for a in load(args.data, 'train', args.train_limit))
    x_test, y_test = (torch.from_numpy(a) for a in load(args.data, 'test', args.test_limit))
    torch.manual_seed(args.seed)  # the same model on every rank (DDP broadcasts rank 0's too)
    model = torch.nn.parallel.DistributedDataParallel(mlp())
    counting = Counting()
    sent = setup_hook(args, model, counting)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    order_gen = torch.Generator().manual_seed(args.seed)
    lo, hi = rank * args.batch // n, (rank + 1) * args.batch // n
    steps_per_epoch = len(x_train) // args.batch
    what = args.hook if args.hook != 'zipccl' else (
        f'zipccl {args.codec}' + (f' {args.bits} bits' if args.codec == 'qsgd' else ''))
    if rank == 0:
        print(f'torch_ddp_fmnist: {n} ranks, {what}, {len(x_train)} training and '
              f'{len(x_test)} test images, {sum(p.numel() for p in model.parameters())} '
              f'parameters, batch {args.batch}, {args.epochs} epochs', flush=True)
    accuracy, train_s, cpu_s, steps = 0.0, 0.0, 0.0, 0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=order_gen)
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        model.train()
        for b in range(steps_per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch][lo:hi]
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
            steps += 1
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        cpu = torch.tensor([time.process_time() - cpu_start], dtype=torch.float64)
        counting.paused = True
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        dist.all_reduce(cpu)
        train_s += float(elapsed)
        cpu_s += float(cpu)
        model.eval()
        accuracy = evaluate(model, x_test, y_test)
        counting.paused = False
        if rank == 0:
            print(f'epoch {epoch}: test accuracy {accuracy:.4f}, {float(elapsed):.2f} s',
                  flush=True)

    nbytes = sent(steps)
    state = getattr(args, 'zipccl_state', None)
    stats = state.stats() if state is not None else None
    # the ranks' models must be identical: every all-reduce gave every rank the same values
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().tobytes()
    digest = int.from_bytes(hashlib.sha256(flat).digest()[:7], 'little')
    lo_d, hi_d = torch.tensor([digest]), torch.tensor([digest])
    dist.all_reduce(lo_d, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi_d, op=dist.ReduceOp.MAX)
    if state is not None:
        state.close()
    if int(lo_d) != int(hi_d):
        sys.exit(f'torch_ddp_fmnist: rank {rank}: the ranks\' models differ')
    per_epoch = train_s / max(args.epochs, 1)
    if rank == 0:
        print(f'final: test accuracy {accuracy:.4f}, sent {nbytes} bytes per rank, '
              f'{per_epoch:.2f} s per epoch, {args.epochs} epochs', flush=True)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump({'hook': args.hook, 'what': what, 'ranks': n, 'accuracy': accuracy,
                           'bytes_per_rank': nbytes, 'seconds_per_epoch': per_epoch,
                           'cpu_seconds_per_epoch': cpu_s / max(args.epochs, 1),
                           'epochs': args.epochs, 'steps': steps, 'zipccl_stats': stats}, f)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
