"""zipccl under PyTorch: a communicator from a process group, and a DistributedDataParallel
communication hook that all-reduces each gradient bucket through zipccl.

    import zipccl.torch
    state = zipccl.torch.HookState(codec='qsgd', qsgd_bits=8)   # ZIPCCL_* settings
    ddp_model.register_comm_hook(state, zipccl.torch.comm_hook)
    ...
    state.stats()['bytes_wire']; state.close()

The hook hands the bucket's flat buffer to zc_iallreduce (op avg: DDP expects the mean) under the
key bucket.index() + 1, so stateful codecs (top-k and QSGD error feedback, GradiVeQ bases) keep
one state per bucket, and returns a torch.futures.Future that a waiter thread completes when the
call is done: backward goes on computing the next buckets' gradients meanwhile, and the
communicator's progress thread (ZIPCCL_PROGRESS_THREAD=1) moves the data. CPU tensors are
reduced where they lie; CUDA tensors are copied to host memory and back. docs/python.md.
"""
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
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._complete, name='zipccl-hook', daemon=True)
        self._thread.start()

    def _complete(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, future = item
            try:
                result = request.wait()  # zc_wait, without the GIL
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
        self._queue.put((request, future))
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


def comm_hook(state, bucket):
    """DDP communication hook: the bucket's gradients averaged over the ranks by zipccl.

    register with ddp_model.register_comm_hook(state, comm_hook), state a HookState. Key:
    bucket.index() + 1 (0 is zipccl's "no key"). After DDP rebuilds its buckets (after the first
    iteration) an index may name a bucket of another size: zipccl then starts its state afresh.
    """
    return state.allreduce_future(bucket.buffer(), bucket.index() + 1)


def register(model, process_group=None, settings=None, **kw):
    """model.register_comm_hook(HookState(...), comm_hook); returns the state."""
    state = HookState(process_group, settings=settings, **kw)
    model.register_comm_hook(state, comm_hook)
    return state
