"""zipccl under PyTorch: a communicator from a process group, and a DistributedDataParallel
communication hook that all-reduces each gradient bucket through zipccl.

    import zipccl.torch
    state = zipccl.torch.HookState(codec='qsgd', qsgd_bits=8)   # ZIPCCL_* settings
    ddp_model.register_comm_hook(state, zipccl.torch.comm_hook)
    ...
    state.stats()['bytes_wire']; state.close()

The hook hands the bucket's flat buffer to zc_iallreduce (op avg: DDP expects the mean) under the
a key per bucket index and layout (BucketKeys), so stateful codecs (top-k and QSGD error
feedback, GradiVeQ bases) keep one state per bucket. With codec powersgd, which views a call as a matrix, it makes one call per
gradient tensor of the bucket instead (tensor_layout: each weight as its own matrix, its state
keyed by bucket and tensor), as PyTorch's powerSGD_hook compresses each tensor. It returns a
torch.futures.Future that a waiter thread completes when the calls are done: backward goes on
computing the next buckets' gradients meanwhile, and the communicator's progress thread
(ZIPCCL_PROGRESS_THREAD=1) moves the data. CPU tensors are reduced where they lie; CUDA tensors
are copied to host memory and back. docs/python.md.
"""
import math
import queue
import threading

import torch
import torch.distributed as dist

from zipccl._comm import Communicator

__all__ = ['communicator', 'HookState', 'comm_hook', 'register']


def _global_rank(group, rank):
    if group is None or group is dist.group.WORLD:
        return rank
    get = getattr(dist, 'get_global_rank', None) or dist.distributed_c10d._get_global_rank
    return get(group, rank)


def communicator(group=None, settings=None, **kw):
    """A zipccl Communicator of the ranks of @group (None: the default process group), which
    meet through the group itself (all_gather_object, broadcast_object_list, barrier): no port
    of its own, any backend. torch.distributed must be initialized. Settings as Communicator's.
    """
    if not dist.is_initialized():
        raise RuntimeError('zipccl.torch: torch.distributed is not initialized '
                           '(call dist.init_process_group first)')
    rank, size = dist.get_rank(group), dist.get_world_size(group)

    def allgather(mine):
        out = [None] * size
        dist.all_gather_object(out, mine, group=group)
        return b''.join(out)

    def broadcast(data, root):
        box = [data]
        dist.broadcast_object_list(box, src=_global_rank(group, root), group=group)
        return box[0]

    def barrier():
        dist.barrier(group=group)

    return Communicator.from_bootstrap(rank, size, allgather, broadcast, barrier, settings, **kw)


class BucketKeys:
    """The key of a DDP bucket's zipccl state, keys(bucket): bucket.index() + 1 for the first
    layout seen under that index, and (g << 20) | (bucket.index() + 1) for the g-th other layout
    (other parameters, or the same in another order). DDP rebuilds its buckets after the first
    iteration; a bucket that keeps its index and size but holds other parameters must not
    inherit their residual or basis. Parameters are numbered in the order first seen, which is
    the same on every rank (DDP reduces buckets in index order), so every rank computes the same
    keys.
    """

    def __init__(self):
        self._number = {}  # a parameter's storage address -> its number
        self._keys = {}  # (bucket index, its parameters' numbers) -> key

    def __call__(self, bucket):
        numbers = tuple(self._number.setdefault(p.data_ptr(), len(self._number))
                        for p in bucket.parameters())
        index = bucket.index()
        key = self._keys.get((index, numbers))
        if key is None:
            generation = sum(1 for i, _ in self._keys if i == index)
            key = generation << 20 | (index + 1)
            self._keys[(index, numbers)] = key
        return key


