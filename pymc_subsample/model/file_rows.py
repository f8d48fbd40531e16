"""Rows of arrays stored in files, read with ``os.pread``: a ``.npy`` file (:class:`NpyRows`) and an
uncompressed zarr array in a local store (:class:`ZarrChunkRows`).

A :class:`~pymc_subsample.model.sources.RowSource` reads them row by row, without a chunk cache:
a row sits at a known offset of its file, so a random row costs one page read, and the operating
system's page cache is their chunk cache. Runs of consecutive rows in one file are read in one call.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np

__all__ = ["NpyRows", "PreadRows", "ZarrChunkRows", "direct_if_possible"]


class PreadRows:
    """Rows of a C-ordered array whose rows are stored ``rows_per_file`` to a file, read with
    ``os.preadv``: ``array[a:b]`` and ``array[idx]`` (``idx`` sorted and unique, as
    :meth:`~pymc_subsample.model.sources.RowSource.take` passes it). A subclass sets ``shape``,
    ``dtype``, ``row_bytes`` and ``rows_per_file`` and fills ``out`` with the rows from row
    ``start``, all in one file, in ``_read_into(out, start)``.

    Each run of consecutive rows is read straight into the result, allocated once: a block update's
    handful of random rows costs a system call each and no other copy.
    """

    # measured: with a bytes object per run (os.pread), then np.frombuffer, np.split and
    # np.concatenate, 10 random rows of X and of y cost 0.32 ms, twice the in-memory gather, and an
    # HMC-ECS iteration from an uncompressed store at 2·10⁷ rows 1.15× (CPU) that in memory at 10⁵

    shape: tuple
    dtype: np.dtype
    row_bytes: int
    rows_per_file: int

    def _read_into(self, out, start) -> None:
        raise NotImplementedError

    def _pread_into(self, fd, out, offset) -> None:
        view = out.reshape(-1).view(np.uint8)
        if os.preadv(fd, [view], offset) != view.nbytes:
            raise OSError(f"a file of this {type(self).__name__} is shorter than its shape {self.shape} "
                          "says; it was truncated or is still being written.")

    def __getitem__(self, key):
        size = self.rows_per_file
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.shape[0])
            out = np.empty((max(stop - start, 0), *self.shape[1:]), dtype=self.dtype)
            a = start
            while a < stop:
                b = min((a // size + 1) * size, stop)
                self._read_into(out[a - start:b - start], a)
                a = b
            return out
        idx = np.asarray(key, dtype=np.int64)
        out = np.empty((idx.size, *self.shape[1:]), dtype=self.dtype)
        if idx.size == 0:
            return out
        breaks = np.flatnonzero((np.diff(idx) != 1) | (np.diff(idx // size) != 0)) + 1
        edges = [0, *breaks.tolist(), idx.size]
        for a, b, row in zip(edges[:-1], edges[1:], idx[edges[:-1]].tolist()):
            self._read_into(out[a:b], row)
        return out


class NpyRows(PreadRows):
    """Rows of a C-ordered ``.npy`` file read with ``os.pread``, not mapped into memory.

    A memmap would do the same reads, but every page a full pass touches stays mapped and counts
    towards the process's resident memory (the whole file after one pass); ``pread`` copies only
    what is asked for.
    """

    def __init__(self, path):
        self.filename = str(path)
        with open(self.filename, "rb") as f:
            version = np.lib.format.read_magic(f)
            reader = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = reader(f)
            self.offset = f.tell()
        if fortran and len(shape) > 1:
            raise ValueError(f"{self.filename!r} is stored in Fortran order; save it C-ordered "
                             "(np.save(path, np.ascontiguousarray(a))) so that rows are contiguous.")
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.rows_per_file = max(self.shape[0], 1)
        self._fd = None

    def _read_into(self, out, start) -> None:
        if self._fd is None:
            self._fd = os.open(self.filename, os.O_RDONLY)
        self._pread_into(self._fd, out, self.offset + start * self.row_bytes)

    def __getstate__(self):
        return dict(self.__dict__, _fd=None)

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)


def direct_if_possible(array):
    """``array`` as :class:`ZarrChunkRows` when its rows can be read alone, else unchanged."""
    # measured: zarr's own read decoded the whole chunk, ~0.6 ms a call in zarr-python 3, which made
    # an HMC-ECS iteration 6.8× slower at 10⁸ rows than at 10⁵
    return ZarrChunkRows(array) if ZarrChunkRows.supports(array) else array


class ZarrChunkRows(PreadRows):
    """Rows of an uncompressed zarr array in a local directory store, read with ``os.pread``.

    Such a chunk's file is the C-ordered bytes of the chunk (edge chunks padded to full size), so
    row r of chunk k = r // C sits at byte (r − kC)·row_bytes of the file zarr names for chunk
    (k, 0, …). Only arrays chunked along the rows alone, little-endian or single-byte numbers,
    with no compressor, filter or sharding, qualify (:meth:`supports`); a chunk file that was
    never written holds the fill value. Open files are kept in a small LRU.
    """

    MAX_OPEN_FILES = 64

    def __init__(self, array):
        self.zarr_array = array
        self.shape = tuple(int(n) for n in array.shape)
        self.dtype = np.dtype(array.dtype)
        self.chunks = tuple(int(c) for c in array.chunks)
        self.store = array.store
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.rows_per_file = self.chunks[0]
        self._fill = array.metadata.fill_value
        self._root = Path(str(array.store.root))
        self._files = OrderedDict()

    @staticmethod
    def supports(array) -> bool:
        try:
            metadata = array.metadata
            serializer = getattr(array, "serializer", None)
            uncompressed = (len(array.compressors) == 0 and len(array.filters) == 0
                            and (type(serializer).__name__ == "BytesCodec" if metadata.zarr_format == 3
                                 else serializer is None and getattr(metadata, "order", "C") == "C"))
            little = np.dtype(array.dtype).byteorder in "<|" or (
                np.dtype(array.dtype).byteorder == "=" and np.little_endian)
            if metadata.zarr_format == 3:
                little = little and str(getattr(serializer, "endian", "little")).endswith("little")
            return bool(type(array.store).__name__ == "LocalStore" and uncompressed and little
                        and tuple(array.chunks[1:]) == tuple(array.shape[1:])
                        and np.dtype(array.dtype).kind in "biuf")
        except (AttributeError, TypeError, ValueError):  # another zarr layout: read through zarr
            return False

    def _chunk_file(self, k):
        if k in self._files:
            self._files.move_to_end(k)
            return self._files[k]
        key = self.zarr_array.metadata.encode_chunk_key((k,) + (0,) * (len(self.shape) - 1))
        path = self._root / self.zarr_array.path / key if self.zarr_array.path else self._root / key
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = None  # never written: the fill value
        self._files[k] = fd
        while len(self._files) > self.MAX_OPEN_FILES:
            old = self._files.popitem(last=False)[1]
            if old is not None:
                os.close(old)
        return fd

    def _read_into(self, out, start) -> None:
        k, offset = divmod(start, self.chunks[0])
        fd = self._chunk_file(k)
        if fd is None:
            out[...] = self._fill
        else:
            self._pread_into(fd, out, offset * self.row_bytes)

    def __getstate__(self):
        return dict(self.__dict__, _files=OrderedDict())

    def __del__(self):
        for fd in getattr(self, "_files", {}).values():
            if fd is not None:
                os.close(fd)
