"""Fashion-MNIST from its idx files, for the Python examples (mpi4py_fmnist.py,
torch_ddp_fmnist.py): Debian's dataset-fashion-mnist installs them in DATA_DIR."""
import gzip
import os
import struct

import numpy as np

DATA_DIR = '/usr/share/datasets/fashion-mnist'


def read_idx(path):
    """An idx file (gzip or not) as a numpy array: the magic gives the type and the rank."""
    opener = gzip.open if path.endswith('.gz') else open
    try:
        with opener(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        raise SystemExit(f'{path}: not found; install the dataset with: '
                         'apt-get install dataset-fashion-mnist') from None
    zero, dtype, ndim = struct.unpack('>HBB', data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f'{path}: not an idx file of unsigned bytes')
    shape = struct.unpack('>' + 'I' * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(data_dir, kind, limit):
    """Images as float32 rows in [0, 1] and labels, the first @limit of them (0: all)."""
    prefix = 'train' if kind == 'train' else 't10k'
    x = read_idx(os.path.join(data_dir, f'{prefix}-images-idx3-ubyte.gz'))
    y = read_idx(os.path.join(data_dir, f'{prefix}-labels-idx1-ubyte.gz'))
    if limit:
        x, y = x[:limit], y[:limit]
    return x.reshape(len(x), -1).astype(np.float32) / 255.0, y.astype(np.int64)


def add_training_args(ap):
    """The options both examples share: epochs, batch, optimizer, data and seed."""
    ap.add_argument('--epochs', type=int, default=5)
    ap.add_argument('--batch', type=int, default=128, help='global batch, split over the ranks')
    ap.add_argument('--lr', type=float, default=0.05)
    ap.add_argument('--momentum', type=float, default=0.9)
    ap.add_argument('--train-limit', type=int, default=0, help='first N training images (0: all)')
    ap.add_argument('--test-limit', type=int, default=0, help='first N test images (0: all)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--data', default=DATA_DIR, help='folder of the four idx .gz files')