class HookState:
    """The state of comm_hook: a zipccl communicator with a progress thread and the waiter
    thread that completes the hook's futures.

    HookState(codec='topk', topk_density=0.01, ...) builds a communicator over @process_group
    (None: the default group) with these ZIPCCL_* settings (full or short names), forcing
    ZIPCCL_PROGRESS_THREAD=1; HookState(comm=c) uses a Communicator of your own, which must
    have been created with progress_thread=1. close() ends the thread and the communicator.
    """

    def __init__(self, process_group=None, comm=None, settings=None, **kw):
        if comm is None:
            merged = dict(settings or {}, **kw)
            merged = {k: v for k, v in merged.items()
                      if k.upper() not in ('PROGRESS_THREAD', 'ZIPCCL_PROGRESS_THREAD')}
            comm = communicator(process_group, merged, progress_thread=1)
            self._own = True
        else:
            if settings or kw:
                raise ValueError('zipccl.torch.HookState: settings go to the communicator you '
                                 'create, not with comm=')
            if comm.setting('progress_thread') != '1':
                raise ValueError('zipccl.torch.HookState: the communicator needs '
                                 'progress_thread=1 (the hook waits on another thread)')
            self._own = False
        self.comm = comm
        self.world_size = comm.size
        # codecs that view a call as a matrix: one call per tensor of the bucket
        self.per_tensor = comm.setting('codec') == 'powersgd'
        self.powersgd_rank = int(comm.setting('powersgd_rank')) if self.per_tensor else 0
        self.bucket_key = BucketKeys()
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._complete, name='zipccl-hook', daemon=True)
        self._thread.start()

    def _complete(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            requests, future, finish = item
            try:
                for request in requests:
                    result = request.wait()  # zc_wait, without the GIL
                if finish is not None:
                    result = finish()
            except BaseException as e:
                future.set_exception(e)
            else:
                future.set_result(result)

    def allreduce_future(self, tensor, key):
        """Starts the average of @tensor over the ranks under @key; a Future of the tensor."""
        future = torch.futures.Future()
        try:
            request = self.comm.iallreduce(tensor, op='avg', key=key)
        except BaseException as e:
            future.set_exception(e)
            return future
        self._queue.put(([request], future, None))
        return future

    def allreduce_bucket_future(self, bucket):
        """Starts the average of each gradient tensor of @bucket over the ranks, one call per
        tensor in tensor_layout's layout under the key bucket_key(bucket) << 32 | (i + 1) (i:
        the tensor's place in the bucket); a Future of bucket.buffer(), which holds the results
        once it completes."""
        buffer = bucket.buffer()
        grads = bucket.gradients()
        if sum(g.numel() for g in grads) != buffer.numel():  # not back to back: one call
            return self.allreduce_future(buffer, self.bucket_key(bucket))
        future = torch.futures.Future()
        base = self.bucket_key(bucket) << 32
        requests, back = [], []
        try:
            offset = 0
            for i, grad in enumerate(grads):
                n = grad.numel()
                flat = buffer[offset:offset + n]
                offset += n
                if n == 0:
                    continue
                layout = tensor_layout(tuple(grad.shape), self.powersgd_rank)
                if layout is None:
                    send = flat  # in place
                else:
                    rows, cols, transpose, prows, pcols = layout
                    mat = flat.view(rows, cols) if not transpose else flat.view(cols, rows).t()
                    send = flat.new_zeros(prows, pcols)
                    send[:rows, :cols].copy_(mat)
                    back.append((mat, send, rows, cols))
                requests.append(self.comm.iallreduce(send, op='avg', key=base | (i + 1)))
        except BaseException as e:
            for request in requests:
                request.wait()
            future.set_exception(e)
            return future

        def finish():
            for mat, send, rows, cols in back:
                mat.copy_(send[:rows, :cols])
            return buffer
        self._queue.put((requests, future, finish))
        return future

    def stats(self):
        """The communicator's counters (Communicator.stats); call it between iterations."""
        return self.comm.stats()

    def close(self):
        """Waits for the hook's calls, stops the waiter thread, closes an own communicator."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._own and self.comm is not None:
            self.comm.close()
        self.comm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _powersgd_view(count):
    """(rows, cols) of the codec's matrix view of @count values (zc_powersgd_shape,
    codec/powersgd/lowrank.c; docs/codecs.md, "The matrix view")."""
    root = math.isqrt(count)
    d = root
    while d >= 1 and 4 * d >= root:
        if count % d == 0:
            return count // d, d
        d -= 1
    cols = root if root * root == count else root + 1
    return -(-count // cols), cols


_LAYOUTS = {}


def tensor_layout(shape, rank):
    """How the hook sends a gradient of @shape with PowerSGD of @rank: None to send it as it is
    (1-D tensors, and matrices whose rank-@rank factors are not at least twice smaller, which
    the codec sends raw), else (rows, cols, transpose, prows, pcols): the tensor as a rows x cols
    matrix, shape[0] x the rest as PyTorch's powerSGD_hook takes it, or its transpose (the rest
    x shape[0]) when shape[0] is the smaller side, since the codec's view never has fewer rows
    than columns (a Linear's out x in weight with out < in goes as in x out), copied into
    the top left corner of a zero prows x pcols matrix whose count the codec views as prows x
    pcols exactly, so each row of the view is a row of the matrix (zero rows and columns add
    nothing to the low-rank factors: they come back zero). Such a layout of at most twice the
    tensor's count or None: a matrix over about 16 times taller than wide needs columns added
    (the view has cols >= sqrt(count) / 4), 50000 x 64 as 50003 x 3127, and goes as it is,
    in the codec's own view, instead.
    """
    key = (shape, rank)
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    layout = None
    if len(shape) >= 2 and shape[0] >= 2:
        rows, cols = shape[0], math.prod(shape[1:])
        r = min(rank, rows, cols)
        if cols >= 2 and 2 * ((rows + cols) * r + 1) <= rows * cols:
            transpose = rows < cols
            big, small = (cols, rows) if transpose else (rows, cols)
            best = None
            limit = 2 * rows * cols + 1  # counts below it
            for pc in range(max(small, -(-big // 16)), max(small, -(-big // 16)) + 64):
                if pc * big >= (best[0] * best[1] if best is not None else limit):
                    break
                for pr in range(max(big, pc), big + 4096):
                    if pr * pc >= (best[0] * best[1] if best is not None else limit):
                        break
                    if _powersgd_view(pr * pc) == (pr, pc):
                        best = (pr, pc)
                        break
            if best is not None:
                layout = (big, small, transpose) + best
    _LAYOUTS[key] = layout
    return layout


def comm_hook(state, bucket):
    """DDP communication hook: the bucket's gradients averaged over the ranks by zipccl.

    register with ddp_model.register_comm_hook(state, comm_hook), state a HookState. Key:
    state.bucket_key(bucket), one per bucket index and layout (0 is zipccl's "no key"): after
    DDP rebuilds its buckets (after the first iteration) a bucket under an old index with other
    parameters starts its state afresh. With codec powersgd, one call per gradient tensor of the
    bucket (allreduce_bucket_future).
    """
    if state.per_tensor:
        return state.allreduce_bucket_future(bucket)
    return state.allreduce_future(bucket.buffer(), state.bucket_key(bucket))


def register(model, process_group=None, settings=None, **kw):
    """model.register_comm_hook(HookState(...), comm_hook); returns the state."""
    state = HookState(process_group, settings=settings, **kw)
    model.register_comm_hook(state, comm_hook)
    return state
