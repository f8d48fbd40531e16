"""The perturbed HMC-ECS estimate of a regression affine in θ, with only f compiled from the model.

For rows ℓ_k(θ) = f(y_k, η_k(θ)) with η_k = η_k(0) + J_k θ exactly (η_k ∈ R^p;
:mod:`~pymc_subsample.model.distributional`), the estimate of
:meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_with_exact` (Dang et al. 2019
eqs. 4.1-4.5) needs from the model only f(y_k, ·) and ∂f/∂η_j at the batch's η_k, elementwise, and
log p(θ) with its gradient. Everything else is the same arithmetic for every such model:

    η_k = η_k(0) + J_k θ,   u_k = η_k − η_k*,   d_k = f(y_k, η_k) − q_k(u_k)   (q_k: eq. 4.3 in η),
    ℓ̂ − Σq = Σ_{k∈E} d_k + (n_R/m) Σ_{k∈R} d_k,   σ̂² = (n_R²/m²) Σ_{k∈R} (d_k − d̄_R)²,
    ∇_θ (ℓ̂ − σ̂²/2) = Σ_k c_k J_kᵀ (∂f/∂η(η_k) − ∂q_k/∂u),
    c_k = 1 (k ∈ E),   c_k = n_R/m − (n_R²/m²)(d_k − d̄_R) (k ∈ R).

So :class:`EtaPerturbedFunction` compiles one PyTensor function of (θ, η, batch) with outputs log
p(θ), its gradient, f and ∂f/∂η, all elementwise or in θ (one fused loop over the rows), and runs
the rest in :func:`perturbed_sums`, a Numba kernel of this package cached on disk. Why: compiled
as one graph with η = Xθ and its reverse pass, the estimate was the largest Numba compilation of a
first run, larger than PyMC's own ``logp_dlogp``; measured on a cold PyTensor cache (CPU s, m =
1000): logistic 10.4 against 1.9 s for the function here, StudentT 16.7 against 3.3 s. A call
costs 0-15 µs more (three calls from Python where the graph was one; m = 1000, 2026-11-30).

J_k and η_k(0) of every row are read once, in one pass through NumPy
(:meth:`~pymc_subsample.model.distributional.DistributionalRegression.eta_offset_and_jacobian`),
and kept (:func:`kept_affine_rows`): a batch reads its rows' by index, where computing them per
batch would cost 80-250 µs (η at d + 1 points on PyTensor's Python linker), about an iteration.
Group effects read by index (a[g]) make J dense in every group's coordinate: such models keep the
whole graph (:meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_function`).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt

from pymc_subsample.model.compile import compile_function

__all__ = ["KEPT_AFFINE_MAX_VALUES", "AffineRows", "EtaPerturbedFunction", "affine_eta", "affine_rows",
           "kept_affine_rows", "perturbed_sums"]

#: η's offsets and Jacobians of all N rows, (d + 1) values a row for each η_j that differs between
#: rows, are kept up to this many values (320 MB): 10⁶ rows of a logistic regression with d = 30 fit
#: (the rows' own X is 240 MB)
KEPT_AFFINE_MAX_VALUES = 40_000_000


class AffineRows(NamedTuple):
    """η_k = η_k(0) + J_k θ of a set of rows: the η_j that differ between rows as ``offset`` (p_v, n)
    and ``jacobian`` (p_v, n, d); those the same on every row (a scale, a shape) once, as
    ``constant_offset`` (p_c,) and ``constant_jacobian`` (p_c, d); ``slot`` (p,): η_j's row in
    the former (≥ 0), or −1 − its row in the latter.
    """

    offset: np.ndarray
    jacobian: np.ndarray
    constant_offset: np.ndarray
    constant_jacobian: np.ndarray
    slot: np.ndarray

    @property
    def constant(self) -> tuple:
        return tuple(bool(s < 0) for s in self.slot)

    def rows(self, rows) -> AffineRows:
        """The same of the rows ``rows`` (indices into these)."""
        return self._replace(offset=np.ascontiguousarray(self.offset[:, rows]),
                             jacobian=np.ascontiguousarray(self.jacobian[:, rows]))


def kept_affine_rows(view, n_rows, ndim, slices, chunk_size, varying=None) -> AffineRows | None:
    """:class:`AffineRows` of every row, from ``slices(start, stop)`` chunk by chunk, or None where
    their η_j that differ between rows would hold more than :data:`KEPT_AFFINE_MAX_VALUES` values.

    The η_j the same on every row of the first chunk are taken as constant and only checked against
    it in the others (then read again as varying, where one is not): a scale's J is not written N
    times. ``varying``: the η_j known to differ between rows.
    """
    # measured at 10⁶ rows (StudentT, p = 3, d = 5): 0.45 s with every η_j written per row, the
    # (p, N, d) copies most of it; η at the d + 1 points 0.06 s
    p = view.n_eta
    offset = jacobian = constant = None
    for start in range(0, n_rows, chunk_size):
        stop = min(start + chunk_size, n_rows)
        chunk_offset, chunk_jacobian = view.eta_offset_and_jacobian(slices(start, stop))  # (m, p), (m, p, d)
        if constant is None:
            same = _same_on_every_row(chunk_offset, chunk_jacobian, chunk_offset[0], chunk_jacobian[0])
            constant = same & ~(np.zeros(p, dtype=bool) if varying is None else varying)
            constant_offset, constant_jacobian = chunk_offset[0, constant], chunk_jacobian[0, constant]
            p_varying = p - int(constant.sum())
            if p_varying * (ndim + 1) * n_rows > KEPT_AFFINE_MAX_VALUES:
                return None
            offset, jacobian = np.empty((p_varying, n_rows)), np.empty((p_varying, n_rows, ndim))
        else:
            same = _same_on_every_row(chunk_offset[:, constant], chunk_jacobian[:, constant], constant_offset,
                                      constant_jacobian)
            if not same.all():  # read again, with those η_j as varying
                differs = ~constant
                differs[np.flatnonzero(constant)[~same]] = True
                return kept_affine_rows(view, n_rows, ndim, slices, chunk_size, varying=differs)
        offset[:, start:stop] = chunk_offset[:, ~constant].T
        jacobian[:, start:stop] = np.moveaxis(chunk_jacobian[:, ~constant], 1, 0)
    return AffineRows(offset, jacobian, constant_offset.copy(), np.ascontiguousarray(constant_jacobian),
                      _slots(constant))


def _same_on_every_row(offset, jacobian, offset_value, jacobian_value):
    """Per η_j: whether every row's η_j(0) (``offset`` (m, p)) and J (``jacobian`` (m, p, d)) equal
    ``offset_value`` (p,) and ``jacobian_value`` (p, d).
    """
    return (offset == offset_value).all(axis=0) & (jacobian == jacobian_value).all(axis=(0, 2))


def affine_rows(offset, jacobian) -> AffineRows:
    """:class:`AffineRows` of η(0) ``offset`` (p, n) and J ``jacobian`` (p, n, d)."""
    constant = _same_on_every_row(offset.T, np.moveaxis(jacobian, 1, 0), offset[:, 0], jacobian[:, 0])
    return AffineRows(np.ascontiguousarray(offset[~constant]), np.ascontiguousarray(jacobian[~constant]),
                      offset[constant, 0].copy(), np.ascontiguousarray(jacobian[constant, 0]),
                      _slots(constant))


def _slots(constant) -> np.ndarray:
    """:attr:`AffineRows.slot` of the η_j marked ``constant``: each one's row among its kind."""
    return np.where(constant, -np.cumsum(constant), np.cumsum(~constant) - 1).astype(np.int64)


