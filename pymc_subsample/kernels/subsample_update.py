"""Gibbs update of the subsample u at fixed θ (Dang et al. 2019 §3.3, eq. 3.5, step 1 of Algorithm 1).

Proposals refresh one of G blocks of u (perturbed) or κ of the λ Poisson groups
(signed), so log L̂ at the current and proposed u are correlated (ρ ≈ 1 − 1/G or
1 − κ/λ) and the pseudo-marginal chain does not get stuck. In BlackJAX's shape: a
:class:`GibbsState`, and :func:`gibbs_step` ``(rng, state, θ, propose, estimate) -> (state, info)``
over the callables that propose u and estimate the log posterior.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pymc_subsample.kernels.potential import SignedSubsample
from pymc_subsample.subsample.batch import Subsample

__all__ = [
    "GibbsInfo",
    "GibbsState",
    "accept_log_ratio",
    "draw_rest",
    "draw_signed",
    "draw_subsample",
    "gibbs_step",
    "gather_perturbed",
    "propose_block_indices",
    "propose_signed_groups",
    "propose_subsample",
]


class GibbsState(NamedTuple):
    """The subsample u, and the estimate of the log posterior at θ on it (None: not made yet)."""

    subsample: Any
    estimate: Any
    theta: np.ndarray | None


class GibbsInfo(NamedTuple):
    accepted: bool
    acceptance_probability: float


def gibbs_step(rng, state: GibbsState, theta, propose, estimate) -> tuple[GibbsState, GibbsInfo]:
    """One pseudo-marginal update of u | θ (eq. 3.5): u' = ``propose(rng, u)``, accepted with
    probability min(1, L̂(θ; u') / L̂(θ; u)).

    The proposals are symmetric in u (a block redrawn from the distribution it was drawn from), so
    the ratio of estimated likelihoods is the whole acceptance ratio, and the update leaves
    p(u | θ) ∝ L̂(θ; u) p(u) invariant.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : GibbsState
        Its estimate is made again where it is missing or was made at another θ.
    theta : array
    propose : callable
        ``propose(rng, u) -> u'``.
    estimate : callable
        ``estimate(θ, u)`` -> an object whose ``value`` is log p(θ) + log |L̂(θ; u)|.

    Returns
    -------
    state : GibbsState
        At θ, with the accepted subsample and its estimate.
    info : GibbsInfo
    """
    if state.estimate is None or not np.array_equal(state.theta, theta):
        state = GibbsState(state.subsample, estimate(theta, state.subsample), np.array(theta, copy=True))
    proposal = propose(rng, state.subsample)
    proposed = estimate(theta, proposal)
    accepted, prob = accept_log_ratio(rng, proposed.value - state.estimate.value)
    if accepted:
        state = state._replace(subsample=proposal, estimate=proposed)
    return state, GibbsInfo(accepted, prob)


def accept_log_ratio(rng, log_ratio) -> tuple[bool, float]:
    """Metropolis accept with log ratio; returns (accepted, acceptance probability)."""
    prob = float(np.exp(min(0.0, log_ratio))) if np.isfinite(log_ratio) else 0.0
    return bool(rng.uniform() < prob), prob


def propose_block_indices(rng, design, idx) -> tuple:
    """(u′'s row indices, the block of positions redrawn, the number of exact rows before u's in a
    batch) of a perturbed proposal from u's indices ``idx``: one of the G blocks redrawn uniformly
    over the rows not computed exactly (:func:`draw_rest`, which draws as
    :func:`~pymc_subsample.subsample.indices.block_update` does where there are none).
    """
    block = design.blocks[rng.integers(len(design.blocks))]
    new_idx = idx.copy()
    new_idx[block] = draw_rest(rng, design.n, design.exact, block.stop - block.start)
    return new_idx, block, design.exact.size


def gather_perturbed(tall, design, exact_batch, idx) -> Subsample:
    """The perturbed subsample of the rows ``idx``, after the rows computed exactly (``exact_batch``)
    where ``design`` has some.
    """
    if design.exact.size:
        return Subsample.with_exact(tall, exact_batch, idx)
    return Subsample.gather(tall, idx)


def draw_rest(rng, n, exact, size):
    """``size`` rows uniform over the n rows not in ``exact`` (ω_k = 1/n_R, eq. 4.2): uniform over
    all rows, those in ``exact`` drawn again (no array of the other n − e rows is kept).
    """
    idx = rng.integers(0, n, size=size)
    if exact.size:
        while True:
            hit = np.isin(idx, exact)
            if not hit.any():
                break
            idx[hit] = rng.integers(0, n, size=int(hit.sum()))
    return idx


def draw_subsample(rng, tall, design, exact_batch=None):
    """A fresh u for ``design`` (:class:`~pymc_subsample.kernels.ecs_tuning.Design`): λ Poisson groups
    of mini-batches (signed), or m rows uniform over the rows not computed exactly, whose batch
    ``exact_batch`` comes first (perturbed).
    """
    if design.estimator == "signed":
        return draw_signed(rng, tall, design.lam, design.m)
    return gather_perturbed(tall, design, exact_batch, draw_rest(rng, design.n, design.exact, design.m))


def propose_subsample(rng, tall, design, subsample):
    """A proposed u' for ``design``: κ of the λ groups redrawn (signed), or one of its G blocks."""
    if design.estimator == "signed":
        return propose_signed_groups(rng, tall, subsample, design.kappa)
    new_idx, block, offset = propose_block_indices(rng, design, subsample.idx)
    return subsample.with_block(tall, new_idx, block, offset)


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
