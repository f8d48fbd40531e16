"""Modified stochastic MH with a two-sample t-test (El hanchi 2019 §5.2.1)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.special import stdtr

from pymc_subsample.kernels.mh_tests.shared import (
    RowStream,
    SequentialTest,
    look_level,
    look_size,
    mean_var,
    row_values,
)

__all__ = ["TwoSample", "two_sample_test"]


def two_sample_test(current_terms, proposed_terms, n_rows, offset, log_u, rng, *,
                    batch_size, error, probs=None, per_look=False):
    """Modified stochastic MH with a two-sample t-test (El hanchi 2019 §5.2.1).

    Neither log-posterior estimate is taken as exact: Σ_k a_k (a_k = ``current_terms``,
    e.g. ℓ_k(θ) − q_k(θ)) and Σ_k b_k (``proposed_terms`` at θ') are estimated from
    two independent samples, and both are refreshed with ``batch_size`` more rows while
    Welch's t-test of Δ̂ = offset + Σ̂b − Σ̂a against log u is inconclusive at the level
    of the look, ε_k = ε/(2k²) (:func:`look_level`; ``per_look=True``: ε at every look,
    as in :func:`austerity_test`). Uniform samples are without replacement
    (finite-population correction); with importance probabilities ``probs`` (El hanchi 2019
    §5.1) they are with replacement and weighted by 1/(N p_k). Once each sample has N
    rows, the exact sums are used. Accept iff Δ̂ > log u.

    Returns
    -------
    accept, rows_used, stats
        ``rows_used`` counts the rows of both samples.
    """
    if probs is not None:
        probs = np.asarray(probs, float)
        cdf = np.cumsum(probs / probs.sum())
    streams = [RowStream(rng, n_rows), RowStream(rng, n_rows)]
    values = [np.empty(0), np.empty(0)]
    fns = (current_terms, proposed_terms)
    look = reads = 0
    while True:
        reads += 1
        moments = []
        for j in (0, 1):
            if probs is None:
                idx = streams[j].take(batch_size)
                new = np.asarray(fns[j](idx), float)
            else:
                idx = np.minimum(np.searchsorted(cdf, rng.random(batch_size)), n_rows - 1)
                new = np.asarray(fns[j](idx), float) / (n_rows * probs[idx] / probs.sum())
            values[j] = np.concatenate([values[j], new])
            n = values[j].size
            mean, var = mean_var(values[j])
            fpc = (1.0 - min(n, n_rows) / n_rows) if probs is None else 1.0
            moments.append((n, n_rows * mean, n_rows**2 * var / n * fpc))
        (na, sa, va), (nb, sb, vb) = moments
        delta = offset + sb - sa
        if min(na, nb) >= n_rows:
            if probs is not None:  # the weighted samples are not the population: sum exactly
                all_rows = np.arange(n_rows)
                delta = offset + float(np.sum(fns[1](all_rows)) - np.sum(fns[0](all_rows)))
                na, nb = na + n_rows, nb + n_rows
            return bool(log_u < delta), na + nb, {"delta_hat": delta, "loglik_var": 0.0, "looks": reads}
        se2 = va + vb
        if min(na, nb) >= 2:
            look += 1
            if se2 > 0:
                # Welch-Satterthwaite degrees of freedom
                df = se2**2 / (va**2 / max(na - 1, 1) + vb**2 / max(nb - 1, 1)) if va + vb > 0 else 1.0
                alpha = stdtr(df, -abs(delta - log_u) / math.sqrt(se2))
            else:
                alpha = 0.0 if delta != log_u else 1.0
            if alpha < (error if per_look else look_level(error, look)):
                break
    return bool(log_u < delta), na + nb, {"delta_hat": delta, "loglik_var": se2, "looks": reads}


@dataclass
class TwoSample(SequentialTest):
    """:func:`two_sample_test` on the remainders (or ℓ_k) at θ and at θ′, each read from its own
    sample, ``subsample_size`` rows per look; ``probs`` the importance probabilities
    (``importance_probs``, El hanchi 2019 §5.1), None for uniform samples.
    """

    probs: np.ndarray | None = None
    per_look: bool = False

    name: ClassVar[str] = "two-sample"
    points: ClassVar[int] = 1

    @classmethod
    def configure(cls, n_rows, options):
        return cls(look_size(n_rows, options.subsample_size), options.error, options.control_variates,
                   probs=options.importance_probs)

    def run(self, rng, u, move, offset, proxied):
        target = move.target
        current, proposed = row_values(target, move.theta, proxied), row_values(target, move.theta_p, proxied)
        return two_sample_test(current, proposed, target.n_rows, offset, math.log(u), rng,
                               batch_size=self.subsample_size, error=self.error, probs=self.probs,
                               per_look=self.per_look)


def check_probs(probs, n_rows) -> np.ndarray:
    """Importance probabilities: N positive finite numbers, normalised to sum to 1."""
    probs = np.asarray(probs, dtype=float)
    if probs.shape != (n_rows,) or not np.all(np.isfinite(probs)) or np.any(probs <= 0):
        raise ValueError(f"importance_probs must be {n_rows} positive finite numbers (one per row).")
    return probs / probs.sum()
