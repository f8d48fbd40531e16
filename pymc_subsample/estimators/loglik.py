"""Subsampled log-likelihood estimators (Dang et al. 2019 §4-5) as plain array functions.

Every estimator takes the per-row differences d_i = ℓ_{u_i}(θ) − q_{u_i}(θ) of a
subsample u drawn uniformly with replacement (ω_k = 1/n). :func:`perturbed_loglik`
returns ``weights`` = ∂value/∂d_i too, so that the gradient of the estimate is

    ∇Σ_k q_k(θ) + Σ_i weights_i (∇ℓ_{u_i}(θ) − ∇q_{u_i}(θ)).

The samplers do not assemble that sum from per-row gradients: the value formulas
(:func:`difference_parts`, :func:`block_poisson_log_abs`) are written so that they run
on PyTensor tensors too, and :class:`~pymc_subsample.estimators.target.SubsampledTarget`
differentiates them in one compiled graph; reverse mode then computes exactly the
weights above and the VJPs/HVP of docs/design.md ("One target"). The tests check that graph
against the sum assembled in NumPy (``tests/oracles.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "block_poisson_log_abs",
    "block_poisson_sign",
    "block_poisson_spread_and_sign",
    "difference_parts",
    "difference_estimator",
    "perturbed_loglik",
]


def difference_parts(d, n, m=None):
    """n·d̄ and σ̂² = (n²/m²) Σ_i (d_i − d̄)² (eqs. 4.1-4.3) of a NumPy array *or* PyTensor vector.

    Written with operators and methods both backends share, so the sampler's compiled
    graph (:class:`~pymc_subsample.estimators.target.SubsampledTarget`) and the NumPy
    estimators below are one formula.

    ``m``, the length of ``d``, may be given as a graph of the batch's inputs (the rows of one input):
    ``d.shape[0]`` of a graph is the broadcast length of all its inputs, which PyTensor computes
    with a run-time check per input, each one more Numba kernel to compile on a first run. The sum
    of squares is taken in the same pass as the sum, Σ(d − d̄)² = Σd² − (Σd)²/m, so that the
    estimator's forward computation is one fused kernel, not two: the d_k are differences from the
    control variates, of the order of their spread, so the cancellation costs a few digits of
    sixteen.
    """
    m = d.shape[0] if m is None else m
    total = d.sum()
    return n * total / m, (n * n) / (m * m) * ((d * d).sum() - total * total / m)


def difference_estimator(d, n, sum_q=0.0):
    """Difference estimator ℓ̂ and its variance estimate σ̂² (Dang et al. 2019 eqs. 4.1-4.3).

    Parameters
    ----------
    d : array, shape (m,)
        ℓ_{u_i}(θ) − q_{u_i}(θ) for the subsample u.
    n : int
        Number of rows N.
    sum_q : float
        Σ_{k=1}^n q_k(θ).

    Returns
    -------
    loglik_hat : float
        ℓ̂_m = Σ q_k + (n/m) Σ_i d_i (eq. 4.1-4.2 with ω_k = 1/n).
    sigma2_hat : float
        σ̂²_m = (n²/m²) Σ_i (d_i − d̄)² (eq. 4.3).
    """
    total, sigma2_hat = difference_parts(np.asarray(d, dtype=float), n)
    return float(sum_q + total), float(sigma2_hat)


def perturbed_loglik(d, n, sum_q=0.0):
    """Perturbed log-likelihood estimate log L̂ = ℓ̂ − σ̂²/2 (Dang et al. 2019 eq. 4.5).

    Returns
    -------
    value : float
        ℓ̂_m − σ̂²_m / 2.
    weights : array, shape (m,)
        ∂value/∂d_i = n/m − (n²/m²)(d_i − d̄): the gradient through σ̂² is exact.
    sigma2_hat : float
    """
    d = np.asarray(d, dtype=float)
    m = d.shape[0]
    loglik_hat, sigma2_hat = difference_estimator(d, n, sum_q)
    weights = n / m - (n * n) / (m * m) * (d - d.mean())
    return loglik_hat - 0.5 * sigma2_hat, weights, sigma2_hat


def block_poisson_log_abs(d_hat, a, lam, log):
    """log|L̂| − Σq = a + λ + Σ_b log|(d̂_b − a)/λ| (eq. 5.1), NumPy or PyTensor (``log``)."""
    return a + lam + log(abs((d_hat - a) / lam)).sum()


def block_poisson_sign(d_hat, a) -> int:
    """Sign of the block-Poisson estimate: the product of the signs of d̂_b − a."""
    d_hat = np.asarray(d_hat, dtype=float)
    sign = int(np.prod(np.sign(d_hat - a))) if d_hat.size else 1
    return sign if sign != 0 else 1  # a factor exactly zero has measure zero


def block_poisson_spread_and_sign(d, n, m, a) -> tuple[float, int]:
    """(σ² of one mini-batch's d̂ from the pooled rows, n² Var(d)/m; the estimate's sign) from the
    differences ``d`` of B mini-batches of ``m`` rows in order (eq. 5.1's d̂_b = (n/m) Σ_{i∈b} d_i).
    """
    d = np.asarray(d)
    d_hat = (n / m) * d.reshape(-1, m).sum(axis=1)
    return n * n * float(np.var(d)) / m, block_poisson_sign(d_hat, a)
