"""A subsample: its indices and its gathered rows.

Rows are gathered once when they enter the subsample; a block update re-gathers
only the rows of the changed block (DESIGN step 2), so an HMC-ECS iteration
touches m/G new rows, not m. Nothing else is cached per row: the proxy terms at θ*
come from the batch graph itself in the same compiled call (DESIGN step 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Subsample"]


@dataclass
class Subsample:
    """Indices ``idx`` (m,) and the rows ``batch`` (tuple of arrays, one per row leaf)."""

    idx: np.ndarray
    batch: tuple

    @classmethod
    def gather(cls, tall, idx) -> Subsample:
        idx = np.asarray(idx, dtype=int)
        return cls(idx=idx, batch=tall.gather(idx))

    @property
    def size(self) -> int:
        return int(self.idx.shape[0])

    def with_block(self, tall, new_idx, block: slice) -> Subsample:
        """A new subsample equal to this one except the positions ``block`` of ``new_idx``."""
        rows = tall.gather(new_idx[block])
        batch = tuple(a.copy() for a in self.batch)
        for full, part in zip(batch, rows):
            full[block] = part
        return Subsample(idx=np.asarray(new_idx), batch=batch)
