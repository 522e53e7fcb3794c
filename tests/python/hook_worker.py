"""One rank of the DDP hook test (run by run_torchrun.py under torchrun; N = 2 or 4 ranks).

usage: hook_worker.py CODEC [CODEC...]   (none, fp16, bf16, qsgd8, qsgd4, topk, gradiveq,
                                          powersgd, powersgd-lowrank, auto)

An MLP 784-256-128-10 (235146 parameters) in DistributedDataParallel over gloo, with
dist._DEFAULT_FIRST_BUCKET_BYTES = 64 KiB and bucket_cap_mb = 0.25: DDP's first iteration has
one bucket of every gradient, and after it DDP rebuilds them in the order gradients became
ready: two buckets (34186 and 200960 values), so bucket 0 changes size. The parameters do not
move (no optimizer step); each step every rank draws its own batch (seeded by step and rank).

For each codec, STEPS iterations with zipccl.torch.comm_hook, which is wrapped to keep each
bucket's input (this rank's gradient) and output; every rank gathers all ranks' inputs (gloo)
and checks its outputs against the exact average, in float64:
  - every codec: the outputs are bit-identical on every rank; the first iteration had one
    bucket, the later ones the rebuilt two (the rebuild is exercised);
  - none: param.grad equals plain DDP's (gloo, no hook) on the same batch. With 2 ranks
    bitwise: gloo computes a/2 + b/2, zipccl (a + b)/2; halving is exact and one addition of
    two values does not depend on the order. With 4 ranks the two rings add in different
    orders: |diff| <= 2 gamma_3 sum_r |g_r| / 4 (Higham, lemma 3.1, each order within gamma_3);
    nothing is compressed;
  - fp16, bf16 (ring), qsgd8, qsgd4 (scatter): the per-element bound of
    tests/integration/test_allreduce.c (comp_bound), with M_r the largest |value| of rank r's
    bucket; every call compressed;
  - topk (1%, scatter): each step drops most of the gradient (error > 10% of it), but error
    feedback delays instead of losing it: from the second iteration on (the rebuild starts
    every bucket's state afresh), sum_t out_t = sum_t avg_t - (residuals) / N, so
    ||sum_t (out_t - avg_t)|| <= sqrt(2) sum_r ||residual_r|| / N + rounding. A state lost
    or shared between buckets (reset at every call) breaks it by about T times the residual;
  - gradiveq (ring, a warm-up of 1 call): a tensor's first call sends raw f32 (docs/codecs.md):
    the first call of each bucket after the rebuild is exact to the f32 sum bound; later calls
    project on the learned basis, checked only to beat sending nothing (relative error < 1);
  - powersgd (rank 4, warm-up 1, error feedback; its own algorithm): the hook makes one call
    per gradient tensor (6 a step), the 3 weights compressed (the biases' factors would not be
    twice smaller: raw). Each bucket's first call after the rebuild is exact to the f32 sum
    bound (its tensors' keys start afresh: a new bucket, or another tensor or size under the
    key); then the same error-feedback identity as top-k, sum_t (out_t - avg_t) = -(sum of
    residuals) / N, and a compressed step must be lossy (relative error > 1%: compressed);
    from the third step on, each weight's own error must exceed 1%: its key kept its state
    past the warm-up (a key shared by tensors of other sizes would restart it: raw, exact);
  - powersgd-lowrank: the same with one sample a step, the same on every rank: each weight's
    gradient is of rank 1, so PowerSGD of rank 4 on each weight as its own matrix gives it
    back to rounding (relative error < 1e-3, every tensor of every step). A bucket compressed
    as one matrix, or a weight viewed in another shape (the codec's own view of 256 x 784
    values is 448 x 448, whose rows straddle the weight's), is far from exact;
  - zipccl.torch.BucketKeys (before the codecs): one key per bucket index and layout: a bucket
    that keeps its index and size but holds its parameters in another order (what DDP's rebuild
    makes of a model that fits one bucket) gets a new key, the same layout its old key again,
    and another rank's tensors seen in the same order the same keys;
  - zipccl.torch.tensor_layout (before the codecs): the layouts of docs/python.md's examples,
    and for 400 random shapes that the codec's view (a copy of zc_powersgd_shape) of the
    padded count is exactly the padded matrix, holding the tensor, of at most twice its count;
  - auto: the cost model picks raw, bf16, qsgd 4 bits or qsgd-int per call (GradiVeQ and
    PowerSGD only with ZIPCCL_AUTO_LOWRANK=1): qsgd 4-bit scatter's bound.
Exit status 0 when every check passed on this rank.
"""
import math
import os
import sys

