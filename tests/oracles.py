"""NumPy versions of the subsampled estimators: the tests' analytic reference for the compiled target.

The samplers differentiate the estimators in one compiled graph
(:class:`~pymc_subsample.estimators.target.SubsampledTarget`); these functions give the same
estimates and their gradients assembled from per-row arrays, which the tests compare the graph
against. The NumPy estimators return ``weights`` = ∂value/∂d_i, so that the gradient of an
estimate is ∇Σ_k q_k(θ) + Σ_i weights_i (∇ℓ_{u_i}(θ) − ∇q_{u_i}(θ)) (:func:`combine_gradient`).
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.estimators.loglik import block_poisson_log_abs, block_poisson_sign

__all__ = ["block_poisson", "combine_gradient", "control_variate_gradient", "plain_gradient"]


def block_poisson(d_batches, n, a, lam, sum_q=0.0):
    """Block-Poisson estimator of the likelihood (Dang et al. 2019 eq. 5.1), on the log scale.

    L̂ = exp(Σq) Π_{l=1}^{λ} ξ_l, ξ_l = exp((a+λ)/λ) Π_{h=1}^{X_l} (d̂^{(h,l)} − a)/λ with
    X_l ~ Pois(1). Since Π_l exp((a+λ)/λ) = exp(a + λ), only the pooled mini-batch
    estimates d̂^{(h,l)} = (n/m) Σ_i d_i matter for the value; the grouping into λ
    blocks only matters for which mini-batches are refreshed together.

    Parameters
    ----------
    d_batches : array, shape (B, m)
        d_i for each of the B = Σ_l X_l mini-batches (B may be 0).
    n : int
    a : float
        Lower-bound parameter a (a ≤ d̂ keeps the sign positive).
    lam : int
        λ, the number of Poisson blocks.
    sum_q : float

    Returns
    -------
    log_abs : float
        log |L̂|.
    sign : int
        +1 or −1, the sign of L̂.
    weights : array, shape (B, m)
        ∂ log|L̂| / ∂ d_i = (n/m) / (d̂_b − a).
    """
    d_batches = np.asarray(d_batches, dtype=float)
    if d_batches.ndim != 2:
        raise ValueError("d_batches must have shape (number of mini-batches, m).")
    m = d_batches.shape[1] if d_batches.size else 1
    d_hat = (n / m) * d_batches.sum(axis=1)
    with np.errstate(divide="ignore"):
        log_abs = sum_q + block_poisson_log_abs(d_hat, a, lam, np.log)
        weights = np.broadcast_to(((n / m) / (d_hat - a))[:, None], d_batches.shape).copy()
    return float(log_abs), block_poisson_sign(d_hat, a), weights


def combine_gradient(sum_q_grad, weights, loglik_grads, proxy_grads):
    """∇ of an estimate: ∇Σq + Σ_i w_i (∇ℓ_i − ∇q_i) (Dang et al. 2019 eq. 4.7 for w_i = n/m).

    Parameters
    ----------
    sum_q_grad : array (d,)
    weights : array (m,)
    loglik_grads, proxy_grads : arrays (m, d)
    """
    return sum_q_grad + weights @ (loglik_grads - proxy_grads)


def plain_gradient(row_grads, n):
    """Unbiased (N/m) Σ_i ∇ℓ_{u_i}(θ) for u uniform with replacement (El hanchi 2019 Alg. 2)."""
    row_grads = np.asarray(row_grads)
    return (n / row_grads.shape[0]) * row_grads.sum(axis=0)


def control_variate_gradient(sum_q_grad, row_grads, proxy_row_grads, n):
    """∇Σq(θ) + (N/m) Σ_i (∇ℓ_{u_i} − ∇q_{u_i}) (Dang et al. 2019 eq. 4.7)."""
    row_grads = np.asarray(row_grads)
    return sum_q_grad + (n / row_grads.shape[0]) * (row_grads - proxy_row_grads).sum(axis=0)
