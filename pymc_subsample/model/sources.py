"""Row sources: arrays whose rows stay where they are (disk, zarr, Dask) and are read on demand.

A :class:`RowSource` wraps a ``.npy`` file or memmap, a zarr array, a Dask array, numeric columns
of a Parquet file or dataset (:mod:`~pymc_subsample.model.parquet_rows`) or any array-like with
``shape``, ``dtype`` and slicing, and offers the two reads a tall model needs:

- ``rows(start, stop)``: contiguous rows for a streamed full pass, read one native chunk at a
  time (memory bounded by the pass's chunk) and checked for NaN chunk by chunk;
- ``take(idx)``: the rows of a subsample. Indices are sorted and grouped by native chunk, and
  decoded chunks are kept in a small LRU cache, so a block update of an HMC-ECS subsample (m/G
  new rows) reads few chunks. ``.npy`` files and memmaps are read row by row (runs of
  consecutive rows in one read): a random row costs one page read, and the operating system's
  page cache is their chunk cache. So are uncompressed zarr arrays in a local store
  (:mod:`~pymc_subsample.model.file_rows`): a row sits at a known offset of its chunk's file, so
  it is read alone, where zarr itself would decode the whole chunk for every read, at a cost per
  iteration that grows with the array. Compressed chunks (and Parquet row groups) must be decoded
  whole; they go through the chunk cache, and :mod:`~pymc_subsample.model.read_cost` says before
  sampling when that makes random rows slow.

Nothing ever loads the N rows. A source pickles by reference (path, store), never by value, so
that full passes can be shipped to Dask workers.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np

from pymc_subsample.model.file_rows import NpyRows, ZarrChunkRows, direct_if_possible
from pymc_subsample.model.parquet_rows import ParquetRows, is_parquet_path

__all__ = ["RowSource", "as_row_source"]

DEFAULT_CACHE_BYTES = 64 * 2**20
#: kinds read row by row without a chunk cache (random access costs a page read)
_DIRECT = ("npy", "memmap")
_DEFAULT_CHUNK_ROWS = 20_000


class RowSource:
    """Rows of an out-of-memory array, read on demand (see the module docstring).

    Parameters
    ----------
    array : array-like
        Supports ``shape``, ``dtype`` and ``array[a:b]``; a Dask array, zarr array or memmap.
    name : str
        Used in error messages.
    kind : {"npy", "memmap", "zarr", "dask", "parquet", "array"}
    boundaries : ndarray of int
        Native chunk edges along the rows, from 0 to N.
    description : dict
        What ``InferenceData.attrs`` keeps instead of the rows (kind, path, shape, dtype).
    cache_bytes : int
        Size of the LRU cache of decoded chunks.
    """

    def __init__(self, array, name, kind, boundaries, description, cache_bytes=DEFAULT_CACHE_BYTES):
        self.array = array
        self.name = name
        self.kind = kind
        self.boundaries = np.asarray(boundaries, dtype=np.int64)
        self.description = description
        self.cache_bytes = int(cache_bytes)
        self._cache = OrderedDict()
        self._cached_bytes = 0
        self.chunks_read = 0  # native chunks decoded so far (for tests and benchmarks)

    @property
    def direct(self) -> bool:
        """Rows addressable one by one (``.npy``, memmap, uncompressed local zarr): no chunk cache."""
        return self.kind in _DIRECT or isinstance(self.array, ZarrChunkRows)

    # ------------------------------------------------------------------ array protocol
    @property
    def shape(self) -> tuple:
        return tuple(int(s) for s in self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_rows(self) -> int:
        return self.shape[0]

    def __len__(self) -> int:
        return self.n_rows

    def __getitem__(self, key):
        """Rows ``start:stop`` (a slice with step 1) or the rows of an index array."""
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n_rows)
            if step != 1:
                raise IndexError("a row source is read in contiguous slices or by index arrays")
            return self.rows(start, stop)
        return self.take(key)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"pms.Data {self.name!r} stays where it is ({self.description.get('path', self.kind)}) and "
            "is never loaded whole; read rows with source[a:b] or source[idx]."
        )

    # ------------------------------------------------------------------ reads
    def rows(self, start, stop) -> np.ndarray:
        """Contiguous rows, one native chunk at a time, each checked for NaN (names the chunk)."""
        if self.direct:
            out = np.array(self.array[start:stop])
            self._check_finite(out, start, stop)
            return out
        first, last = self._chunk_of(start), self._chunk_of(max(stop - 1, start))
        parts = []
        for k in range(first, last + 1):
            a, b = self.boundaries[k], self.boundaries[k + 1]
            block = self._chunk(k)
            parts.append(block[max(start, a) - a : min(stop, b) - a])
        return np.concatenate(parts) if len(parts) > 1 else np.array(parts[0])

    def take(self, idx) -> np.ndarray:
        """Rows ``idx`` (any order, repeats allowed): sorted, grouped by native chunk, cached."""
        idx = np.asarray(idx, dtype=np.int64)
        unique, inverse = np.unique(idx, return_inverse=True)
        if unique.size and (unique[0] < 0 or unique[-1] >= self.n_rows):
            raise IndexError(f"row index out of range 0..{self.n_rows - 1} for pms.Data {self.name!r}")
        if self.direct:
            out = np.asarray(self.array[unique])
            self._check_finite(out, None, None)
            return out[inverse.reshape(idx.shape)]
        out = np.empty((unique.size, *self.shape[1:]), dtype=self.dtype)
        chunk_ids = np.searchsorted(self.boundaries, unique, side="right") - 1
        edges = np.flatnonzero(np.diff(chunk_ids)) + 1
        for group in np.split(np.arange(unique.size), edges):
            if group.size:
                k = int(chunk_ids[group[0]])
                out[group] = self._chunk(k)[unique[group] - self.boundaries[k]]
        return out[inverse.reshape(idx.shape)]

    def _chunk_of(self, row) -> int:
        return int(np.searchsorted(self.boundaries, row, side="right") - 1)

    def _chunk(self, k) -> np.ndarray:
        """Native chunk ``k``, decoded once and kept in the LRU cache."""
        if k in self._cache:
            self._cache.move_to_end(k)
            return self._cache[k]
        a, b = int(self.boundaries[k]), int(self.boundaries[k + 1])
        block = self.array[a:b]
        block = np.asarray(block.compute(scheduler="sync") if self.kind == "dask" else block)
        self.chunks_read += 1
        self._check_finite(block, a, b, chunk=k)
        self._cache[k] = block
        self._cached_bytes += block.nbytes
        while len(self._cache) > 1 and self._cached_bytes > self.cache_bytes:
            self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return block

    def _check_finite(self, block, start, stop, chunk=None):
        if np.issubdtype(block.dtype, np.floating) and not np.all(np.isfinite(block)):
            where = f"rows {start}..{stop - 1}" if start is not None else "a gathered subsample"
            if chunk is not None:
                where = f"chunk {chunk} ({where})"
            raise ValueError(
                f"pms.Data {self.name!r} contains NaN or infinite values in {where}. Drop or impute "
                "those rows in the source; subsampling needs complete rows."
            )

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        state = dict(self.__dict__, _cache=OrderedDict(), _cached_bytes=0)
        if self.kind == "memmap":  # by reference: the path, never the rows
            state["array"] = (self.array.filename, self.array.dtype, self.array.shape, self.array.offset)
        return state

    def __setstate__(self, state):
        if state["kind"] == "memmap":
            filename, dtype, shape, offset = state["array"]
            state["array"] = np.memmap(filename, dtype=dtype, mode="r", shape=shape, offset=offset)
        self.__dict__.update(state)


def as_row_source(source, name, *, chunk_rows=None, cache_bytes=DEFAULT_CACHE_BYTES,
                  columns=None) -> RowSource:
    """A :class:`RowSource` from a path (``.npy``, a zarr store, a Parquet file or dataset with
    ``columns``), a memmap, zarr or Dask array.
    """
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0:
        raise ValueError(f"pms.Data {name!r}: cache_bytes must be a number of bytes >= 0; got "
                         f"{cache_bytes!r}.")
    if isinstance(source, (str, os.PathLike)):
        source = _open_path(Path(source), name, columns)
    elif _kind(source) == "zarr":
        source = direct_if_possible(source)
    if columns is not None and not isinstance(source, ParquetRows):
        raise ValueError(
            f"pms.Data {name!r}: columns= selects columns of a Parquet file or dataset; this source is a "
            f"{type(source).__name__}. Select its columns before passing it (e.g. array[:, [0, 2]] on "
            "a Dask array)."
        )
    kind, boundaries, description = _describe(source, name, chunk_rows)
    if not (np.issubdtype(np.dtype(source.dtype), np.number) or np.dtype(source.dtype) == bool):
        raise TypeError(
            f"pms.Data {name!r} has dtype {source.dtype}, which is not numeric; convert the column to "
            "numbers (e.g. category codes) before sampling."
        )
    if len(source.shape) < 1:
        raise ValueError(f"pms.Data {name!r} must have a leading row axis; got a scalar.")
    return RowSource(source, name, kind, boundaries, description, cache_bytes)


def _open_path(path, name, columns):
    if not path.exists():
        raise FileNotFoundError(
            f"pms.Data {name!r}: {str(path)!r} does not exist. Give the path of a .npy file, a zarr "
            "store or a Parquet file or dataset, or an array object."
        )
    if path.suffix == ".npy":
        return NpyRows(path)
    if is_parquet_path(path):
        return ParquetRows(path, columns, name)
    try:
        import zarr
    except ImportError as err:  # pragma: no cover - depends on the optional extra
        raise ImportError(
            f"Reading {str(path)!r} as a zarr store needs zarr: pip install 'pymc_subsample[scale]'."
        ) from err
    return direct_if_possible(zarr.open_array(str(path), mode="r"))


def _describe(source, name, chunk_rows):
    shape = tuple(int(s) if s == s else -1 for s in source.shape)
    kind = _kind(source)
    n = shape[0] if shape else 0
    description = {"kind": kind, "shape": list(shape), "dtype": str(np.dtype(source.dtype))}
    if kind == "dask":
        if any(np.isnan(c) for dim in source.chunks for c in dim):
            raise ValueError(
                f"pms.Data {name!r} is a Dask array with unknown chunk sizes (NaN); call "
                "`.compute_chunk_sizes()` on it (or `to_dask_array(lengths=True)` on a dataframe)."
            )
        boundaries = np.concatenate([[0], np.cumsum(source.chunks[0])])
    elif kind == "parquet":
        boundaries = source.boundaries
        description.update(path=source.path, columns=source.columns, compression=source.compression)
    elif kind == "zarr":
        step = chunk_rows or source.chunks[0]
        boundaries = np.append(np.arange(0, n, step), n)
        description["path"] = str(getattr(source.store, "root", source.store))
        description["read"] = "rows from chunk files" if isinstance(source, ZarrChunkRows) else "whole chunks"
    else:
        boundaries = np.append(np.arange(0, n, chunk_rows or _DEFAULT_CHUNK_ROWS), n)
        if kind in _DIRECT:
            description["path"] = str(source.filename)
    return kind, boundaries, description


def _kind(source) -> str:
    if isinstance(source, NpyRows):
        return "npy"
    if isinstance(source, np.memmap):
        return "memmap"
    if isinstance(source, ParquetRows):
        return "parquet"
    module = type(source).__module__
    if module.startswith("dask."):
        return "dask"
    if module.startswith("zarr.") or isinstance(source, ZarrChunkRows):
        return "zarr"
    if all(hasattr(source, attr) for attr in ("shape", "dtype", "__getitem__")):
        return "array"
    raise TypeError(
        f"Cannot read rows from a {type(source).__name__}; pms.Data takes a .npy path, a zarr store "
        "path or array, a Parquet path with columns=, a NumPy memmap, a Dask array, or an array-like "
        "with shape, dtype and slicing."
    )
