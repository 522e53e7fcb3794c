"""One rank of the Python package's API test (run by run_torchrun.py under torchrun, N ranks).

Checks, each with its expected value computed here:
  - zipccl.Communicator() finds its ranks from torchrun's variables (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT + 1), as zc_comm_init does: rank and size are torchrun's;
  - uncompressed (codec none) all-reduces of numpy arrays (f32, f64, f16, i8, u8, i32, u32, i64,
    u64), torch tensors (f32, f16, bf16, f64, i32, i64, u8), bytearray, array.array and
    memoryview, in place and into out=, with sum, avg, prod, min and max: integer-valued inputs
    whose results are exact, so the checks are equalities; a numpy uint16 array passed as bf16
    (dtype=); empty arrays;
  - iallreduce: three requests in flight, test() until done, wait(), keys as int and str;
  - statistics: exact call and byte counts;
  - errors: ranks passing different counts fail with ZipcclError ZC_ERR_MISMATCH on every rank
    (the communicator still works after); a bad setting fails with ZC_ERR_INVALID_CONFIG naming
    the variable; bad arguments raise ValueError/TypeError before reaching the library;
    LIBZIPCCL_PATH naming a missing file gives LibraryNotFound listing it (in a child);
  - zipccl.torch.HookState(comm=...): refused without a progress thread; with one, its futures
    complete with the average, and the caller's communicator stays open;
  - a compressed communicator over the torch process group (zipccl.torch.communicator, QSGD 8
    bits, allgather): every call compressed, (N - 1) payloads of about a byte a value on the
    wire, each element
    within m/s per rank (s = 127 levels; comp_bound of tests/integration/test_allreduce.c),
    results bit-identical on every rank.
Exit status 0 when every check passed on this rank.
"""
import array
import os
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist

import zipccl
import zipccl.torch as zt

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f'rank {os.environ.get("RANK")}: FAIL: {what}', file=sys.stderr, flush=True)


def expect_error(fn, exc, what, name=None):
    try:
        fn()
    except exc as e:
        if name is not None:
            check(getattr(e, 'name', None) == name, f'{what}: {e!r}, expected {name}')
        return e
    except Exception as e:  # noqa: BLE001: any other exception is the failure reported
        check(False, f'{what}: raised {e!r}, expected {exc.__name__}')
        return None
    check(False, f'{what}: no {exc.__name__} raised')
    return None


def values(rank, count):
    """Rank r's integer-valued input: small, so every sum and product below is exact."""
    return [(i % 5) + rank + 1 for i in range(count)]


def reduce_all(op, n, count):
    cols = [values(r, count) for r in range(n)]
    out = []
    for i in range(count):
        col = [c[i] for c in cols]
        if op == 'sum':
            out.append(sum(col))
        elif op == 'prod':
            p = 1
            for v in col:
                p *= v
            out.append(p)
        elif op == 'min':
            out.append(min(col))
        elif op == 'max':
            out.append(max(col))
        else:
            out.append(sum(col) / n)
    return out


def plain_checks(comm, rank, n):
    calls = 0
    nbytes = 0
    count = 37
    for dt in ('float32', 'float64', 'float16', 'int8', 'uint8', 'int32', 'uint32', 'int64',
               'uint64'):
        for op in ('sum', 'prod', 'min', 'max', 'avg'):
            if op == 'avg' and not dt.startswith('float'):
                continue
            if op == 'prod' and dt in ('int8', 'uint8', 'float16') and n > 2:
                continue  # 5 + 4 ... products leave these types' exact range
            a = np.array(values(rank, count), dtype=dt)
            got = comm.allreduce(a, op=op)
            want = np.array(reduce_all(op, n, count), dtype=dt)
            check(got is a, f'numpy {dt} {op}: in place returns the array')
            check(np.array_equal(a, want), f'numpy {dt} {op}: {a[:6]} != {want[:6]}')
            calls += 1
            nbytes += a.nbytes
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
               torch.int64, torch.uint8):
        t = torch.tensor(values(rank, count), dtype=dt)
        out = torch.empty_like(t)
        got = comm.allreduce(t, out=out)
        want = torch.tensor(reduce_all('sum', n, count), dtype=dt)
        check(got is out and torch.equal(out, want), f'torch {dt} sum into out=')
        check(torch.equal(t, torch.tensor(values(rank, count), dtype=dt)),
              f'torch {dt} sum into out=: the input changed')
        calls += 1
        nbytes += t.numel() * t.element_size()
    ba = bytearray(values(rank, count))
    comm.allreduce(ba, op='max')
    check(list(ba) == reduce_all('max', n, count), 'bytearray max')
    arr = array.array('d', values(rank, count))
    comm.allreduce(arr, op='avg')
    check(list(arr) == reduce_all('avg', n, count), 'array.array(d) avg')
    mv = memoryview(array.array('i', values(rank, count)))
    comm.allreduce(mv, op='sum')
    check(mv.tolist() == reduce_all('sum', n, count), 'memoryview(i) sum')
    calls += 3
    nbytes += count * (1 + 8 + 4)
    # bf16 in 16-bit words: the top half of the float32 pattern of small integers is exact
    f = np.array(values(rank, count), dtype=np.float32)
    words = (f.view(np.uint32) >> 16).astype(np.uint16)
    comm.allreduce(words, dtype='bf16')
    back = (words.astype(np.uint32) << 16).view(np.float32)
    check(np.array_equal(back, np.array(reduce_all('sum', n, count), dtype=np.float32)),
          'numpy uint16 as bf16 sum')
    calls += 1
    nbytes += words.nbytes
    empty = np.zeros(0, dtype=np.float32)
    comm.allreduce(empty)
    calls += 1
    return calls, nbytes


