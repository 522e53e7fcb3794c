"""zipccl for Python: compressed all-reduce (QSGD, top-k with error feedback, GradiVeQ, fp16/bf16,
raw ring) over UCX, through ctypes on libzipccl.so. docs/python.md describes it.

    import zipccl
    comm = zipccl.Communicator(codec='qsgd', qsgd_bits=8)   # rank/size from torchrun, mpirun, srun
    comm.allreduce(grad, op='avg', key='fc1')               # numpy, torch (CPU/CUDA), buffers
    print(comm.stats()['bytes_wire'])

zipccl.torch.comm_hook is a DistributedDataParallel communication hook (docs/python.md).
The library is loaded at the first call; zipccl.lib() loads it now (LibraryNotFound says where
it looked).
"""
from zipccl._comm import (Communicator, Request, ZipcclError, lib, setting_name, status_name,
                          status_string, tensor_key)
from zipccl._lib import DTYPES, OPS, STATUS_NAMES, LibraryNotFound

__all__ = ['Communicator', 'Request', 'ZipcclError', 'LibraryNotFound', 'lib', 'status_name',
           'status_string', 'setting_name', 'tensor_key', 'DTYPES', 'OPS', 'STATUS_NAMES']
__version__ = '0.1.0'
