"""Full-data passes in row chunks, so memory is bounded by the chunk, not by N."""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_CHUNK_SIZE", "chunked_sum"]

DEFAULT_CHUNK_SIZE = 20_000


def chunked_sum(tall, fn, theta, *, rows=None, chunk_size=DEFAULT_CHUNK_SIZE):
    """Sum ``fn(theta, batch)`` (a tuple of arrays) over row chunks of ``tall``.

    Parameters
    ----------
    tall : TallModel
    fn : callable
        ``fn(theta, batch) -> tuple of arrays``, each a sum over the rows of ``batch``.
    theta : ndarray
    rows : array of int, optional
        Restrict the pass to these rows (gathered chunk by chunk).
    chunk_size : int
        Rows per chunk; contiguous chunks are views, so no copy of the data is made.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    total = None
    n = tall.n_rows if rows is None else len(rows)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        batch = tall.row_slice(start, stop) if rows is None else tall.gather(rows[start:stop])
        parts = fn(theta, batch)
        total = (
            [np.array(p, dtype=float) for p in parts]
            if total is None
            else [t + p for t, p in zip(total, parts)]
        )
    return tuple(total)
