"""Finding libzipccl.so and declaring its C API (include/zipccl/zipccl.h) for ctypes.

Where the library is looked for, in order:
  1. LIBZIPCCL_PATH, the path of a libzipccl.so (nothing else is tried when it is set; not a
     ZIPCCL_* name, which the C library would warn about as unknown);
  2. the build tree, when this package is the source tree's python/zipccl: build/ next to python/
     (the folder `make` builds into), then build-*/ and builddir/;
  3. the libdir meson installed the library into (_install.py, written by `meson install`);
  4. the system's loader: libzipccl.so.0 on the default paths and LD_LIBRARY_PATH.
"""
import ctypes
import glob
import os

SONAME = 'libzipccl.so.0'

# zc_status_t (include/zipccl/zipccl_status.h): the numeric values are ABI.
STATUS_NAMES = {
    0: 'ZC_OK',
    1: 'ZC_INPROGRESS',
    -1: 'ZC_ERR_INVALID_ARG',
    -2: 'ZC_ERR_INVALID_CONFIG',
    -3: 'ZC_ERR_NO_MEMORY',
    -4: 'ZC_ERR_BUFFER_TOO_SMALL',
    -5: 'ZC_ERR_CORRUPT',
    -6: 'ZC_ERR_UNSUPPORTED',
    -7: 'ZC_ERR_MISMATCH',
    -8: 'ZC_ERR_IO',
    -9: 'ZC_ERR_TIMEOUT',
    -10: 'ZC_ERR_INTERNAL',
    -11: 'ZC_ERR_PEER',
}
OK = 0
INPROGRESS = 1
ERR_INVALID_ARG = -1
ERR_IO = -8

# zc_dtype_t and zc_redop_t, by the names zc_dtype_name and zc_redop_name give them.
DTYPES = {'f32': 0, 'f16': 1, 'bf16': 2, 'f64': 3, 'i8': 4, 'u8': 5, 'i32': 6, 'u32': 7,
          'i64': 8, 'u64': 9}
OPS = {'sum': 0, 'prod': 1, 'min': 2, 'max': 3, 'avg': 4}


class LibraryNotFound(ImportError):
    """libzipccl.so is not where this package looks (the message lists every place)."""


class Stats(ctypes.Structure):
    """zc_stats_t."""
    _fields_ = [
        ('calls', ctypes.c_uint64),
        ('calls_compressed', ctypes.c_uint64),
        ('bytes_in', ctypes.c_uint64),
        ('bytes_wire', ctypes.c_uint64),
        ('bytes_wire_raw', ctypes.c_uint64),
        ('encode_s', ctypes.c_double),
        ('decode_s', ctypes.c_double),
        ('total_s', ctypes.c_double),
        ('rel_err', ctypes.c_double),
        ('rel_err_samples', ctypes.c_uint64),
        ('residual_norm', ctypes.c_double),
    ]


ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p)
BROADCAST_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_int)
BARRIER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
DESTROY_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class BootstrapHooks(ctypes.Structure):
    """zc_bootstrap_hooks_t."""
    _fields_ = [
        ('allgather', ALLGATHER_FN),
        ('broadcast', BROADCAST_FN),
        ('barrier', BARRIER_FN),
        ('destroy', DESTROY_FN),
    ]


def _candidates():
    """(where it was looked for, path or soname) in search order."""
    env = os.environ.get('LIBZIPCCL_PATH')
    if env:
        return [('LIBZIPCCL_PATH', env)]
    found = []
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))  # python/zipccl -> the source tree
    if os.path.isfile(os.path.join(root, 'meson.build')):
        trees = [os.path.join(root, 'build')]
        trees += sorted(glob.glob(os.path.join(root, 'build-*')))
        trees.append(os.path.join(root, 'builddir'))
        found += [('build tree', os.path.join(t, SONAME)) for t in trees]
    try:
        from zipccl import _install  # written by meson install next to this file
        found.append(('installed libdir', os.path.join(_install.LIBDIR, SONAME)))
    except ImportError:
        pass
    found.append(('system loader', SONAME))
    return found


def _declare(lib):
    c_int, c_size, c_u64, c_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_void_p
    pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        'zc_status_string': (ctypes.c_char_p, [c_int]),
        'zc_comm_init': (c_int, [pp]),
        'zc_comm_init_config': (c_int, [c_p, pp]),
        'zc_comm_init_bootstrap_config': (c_int, [c_p, c_int, c_int,
                                                  ctypes.POINTER(BootstrapHooks), c_p, pp]),
        'zc_comm_config_create': (c_int, [c_int, pp]),
        'zc_comm_config_set': (c_int, [c_p, ctypes.c_char_p, ctypes.c_char_p]),
        'zc_comm_config_get': (c_int, [c_p, ctypes.c_char_p, ctypes.c_char_p, c_size]),
        'zc_comm_config_destroy': (None, [c_p]),
        'zc_comm_destroy': (None, [c_p]),
        'zc_comm_rank': (c_int, [c_p]),
        'zc_comm_size': (c_int, [c_p]),
        'zc_comm_stats': (c_int, [c_p, ctypes.POINTER(Stats)]),
        'zc_comm_set_stats_file': (c_int, [c_p, ctypes.c_char_p]),
        'zc_allreduce_key': (c_int, [c_p, c_p, c_p, c_size, c_int, c_int, c_u64]),
        'zc_iallreduce': (c_int, [c_p, c_p, c_p, c_size, c_int, c_int, c_u64, pp]),
        'zc_test': (c_int, [pp]),
        'zc_wait': (c_int, [pp]),
        'zc_dtype_name': (ctypes.c_char_p, [c_int]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load():
    """The loaded library, its functions declared; LibraryNotFound naming every place tried."""
    tried = []
    for where, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f'{path} ({where}: no such file)')
            continue
        try:
            return _declare(ctypes.CDLL(path))
        except OSError as e:
            tried.append(f'{path} ({where}: {e})')
    raise LibraryNotFound('zipccl: libzipccl.so not found; looked for ' + '; '.join(tried) +
                          '. Build it with `make` in the source tree, install it with '
                          '`make install`, or set LIBZIPCCL_PATH=/path/to/libzipccl.so')
