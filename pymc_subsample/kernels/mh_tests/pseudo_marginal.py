"""Correlated pseudo-marginal MH with the perturbed difference estimator (Dang et al. 2019 §3-4)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pymc_subsample.estimators.loglik import perturbed_loglik
from pymc_subsample.estimators.subsampled import perturbed_value
from pymc_subsample.kernels.mh_tests.shared import AcceptTest, Estimate
from pymc_subsample.subsample import block_slices, block_update, uniform_with_replacement
from pymc_subsample.subsample.batch import Subsample

__all__ = ["PseudoMarginal", "pseudo_marginal_test"]


def pseudo_marginal_test(current_value, d, n_rows, offset, log_u):
    """Correlated pseudo-marginal MH with the perturbed difference estimator (Dang et al. 2019 §3-4).

    Parameters
    ----------
    current_value : float
        log p(θ) + ℓ̂(θ; u) − σ̂²(θ; u)/2 for the current state (θ, u), kept from the
        step that accepted it (never re-estimated: that would break the pseudo-marginal
        argument).
    d : array, shape (m,)
        ℓ_{u'_i}(θ') − q_{u'_i}(θ') on the proposed subsample u'.
    n_rows : int
    offset : float
        log p(θ') + Σ_k q_k(θ') (+ log proposal ratio for asymmetric proposals).
    log_u : float

    Returns
    -------
    accept, rows_used, stats
        ``stats["value"]`` is the proposed estimated log-posterior (eq. 4.5) and
        ``stats["loglik_var"]`` its σ̂² (eq. 4.3).
    """
    value, _, sigma2 = perturbed_loglik(d, n_rows, 0.0)
    proposed = offset + value
    delta = proposed - current_value
    return bool(log_u < delta), int(np.size(d)), {
        "value": proposed, "loglik_var": sigma2, "delta_hat": delta,
    }


@dataclass
class PseudoMarginal(AcceptTest):
    """θ′ and one of G blocks of the subsample u proposed jointly, accepted by
    :func:`pseudo_marginal_test` against the estimate kept at (θ, u); ρ ≈ 1 − 1/G between the two
    estimates (Dang et al. 2019 §3.3). Targets the perturbed posterior of eq. 4.6.
    """

    #: the subsample's positions in G contiguous blocks
    blocks: tuple

    name: ClassVar[str] = "pseudo-marginal"
    reports_sigma2: ClassVar[bool] = True

    @classmethod
    def configure(cls, n_rows, options):
        # m = 1000 keeps σ̂² near 1 with order-2 proxies on most GLMs (Dang et al. 2019 §6)
        m = min(1000, n_rows) if options.subsample_size is None else int(options.subsample_size)
        g = options.num_blocks
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 1 <= g <= m:
            raise ValueError(f"num_blocks must be an integer between 1 and subsample_size = {m}; got {g!r}.")
        return cls(m, tuple(block_slices(m, int(g))))

    def decide(self, rng, u, move, current):
        target, m = move.target, self.subsample_size
        tall, n = target.tall, target.n_rows
        evals = 0
        subsample = None if current is None else current.subsample
        if subsample is None:
            subsample = Subsample.gather(tall, uniform_with_replacement(rng, n, m))
            evals += m
        if current is None or not np.array_equal(current.theta, move.theta):
            # first move, or θ moved under another step: estimate at the current (θ, u)
            value, sigma2 = perturbed_value(target, subsample, move.theta)
            current = Estimate(move.theta.copy(), value + move.log_prior, sigma2, subsample)
            evals += m
        new_idx, block = block_update(rng, subsample.idx, n, self.blocks)
        proposed = subsample.with_block(tall, new_idx, block)
        d = target.differences(move.theta_p, proposed.batch)
        offset = move.log_prior_p + target.proxy.sum_value_and_grad(move.theta_p)[0]
        accept, rows, info = pseudo_marginal_test(current.value, d, n, offset, math.log(u))
        if accept:
            current = Estimate(move.theta_p.copy(), info["value"], info["loglik_var"], proposed)
        # ℓ_k at θ′ on the m rows, and ℓ_k(θ*) for the rows of the refreshed block
        evals += rows + (block.stop - block.start)
        return accept, {"accept": float(min(1.0, math.exp(min(info["delta_hat"], 0.0)))),
                        "batch_size": rows, "n_loglik_evals": evals, "loglik_var": current.sigma2,
                        "looks": 1}, current