@numba.njit(cache=True)
def affine_eta(offset, jacobian, constant_offset, constant_jacobian, slot, theta):
    """η (p, m) at θ of :class:`AffineRows`' arrays: η_k = η_k(0) + J_k θ, each constant η_j on every row."""
    # loops, not np.dot: as fast at these sizes, and Numba compiles them in a fraction of the time
    m, d = jacobian.shape[1], theta.shape[0]
    eta = np.empty((slot.shape[0], m))
    for j in range(slot.shape[0]):
        if slot[j] >= 0:
            v = slot[j]
            for k in range(m):
                total = offset[v, k]
                for i in range(d):
                    total += jacobian[v, k, i] * theta[i]
                eta[j, k] = total
        else:
            c = -1 - slot[j]
            total = constant_offset[c]
            for i in range(d):
                total += constant_jacobian[c, i] * theta[i]
            eta[j, :] = total
    return eta


@numba.njit(cache=True, fastmath=True)
def perturbed_sums(eta, jacobian, constant_jacobian, slot, at_eta, centre, pairs, order, subsampled, n_rest,
                   m_rest):
    """(ℓ̂ − Σq − σ̂²/2, its gradient in θ, σ̂²) of the module docstring's formulas.

    ``eta`` (p, m) at θ; ``jacobian``, ``constant_jacobian``, ``slot``: J as :class:`AffineRows`
    holds it; ``at_eta`` (1 + p, m): f and ∂f/∂η_j at ``eta``;
    ``centre`` (2p + 1 + n_pairs, m): the rows' terms at θ* (η*, f*, ∂f*, ∂²f*: the order of
    :meth:`~pymc_subsample.model.distributional.RowTerms.flat`), with ``pairs`` (n_pairs, 2) the
    (j, l), j ≤ l, of ∂²f*; the proxy of ``order`` 0, 1 or 2; ``subsampled`` (m,) 1 for the rows
    of R, 0 for those of E; n_R; m = Σ subsampled.
    """
    p, m = eta.shape
    u = eta - centre[:p]
    f_c, df_c, d2f_c = centre[p], centre[p + 1: 2 * p + 1], centre[2 * p + 1:]
    # slope: ∂d_k/∂η_j = ∂f/∂η_j − ∂q_k/∂u_j; d: f − q_k
    slope = at_eta[1:].copy()
    d = at_eta[0] - f_c
    if order >= 1:
        for j in range(p):
            for k in range(m):
                d[k] -= df_c[j, k] * u[j, k]
                slope[j, k] -= df_c[j, k]
    if order == 2:
        for i in range(pairs.shape[0]):
            j, i2 = pairs[i, 0], pairs[i, 1]
            for k in range(m):
                h = d2f_c[i, k]
                if j == i2:
                    d[k] -= 0.5 * h * u[j, k] * u[j, k]
                    slope[j, k] -= h * u[j, k]
                else:
                    d[k] -= h * u[j, k] * u[i2, k]
                    slope[j, k] -= h * u[i2, k]
                    slope[i2, k] -= h * u[j, k]
    total, s1 = 0.0, 0.0
    for k in range(m):
        total += d[k]
        s1 += subsampled[k] * d[k]
    mean = s1 / m_rest
    s2 = 0.0
    for k in range(m):
        s2 += subsampled[k] * (d[k] - mean) ** 2
    scale = n_rest / m_rest
    sigma2 = scale * scale * s2
    value = (total - s1) + scale * s1 - 0.5 * sigma2
    # ∂(value)/∂d_k: 1 on E; n_R/m − (n_R²/m²)(d_k − d̄) on R (the second from −σ̂²/2)
    c = 1.0 + subsampled * (scale - scale * scale * (d - mean) - 1.0)
    grad = np.zeros(jacobian.shape[2])
    for j in range(p):
        v = slot[j]
        if v >= 0:
            for k in range(m):
                w = slope[j, k] * c[k]
                for i in range(grad.shape[0]):
                    grad[i] += w * jacobian[v, k, i]
        else:
            w = 0.0
            for k in range(m):
                w += slope[j, k] * c[k]
            grad += w * constant_jacobian[-1 - v]
    return value, grad, sigma2


