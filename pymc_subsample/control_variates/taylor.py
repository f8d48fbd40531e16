"""Taylor-series control variates q_k(θ) around a centre θ* (seed 004, eq. 4.4).

q_k(θ) = ℓ_k(θ*) + ∇ℓ_k(θ*)ᵀ v + ½ vᵀ H_k(θ*) v, with v = θ − θ*, truncated at
``order`` 0, 1 or 2. The full-data sum Σ_k q_k(θ) = Σℓ_k(θ*) + Aᵀv + ½ vᵀBv needs
only the three sums computed once in chunks (A, B of eq. 4.7), so it costs O(d²).
Per-row terms on a subsample are directional derivatives of the batch graph at θ*
along v (forward mode, O(m)): ∇ℓ_k(θ*)ᵀv and vᵀH_k(θ*)v, never per-row gradients
or m x d x d Hessians (DESIGN step 5).

B is computed for every order, because the Laplace precision −(∇²log p(θ*) + B)
(mass matrix, proposal scale, SG preconditioner) needs it whatever the order of the
control variates: one pass, one correct computation.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, chunked_sum

__all__ = ["TaylorProxy", "check_proxy_order"]


def check_proxy_order(order) -> int:
    """Validate the Taylor order of the control variates."""
    if isinstance(order, bool) or order not in (0, 1, 2):
        raise ValueError(
            f"proxy_order must be 0, 1 or 2 (the order of the Taylor expansion of each row's "
            f"log-likelihood, seed 004 eq. 4.4); got {order!r}."
        )
    return int(order)


class TaylorProxy:
    """Control variates of order 0, 1 or 2 around ``center`` for a TallModel.

    Parameters
    ----------
    tall : TallModel
    center : ndarray, shape (d,)
        θ*, close to the full-data mode.
    order : {0, 1, 2}
    chunk_size : int
        Rows per chunk of the full-data pass that computes the sums.
    """

    def __init__(self, tall, center, order=2, *, chunk_size=DEFAULT_CHUNK_SIZE):
        self.tall = tall
        self.order = check_proxy_order(order)
        self.center = np.asarray(center, dtype=float).copy()
        self.loglik_sum, self.grad_sum, self.hess_sum = chunked_sum(
            tall, tall.loglik_sum_value_grad_hessian, self.center, chunk_size=chunk_size
        )
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
    def rows_value(self, theta, batch):
        """q_k(θ) (m,) for the rows of ``batch``: one forward-mode call at θ* along v."""
        v = np.asarray(theta, dtype=float) - self.center
        at_center, slope, curvature = self.tall.rows_directional(self.center, v, v, batch)
        return truncate(self.order, at_center, slope, curvature)

    def rows_value_and_grad(self, theta, batch):
        """q_k(θ) (m,) and ∇q_k(θ) = ∇ℓ_k(θ*) + H_k(θ*)v (m, d), for SG estimators that
        keep per-row terms (2d forward passes over the batch).
        """
        v = np.asarray(theta, dtype=float) - self.center
        q = self.rows_value(theta, batch)
        if self.order == 0:
            return q, np.zeros((q.shape[0], v.size))
        _, grads = self.tall.loglik_rows_and_grads(self.center, batch)
        if self.order == 2:
            grads = grads + self.tall.rows_hessian_vector(self.center, v, batch)
        return q, grads

    # ----------------------------------------------------------------- helpers
    def laplace_precision(self, prior_hessian=None):
        """−(prior Hessian + B): the Laplace precision at the centre, for every order."""
        prec = -self.hess_sum
        if prior_hessian is not None:
            prec = prec - prior_hessian
        return prec


def truncate(order, at_center, slope, curvature):
    """The proxy q = ℓ(θ*) + slope + ½ curvature, truncated at ``order`` (arrays or PyTensor tensors)."""
    q = at_center
    if order >= 1:
        q = q + slope
    if order == 2:
        q = q + 0.5 * curvature
    return q
