"""Communicator, Request and ZipcclError: zipccl's C API (include/zipccl/zipccl.h) for Python."""
import ctypes
import hashlib
import threading

from zipccl import _lib

_LIB = None
_LIB_LOCK = threading.Lock()


def lib():
    """libzipccl.so, loaded once (_lib.load says where it looks)."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            _LIB = _lib.load()
        return _LIB


def status_string(status):
    """zc_status_string: "corrupt payload", "a deadline passed"..."""
    return lib().zc_status_string(status).decode()


def status_name(status):
    """The enumerator's name: "ZC_ERR_TIMEOUT"; "zc_status_t N" for a value this package lacks."""
    return _lib.STATUS_NAMES.get(status, f'zc_status_t {status}')


class ZipcclError(RuntimeError):
    """A zipccl call failed: .status (the zc_status_t), .name ("ZC_ERR_PEER"), .call.

    The C library logged the cause (rank, variable, values) to stderr where it arose; the message
    here names the call and the status with zc_status_string's description.
    """

    def __init__(self, status, call, detail=''):
        self.status = status
        self.name = status_name(status)
        self.call = call
        super().__init__(f'{call}: {self.name} ({status_string(status)})' +
                         (f': {detail}' if detail else ''))


def _check(status, call, detail=''):
    if status != _lib.OK:
        raise ZipcclError(status, call, detail)


def setting_name(name):
    """'codec', 'CODEC' and 'ZIPCCL_CODEC' all name ZIPCCL_CODEC."""
    up = name.upper()
    return up if up.startswith('ZIPCCL_') else 'ZIPCCL_' + up


def _setting_value(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    return str(value)


def tensor_key(key):
    """A zc_allreduce_key key from an int (0: the default key) or a name (str or bytes, hashed)."""
    if isinstance(key, int):
        if not 0 <= key < 1 << 64:
            raise ValueError(f'key {key} is not in 0..2^64-1')
        return key
    if isinstance(key, str):
        key = key.encode()
    if isinstance(key, bytes):
        k = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), 'little')
        return k or 1
    raise TypeError(f'key must be an int, str or bytes, not {type(key).__name__}')


_NUMPY_DTYPES = {'float32': 'f32', 'float16': 'f16', 'float64': 'f64', 'int8': 'i8',
                 'uint8': 'u8', 'int32': 'i32', 'uint32': 'u32', 'int64': 'i64',
                 'uint64': 'u64'}
_TORCH_DTYPES = {'torch.float32': 'f32', 'torch.float16': 'f16', 'torch.bfloat16': 'bf16',
                 'torch.float64': 'f64', 'torch.int8': 'i8', 'torch.uint8': 'u8',
                 'torch.int32': 'i32', 'torch.int64': 'i64'}
# struct format character -> type, for objects of the buffer protocol
_FORMATS = {'f': 'f32', 'e': 'f16', 'd': 'f64', 'b': 'i8', 'B': 'u8', 'c': 'u8'}
_INT_FORMATS = {('i', 4): 'i32', ('l', 4): 'i32', ('q', 4): 'i32', ('I', 4): 'u32',
                ('L', 4): 'u32', ('Q', 4): 'u32', ('i', 8): 'i64', ('l', 8): 'i64',
                ('q', 8): 'i64', ('I', 8): 'u64', ('L', 8): 'u64', ('Q', 8): 'u64'}
_BYTES = {'f32': 4, 'f16': 2, 'bf16': 2, 'f64': 8, 'i8': 1, 'u8': 1, 'i32': 4, 'u32': 4,
          'i64': 8, 'u64': 8}


