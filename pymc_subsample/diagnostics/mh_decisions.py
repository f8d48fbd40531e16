"""The decisions of a subsampled accept test against the exact full-data decision, on fixed moves.

For a :class:`~pymc_subsample.SubsampleMH` step (through its ``target`` and ``accept_test`` only) and
moves (θ, θ′, u), :func:`decision_errors` runs the step's test and the exact test on the same
uniform: MH accepts iff log u < Δ, Δ from all N rows; Barker's exact test accepts with probability
S(Δ) = 1/(1 + e^{−Δ}). :func:`laplace_moves` draws such moves as the chain proposes them near its
centre. Used by ``tests/test_mh_error_rates.py`` and ``benchmarks/mh_error_rates.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from pymc_subsample.kernels.mh_tests import Move, exact_mh_test
from pymc_subsample.kernels.mh_tests.shared import full_loglik

__all__ = ["DecisionErrors", "decision_errors", "laplace_moves"]


@dataclass(frozen=True)
class DecisionErrors:
    """Per move: the test's ``accept``, the exact MH decision ``exact`` on the same uniform, the exact
    Barker probability ``barker`` = S(Δ), ``delta`` = Δ and the rows the test read.
    """

    accept: np.ndarray
    exact: np.ndarray
    barker: np.ndarray
    delta: np.ndarray
    rows: np.ndarray

    @property
    def error_rate(self) -> float:
        """The fraction of decisions that differ from exact MH's (the t-tests' and the confidence
        sampler's error, bounded by ``error``).
        """
        return float(np.mean(self.accept != self.exact))

    @property
    def barker_deviation(self) -> float:
        """mean(accept) − mean S(Δ): each move's acceptance probability is within δ of S(Δ) under the
        minibatch Barker test's bound, so their mean is too.
        """
        return float(np.mean(self.accept) - np.mean(self.barker))


def laplace_moves(step, count, seed=0, scale=None):
    """``count`` moves (θ, θ′, u): θ = θ* + Lz, θ′ = θ + scale·Lz′ (LLᵀ the Laplace covariance,
    ``scale`` by default 2.38/√d, the step's initial random-walk scale), u uniform.
    """
    target = step.target
    precision = target.laplace_precision()
    chol = np.linalg.cholesky(np.linalg.inv(precision))
    d = chol.shape[0]
    scale = 2.38 / math.sqrt(d) if scale is None else float(scale)
    rng = np.random.default_rng(seed)
    moves = []
    for _ in range(int(count)):
        theta = target.center + chol @ rng.standard_normal(d)
        moves.append((theta, theta + scale * chol @ rng.standard_normal(d), float(rng.random())))
    return moves


def decision_errors(step, moves, seed=0, near=None) -> DecisionErrors:
    """The step's accept test on each move (θ, θ′, u) beside the exact full-data decisions.

    ``near`` (optional, > 0): hard decisions, the move's u replaced by min(1, exp(Δ + ξ)) with
    ξ = near·(2u − 1), uniform on (−near, near), so that log u lies within ``near`` of Δ.
    """
    target, tall, test = step.target, step.tall, step.accept_test
    rng = np.random.default_rng(seed)
    cache = {}

    def log_post(theta):
        key = theta.tobytes()
        if key not in cache:
            cache[key] = (float(tall.prior_value_and_grad(theta)[0]),
                          full_loglik(tall, theta, 20_000))
        return cache[key]

    out = {k: [] for k in ("accept", "exact", "barker", "delta", "rows")}
    for number, (theta, theta_p, u) in enumerate(moves, start=1):
        (prior, loglik), (prior_p, loglik_p) = log_post(theta), log_post(theta_p)
        delta = prior_p - prior + loglik_p - loglik
        if near is not None:
            u = math.exp(min(0.0, delta + near * (2.0 * u - 1.0)))
        accept, stats, _ = test.decide(rng, u, Move(target, theta, theta_p, prior, prior_p, number), None)
        out["accept"].append(bool(accept))
        out["exact"].append(exact_mh_test(delta, math.log(u)))
        out["barker"].append(float(expit(delta)))
        out["delta"].append(delta)
        out["rows"].append(int(stats["batch_size"]))
    return DecisionErrors(**{k: np.asarray(v) for k, v in out.items()})
