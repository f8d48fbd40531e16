"""Choosing subsample sizes and block-Poisson parameters from a pilot near the centre.

Both rules target the variance of the log-likelihood estimator, which is what
governs pseudo-marginal efficiency (seed 004 §3.1: Var log L̂ ≈ 1 minimises CT;
with correlated blocks larger values are tolerated).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["choose_block_poisson", "choose_subsample_size", "laplace_draws", "pilot_differences"]


def laplace_draws(rng, center, precision, size):
    """θ ~ N(θ*, precision⁻¹): where the sampler will spend its time."""
    chol = np.linalg.cholesky(np.linalg.inv(precision))
    return center + rng.standard_normal((size, center.size)) @ chol.T


def pilot_differences(rng, target, thetas, pilot_size):
    """Per-θ mean and variance of d_k = ℓ_k − q_k on one uniform pilot subsample.

    Returns
    -------
    mean_d, var_d : arrays of shape (len(thetas),)
    """
    batch = target.tall.gather(rng.integers(0, target.n_rows, size=pilot_size))
    means, variances = [], []
    for theta in thetas:
        d = target.differences(theta, batch)
        means.append(d.mean())
        variances.append(d.var(ddof=1))
    return np.asarray(means), np.asarray(variances)


def pilot_loglik_variances(rng, target, thetas, pilot_size):
    """Var(d_k) per θ, as :func:`pilot_differences`, from the perturbed estimator's own σ̂².

    σ̂² = (n²/m) Var₀(d) on m pilot rows, so Var(d) (ddof 1) = σ̂² m² / (n² (m − 1)). It
    reuses the estimator every HMCECS run compiles anyway: no extra compiled function
    (each costs seconds on a fresh machine).
    """
    batch = target.tall.gather(rng.integers(0, target.n_rows, size=pilot_size))
    n = target.n_rows
    sigma2 = np.array([target.perturbed(theta, batch)[2] for theta in thetas])
    return sigma2 * pilot_size**2 / (n * n * max(pilot_size - 1, 1))


def choose_subsample_size(n, var_d, target=1.0, minimum=10):
    """Smallest m with σ² = n² Var(d)/m ≤ target, for the 90% quantile of Var(d) over the pilot.

    Using an upper quantile rather than the mean keeps σ̂² near the target in the
    tails of the posterior, where a too-small m makes the chain sticky.
    """
    v = float(np.quantile(np.atleast_1d(var_d), 0.9))
    m = int(np.ceil(n * n * v / target))
    return int(min(max(m, minimum), n))


def choose_block_poisson(n, m, mean_d, var_d, target=1.0, max_lambda=10_000):
    """λ and a for the block-Poisson estimator (seed 004 eq. 5.1).

    With D(θ) = n·mean(d) the quantity each mini-batch estimates and σ_m² = n² Var(d)/m its
    variance, each factor is (d̂ − a)/λ with d̂ ~ N(D, σ_m²). Set a = D̄ − λ (D̄ the pilot mean)
    so the factor is centred at 1, and take the smallest λ for which
    Var log|L̂| = λ E[log²|(d̂ − a)/λ|] (X_l ~ Pois(1): Var Σ_{h≤X} Z_h = E[Z²])
    is at most ``target``, averaging over the pilot θ's and over d̂ by Gauss-Hermite
    quadrature. The probability of a negative factor is then Φ(−(D − a)/σ_m), tiny.

    Returns
    -------
    lam : int
    a : float
    var_log : float
        The achieved Var log|L̂| estimate.
    prob_negative : float
        P(L̂ < 0) approximated by the expected number of negative factors.
    """
    big_d = n * np.atleast_1d(mean_d)
    sigma_m = np.sqrt(n * n * np.atleast_1d(var_d) / m)
    d_bar = float(big_d.mean())
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    weights = weights / weights.sum()
    lam = 1
    while True:
        a = d_bar - lam
        x = (big_d[:, None] + sigma_m[:, None] * nodes[None, :] - a) / lam
        ez2 = np.mean(np.sum(weights * np.log(np.abs(x) + 1e-300) ** 2, axis=1))
        var_log = lam * ez2
        if var_log <= target or lam >= max_lambda:
            break
        lam = int(np.ceil(lam * 1.25)) if lam > 8 else lam + 1
    p_neg_factor = float(np.mean(stats.norm.cdf(-(big_d - a) / np.maximum(sigma_m, 1e-300))))
    return lam, float(a), float(var_log), float(min(1.0, lam * p_neg_factor))