class _Buffer:
    """A caller's array as (address, count, type), and what to do once the call completed.

    CPU torch tensors, numpy arrays and writable buffer-protocol objects are used where they lie;
    a CUDA tensor is copied to host memory first and the result copied back by finish().
    """

    def __init__(self, obj, dtype=None):
        self.obj = obj
        self.host = obj  # what the C library reads and writes
        self.device = None
        mod = type(obj).__module__
        if mod.startswith('torch') and hasattr(obj, 'data_ptr'):
            kind = _TORCH_DTYPES.get(str(obj.dtype))
            if not obj.is_contiguous():
                raise ValueError('zipccl: the tensor is not contiguous (use .contiguous())')
            if obj.device.type != 'cpu':
                self.device = obj
                self.host = obj.to('cpu')
            self.addr, self.count = self.host.data_ptr(), self.host.numel()
            self.nbytes = self.count * self.host.element_size()
        elif mod == 'numpy' and hasattr(obj, '__array_interface__'):
            kind = _NUMPY_DTYPES.get(obj.dtype.name)
            if not obj.flags['C_CONTIGUOUS']:
                raise ValueError('zipccl: the array is not C-contiguous (use numpy.ascontiguousarray)')
            if not obj.flags['WRITEABLE']:
                raise ValueError('zipccl: the array is read-only')
            self.addr, self.count, self.nbytes = obj.ctypes.data, obj.size, obj.nbytes
        else:
            mv = memoryview(obj)
            if mv.readonly:
                raise ValueError(f'zipccl: the {type(obj).__name__} is read-only')
            if not mv.c_contiguous:
                raise ValueError(f'zipccl: the {type(obj).__name__} is not contiguous')
            fmt = mv.format.lstrip('@=<')
            kind = _FORMATS.get(fmt) or _INT_FORMATS.get((fmt, mv.itemsize))
            if dtype is not None and kind is None:
                kind = dtype if _BYTES.get(dtype) == mv.itemsize else None
            self.nbytes = mv.nbytes
            self.count = mv.nbytes // mv.itemsize if mv.itemsize else 0
            raw = mv.cast('B') if mv.nbytes else mv
            self._keep = (ctypes.c_char * mv.nbytes).from_buffer(raw) if mv.nbytes else None
            self.addr = ctypes.addressof(self._keep) if self._keep is not None else 0
        if dtype is not None:
            if dtype not in _lib.DTYPES:
                raise ValueError(f'zipccl: unknown dtype {dtype!r} (one of {", ".join(_lib.DTYPES)})')
            if self.count and self.nbytes != self.count * _BYTES[dtype] and kind != dtype:
                raise ValueError(f'zipccl: dtype {dtype} does not match the elements of '
                                 f'{self.nbytes // max(self.count, 1)} bytes')
            kind = dtype
        if kind is None:
            raise TypeError(f'zipccl: cannot all-reduce elements of type {_describe(obj)} (f32, '
                            'f16, bf16, f64, i8, u8, i32, u32, i64, u64; pass dtype= for raw '
                            'buffers)')
        self.dtype = kind

    def finish(self):
        """After completion: the staged result back into the device tensor; the caller's object."""
        if self.device is not None:
            self.device.copy_(self.host)
        return self.obj


def _describe(obj):
    for attr in ('dtype',):
        if hasattr(obj, attr):
            return str(getattr(obj, attr))
    try:
        return f"format '{memoryview(obj).format}'"
    except TypeError:
        return type(obj).__name__


def _op_code(op):
    try:
        return _lib.OPS[op]
    except KeyError:
        raise ValueError(f'zipccl: unknown op {op!r} (one of {", ".join(_lib.OPS)})') from None


class Request:
    """A nonblocking all-reduce in flight (Communicator.iallreduce).

    test() and wait() raise ZipcclError when the exchange failed. The buffers belong to the call
    until it has completed; a request dropped while in flight is waited for when collected.
    """

    def __init__(self, comm, handle, send, recv):
        self._comm = comm
        self._handle = handle
        self._send, self._recv = send, recv
        self._result = None
        self._done = False

    def _complete(self, status):
        self._handle = None
        self._done = True
        _check(status, 'zc_iallreduce')
        self._result = self._recv.finish()
        return self._result

    def test(self):
        """True once completed (then result() gives the output); never blocks."""
        if self._done:
            return True
        status = lib().zc_test(ctypes.byref(self._handle))
        if status == _lib.INPROGRESS:
            return False
        self._complete(status)
        return True

    def wait(self):
        """Blocks until completion (releasing the GIL) and returns the output object."""
        if not self._done:
            self._complete(lib().zc_wait(ctypes.byref(self._handle)))
        return self._result

    def result(self):
        if not self._done:
            raise RuntimeError('zipccl: the request has not completed (wait() or test() first)')
        return self._result

    def __del__(self):
        if getattr(self, '_handle', None) is not None and self._handle.value:
            lib().zc_wait(ctypes.byref(self._handle))  # the C side still owns our buffers


