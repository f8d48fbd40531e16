"""Taylor-series control variates q_k(θ) around a centre θ* (Dang et al. 2019, eq. 4.4).

q_k(θ) = ℓ_k(θ*) + ∇ℓ_k(θ*)ᵀ v + ½ vᵀ H_k(θ*) v, with v = θ − θ*, truncated at
``order`` 0, 1 or 2. The full-data sum Σ_k q_k(θ) = Σℓ_k(θ*) + Aᵀv + ½ vᵀBv needs
only the three sums computed once in chunks (A, B of eq. 4.7), so it costs O(d²).
Per-row terms on a subsample are directional derivatives of the batch graph at θ*
along v (forward mode, O(m)): ∇ℓ_k(θ*)ᵀv and vᵀH_k(θ*)v, never per-row gradients
or m x d x d Hessians (docs/design.md, "Control variates").

B is computed for every order, because the Laplace precision −(∇²log p(θ*) + B)
(mass matrix, proposal scale, SG preconditioner) needs it whatever the order of the
control variates: one pass, one correct computation.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, chunked_sum

__all__ = ["RowFreeTaylorProxy", "TaylorProxy", "check_proxy_order", "make_proxy", "taylor_sum"]


def check_proxy_order(order) -> int:
    """Validate the Taylor order of the control variates."""
    if isinstance(order, bool) or order not in (0, 1, 2):
        raise ValueError(
            f"proxy_order must be 0, 1 or 2 (the order of the Taylor expansion of each row's "
            f"log-likelihood, Dang et al. 2019 eq. 4.4); got {order!r}."
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
        return taylor_sum(self.order, np.asarray(theta), self.loglik_sum, self.center, self.grad_sum,
                          self.hess_sum)

    def sum_value(self, theta) -> float:
        """Σ_k q_k(θ) alone, in NumPy (the set-up's checks of a point; nothing compiled)."""
        return self.sum_value_and_grad(theta)[0]

    #: whether Σq is compiled into the estimator's per-call function (:meth:`sum_graph`) rather than
    #: added in NumPy (O(d²)) after each call
    sum_in_graph = False

    def sum_graph(self):
        """(Σ_k q_k(θ) as a graph in θ, its other inputs, their values): Σℓ(θ*) + Aᵀv + ½ vᵀBv with
        v = θ − θ*, truncated at the proxy's order, for functions that run several estimates in one
        call (a compiled HMC-ECS iteration). The sums are inputs, not constants (as
        :meth:`RowFreeTaylorProxy.sum_graph`).
        """
        total = pt.scalar("loglik_sum_at_center", dtype="float64")
        center, linear = pt.vector("center", dtype="float64"), pt.vector("grad_sum", dtype="float64")
        quadratic = pt.matrix("hess_sum", dtype="float64")
        v = pt.cast(self.tall.theta, "float64") - center
        graph = total
        if self.order >= 1:
            graph = graph + pt.dot(linear, v)
        if self.order == 2:
            graph = graph + 0.5 * pt.dot(v, pt.dot(quadratic, v))
        values = [np.asarray(self.loglik_sum, dtype="float64"), *(np.asarray(v, dtype="float64") for v in
                  (self.center, self.grad_sum, self.hess_sum))]
        return graph, [total, center, linear, quadratic], values

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


class RowFreeTaylorProxy(TaylorProxy):
    """Taylor proxies in η for rows whose parameters are affine in a row-free φ(θ), not in θ.

    A non-centred hierarchical model's rows read ``a = μ + τ z`` through ``a[g_k]``
    (:mod:`pymc_subsample.model.row_free`): η_k = η_k(0) + J_k φ(θ) exactly, with φ = (a, β, ...).
    Expanding f(y_k, ·) to ``order`` in u_k = η_k(θ) − η_k(θ*) = J_k Δφ instead of ℓ_k in v = θ − θ*
    (Dang et al. 2019 eq. 4.4 in other coordinates) gives a control variate whose sum is as cheap,

        Σ_k q_k(θ) = Σ_k f_k* + Aᵀ Δφ + ½ Δφᵀ B Δφ,   A = Σ_k J_kᵀ ∇f_k*,  B = Σ_k J_kᵀ F''_k* J_k,

    with Δφ = φ(θ) − φ(θ*), and that is exact in φ's own non-linearity (τ z): the rows' differences
    are f's third-order terms in u_k only. The θ-Taylor proxy of the same model leaves a difference
    of order N·|v|³ through τ z, which can make HMC-ECS need every row. Where φ = θ the two
    are the same proxy. ``grad_sum`` and ``hess_sum`` are still the θ-space sums at θ*
    (Dφᵀ A and Dφᵀ B Dφ + Σ_i A_i ∇²φ_i), for the Laplace precision.

    Parameters
    ----------
    tall : TallModel
    view : DistributionalRegression
        With ``view.phi`` set.
    center, order, chunk_size
        As :class:`TaylorProxy`.
    """

    # measured: with the θ-Taylor proxy a non-centred model at 10⁵ rows made HMC-ECS need every row
    def __init__(self, tall, view, center, order=2, *, chunk_size=DEFAULT_CHUNK_SIZE):
        self.tall, self.view = tall, view
        self.order = check_proxy_order(order)
        self.center = np.asarray(center, dtype=float).copy()
        total, self.phi_grad_sum, self.phi_hess_sum = chunked_sum(
            tall, tall.loglik_sums_in_phi, self.center, chunk_size=chunk_size
        )
        self.loglik_sum = float(total)
        phi = view.phi
        self.phi_center = phi.value(self.center)
        dphi = phi.jacobian(self.center)
        self.grad_sum = dphi.T @ self.phi_grad_sum
        curvature_of_phi = phi.contracted_hessian(self.center, self.phi_grad_sum)
        self.hess_sum = dphi.T @ self.phi_hess_sum @ dphi + curvature_of_phi

    def sum_value_and_grad(self, theta):
        """Σ_k q_k(θ) and its gradient Dφ(θ)ᵀ(A + B Δφ), one small compiled call (no rows)."""
        value, grad = self.view.phi.quadratic(theta, self.phi_center, self.phi_grad_sum, self.phi_hess_sum,
                                              self.order)
        return self.loglik_sum + value, grad

    def sum_value(self, theta) -> float:
        """Σ_k q_k(θ) alone: φ(θ) on PyTensor's Python linker, the expansion in NumPy (the set-up's checks
        of a point; unlike :meth:`sum_value_and_grad`, nothing compiled).
        """
        delta = self.view.phi.value(theta) - self.phi_center
        return float(truncate(self.order, self.loglik_sum, self.phi_grad_sum @ delta,
                              delta @ self.phi_hess_sum @ delta))

    # φ's graph is small: compiled into the estimator's function. measured (non-centred, 10⁵ rows): on
    # PyTensor's Python linker as a call of its own, 0.18 ms a leapfrog step against 0.04 ms for the
    # whole estimator
    sum_in_graph = True

    def sum_graph(self):
        """(Σ_k q_k(θ) as a graph in θ, its other inputs, their values).

        The sums at θ* are inputs, not constants: the compiled function is then the same for every
        set-up of the model graph (a TallModel's kept functions serve the next), and a 1,000-group
        model's B (8 MB) is not copied into the graph.
        """
        total = pt.scalar("loglik_sum_at_center", dtype="float64")
        center, linear = pt.vector("phi_center", dtype="float64"), pt.vector("phi_linear", dtype="float64")
        quadratic = pt.matrix("phi_quadratic", dtype="float64")
        graph = total + self.view.phi.quadratic_graph(center, linear, quadratic, self.order)
        values = [np.asarray(self.loglik_sum, dtype="float64"), *(np.asarray(v, dtype="float64") for v in
                  (self.phi_center, self.phi_grad_sum, self.phi_hess_sum))]
        return graph, [total, center, linear, quadratic], values

    def rows_value(self, theta, batch):
        """q_k(θ) (m,) from the rows' terms at θ* and η at θ."""
        return self._rows(theta, batch)[0]

    def _rows(self, theta, batch):
        """(q_k (m,), the rows' terms at θ*, u = η(θ) − η(θ*) (m, p))."""
        terms = self.view.row_terms(self.center, batch)
        u = self.view.eta(theta, batch) - np.column_stack(terms.eta)
        q = eta_taylor(self.order, terms, u.T)
        return np.broadcast_to(q, u.shape[:1]), terms, u

    def rows_value_and_grad(self, theta, batch):
        """q_k(θ) (m,) and ∇q_k(θ) = Dφ(θ)ᵀ J_kᵀ (∇f_k* + F''_k* u_k) (m, d)."""
        q, terms, u = self._rows(theta, batch)
        if self.order == 0:
            return q, np.zeros((q.shape[0], self.tall.ndim))
        cotangent = np.column_stack([np.broadcast_to(g, q.shape) for g in terms.first])
        if self.order == 2:
            for (j, k), g in terms.second.items():
                cotangent[:, j] += g * u[:, k]
                if j != k:
                    cotangent[:, k] += g * u[:, j]
        _, jac = self.view.phi_offset_and_jacobian(batch)
        return q, np.einsum("kj,kjr,rd->kd", cotangent, jac, self.view.phi.jacobian(theta))


def make_proxy(tall, view, center, order=2, *, chunk_size=DEFAULT_CHUNK_SIZE):
    """The Taylor proxy of ``tall`` around ``center``: in η (:class:`RowFreeTaylorProxy`) when the
    distributional-regression ``view`` has its parameters affine in a row-free φ(θ), else in θ.
    """
    if view is not None and view.phi is not None:
        return RowFreeTaylorProxy(tall, view, center, order, chunk_size=chunk_size)
    return TaylorProxy(tall, center, order, chunk_size=chunk_size)


def eta_taylor(order, at_center, u):
    """The Taylor expansion of f in η at θ*, q_k = f_k* + Σ_j ∂_j f_k* u_kj + ½ Σ_jl ∂_jl f_k* u_kj u_kl,
    truncated at ``order``, for ``at_center`` (:class:`~pymc_subsample.model.distributional.RowTerms`)
    and u = [η_j(θ) − η_j(θ*)] (arrays or PyTensor tensors: the estimator's graph and the rows in
    NumPy share it).
    """
    slope = sum(g * u[j] for j, g in enumerate(at_center.first)) if order >= 1 else None
    # ∂_jk f u_j u_k over j ≤ k: the pairs j < k stand for both (j, k) and (k, j)
    curvature = (sum((1 if j == k else 2) * g * u[j] * u[k] for (j, k), g in at_center.second.items())
                 if order == 2 else None)
    return truncate(order, at_center.value, slope, curvature)


def eta_differences_at_thetas(view, order, thetas, batch, at_center):
    """d_k = f(y_k, η_k(θ)) − q_k(θ) of the rows of ``batch`` at each row of ``thetas`` (k, d), shape
    (k, m), in NumPy: q_k the proxy in η (:func:`eta_taylor`) from the rows' terms at θ* ``at_center``
    (:class:`~pymc_subsample.model.distributional.RowTerms`), the formula of the estimator's graph
    (:func:`~pymc_subsample.estimators.glm_differences.glm_differences_graph`); η and f at all k
    points from one call of the view's
    :meth:`~pymc_subsample.model.distributional.DistributionalRegression.values_at_thetas`.
    """
    etas, value = view.values_at_thetas(thetas, batch)
    u = [eta - eta_center for eta, eta_center in zip(etas, at_center.eta, strict=True)]
    return np.asarray(value - eta_taylor(order, at_center, u), dtype=float)


def taylor_sum(order, x, total, center, linear, quadratic):
    """Σ_k q_k = Σℓ* + Aᵀv + ½vᵀBv, v = x − ``center``, truncated at ``order``, and its gradient in x,
    A + Bv (Dang et al. 2019 eq. 4.7), in NumPy: for coordinates θ (:class:`TaylorProxy`) or φ
    (:class:`RowFreeTaylorProxy`'s sums in φ).
    """
    v = x - center
    if order == 0:
        return float(total), np.zeros_like(v)
    value, grad = total + linear @ v, np.array(linear, dtype=float)
    if order == 2:
        curved = quadratic @ v
        value += 0.5 * v @ curved
        grad += curved
    return float(value), grad


def truncate(order, at_center, slope, curvature):
    """The proxy q = ℓ(θ*) + slope + ½ curvature, truncated at ``order`` (arrays or PyTensor tensors)."""
    q = at_center
    if order >= 1:
        q = q + slope
    if order == 2:
        q = q + 0.5 * curvature
    return q
