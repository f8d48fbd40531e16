"""A subsample: its indices, its gathered rows and the proxy terms of those rows.

Rows are gathered once when they enter the subsample; a block update re-gathers
only the rows of the changed block (DESIGN step 2), so an HMC-ECS iteration
touches m/G new rows, not m.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_subsample.control_variates.taylor import RowProxyTerms

__all__ = ["Subsample"]


@dataclass
class Subsample:
    """Indices ``idx`` (m,), row ``batch`` (tuple of arrays) and proxy ``terms`` at θ*."""

    idx: np.ndarray
    batch: tuple
    terms: RowProxyTerms

    @classmethod
    def gather(cls, tall, proxy, idx) -> Subsample:
        idx = np.asarray(idx, dtype=int)
        batch = tall.gather(idx)
        if idx.size == 0:  # the block-Poisson estimator may draw no mini-batch at all
            return cls(idx=idx, batch=batch, terms=RowProxyTerms(np.zeros(0), np.zeros((0, tall.ndim))))
        return cls(idx=idx, batch=batch, terms=proxy.row_terms(batch))

    @property
    def size(self) -> int:
        return int(self.idx.shape[0])

    def with_block(self, tall, proxy, new_idx, block: slice) -> Subsample:
        """A new subsample equal to this one except the positions ``block`` of ``new_idx``."""
        rows = tall.gather(new_idx[block])
        batch = tuple(a.copy() for a in self.batch)
        for full, part in zip(batch, rows):
            full[block] = part
        terms = RowProxyTerms(self.terms.loglik.copy(), self.terms.grad.copy())
        terms.put(block, proxy.row_terms(rows))
        return Subsample(idx=np.asarray(new_idx), batch=batch, terms=terms)