class Communicator:
    """A group of ranks that all-reduce together (zc_comm_t).

        comm = zipccl.Communicator(codec='qsgd', qsgd_bits=8)   # ZIPCCL_* settings
        comm.allreduce(array, op='avg', key='layer1')

    Rank, size and where rank 0 listens come from ZIPCCL_RANK/SIZE/ROOT, else torchrun's
    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (rank 0 listens on MASTER_PORT + 1), Open MPI's or
    Slurm's variables, as zc_comm_init reads them; rank=, size=, root= set them in code.
    Settings are ZIPCCL_* variables by their full or short name; read_env=False ignores the
    environment's ZIPCCL_* values (the launcher's variables are still read). Collective.

    A communicator is used by one thread at a time, unless progress_thread=1 (then iallreduce
    from one thread and Request.wait from another may overlap).
    """

    def __init__(self, settings=None, *, read_env=True, _bootstrap=None, **kw):
        self._handle = None
        self._hooks = None
        c = lib()
        cfg = ctypes.c_void_p()
        _check(c.zc_comm_config_create(1 if read_env else 0, ctypes.byref(cfg)),
               'zc_comm_config_create', 'a ZIPCCL_* variable of the environment is invalid')
        self._config = cfg
        try:
            for name, value in list((settings or {}).items()) + list(kw.items()):
                full = setting_name(name)
                _check(c.zc_comm_config_set(cfg, full.encode(), _setting_value(value).encode()),
                       'zc_comm_config_set', f'{full}={_setting_value(value)}')
            handle = ctypes.c_void_p()
            if _bootstrap is None:
                _check(c.zc_comm_init_config(cfg, ctypes.byref(handle)), 'zc_comm_init')
            else:
                self._hooks = _bootstrap
                status = c.zc_comm_init_bootstrap_config(cfg, _bootstrap.rank, _bootstrap.size,
                                                         ctypes.byref(_bootstrap.hooks), None,
                                                         ctypes.byref(handle))
                if status != _lib.OK and _bootstrap.error is not None:
                    raise ZipcclError(status, 'zc_comm_init_bootstrap',
                                      f'bootstrap callback failed: {_bootstrap.error!r}')
                _check(status, 'zc_comm_init_bootstrap')
            self._handle = handle
        except BaseException:
            c.zc_comm_config_destroy(cfg)
            self._config = None
            raise

    @classmethod
    def from_bootstrap(cls, rank, size, allgather, broadcast, barrier, settings=None, **kw):
        """A communicator whose ranks meet through the caller's channel (zc_comm_init_bootstrap).

        allgather(bytes) -> every rank's bytes concatenated in rank order; broadcast(bytes,
        root) -> root's bytes (every rank passes a buffer of the same length); barrier(). Each
        is collective and called only while this constructor runs.
        """
        return cls(settings, _bootstrap=_PyBootstrap(rank, size, allgather, broadcast, barrier),
                   **kw)

    def _live(self):
        if not self._handle:
            raise ValueError('zipccl: the communicator is closed')
        return self._handle

    @property
    def rank(self):
        return lib().zc_comm_rank(self._live())

    @property
    def size(self):
        return lib().zc_comm_size(self._live())

    def setting(self, name):
        """The value the communicator was created with, as text ("qsgd", "65536", "auto")."""
        buf = ctypes.create_string_buffer(4096)
        full = setting_name(name)
        if self._config is None:
            raise ValueError('zipccl: the communicator is closed')
        _check(lib().zc_comm_config_get(self._config, full.encode(), buf, len(buf)),
               'zc_comm_config_get', f'unknown setting {full}')
        return buf.value.decode()

    def _start(self, send, out, op, key, dtype):
        s = _Buffer(send, dtype)
        r = s if out is None or out is send else _Buffer(out, dtype)
        if r is not s and (r.count != s.count or r.dtype != s.dtype):
            raise ValueError(f'zipccl: out holds {r.count} x {r.dtype}, the input {s.count} x '
                             f'{s.dtype}')
        return s, r, _op_code(op), tensor_key(key)

    def allreduce(self, buf, op='sum', key=0, out=None, dtype=None):
        """Reduces buf over every rank into out (None: in place) and returns it. Collective.

        buf: a numpy array, a torch tensor (CPU, or CUDA staged through host memory) or a
        writable buffer (bytearray, array.array, memoryview), contiguous. op: sum, avg, prod,
        min, max. key: the tensor's identity for stateful codecs (top-k, error feedback,
        GradiVeQ bases): an int, or a str/bytes name; 0 keys by address and count. dtype
        overrides the element type ('bf16' for a buffer of 16-bit words). Float sums and
        averages of at least ZIPCCL_MIN_BYTES are compressed by the communicator's codec.
        """
        s, r, opc, k = self._start(buf, out, op, key, dtype)
        _check(lib().zc_allreduce_key(self._live(), s.addr, r.addr, s.count,
                                      _lib.DTYPES[s.dtype], opc, k),
               'zc_allreduce', f'{s.count} x {s.dtype} {op}')
        return r.finish()

    def iallreduce(self, buf, op='sum', key=0, out=None, dtype=None):
        """allreduce, started: returns a Request; the buffers are the call's until it completes."""
        s, r, opc, k = self._start(buf, out, op, key, dtype)
        handle = ctypes.c_void_p()
        _check(lib().zc_iallreduce(self._live(), s.addr, r.addr, s.count, _lib.DTYPES[s.dtype],
                                   opc, k, ctypes.byref(handle)),
               'zc_iallreduce', f'{s.count} x {s.dtype} {op}')
        return Request(self, handle, s, r)

    def stats(self):
        """This communicator's counters (zc_stats_t) as a dict: calls, calls_compressed,
        bytes_in, bytes_wire, bytes_wire_raw, encode_s, decode_s, total_s, rel_err,
        rel_err_samples, residual_norm. Read it while no call is in flight."""
        st = _lib.Stats()
        _check(lib().zc_comm_stats(self._live(), ctypes.byref(st)), 'zc_comm_stats')
        return {name: getattr(st, name) for name, _ in _lib.Stats._fields_}

    def set_stats_file(self, path):
        """JSON statistics to this file at close ("%r": the rank; "": none)."""
        _check(lib().zc_comm_set_stats_file(self._live(), path.encode()), 'zc_comm_set_stats_file')

    def close(self):
        """Waits for calls in flight, writes statistics, frees the communicator. Local."""
        if self._handle:
            lib().zc_comm_destroy(self._handle)
            self._handle = None
        if self._config is not None:
            lib().zc_comm_config_destroy(self._config)
            self._config = None
        self._hooks = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, '_handle', None) is not None:
            self.close()