class EtaPerturbedFunction:
    """The perturbed estimate (θ, n_R, m, r, batch pieces) ↦ (log p(θ) + ℓ̂ − Σq − σ̂²/2, gradient, σ̂²)
    of a target whose rows are affine in θ, called as the target's compiled
    :meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_function` is; its arguments
    after θ from :meth:`arguments`.
    """

    def __init__(self, target, constant):
        view, tall = target.glm, target.tall
        self.order, self.n_eta = target.order, view.n_eta
        self.pairs = np.array(view.pairs, dtype=np.int64).reshape(-1, 2)
        self.constant = constant
        key = ("EtaPerturbedFunction", "prior, f and ∂f/∂η", self.constant)
        self.rows_function = tall.kept_function(key, lambda: _rows_function(tall, view, self.constant))

    def arguments(self, batch, terms, affine, subsampled, n_rest) -> tuple:
        """The arguments after θ on ``batch`` with the rows' ``terms`` at θ* (flat, as
        :class:`~pymc_subsample.model.distributional.RowTerms`) and their :class:`AffineRows`
        ``affine``: the rows marked 1 in ``subsampled`` a subsample of ``n_rest`` rows, the others
        computed exactly.
        """
        centre = np.array(terms, dtype=float)
        return (float(n_rest), float(subsampled.sum()), subsampled, affine, tuple(batch), centre)

    def __call__(self, theta, n_rest, m_rest, subsampled, affine, batch, centre):
        eta = affine_eta(*affine, theta)
        etas = [np.array(e[0]) if c else e for e, c in zip(eta, self.constant, strict=True)]
        prior, prior_grad, *at_eta = self.rows_function(theta, *etas, *batch)
        value, grad, sigma2 = perturbed_sums(eta, affine.jacobian, affine.constant_jacobian, affine.slot,
                                             np.array(at_eta), centre, self.pairs, self.order, subsampled,
                                             n_rest, m_rest)
        return float(prior) + value, prior_grad + grad, sigma2


def _rows_function(tall, view, constant):
    """Log p(θ), its gradient, f(y_k, η_k) and ∂f/∂η_j (one value a row each) as a function of (θ,
    η_1..η_p, batch), with the η_j that are the same on every row (``constant``) scalars.

    Why scalars: f's special functions of such an η (a StudentT's ν and σ, a negative binomial's α)
    are then computed once a call, not once a row; their rows' ∂f/∂η_j come by forward mode.
    """
    # measured at m = 1000 (StudentT): 83 µs a call with η_ν and η_σ as vectors
    etas = [pt.dscalar(f"eta_{j}") if c else pt.dvector(f"eta_{j}") for j, c in enumerate(constant)]
    value = view.loglik_graph(etas)
    one = pt.constant(1.0, dtype="float64")
    slopes = [pytensor.pushforward(value, eta, one, disconnected_outputs="ignore") if c else
              pytensor.grad(value.sum(), eta, disconnected_inputs="ignore")
              for eta, c in zip(etas, constant, strict=True)]
    # every output one value a row: a slope that does not depend on the row is broadcast
    slopes = [pt.second(value, slope) for slope in slopes]
    prior = tall.prior_graph
    return compile_function([tall.theta, *etas, *tall.batch_inputs],
                            [prior, tall.gradient(prior), value, *slopes])
