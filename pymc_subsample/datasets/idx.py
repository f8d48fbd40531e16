"""The IDX format of the MNIST files."""

from __future__ import annotations

import numpy as np

from pymc_subsample.datasets._common import PathLike, read_bytes

__all__ = ["read_idx"]

#: NumPy dtype of each data-type code of the IDX header (big-endian on disk)
_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), plain or ``.gz``/``.bz2``.

    The header is two zero bytes, a data-type code (``0x08`` uint8, ``0x09``
    int8, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E`` float64),
    the number of dimensions, then one big-endian uint32 per dimension,
    followed by the big-endian data.

    Parameters
    ----------
    path : str or os.PathLike
        The IDX file.

    Returns
    -------
    numpy.ndarray
        The array with the stored shape, in native byte order.

    Raises
    ------
    ValueError
        If the magic number is invalid or the data size does not match.
    """
    raw = read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"'{path}' is not an IDX file (bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"'{path}': unknown IDX data type code 0x{code:02X}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"'{path}': truncated IDX header")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header != count * dtype.itemsize:
        raise ValueError(
            f"'{path}': IDX header announces shape {shape} ({count * dtype.itemsize} "
            f"bytes) but the file holds {len(raw) - header} data bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header)
    return data.astype(dtype.newbyteorder("="), copy=True).reshape(shape)
