"""What the Zig-Zag thinning bound needs from a model: per-row Lipschitz constants and a quadratic prior.

For a GLM row ℓ_k = f(y_k, η_k), η_k affine in θ with Jacobian J_k, and |f''| ≤ κ, the change of
∂_jℓ_k between θ* and θ is at most κ |J_kj| |J_k·(θ − θ*)| (the quantity behind El hanchi's (2019)
Lipschitz importance-sampling bounds, here per coordinate). The bound of
:mod:`pymc_subsample.kernels.zigzag` needs, per coordinate and in two norms, its maximum over all
N rows relative to each row's sampling weight, and the weights themselves when rows are drawn in
proportion to them: one streamed pass over the rows, with the GLM view's J on each chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from numba import njit
from pytensor.graph.replace import vectorize_graph
from pytensor.graph.traversal import applys_between
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import Dot

from pymc_subsample.families import GLM_FAMILIES
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.model.compile import compile_python, has_blockwise
from pymc_subsample.model.glm import observed_family
from pymc_subsample.model.op_patterns import is_advanced_indexing

__all__ = ["ROW_CHOICES", "SUPPORTED", "RowConstants", "check_family", "eta_at_points", "glm_row_constants",
           "glm_row_sampler", "guide_table", "lipschitz_row_weights", "quadratic_prior",
           "row_lipschitz_maxima", "weighted_rows"]

#: how ZigZag draws the row of each candidate switch
ROW_CHOICES = ("lipschitz", "uniform")
#: rows per entry of the guide table of the weighted row draw (8 bytes an entry: 1 byte a row)
GUIDE_ROWS = 8
#: the models whose rows have a thinning bound, as ZigZag's messages name them
SUPPORTED = (
    "one observed pm.Bernoulli(logit_p=η) (or p=pm.math.sigmoid(η)) or pm.Normal(mu=η, sigma=a known "
    "number) with η affine in the free variables (e.g. X @ beta + a), and Normal, MvNormal or flat "
    "priors (logistic and linear regression)"
)
POISSON_LIMITATION = (
    "Poisson regression (pm.Poisson(mu=pm.math.exp(η))) is not supported yet: the curvature e^η of "
    "its rows is unbounded, so no thinning bound holds along every segment"
)


def check_family(model):
    """Refuse a likelihood without a Zig-Zag rate bound before any set-up: a look at the observed
    distribution only (the link and the affinity of η are the GLM view's checks).
    """
    observed = model.observed_RVs
    if len(observed) != 1:
        raise ValueError(f"ZigZag supports {SUPPORTED}; this model has {len(observed)} observed variables.")
    family = observed_family(model)
    if family == "poisson_log":
        raise ValueError(f"{POISSON_LIMITATION}. ZigZag supports {SUPPORTED}. For Poisson regression use "
                         "pms.HMCECS or pms.SubsampleMH.")
    if family is None or GLM_FAMILIES[family].score is None:
        raise ValueError(f"ZigZag supports {SUPPORTED}; observed variable {observed[0].name!r} has "
                         f"distribution {type(observed[0].owner.op).__name__}. Use pms.HMCECS or "
                         "pms.SubsampleMH.")


def lipschitz_row_weights(jac, inv_r):
    """w_k = ‖J_k‖_∞ ‖R⁻ᵀJ_k‖₂ for the rows of ``jac`` (m, d): each row's Lipschitz constant of the
    largest of its d gradient coordinates in the bound's metric, without κ (the sampling weights of
    :mod:`pymc_subsample.kernels.zigzag`'s rows).
    """
    jac = np.asarray(jac, dtype=float)
    return np.abs(jac).max(axis=1) * np.linalg.norm(jac @ inv_r, axis=1)


def row_lipschitz_maxima(jac, inv_r, weights=None):
    """Per-coordinate maxima over the rows of ``jac`` of |J_kj| ‖R⁻ᵀJ_k‖₂ / w_k and |J_kj| ‖J_k‖₁ / w_k.

    Parameters
    ----------
    jac : ndarray (m, d)
        J_k = ∂η_k/∂θ for m rows.
    inv_r : ndarray (d, d)
        R⁻¹, R the upper Cholesky factor of the metric P = RᵀR; (R⁻ᵀJ_k)ᵀ = J_kᵀR⁻¹.
    weights : ndarray (m,), optional
        w_k ≥ 0, the rows' sampling weights; None: uniform (w ≡ 1). A row of weight 0 is never
        drawn and must have J_k = 0 (its gradient is then 0 and it adds nothing to any estimate).

    Returns
    -------
    a, b : ndarray (d,)
        Multiply by κ to get the constants a_j, b_j of the thinning bound
        (:mod:`pymc_subsample.kernels.zigzag`). Maxima combine over chunks by ``np.maximum``, so a
        full pass is one streamed reduction.
    """
    jac = np.asarray(jac, dtype=float)
    abs_jac = np.abs(jac)
    metric_norm = np.linalg.norm(jac @ inv_r, axis=1)
    l1_norm = abs_jac.sum(axis=1)
    if weights is None:
        scale = np.ones(len(jac))
    else:
        weights = np.asarray(weights, dtype=float)
        if np.any((weights <= 0) & (abs_jac.max(axis=1, initial=0.0) > 0)):
            raise ValueError("a row with J_k ≠ 0 has sampling weight 0: it would never be drawn, and the "
                             "estimates would be biased. Give every row with J_k ≠ 0 a positive weight.")
        scale = np.divide(1.0, weights, out=np.zeros(len(jac)), where=weights > 0)
    a = (abs_jac * (metric_norm * scale)[:, None]).max(axis=0, initial=0.0)
    b = (abs_jac * (l1_norm * scale)[:, None]).max(axis=0, initial=0.0)
    return a, b


@dataclass(frozen=True)
class RowConstants:
    """What one pass over the rows gives the Zig-Zag bound and its row sampler.

    ``a``, ``b`` (d,): max_k |J_kj| ‖R⁻ᵀJ_k‖₂ / w_k and max_k |J_kj| ‖J_k‖₁ / w_k (without κ);
    ``weight_total``: W = Σ_k w_k; ``cumulative_weights`` (N,): the running sums of w_k, from
    which rows are drawn with probability w_k/W, or None for uniform rows (w ≡ 1, W = N).
    """

    a: np.ndarray
    b: np.ndarray
    weight_total: float
    cumulative_weights: np.ndarray | None = None


def glm_row_constants(glm, inv_r, *, rows="lipschitz", chunk_size=DEFAULT_CHUNK_SIZE) -> RowConstants:
    """The constants of the thinning bound over the N rows of ``glm.tall``, in one chunked pass.

    Parameters
    ----------
    glm : LinearPredictorModel
    inv_r : ndarray (d, d)
        R⁻¹, R the upper Cholesky factor of the metric of the bound.
    rows : {"lipschitz", "uniform"}
        "lipschitz": rows drawn with probability ∝ w_k = ‖J_k‖_∞ ‖R⁻ᵀJ_k‖₂, which keeps the bound
        independent of the most extreme rows (kernels.zigzag docstring); costs 8 bytes per row.
        "uniform": the paper's uniform rows.
    chunk_size : int
        Rows per chunk (contiguous views of the row data, no copy).
    """
    if rows not in ROW_CHOICES:
        raise ValueError(f"rows must be one of {ROW_CHOICES}; got {rows!r}.")
    tall = glm.tall
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    a = np.zeros(tall.ndim)
    b = np.zeros(tall.ndim)
    weights = np.empty(tall.n_rows) if rows == "lipschitz" else None
    for start in range(0, tall.n_rows, chunk_size):
        stop = min(start + chunk_size, tall.n_rows)
        jac = glm.eta_jacobian(tall.row_slice(start, stop))
        chunk_w = None
        if weights is not None:
            chunk_w = weights[start:stop] = lipschitz_row_weights(jac, inv_r)
        chunk_a, chunk_b = row_lipschitz_maxima(jac, inv_r, chunk_w)
        np.maximum(a, chunk_a, out=a)
        np.maximum(b, chunk_b, out=b)
    if weights is None:
        return RowConstants(a, b, float(tall.n_rows))
    cumulative = np.cumsum(weights, out=weights)  # in place: one array of N numbers in all
    if not cumulative[-1] > 0:
        raise ValueError("every row has J_k = ∂η_k/∂θ = 0: the likelihood does not depend on the free "
                         "variables, so there is nothing to sample from the rows.")
    return RowConstants(a, b, float(cumulative[-1]), cumulative)


def glm_row_sampler(glm, center, constants=None, inv_r=None):
    """``draw(rng, size) -> (J, y, η(θ*), 1/w)`` for rows drawn with replacement.

    Uniform rows (``constants`` None or without weights: 1/w = 1), or rows drawn with probability
    w_k/W by inverting the running sums of :class:`RowConstants` (:func:`weighted_rows`). The drawn
    rows' w_k are computed again from their J_k (``inv_r`` as in :func:`glm_row_constants`), not
    recovered as differences of the running sums: those lose digits for rows far below the mean
    weight, and the bound was built from exactly these w_k. Rows are gathered once per batch of
    proposals (``RowStream``), so a proposal costs no compiled call: the kernel evaluates ∂ℓ/∂η of
    its row from these. J_k and η_k(θ*) of a batch come from η at 0, at e_1, …, e_d and at θ* in
    one call (:func:`eta_at_points`) where the η graph vectorises over θ, else from d + 2 calls.
    """
    tall = glm.tall
    center = np.asarray(center, dtype=float)
    cumulative = None if constants is None else constants.cumulative_weights
    d = tall.ndim
    eta_at = eta_at_points(glm, np.vstack([np.zeros(d), np.eye(d), center]))
    guide = None if cumulative is None else guide_table(cumulative)

    def draw(rng, size):
        if cumulative is None:
            idx = rng.integers(0, tall.n_rows, size=size)
        else:
            idx = weighted_rows(cumulative, guide, rng.random(size) * cumulative[-1])
        batch = tall.gather(idx)
        if eta_at is None:
            jac, eta_center = glm.eta_jacobian(batch), glm.eta(center, batch)
        else:
            eta = eta_at(batch)  # (d + 2, m): η at 0, at e_1, …, e_d, at θ*
            jac, eta_center = (eta[1:-1] - eta[0]).T, eta[-1]
        inv_weight = np.ones(size) if cumulative is None else 1.0 / lipschitz_row_weights(jac, inv_r)
        return jac, glm.observed(batch), eta_center, inv_weight

    return draw


def guide_table(cumulative, rows_per_entry=GUIDE_ROWS):
    """Entry b (of G + 1, G = ⌈N/``rows_per_entry``⌉): the first row k with cumulative[k] > b·W/G.

    The guide table of Chen & Asau (1974) for inverting the running sums ``cumulative`` (W its last):
    a u in [bW/G, (b + 1)W/G) falls on a row between entries b and b + 1.
    """
    cumulative = np.asarray(cumulative, dtype=float)
    entries = max(1, -(-len(cumulative) // rows_per_entry))
    return np.searchsorted(cumulative, np.arange(entries + 1) * (cumulative[-1] / entries), side="right")


@njit(cache=True)
def weighted_rows(cumulative, guide, u):
    """``min(searchsorted(cumulative, u, side="right"), N − 1)`` for u (m,) in [0, W), W = cumulative[-1].

    Each search runs between the guide-table entries (:func:`guide_table`) of u's neighbouring
    buckets (one bucket either side covers the rounding of u·G/W), so it reads a few rows near u
    instead of log₂ N rows across the array; the rows found are the same.
    """
    # measured at N = 10⁶: NumPy's searchsorted cost 0.17 µs a row, most of a weighted row draw's
    # time besides J
    n = cumulative.size
    entries = guide.size - 1
    scale = entries / cumulative[n - 1]
    out = np.empty(u.size, dtype=np.int64)
    for i in range(u.size):
        b = min(max(int(u[i] * scale), 0), entries - 1)
        lo = guide[max(b - 1, 0)]
        hi = min(guide[min(b + 2, entries)] + 1, n)
        while lo < hi:
            mid = (lo + hi) // 2
            if cumulative[mid] <= u[i]:
                lo = mid + 1
            else:
                hi = mid
        out[i] = min(lo, n - 1)
    return out


def eta_at_points(glm, points, check_rows=8):
    """``eta_at(batch) -> (k, m)``: η of a batch's m rows at the k points θ (rows of ``points``) in one
    call, or None where that call would loop.

    The GLM view's η graph vectorised over θ (for η = Xβ + a, one matrix product); None where its
    graph indexes rows by arrays (PyTensor's vectorising rewrites stall on those), where the
    vectorised graph holds a ``Blockwise`` other than a batched product (a Python loop over the
    points), or where it differs from the view's own η on ``check_rows`` rows.
    """
    # measured at d = 31, 4096 rows: 0.18 µs a row against 0.90 for a call per point (η at the
    # d + 1 points of J), the other core busy. On PyTensor's Python linker: the graph is one
    # matrix product, which NumPy runs as fast (0.063 against 0.058 µs a row) and which compiles
    # in 0.02 s where Numba took 6.8 s on a cold cache
    tall = glm.tall
    inputs = [tall.theta, *tall.batch_inputs]
    if any(is_advanced_indexing(node) for node in applys_between(inputs, [glm.eta_rows])):
        return None
    thetas = pt.matrix("thetas", dtype=tall.theta.dtype)
    try:
        eta = vectorize_graph(glm.eta_rows, {tall.theta: thetas})
        if any(isinstance(node.op, Blockwise) and not isinstance(node.op.core_op, Dot)
               for node in applys_between([thetas, *tall.batch_inputs], [eta])):
            return None
        function = compile_python([thetas, *tall.batch_inputs], eta, arrays=True)
    except (NotImplementedError, TypeError, ValueError):
        return None
    if has_blockwise(function):
        return None
    points = np.asarray(points, dtype=tall.theta.dtype)

    def eta_at(batch):
        return np.asarray(function(points, *batch), dtype=float).reshape(len(points), -1)

    batch = tall.gather(np.arange(min(check_rows, tall.n_rows)))
    expected = np.stack([glm.eta(p, batch) for p in points])
    if not np.allclose(eta_at(batch), expected, rtol=1e-10, atol=1e-10 * (1.0 + np.abs(expected).max())):
        return None
    return eta_at


def quadratic_prior(tall, center, n_checks=3, rtol=1e-6):
    """∇log p(θ*) and the constant Hessian H₀ of a quadratic log-prior, or a ValueError.

    The Zig-Zag bound keeps the prior part of ∂U exact and linear along each segment, which
    needs ∇log p affine in θ (Normal, MvNormal or flat priors on the unconstrained free
    variables). Checked at ``n_checks`` points around θ* against the central-difference Hessian.
    """
    center = np.asarray(center, dtype=float)
    grad_center = np.asarray(tall.prior_value_and_grad(center, setup=True)[1], dtype=float)
    hess = tall.prior_hessian(center)
    rng = np.random.default_rng(0)
    for _ in range(n_checks):
        step = rng.normal(scale=1.0 + np.abs(center))
        grad = np.asarray(tall.prior_value_and_grad(center + step, setup=True)[1], dtype=float)
        expected = grad_center + hess @ step
        scale = 1.0 + np.abs(grad_center).max() + np.abs(hess @ step).max()
        if not np.allclose(grad, expected, rtol=rtol, atol=rtol * scale):
            names = [v.name for v in tall.value_vars]
            raise ValueError(
                "ZigZag's thinning bound needs a Gaussian prior (pm.Normal, pm.MvNormal, or a flat "
                "prior) on every free variable, so that the prior's gradient is linear along each "
                f"segment; the prior of {names} (on the unconstrained scale) is not. Put Normal "
                "priors on the regression coefficients, or use pms.HMCECS or pms.SubsampleMH."
            )
    return grad_center, hess
