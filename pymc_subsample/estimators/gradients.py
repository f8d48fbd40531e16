"""Stochastic-gradient estimators of ∇ℓ(θ) = Σ_k ∇ℓ_k(θ) shared by the SG samplers.

Plain functions of per-row gradient arrays (El hanchi 2019 §2-5, Dang et al. 2019 eq. 4.7).
"""

from __future__ import annotations

import numpy as np

__all__ = ["control_variate_gradient", "plain_gradient"]


def plain_gradient(row_grads, n):
    """Unbiased (N/m) Σ_i ∇ℓ_{u_i}(θ) for u uniform with replacement (El hanchi 2019 Alg. 2)."""
    row_grads = np.asarray(row_grads)
    return (n / row_grads.shape[0]) * row_grads.sum(axis=0)


def control_variate_gradient(sum_q_grad, row_grads, proxy_row_grads, n):
    """∇Σq(θ) + (N/m) Σ_i (∇ℓ_{u_i} − ∇q_{u_i}) (Dang et al. 2019 eq. 4.7)."""
    row_grads = np.asarray(row_grads)
    return sum_q_grad + (n / row_grads.shape[0]) * (row_grads - proxy_row_grads).sum(axis=0)
