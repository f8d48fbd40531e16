"""A subsample: its indices and its gathered rows.

Rows are gathered once when they enter the subsample; a block update re-gathers
only the rows of the changed block (docs/design.md, "Rows on demand"), so an HMC-ECS iteration
touches m/G new rows, not m. A batch made by a block update says which batch it
came from and which positions changed (:class:`Batch`), so that per-row
quantities cached for the old batch (a distributional regression's terms at θ*,
``SubsampledTarget``) are computed again for those positions only.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

import numpy as np

__all__ = ["Batch", "GatheredOnUse", "RecentBatches", "Subsample"]

_tokens = itertools.count()


class Batch(tuple):
    """The rows of a subsample: one array per row leaf, never changed in place.

    ``token`` names this batch; a batch made from another by replacing the rows at ``changed``
    (a slice) records the other's token as ``parent_token``. Tokens, not references: a chain of
    references would keep every earlier batch alive. ``rows``: the data's row indices of the
    batch's rows, in order, where known (per-row quantities kept for all N rows are read with them).
    """

    def __new__(cls, arrays, *, parent_token=None, changed=None, rows=None):
        batch = super().__new__(cls, arrays)
        batch.token, batch.parent_token, batch.changed = next(_tokens), parent_token, changed
        batch.rows = rows
        return batch


class RecentBatches:
    """Values derived from the :attr:`size` batches used last, each under a key: a proposed subsample's
    batch finds its parent's (the current subsample's, used by every proposal from it) by token.
    """

    size = 4

    def __init__(self):
        self._entries = []  # (batch, key, value), the one used last at the end

    def get(self, batch, key):
        """The value of ``batch`` itself under ``key``, or None."""
        return self._use(lambda b, k: b is batch and k == key)

    def parent(self, batch, key):
        """The value under ``key`` of the batch ``batch`` was made from by a block update, or None."""
        token = getattr(batch, "parent_token", None)
        if token is None:
            return None
        return self._use(lambda b, k: getattr(b, "token", None) == token and k == key)

    def put(self, batch, key, value):
        self._entries = [*self._entries[1 - self.size:], (batch, key, value)]

    def _use(self, matches):
        for i, entry in enumerate(self._entries):
            if matches(entry[0], entry[1]):
                self._entries.append(self._entries.pop(i))
                return entry[2]
        return None


@dataclass
class Subsample:
    """Indices ``idx`` (m,) and the rows ``batch`` (tuple of arrays, one per row leaf)."""

    idx: np.ndarray
    batch: tuple

    @classmethod
    def gather(cls, tall, idx) -> Subsample:
        idx = np.asarray(idx, dtype=int)
        return cls(idx=idx, batch=Batch(tall.gather(idx), rows=idx))

    @property
    def size(self) -> int:
        return int(self.idx.shape[0])

    def with_block(self, tall, new_idx, block: slice, offset: int = 0) -> Subsample:
        """A new subsample equal to this one except the positions ``block`` of ``new_idx``.

        ``offset``: the batch holds that many other rows before the subsample's (the rows computed
        exactly, :meth:`with_exact`), which stay.
        """
        rows = tall.gather(new_idx[block])
        arrays = tuple(a.copy() for a in self.batch)
        changed = slice(block.start + offset, block.stop + offset)
        for full, part in zip(arrays, rows):
            full[changed] = part
        parent = getattr(self.batch, "token", None)
        indices = getattr(self.batch, "rows", None)
        if indices is not None:
            indices = indices.copy()
            indices[changed] = new_idx[block]
        return Subsample(idx=np.asarray(new_idx), batch=Batch(arrays, parent_token=parent, changed=changed,
                                                              rows=indices))

    @classmethod
    def with_exact(cls, tall, exact_batch, idx) -> Subsample:
        """The rows ``idx`` after the rows ``exact_batch`` in one batch; ``idx`` names the former only."""
        idx = np.asarray(idx, dtype=int)
        rows = tall.gather(idx)
        exact_rows = getattr(exact_batch, "rows", None)
        arrays = tuple(np.concatenate([e, r]) for e, r in zip(exact_batch, rows, strict=True))
        together = None if exact_rows is None else np.concatenate([exact_rows, idx])
        return cls(idx=idx, batch=Batch(arrays, rows=together))


class GatheredOnUse(Subsample):
    """A :class:`Subsample` known by its indices ``idx``, its rows gathered by ``gather(idx)`` (a
    Subsample) when ``batch`` is first read: a sampler that keeps the estimate's arguments on the
    rows itself (:class:`~pymc_subsample.kernels.eta_nuts.EtaNUTS`) never reads them, where
    gathering them costs 20-40 µs an accepted proposal.
    """

    def __init__(self, idx, gather):
        self.idx, self._gather, self._batch = idx, gather, None

    @property
    def batch(self):
        if self._batch is None:
            self._batch = self._gather(self.idx).batch
        return self._batch

    def __deepcopy__(self, memo):
        # PyMC deep-copies a step's sampling state (this subsample among it) at every pm.sample and
        # chain: the indices are copied, the gatherer shared, not the data and model it reads (a
        # copy of those took 0.5-1 s a call at 200,000 rows, d = 31)
        copied = GatheredOnUse(self.idx.copy(), self._gather)
        copied._batch = copy.deepcopy(self._batch, memo)
        return copied
