"""Index samplers: which rows form the subsample u (docs/design.md, "Rows on demand")."""

from __future__ import annotations

import numpy as np

__all__ = ["block_update", "block_slices", "uniform_with_replacement", "without_replacement"]


def uniform_with_replacement(rng, n, m):
    """M indices iid uniform on 0..n-1 (ω_k = 1/n, Dang et al. 2019 eq. 4.2)."""
    return rng.integers(0, n, size=m)


def without_replacement(rng, n, m):
    """M distinct indices uniform on 0..n-1, in O(m) memory for m << n."""
    if m > n:
        raise ValueError(f"cannot draw {m} distinct rows out of {n}.")
    return rng.choice(n, size=m, replace=False)


def block_slices(m, num_blocks):
    """Split positions 0..m-1 into ``num_blocks`` contiguous blocks (sizes differ by ≤ 1)."""
    if not 1 <= num_blocks <= m:
        raise ValueError(f"num_blocks must be between 1 and the subsample size {m}; got {num_blocks}.")
    edges = np.linspace(0, m, num_blocks + 1).round().astype(int)
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def block_update(rng, idx, n, blocks):
    """Redraw one uniformly chosen block of ``idx`` (correlation ρ ≈ 1 − 1/G, Dang et al. 2019 §3.3).

    Returns
    -------
    new_idx : array
        A copy of ``idx`` with the positions of one block redrawn uniformly.
    block : slice
        The positions that changed.
    """
    block = blocks[rng.integers(len(blocks))]
    new_idx = idx.copy()
    new_idx[block] = rng.integers(0, n, size=block.stop - block.start)
    return new_idx, block