def async_checks(comm, rank, n):
    bufs = [np.full(1000 * (k + 1), rank + k, dtype=np.float32) for k in range(3)]
    reqs = [comm.iallreduce(b, key=k, op='sum') for k, b in zip([5, 'layer', b'x'], bufs)]
    while not reqs[0].test():
        pass
    for k, (r, b) in enumerate(zip(reqs, bufs)):
        got = r.wait()
        want = sum(rr + k for rr in range(n))
        check(got is b and np.all(b == want), f'iallreduce {k}: {b[:3]} != {want}')
        check(r.test(), f'iallreduce {k}: test() after wait() is True')
    return 3, sum(b.nbytes for b in bufs)


def error_checks(comm, rank, n):
    e = expect_error(lambda: comm.allreduce(np.ones(10 + rank, dtype=np.float32)),
                     zipccl.ZipcclError, 'counts differ', 'ZC_ERR_MISMATCH')
    if e is not None:
        check('zc_allreduce' in str(e) and 'ZC_ERR_MISMATCH' in str(e),
              f'the message names the call and the status: {e}')
        check(e.status == -7, f'status {e.status}, expected -7')
    # a header disagreement leaves the communicator usable
    a = np.ones(8, dtype=np.int64)
    comm.allreduce(a)
    check(np.all(a == n), 'the call after a mismatch')
    expect_error(lambda: zipccl.Communicator(qsgd_bits=99), zipccl.ZipcclError,
                 'ZIPCCL_QSGD_BITS=99', 'ZC_ERR_INVALID_CONFIG')
    e = expect_error(lambda: zipccl.Communicator(no_such_setting=1), zipccl.ZipcclError,
                     'unknown setting', 'ZC_ERR_INVALID_CONFIG')
    if e is not None:
        check('ZIPCCL_NO_SUCH_SETTING' in str(e), f'the message names the variable: {e}')
    expect_error(lambda: comm.allreduce(np.ones(4), op='mean'), ValueError, 'op mean')
    expect_error(lambda: comm.allreduce(np.ones((4, 4))[:, 0]), ValueError, 'not contiguous')
    expect_error(lambda: comm.allreduce(b'abc'), ValueError, 'read-only bytes')
    expect_error(lambda: comm.allreduce(np.ones(4, dtype=np.complex64)), TypeError, 'complex')
    expect_error(lambda: comm.allreduce(np.ones(4), key=-1), ValueError, 'negative key')
    expect_error(lambda: comm.allreduce(np.ones(4, np.float32), out=np.ones(5, np.float32)),
                 ValueError, 'out of another count')
    return 1


def missing_library_check():
    code = ('import zipccl\n'
            'try:\n'
            '    zipccl.lib()\n'
            'except zipccl.LibraryNotFound as e:\n'
            '    print("NOTFOUND", e)\n')
    env = dict(os.environ, LIBZIPCCL_PATH='/nonexistent/libzipccl.so')
    p = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                       timeout=60)
    check(p.stdout.startswith('NOTFOUND') and '/nonexistent/libzipccl.so' in p.stdout,
          f'missing library: {p.stdout!r} {p.stderr[-300:]!r}')