import torch
import torch.distributed as dist
import zipccl.torch as zt

STEPS = 6
BATCH = 16
U32 = 2.0 ** -24
U64 = 2.0 ** -53

CODECS = {
    'none': dict(codec='none'),
    'fp16': dict(codec='fp16', algo='ring'),
    'bf16': dict(codec='bf16', algo='ring'),
    'qsgd8': dict(codec='qsgd', qsgd_bits=8, algo='scatter'),
    'qsgd4': dict(codec='qsgd', qsgd_bits=4, algo='scatter'),
    'topk': dict(codec='topk', topk_density=0.01, algo='scatter'),
    'gradiveq': dict(codec='gradiveq', algo='ring', gradiveq_warmup=1),
    'powersgd': dict(codec='powersgd', powersgd_rank=4, powersgd_warmup=1),
    'powersgd-lowrank': dict(codec='powersgd', powersgd_rank=4, powersgd_warmup=1),
    'auto': dict(codec='auto', algo='auto'),
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f'rank {dist.get_rank()}: FAIL: {what}', file=sys.stderr, flush=True)


def gamma(n, u):
    return n * u / (1 - n * u)


def make_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def make_ddp():
    dist._DEFAULT_FIRST_BUCKET_BYTES = 64 * 1024  # read by the constructor
    return torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.25)


def batch(step, rank, size=BATCH):
    g = torch.Generator().manual_seed(1000 * step + (rank if size > 1 else 0))
    return torch.randn(size, 784, generator=g), torch.randint(0, 10, (size,), generator=g)


def backward(model, step, rank, size=BATCH):
    x, y = batch(step, rank, size)
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def gather(t):
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return out


def codec_bound(name, n, ins, exact):
    """Per-element bound of |out - exact average| for stateless codecs (comp_bound's, avg)."""
    s_abs = sum(x.abs() for x in ins)
    big_m = sum(float(x.abs().max()) for x in ins)
    if name in ('fp16', 'bf16'):
        uc = 2.0 ** -11 if name == 'fp16' else 2.0 ** -8
        under = 2.0 ** -25 if name == 'fp16' else 2.0 ** -134
        err = ((2 * n + 1) * uc + (n + 2) * U32) * (1 + uc) ** (2 * n + 2) * s_abs \
            + (2 * n + 2) * under
    elif name in ('qsgd8', 'qsgd4', 'auto'):
        s = 127.0 if name == 'qsgd8' else 7.0
        once = 1 / s + 2 * U32
        err = once * big_m * (2 + once)  # scatter: each contribution, then the re-encoded sum
        err = err + (n + 2) * U32 * (s_abs + err)
    else:  # raw f32 sum (gradiveq's first call)
        err = (n + 2) * U32 * s_abs
    err = err + gamma(n - 1, U64) * s_abs
    return err / n + 2 * U32 * (exact.abs() + err / n) + 2.0 ** -149


class FakeBucket:
    def __init__(self, index, params):
        self._index, self._params = index, params

    def index(self):
        return self._index

    def parameters(self):
        return self._params


def check_bucket_keys():
    def keys_of(params):
        a, b, c = params
        keys = zt.BucketKeys()
        return [keys(FakeBucket(0, [a, b, c])), keys(FakeBucket(0, [a, b, c])),
                keys(FakeBucket(0, [c, b, a])), keys(FakeBucket(1, [a])),
                keys(FakeBucket(0, [c, b, a])), keys(FakeBucket(0, [b, a, c])),
                keys(FakeBucket(0, [a, b, c]))]
    mine = keys_of([torch.zeros(3), torch.zeros(4), torch.zeros(5)])
    want = [1, 1, 1 << 20 | 1, 2, 1 << 20 | 1, 2 << 20 | 1, 1]
    check(mine == want, f'BucketKeys: {mine}, expected {want}')
    other = keys_of([torch.ones(3), torch.ones(4), torch.ones(5)])  # another rank's storage
    check(other == mine, f'BucketKeys on other tensors: {other}, expected {mine}')


