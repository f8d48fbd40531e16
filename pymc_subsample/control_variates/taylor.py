"""Taylor-series control variates q_k(θ) around a centre θ* (seed 004, eq. 4.4).

q_k(θ) = ℓ_k(θ*) + ∇ℓ_k(θ*)ᵀ v + ½ vᵀ H_k(θ*) v, with v = θ − θ*, truncated at
``order`` 0, 1 or 2. The full-data sum Σ_k q_k(θ) = Σℓ_k(θ*) + Aᵀv + ½ vᵀBv needs
only the three sums computed once in chunks (A, B of eq. 4.7), so it costs O(d²).
Per-row terms on a subsample use per-row gradients at θ* (computed once per row
when it enters the subsample) and the per-row Hessian-vector product H_k v,
never the m x d x d Hessians.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, chunked_sum

__all__ = ["RowProxyTerms", "TaylorProxy", "check_proxy_order"]


def check_proxy_order(order) -> int:
    """Validate the Taylor order of the control variates."""
    if isinstance(order, bool) or order not in (0, 1, 2):
        raise ValueError(
            f"proxy_order must be 0, 1 or 2 (the order of the Taylor expansion of each row's "
            f"log-likelihood, seed 004 eq. 4.4); got {order!r}."
        )
    return int(order)


@dataclass
class RowProxyTerms:
    """ℓ_k(θ*) (m,) and ∇ℓ_k(θ*) (m, d) for the rows of one batch."""

    loglik: np.ndarray
    grad: np.ndarray

    def take(self, positions):
        return RowProxyTerms(self.loglik[positions], self.grad[positions])

    def put(self, positions, other: RowProxyTerms):
        self.loglik[positions] = other.loglik
        self.grad[positions] = other.grad


class TaylorProxy:
    """Control variates of order 0, 1 or 2 around ``center`` for a TallModel.

    Parameters
    ----------
    tall : TallModel
    center : ndarray, shape (d,)
        θ*, usually the full-data MAP (``pms.find_map``).
    order : {0, 1, 2}
    chunk_size : int
        Rows per chunk of the full-data pass that computes the sums.
    """

    def __init__(self, tall, center, order=2, *, chunk_size=DEFAULT_CHUNK_SIZE):
        self.tall = tall
        self.order = check_proxy_order(order)
        self.center = np.asarray(center, dtype=float).copy()
        d = tall.ndim
        if order == 2:
            self.loglik_sum, self.grad_sum, self.hess_sum = chunked_sum(
                tall, tall.loglik_sum_value_grad_hessian, self.center, chunk_size=chunk_size
            )
        else:
            self.loglik_sum, self.grad_sum = chunked_sum(
                tall, tall.loglik_sum_value_and_grad, self.center, chunk_size=chunk_size
            )
            self.hess_sum = np.zeros((d, d))
        self.loglik_sum = float(self.loglik_sum)

    # --------------------------------------------------------------- full sums
    def sum_value_and_grad(self, theta):
        """Σ_k q_k(θ) and its gradient A + B v (eq. 4.7), in O(d²)."""
        v = np.asarray(theta) - self.center
        if self.order == 0:
            return self.loglik_sum, np.zeros_like(v)
        value = self.loglik_sum + self.grad_sum @ v
        grad = self.grad_sum.copy()
        if self.order == 2:
            bv = self.hess_sum @ v
            value += 0.5 * v @ bv
            grad += bv
        return float(value), grad

    # ----------------------------------------------------------------- per row
    def row_terms(self, batch) -> RowProxyTerms:
        """ℓ_k(θ*) and ∇ℓ_k(θ*) for the rows of ``batch`` (once per row entering a subsample)."""
        loglik, grad = self.tall.loglik_rows_and_grads(self.center, batch)
        return RowProxyTerms(np.asarray(loglik), np.asarray(grad))

    def rows_value_and_grad(self, theta, terms: RowProxyTerms, batch):
        """q_k(θ) (m,) and ∇q_k(θ) (m, d) for the rows of ``batch``."""
        v = np.asarray(theta) - self.center
        hv = self.tall.rows_hessian_vector(self.center, v, batch) if self.order == 2 else None
        return self._rows_proxy(v, terms, hv)

    def rows_loglik_and_proxy(self, theta, terms: RowProxyTerms, batch):
        """ℓ_k(θ), ∇ℓ_k(θ), q_k(θ), ∇q_k(θ) for the rows of ``batch`` in one compiled call."""
        v = np.asarray(theta) - self.center
        out = self.tall.rows_with_proxy_terms(theta, self.center, batch, self.order)
        q, q_grads = self._rows_proxy(v, terms, out[2] if self.order == 2 else None)
        return out[0], out[1], q, q_grads

    def _rows_proxy(self, v, terms: RowProxyTerms, hv):
        """q_k = ℓ_k(θ*) + ∇ℓ_k(θ*)ᵀv + ½ vᵀH_k v and its gradient, truncated at ``order``."""
        if self.order == 0:
            return terms.loglik.copy(), np.zeros_like(terms.grad)
        value = terms.loglik + terms.grad @ v
        grad = terms.grad
        if self.order == 2:
            value = value + 0.5 * (hv @ v)
            grad = grad + hv
        return value, grad

    def rows_value(self, theta, terms: RowProxyTerms, batch):
        """q_k(θ) only (what gradient-free kernels need)."""
        return self.rows_value_and_grad(theta, terms, batch)[0]

    # ----------------------------------------------------------------- helpers
    def laplace_precision(self, prior_hessian=None):
        """−(prior Hessian + B): the Laplace precision at the centre (mass matrix of HMC-ECS)."""
        prec = -self.hess_sum
        if prior_hessian is not None:
            prec = prec - prior_hessian
        return prec