def compressed_checks(rank, n):
    comm = zt.communicator(codec='qsgd', qsgd_bits=8, algo='allgather', min_bytes=0)
    check(comm.rank == rank and comm.size == n, 'process-group communicator rank and size')
    check(comm.setting('codec') == 'qsgd', f'setting codec: {comm.setting("codec")}')
    count = 5000
    g = torch.Generator().manual_seed(7 + rank)
    x = torch.rand(count, generator=g) * 2 - 1  # |x| <= 1: every bucket scale m <= 1
    inputs = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(inputs, x)
    exact = sum(t.double() for t in inputs)
    out = comm.allreduce(x.clone())
    # per rank |error| < m / s + 2 u32 m, s = 127, then n + 2 f32 roundings of the sum
    err = n * (1 / 127 + 2 * 2.0 ** -24)
    bound = err + (n + 2) * 2.0 ** -24 * (sum(t.double().abs() for t in inputs) + err)
    worst = float(((out.double() - exact).abs() / bound).max())
    check(worst <= 1, f'qsgd 8 bits: error {worst:.3g} of the bound')
    check(float((out.double() - exact).abs().max()) > 0, 'qsgd 8 bits: the result is exact')
    outs = [torch.empty_like(out) for _ in range(n)]
    dist.all_gather(outs, out)
    check(all(torch.equal(o, out) for o in outs), 'qsgd: results differ between ranks')
    st = comm.stats()
    check(st['calls'] == 1 and st['calls_compressed'] == 1, f'qsgd stats {st}')
    # allgather: each rank sends its payload to the N - 1 others; 8 fixed bits per value plus a
    # scale per bucket of 512 and headers
    lo, hi = (n - 1) * count, (n - 1) * (count * (1 + 8 / 512) + 256)
    check(lo <= st['bytes_wire'] <= hi, f'qsgd 8 bits: {st["bytes_wire"]} bytes on the wire, '
          f'expected {lo}..{hi:.0f} (raw ring {st["bytes_wire_raw"]})')
    comm.close()
    expect_error(lambda: comm.allreduce(x), ValueError, 'closed communicator')


def hook_state_checks(plain_comm, rank, n):
    """HookState(comm=...): needs a progress thread; its futures complete with the average."""
    expect_error(lambda: zt.HookState(comm=plain_comm), ValueError, 'comm without progress thread')
    with zt.communicator(progress_thread=1, codec='none') as comm:
        with zt.HookState(comm=comm) as state:
            futs = [state.allreduce_future(torch.full((1000,), float(rank + k)), key=k + 1)
                    for k in range(3)]
            for k, f in enumerate(futs):
                want = sum(r + k for r in range(n)) / n
                check(bool((f.wait() == want).all()), f'HookState future {k}: {f.wait()[:3]}')
        check(comm.stats()['calls'] == 3, 'HookState(comm=): the communicator is still open')


def main():
    rank, n = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    dist.init_process_group('gloo')
    with zipccl.Communicator(codec='none', min_bytes=0) as comm:
        check(comm.rank == rank and comm.size == n,
              f'torchrun variables: rank {comm.rank} size {comm.size}, expected {rank} {n}')
        c1, b1 = plain_checks(comm, rank, n)
        c2, b2 = async_checks(comm, rank, n)
        c3 = error_checks(comm, rank, n)
        st = comm.stats()
        # the failed call (count mismatch) is not counted as completed
        calls = c1 + c2 + c3
        check(st['calls'] == calls, f'stats: {st["calls"]} calls, expected {calls}')
        want = b1 + b2 + 8 * 8
        check(st['bytes_in'] == want, f'stats: {st["bytes_in"]} bytes in, expected {want}')
        check(st['calls_compressed'] == 0, 'codec none compressed a call')
        hook_state_checks(comm, rank, n)
    if rank == 0:
        missing_library_check()
    compressed_checks(rank, n)
    bad = torch.tensor([len(failures)])
    dist.all_reduce(bad)
    dist.destroy_process_group()
    if failures:
        sys.exit(f'rank {rank}: {len(failures)} checks failed')
    if int(bad):
        sys.exit(f'rank {rank}: another rank failed')
    if rank == 0:
        print(f'api: {n} ranks, every check passed', flush=True)


if __name__ == '__main__':
    main()
