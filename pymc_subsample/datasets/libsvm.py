"""The LIBSVM / SVMlight sparse text format, read into dense arrays."""

from __future__ import annotations

import warnings

import numpy as np

from pymc_subsample.datasets._common import PathLike, read_bytes

__all__ = ["read_libsvm"]


def read_libsvm(path: PathLike, n_features: int | None = None):
    """Read a LIBSVM / SVMlight sparse text file into dense arrays.

    Each line is ``label idx:value idx:value ...`` with 1-based feature
    indices; omitted features are zero. Blank lines and lines starting with
    ``#`` are skipped, as are trailing ``# comment`` parts of a line.

    Parameters
    ----------
    path : str or os.PathLike
        The file; ``.bz2``, ``.gz`` and ``.xz`` files are decompressed.
    n_features : int, optional
        Number of columns of ``X``. Defaults to the largest index present.

    Returns
    -------
    X : numpy.ndarray
        Dense ``float64`` array of shape ``(N, p)``.
    y : numpy.ndarray
        ``float64`` labels of shape ``(N,)``, as written in the file.

    Raises
    ------
    ValueError
        If the file is malformed, an index is below 1, or an index exceeds
        ``n_features``.
    """
    text = read_bytes(path)
    lines = []
    for line in text.splitlines():
        if b"#" in line:
            line = line.split(b"#", 1)[0]
        line = line.strip()
        if line:
            lines.append(line)
    n = len(lines)
    nnz = np.fromiter((ln.count(b":") for ln in lines), dtype=np.int64, count=n)
    joined = b" ".join(lines).replace(b":", b" ").decode("ascii", errors="replace")
    expected = n + 2 * int(nnz.sum())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            values = np.fromstring(joined, dtype=np.float64, sep=" ")
    except (ValueError, DeprecationWarning) as exc:
        raise ValueError(f"malformed LIBSVM file '{path}': {exc}") from None
    if values.size != expected:
        raise ValueError(
            f"malformed LIBSVM file '{path}': expected {expected} numbers, "
            f"parsed {values.size}"
        )
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        starts[1:] = np.cumsum(1 + 2 * nnz[:-1])
    y = values[starts].copy()
    is_label = np.zeros(values.size, dtype=bool)
    is_label[starts] = True
    pairs = values[~is_label].reshape(-1, 2)
    idx_f = pairs[:, 0]
    idx = idx_f.astype(np.int64)
    if np.any(idx != idx_f):
        raise ValueError(f"malformed LIBSVM file '{path}': non-integer feature index")
    if idx.size and idx.min() < 1:
        raise ValueError(
            f"LIBSVM file '{path}' has feature index {idx.min()}; indices must start at 1"
        )
    max_idx = int(idx.max()) if idx.size else 0
    if n_features is None:
        n_features = max_idx
    elif max_idx > n_features:
        raise ValueError(
            f"LIBSVM file '{path}' has feature index {max_idx} > n_features={n_features}"
        )
    X = np.zeros((n, int(n_features)), dtype=np.float64)
    rows = np.repeat(np.arange(n), nnz)
    X[rows, idx - 1] = pairs[:, 1]
    return X, y
