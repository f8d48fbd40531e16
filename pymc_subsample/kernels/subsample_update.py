"""Gibbs update of the subsample u at fixed θ (Dang et al. 2019 §3.3, eq. 3.5).

Proposals refresh one of G blocks of u (perturbed) or κ of the λ Poisson groups
(signed), so log L̂ at the current and proposed u are correlated (ρ ≈ 1 − 1/G or
1 − κ/λ) and the pseudo-marginal chain does not get stuck.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.kernels.potential import SignedSubsample
from pymc_subsample.subsample.batch import Subsample
from pymc_subsample.subsample.indices import block_update

__all__ = ["accept_log_ratio", "propose_block", "propose_block_of_rest", "propose_signed_groups"]


def accept_log_ratio(rng, log_ratio) -> tuple[bool, float]:
    """Metropolis accept with log ratio; returns (accepted, acceptance probability)."""
    prob = float(np.exp(min(0.0, log_ratio))) if np.isfinite(log_ratio) else 0.0
    return bool(rng.uniform() < prob), prob


def propose_block(rng, tall, subsample: Subsample, blocks) -> Subsample:
    """Refresh one of the G blocks of a with-replacement subsample."""
    new_idx, block = block_update(rng, subsample.idx, tall.n_rows, blocks)
    return subsample.with_block(tall, new_idx, block)


def propose_block_of_rest(rng, tall, subsample: Subsample, blocks, draw_rest, n_exact) -> Subsample:
    """Refresh one of the G blocks of a with-replacement subsample of the rows not computed exactly
    (``draw_rest(size)`` draws them uniformly), whose batch holds the ``n_exact`` exact rows first.
    """
    block = blocks[rng.integers(len(blocks))]
    new_idx = subsample.idx.copy()
    new_idx[block] = draw_rest(block.stop - block.start)
    return subsample.with_block(tall, new_idx, block, offset=n_exact)


def draw_signed(rng, tall, lam, m) -> SignedSubsample:
    """A fresh block-Poisson subsample: X_l ~ Pois(1) mini-batches of m rows for l = 1..λ."""
    counts = rng.poisson(1.0, size=lam)
    idx = rng.integers(0, tall.n_rows, size=int(counts.sum()) * m)
    return SignedSubsample(Subsample.gather(tall, idx), counts, m)


def propose_signed_groups(rng, tall, current: SignedSubsample, kappa) -> SignedSubsample:
    """Redraw X_l and the rows of κ of the λ groups, keeping the others (ρ ≈ 1 − κ/λ)."""
    lam = current.batches_per_group.size
    m = current.batch_size
    groups = rng.choice(lam, size=min(kappa, lam), replace=False)
    counts = current.batches_per_group.copy()
    counts[groups] = rng.poisson(1.0, size=groups.size)
    pieces = []
    for g in range(lam):
        if g in groups:
            pieces.append(rng.integers(0, tall.n_rows, size=counts[g] * m))
        else:
            pieces.append(current.rows.idx[current.group_positions([g])])
    idx = np.concatenate(pieces).astype(int) if pieces else np.zeros(0, dtype=int)
    return SignedSubsample(Subsample.gather(tall, idx), counts, m)