class _PyBootstrap:
    """Python callables behind zc_bootstrap_hooks_t. An exception in a callback fails the init
    with ZC_ERR_IO (kept in .error and named in the ZipcclError)."""

    def __init__(self, rank, size, allgather, broadcast, barrier):
        self.rank, self.size, self.error = rank, size, None

        def guarded(fn):
            def call(*args):
                try:
                    fn(*args)
                    return _lib.OK
                except BaseException as e:  # an exception must not cross the C frames
                    self.error = e
                    return _lib.ERR_IO
            return call

        def do_allgather(ctx, mine, length, out):
            got = bytes(allgather(ctypes.string_at(mine, length) if length else b''))
            if len(got) != size * length:
                raise ValueError(f'allgather returned {len(got)} bytes, expected {size * length}')
            ctypes.memmove(out, got, len(got))

        def do_broadcast(ctx, buf, length, root):
            got = bytes(broadcast(ctypes.string_at(buf, length) if length else b'', root))
            if len(got) != length:
                raise ValueError(f'broadcast returned {len(got)} bytes, expected {length}')
            ctypes.memmove(buf, got, length)

        self.hooks = _lib.BootstrapHooks(
            _lib.ALLGATHER_FN(guarded(do_allgather)),
            _lib.BROADCAST_FN(guarded(do_broadcast)),
            _lib.BARRIER_FN(guarded(lambda ctx: barrier())),
            _lib.DESTROY_FN())  # NULL: nothing to free
