"""The cost of a random row of a ``pms.Data`` source, known before the first draw.

A subsampling step reads a few new rows per iteration, each likely in another native chunk (an
HMC-ECS block update: about m/G rows). A source whose rows are read alone (``.npy``, memmap,
uncompressed local zarr) or that sits in memory makes that cheap at any N. A compressed zarr chunk,
a Parquet row group or a Dask chunk is decoded whole for any of its rows, and kept only while the
row cache (``cache_bytes``) holds it: once the decoded rows outgrow the cache, nearly every new row
costs one whole-chunk decode. :func:`read_cost` decides from the metadata first (chunk bytes, the
cache's share of the chunks) and only then times one random row; :func:`check_read_cost` warns with
the figure and the one-call remedy, :func:`~pymc_subsample.model.sampling_store.to_sampling_store`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["SLOW_ROW_SECONDS", "TIMED_CHUNK_BYTES", "ReadCost", "SlowRowsWarning", "check_read_cost",
           "read_cost",
           "size_text", "slow_rows_message"]

#: a random row that costs more than this (expected, cache misses counted) makes the warning fire:
#: an HMC-ECS iteration of a GLM on m = 1000 rows takes ~10 ms and reads ~10 new rows
SLOW_ROW_SECONDS = 2e-3
#: one random row is timed only when its chunk decodes to at most this many bytes; a larger chunk is
#: judged from the metadata alone (it is larger than any sensible cache)
TIMED_CHUNK_BYTES = 512 * 2**20


class SlowRowsWarning(UserWarning):
    """Random rows of a ``pms.Data`` source are slow to read: sampling will spend its time decoding.

    The message gives the measured figure and the call that copies the rows into a store whose rows
    are read alone (:func:`pymc_subsample.to_sampling_store`).
    """


@dataclass(frozen=True)
class ReadCost:
    """What a random row of a source costs.

    Attributes
    ----------
    chunk_bytes : int
        Bytes of the largest native chunk once decoded.
    n_chunks : int
    cache_bytes : int
    cached_chunks : int
        How many decoded chunks the cache holds (at least one).
    row_seconds : float or None
        Measured seconds of one random row read on a cold cache (one chunk decoded), or None when
        the chunk was too large to time.
    codec : str
        The source's compression, as far as its metadata says.
    """

    chunk_bytes: int
    n_chunks: int
    cache_bytes: int
    cached_chunks: int
    row_seconds: float | None
    codec: str

    @property
    def miss_fraction(self) -> float:
        """The share of random rows whose chunk is not in the cache once it is full."""
        return max(0.0, 1.0 - self.cached_chunks / self.n_chunks)

    @property
    def expected_row_seconds(self) -> float | None:
        return None if self.row_seconds is None else self.row_seconds * self.miss_fraction

    @property
    def slow(self) -> bool:
        """Chunks larger than the cache (known to be compressed, or too large to time), or a random
        row measured slower than :data:`SLOW_ROW_SECONDS` on average.
        """
        if self.miss_fraction == 0.0:
            return False
        # past the cache, every new row in another chunk decodes a whole chunk; a chunk of unknown
        # codec (a Dask graph, an array-like) may be a slice of memory, so its measured time decides
        if self.chunk_bytes > self.cache_bytes and (self.codec not in ("none", "unknown")
                                                    or self.row_seconds is None):
            return True
        return self.row_seconds is not None and self.expected_row_seconds > SLOW_ROW_SECONDS


def read_cost(source, *, seed=0) -> ReadCost | None:
    """The cost of a random row of a :class:`~pymc_subsample.model.sources.RowSource`.

    None for sources whose rows are read alone or sit in memory (``.npy``, memmap, uncompressed
    local zarr, NumPy arrays): nothing to check. Otherwise one random row is read and timed, unless
    the metadata already settle it: a source whose decoded chunks all fit the cache needs no timing.

    Parameters
    ----------
    source : RowSource
    seed : int
        Which row is timed.
    """
    if source.direct or isinstance(source.array, np.ndarray) or source.n_rows == 0:
        return None
    edges = source.boundaries
    row_bytes = int(np.prod(source.shape[1:], dtype=np.int64)) * source.dtype.itemsize
    chunk_bytes = int(np.max(np.diff(edges))) * row_bytes
    n_chunks = len(edges) - 1
    cached = max(1, source.cache_bytes // max(chunk_bytes, 1))
    codec = _codec(source)
    if cached >= n_chunks:  # the whole source fits the cache: each chunk is decoded once
        return ReadCost(chunk_bytes, n_chunks, source.cache_bytes, n_chunks, None, codec)
    seconds = None
    if chunk_bytes <= TIMED_CHUNK_BYTES:
        row = int(np.random.default_rng(seed).integers(source.n_rows))
        # read past the cache (and its counters): the cost of a miss is what is asked
        start = time.perf_counter()
        block = source.array[row:row + 1]
        if source.kind == "dask":
            block.compute(scheduler="sync")
        seconds = time.perf_counter() - start
    return ReadCost(chunk_bytes, n_chunks, source.cache_bytes, int(cached), seconds, codec)


def check_read_cost(source, remedy_source="source") -> ReadCost | None:
    """Warn (:class:`SlowRowsWarning`) when random rows of ``source`` are slow; returns the cost.

    Parameters
    ----------
    source : RowSource
    remedy_source : str
        How the warning's remedy names the source (a path's repr, or ``source``).
    """
    cost = read_cost(source)
    if cost is not None and cost.slow:
        warnings.warn(slow_rows_message(source, cost, remedy_source), SlowRowsWarning, stacklevel=3)
    return cost


def slow_rows_message(source, cost: ReadCost, remedy_source="source") -> str:
    rows_per_chunk = int(np.max(np.diff(source.boundaries)))
    if cost.chunk_bytes > cost.cache_bytes:
        held = f"larger than the {size_text(cost.cache_bytes)} row cache (cache_bytes)"
    else:
        held = (f"and the {size_text(cost.cache_bytes)} row cache holds {cost.cached_chunks:,} of "
                f"{cost.n_chunks:,}")
    chunk = (f"each row decodes a whole chunk of {rows_per_chunk:,} rows ({size_text(cost.chunk_bytes)} "
             f"decoded, codec {cost.codec}), {held}")
    if cost.row_seconds is None:
        figure = f"random rows are slow to read: {chunk}"
    else:
        figure = (f"a random row costs {1e3 * cost.expected_row_seconds:,.1f} ms on average to read (one "
                  f"row read on a cold cache took {1e3 * cost.row_seconds:,.1f} ms): {chunk}")
    name = source.name
    return (
        f"pms.Data {name!r}: {figure}. Sampling reads a few new rows per iteration, each likely in "
        "another chunk. Copy the rows once into an uncompressed store whose rows are read alone: "
        f"pms.Data({name!r}, pms.to_sampling_store({remedy_source}, {name + '_rows.zarr'!r})), or "
        f"pms.Data({name!r}, {remedy_source}, local_copy=True)."
    )


def size_text(n_bytes) -> str:
    """``n_bytes`` in KiB, MiB or GiB, as the cache's size is set (64 MiB by default)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def _codec(source) -> str:
    """The source's compression as its metadata says it, or "unknown" (a Dask graph, an array-like)."""
    if source.kind == "parquet":
        return str(source.description.get("compression", "unknown")).lower()
    if source.kind == "zarr":
        try:
            codecs = [*source.array.filters, *source.array.compressors]
        except (AttributeError, TypeError):
            return "unknown"
        names = [getattr(c, "codec_id", None) or type(c).__name__.removesuffix("Codec").lower()
                 for c in codecs]
        return "+".join(str(n) for n in names) or "none"
    return "unknown"
