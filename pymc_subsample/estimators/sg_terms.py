"""The terms z_i of the stochastic-gradient estimators, and the covariance of an estimate from them.

Each estimator of :mod:`pymc_subsample.estimators.sg_gradients` is ĝ = offset + (1/m) Σ_i z_i with
z_i iid given the past; these functions make the z_i from the m rows' gradients and estimate
Cov(ĝ) ≈ Cov_sample(z)/m. Plain NumPy over arrays: the kernels' step-size rules
(:mod:`pymc_subsample.kernels.sg_tuning`) use them without the model layer.
"""

from __future__ import annotations

import numpy as np

__all__ = ["estimator_covariance", "importance_terms", "saga_terms", "uniform_terms"]


def uniform_terms(row_grads, n, proxy_row_grads=None):
    """z_i = N (∇ℓ_{u_i} − ∇q_{u_i}) for uniform sampling with replacement.

    ``proxy_row_grads=None`` gives the plain SGLD estimator (El hanchi 2019 Alg. 2); with
    the Taylor proxy's per-row gradients it gives the control-variate terms of
    Dang et al. 2019 eq. (4.7), whose offset is ∇Σq(θ).
    """
    row_grads = np.asarray(row_grads, dtype=float)
    if proxy_row_grads is None:
        return n * row_grads
    return n * (row_grads - np.asarray(proxy_row_grads, dtype=float))


def importance_terms(row_grads, probs, table_rows=None):
    """z_i = (∇ℓ_{u_i} − h_{u_i}) / p_{u_i} (El hanchi 2019 §4.3); ``table_rows=None`` means h = 0."""
    row_grads = np.asarray(row_grads, dtype=float)
    if table_rows is not None:
        row_grads = row_grads - table_rows
    return row_grads / np.asarray(probs, dtype=float)[:, None]


def saga_terms(row_grads, table_rows, n):
    """z_i = N (∇ℓ_{u_i} − h_{u_i}): SAGA with uniform sampling (El hanchi 2019 §4.3)."""
    return n * (np.asarray(row_grads, dtype=float) - table_rows)


def estimator_covariance(terms, full=True):
    """Covariance of ĝ = offset + mean(z) estimated from its own m terms.

    Returns
    -------
    cov : ndarray (d, d) or None
        Sample covariance of z divided by m (None when ``full=False`` or m < 2).
    trace : float
        tr Cov(ĝ) (nan when m < 2: one term says nothing about its spread).
    """
    terms = np.asarray(terms, dtype=float)
    m = terms.shape[0]
    if m < 2:
        return None, float("nan")
    centred = terms - terms.mean(axis=0)
    if not full:
        return None, float(np.einsum("ij,ij->", centred, centred) / ((m - 1) * m))
    cov = centred.T @ centred / ((m - 1) * m)
    return cov, float(np.trace(cov))
