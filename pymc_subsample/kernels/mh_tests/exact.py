"""Full-data Metropolis-Hastings, the reference the subsampled tests are measured against."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pymc_subsample.kernels.mh_tests.shared import AcceptTest, Estimate, exact_mh_test, full_loglik, look_size

__all__ = ["Exact"]


@dataclass
class Exact(AcceptTest):
    """Exact MH on all N rows (El hanchi 2019 §3.1): Σ_k ℓ_k(θ) is kept from move to move, so a
    move costs N evaluations, at θ′.
    """

    chunk_size: int

    name: ClassVar[str] = "exact"
    is_exact: ClassVar[bool] = True

    @classmethod
    def configure(cls, n_rows, options):
        return cls(look_size(n_rows, options.subsample_size), int(options.chunk_size))

    def decide(self, rng, u, move, current):
        tall, evals = move.target.tall, 0
        if current is None or not np.array_equal(current.theta, move.theta):
            current = Estimate(move.theta.copy(), full_loglik(tall, move.theta, self.chunk_size))
            evals += tall.n_rows
        proposed = full_loglik(tall, move.theta_p, self.chunk_size)
        delta = proposed - current.value + (move.log_prior_p - move.log_prior)
        accept = exact_mh_test(delta, math.log(u))
        if accept:
            current = Estimate(move.theta_p.copy(), proposed)
        return accept, {"accept": float(min(1.0, math.exp(min(delta, 0.0)))), "batch_size": tall.n_rows,
                        "n_loglik_evals": evals + tall.n_rows, "loglik_var": 0.0, "looks": 1}, current