def check_layouts():
    known = {(512, 784): (784, 512, True, 784, 512), (256, 512): (512, 256, True, 512, 256),
             (256, 784): (784, 256, True, 787, 256), (10, 256): (256, 10, True, 257, 16),
             (1000, 999): (1000, 999, False, 1000, 999), (64, 3, 7, 7): (147, 64, True, 149, 64),
             (256,): None, (3, 256): None, (50000, 64): None}
    for shape, want in known.items():
        got = zt.tensor_layout(shape, 4)
        check(got == want, f'tensor_layout{shape}: {got}, expected {want}')
    g = torch.Generator().manual_seed(7)
    for _ in range(400):
        shape = tuple(int(x) for x in torch.randint(1, 3000, (2,), generator=g))
        layout = zt.tensor_layout(shape, 4)
        if layout is None:
            continue
        rows, cols, transpose, prows, pcols = layout
        check((rows, cols) == (shape[::-1] if transpose else shape) and prows >= rows and
              pcols >= cols and prows * pcols <= 2 * rows * cols and
              zt._powersgd_view(prows * pcols) == (prows, pcols),
              f'tensor_layout{shape}: {layout}')


def run_codec(name, rank, n):
    record = []  # per step: [(index, input, output)]

    def hook(state, bucket):
        inp = bucket.buffer().clone()
        idx = bucket.index()
        shapes = [tuple(g.shape) for g in bucket.gradients()]
        step_log = record[-1]
        fut = zt.comm_hook(state, bucket)

        def done(f):
            step_log.append((idx, inp, f.value().clone(), shapes))
            return f.value()
        return fut.then(done)

    model = make_ddp()
    state = zt.HookState(settings=dict(CODECS[name], min_bytes=0))
    model.register_comm_hook(state, hook)
    plain = make_ddp() if name == 'none' else None

    lowrank = name == 'powersgd-lowrank'
    tensors = 0  # calls the hook made
    sum_err = None  # topk: sum over steps >= 2 of (out - avg), buckets concatenated
    sum_abs = 0.0
    first_seen = set()
    for step in range(STEPS):
        record.append([])
        grads = backward(model, step, rank, 1 if lowrank else BATCH)
        log = sorted(record[-1], key=lambda e: e[0])
        layout = [(i, inp.numel()) for i, inp, _, _ in log]
        tensors += sum(len(e[3]) for e in log) if CODECS[name]['codec'] == 'powersgd' \
            else len(log)
        total = sum(c for _, c in layout)
        check(total == grads.numel(), f'{name} step {step}: buckets hold {total} values, '
              f'the model {grads.numel()}')
        if step == 0:
            check(len(layout) == 1, f'{name} step 0: {len(layout)} buckets, expected 1 before '
                  f'the rebuild')
        else:
            check(len(layout) >= 2, f'{name} step {step}: {len(layout)} buckets, expected the '
                  f'rebuilt ones (2)')
        step_err = []
        for idx, inp, out, shapes in log:
            ins = [x.double() for x in gather(inp)]
            outs = gather(out)
            check(all(torch.equal(o, outs[0]) for o in outs),
                  f'{name} step {step} bucket {idx}: the ranks got different results')
            exact = sum(ins) / n
            diff = out.double() - exact
            what = f'{name} step {step} bucket {idx} ({inp.numel()} values)'
            first_call = step >= 1 and idx not in first_seen
            if CODECS[name]['codec'] == 'powersgd':
                offset = 0
                for t, shape in enumerate(shapes):
                    cnt = math.prod(shape)
                    d, e = diff[offset:offset + cnt], exact[offset:offset + cnt]
                    offset += cnt
                    rel = float(d.norm() / e.norm()) if float(e.norm()) > 0 else float(d.norm())
                    if lowrank:
                        check(rel < 1e-3, f'{what} tensor {t} {shape}: relative error {rel:.3g} '
                              f'of a gradient of rank 1')
                    elif step >= 2 and len(shape) == 2:
                        check(rel > 0.01, f'{what} tensor {t} {shape}: relative error {rel:.3g}: '
                              f'not compressed')
            if lowrank:
                pass
            elif name in ('fp16', 'bf16', 'qsgd8', 'qsgd4', 'auto') or \
                    (name in ('gradiveq', 'powersgd') and first_call):
                bound = codec_bound(name, n, ins, exact)
                worst = float((diff.abs() / bound).max())
                check(worst <= 1, f'{what}: error {worst:.3g} of the bound')
            elif name == 'gradiveq':
                rel = float(diff.norm() / exact.norm())
                check(rel < 1, f'{what}: relative error {rel:.3g} >= 1')
            elif name == 'powersgd' and step >= 1:
                rel = float(diff.norm() / exact.norm())
                check(rel > 0.01, f'{what}: relative error {rel:.3g}: rank 4 is not exact')
            if step >= 1:
                first_seen.add(idx)
            step_err.append(diff)
            if name in ('topk', 'powersgd') and step >= 1:
                sum_abs += float(sum(x.abs() for x in ins).norm())
            if name == 'topk':
                rel = float(diff.norm() / exact.norm())
                check(rel > 0.1, f'{what}: relative error {rel:.3g}: top-k 1% should drop more')
        if name in ('topk', 'powersgd') and step >= 1:
            e = torch.cat(step_err)
            sum_err = e if sum_err is None else sum_err + e
        if plain is not None:
            ref = backward(plain, step, rank)
            if n == 2:
                check(torch.equal(grads, ref), f'none step {step}: grads differ from gloo\'s '
                      f'(max {float((grads - ref).abs().max()):.3g})')
            else:
                # each rank's own gradient, in parameter order: a model without DDP
                ins = [x.double() for x in gather(backward(make_model(), step, rank))]
                tol = 2 * gamma(n - 1, U32) * sum(x.abs() for x in ins) / n + 2.0 ** -149
                worst = float(((grads.double() - ref.double()).abs() / tol).max())
                check(worst <= 1, f'none step {step}: grads differ from gloo\'s by {worst:.3g} '
                      f'of the summation bound')

    stats = state.stats()
    calls = stats['calls']
    check(calls == tensors, f'{name}: {calls} calls, expected {tensors}')
    if name == 'none':
        check(stats['calls_compressed'] == 0, f'none: {stats["calls_compressed"]} compressed')
    elif CODECS[name]['codec'] == 'powersgd':
        # the codec takes the weights (3 a step); the biases are not worth factors: raw
        check(stats['calls_compressed'] == 3 * STEPS,
              f'{name}: {stats["calls_compressed"]} of {calls} calls compressed, expected the '
              f'{3 * STEPS} of the weights')
        check(stats['bytes_wire'] < stats['bytes_wire_raw'],
              f'{name}: {stats["bytes_wire"]} bytes on the wire, raw {stats["bytes_wire_raw"]}')
    elif name != 'auto':
        check(stats['calls_compressed'] == calls,
              f'{name}: {stats["calls_compressed"]} of {calls} calls compressed')
        check(stats['bytes_wire'] < stats['bytes_wire_raw'],
              f'{name}: {stats["bytes_wire"]} bytes on the wire, raw {stats["bytes_wire_raw"]}')
    if name in ('topk', 'powersgd'):
        res = gather(torch.tensor([stats['residual_norm']], dtype=torch.float64))
        res_sum = float(sum(res))
        bound = math.sqrt(2) * res_sum / n + STEPS * (n + 4) * U32 * sum_abs
        got = float(sum_err.norm())
        check(res_sum > 0, f'{name}: no residual held')
        check(got <= bound, f'{name}: ||sum_t (out_t - avg_t)|| = {got:.4g} exceeds the '
              f'error-feedback bound {bound:.4g}')
        if rank == 0:
            print(f'{name}: ||sum of errors|| {got:.4g}, bound {bound:.4g}', flush=True)
    state.close()
    if rank == 0:
        print(f'{name}: {calls} calls, {stats["calls_compressed"]} compressed, wire '
              f'{stats["bytes_wire"]} of {stats["bytes_wire_raw"]} raw bytes', flush=True)


def main():
    names = sys.argv[1:]
    for name in names:
        if name not in CODECS:
            sys.exit(f'unknown codec {name} (one of {", ".join(CODECS)})')
    dist.init_process_group('gloo')
    rank, n = dist.get_rank(), dist.get_world_size()
    check_bucket_keys()
    check_layouts()
    for name in names:
        run_codec(name, rank, n)
    bad = torch.tensor([len(failures)])
    dist.all_reduce(bad)
    dist.destroy_process_group()
    if failures:
        sys.exit(f'rank {rank}: {len(failures)} checks failed')
    if int(bad) and rank == 0:
        sys.exit('another rank failed')


if __name__ == '__main__':
    os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
    main()
