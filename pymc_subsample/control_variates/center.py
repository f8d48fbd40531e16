"""The centre θ* of the control variates: a full-data MAP computed in row chunks."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
from scipy import optimize

from pymc_subsample.control_variates.expansion import PhiCoordinates, ThetaCoordinates, expansion_steps
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, chunked_sum
from pymc_subsample.model.distributional import JACOBIAN_GRADIENT_MAX_D
from pymc_subsample.model.tall import as_tall_model

__all__ = ["find_map", "find_map_theta"]


def find_map_theta(
    tall,
    *,
    start=None,
    rows=None,
    chunk_size=DEFAULT_CHUNK_SIZE,
    maxiter=500,
    tol=1e-9,
    ftol=1e-11,
    polish=True,
    maxfun=15_000,
):
    """MAP on the flat unconstrained vector; returns (theta, scipy OptimizeResult).

    With ``rows`` the log-likelihood of those rows is scaled by N / len(rows), so the
    result approximates the full-data MAP (a cheap centre, Dang et al. 2019 §6.5). ``maxfun``: the
    evaluations of the log posterior L-BFGS may make (``result.success`` is False where they ran out).
    """
    theta0 = tall.initial_theta if start is None else np.asarray(start, dtype=float)
    scale = 1.0
    if rows is not None:
        rows = np.asarray(rows)
        if rows.ndim != 1 or rows.size < 1 or rows.min() < 0 or rows.max() >= tall.n_rows:
            raise ValueError(f"rows must be a non-empty 1-d array of indices in 0..{tall.n_rows - 1}.")
        scale = tall.n_rows / rows.size

    def neg_logp(theta):
        lp, dlp = tall.prior_value_and_grad(theta, setup=True)
        ll, dll = chunked_sum(tall, tall.loglik_sum_value_and_grad, theta, rows=rows, chunk_size=chunk_size)
        value = -(float(lp) + scale * float(ll))
        if not np.isfinite(value):
            return np.inf, np.zeros_like(theta)
        return value, -(dlp + scale * dll)

    result = optimize.minimize(
        neg_logp,
        theta0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": maxiter, "maxfun": maxfun, "ftol": ftol, "gtol": tol, "maxcor": 20},
    )
    theta = _newton_polish(tall, result.x, rows, scale, chunk_size) if polish else result.x
    return theta, result


def _newton_polish(tall, theta, rows, scale, chunk_size, steps=2):
    """A few exact Newton steps after L-BFGS: L-BFGS stalls at ~1e-6 relative accuracy on
    sums of 10^5+ terms (its line search sees rounding noise); Newton with the chunked
    Hessian converges quadratically from there at the cost of ~2 passes per step.
    """
    for _ in range(steps):
        _, dlp = tall.prior_value_and_grad(theta, setup=True)
        _, dll, hll = chunked_sum(
            tall, tall.loglik_sum_value_grad_hessian, theta, rows=rows, chunk_size=chunk_size
        )
        step, _ = _newton_step(tall, theta, dlp + scale * dll, scale * hll)
        if step is None:
            return theta  # not locally concave: keep the L-BFGS point
        theta = theta - step
    return theta


def _newton_step(tall, theta, grad, loglik_hessian, prior_hessian=None):
    """(H⁻¹g with H = ∇²log p(θ) + ``loglik_hessian``, the Newton decrement √(gᵀ(−H)⁻¹g)), or
    (None, None) where H is not negative definite.
    """
    hess = (tall.prior_hessian(theta) if prior_hessian is None else prior_hessian) + loglik_hessian
    try:
        np.linalg.cholesky(-hess)
    except np.linalg.LinAlgError:
        return None, None
    step = np.linalg.solve(hess, grad)
    return step, np.sqrt(max(-grad @ step, 0.0))


# measured, full passes and seconds from the subset MAP / from the initial point: crossed effects
# (d = 121; L-BFGS 225-424 evaluations) 4 / 4 and 3.1-4.8 / 1.35 s at 10⁶ rows, 4 / 5 and 1.12 /
# 0.96 s at 10⁵; non-centred varying slopes over 1000 groups (d = 2003, 173 evaluations) 6 / 4 and
# 14.5 / 7.9 s; the zoo's non-centred model (d = 23, 16 evaluations) 2 / 3 and 0.21 / 0.77 s at 10⁶
#: the subset MAP that starts the steps in φ may read the rows of this many full passes; where its
#: L-BFGS in θ needs more evaluations (a posterior curved in θ along many coordinates), the steps
#: start from the initial point, where their bounded, preconditioned expansions in φ get to the
#: mode sooner than L-BFGS in θ gets to the subset's
SUBSET_MAP_READS = 1
#: and at least this many evaluations (each costs more than its rows where they are few)
SUBSET_MAP_MIN_EVALUATIONS = 30
#: how far from the mode, in posterior sds (the Newton decrement), the default centre may be
CENTER_TOLERANCE = 0.05
#: subset rows per group below which the expansions in φ take B over all rows
MIN_ROWS_PER_GROUP = 200


def find_center(tall, *, chunk_size=DEFAULT_CHUNK_SIZE, warm_rows=20_000, seed=0):
    """A centre θ* for control variates: MAP of a random subset, then full-data Newton steps.

    θ* need not be the exact mode, only close to it (Dang et al. 2019 §4.2, Corollary 1 of Quiroz
    et al.). The subset MAP is ~sqrt(N/n) posterior sds from the mode. Newton steps with the
    full-data gradient and the subset's Hessian scaled by N/n (one gradient pass over the rows
    each; the subset's Hessian costs one chunk) bring it within :data:`CENTER_TOLERANCE` posterior
    sds in fewer passes than full-data L-BFGS: each step shrinks the distance by about the subset
    Hessian's relative error. Where a pass with the full-data Hessian costs about a gradient pass
    (:func:`hessian_passes_are_cheap`: the GLMs of ≤ 8 parameters on the η path), the steps are
    exact Newton steps corrected to third order by the subset (:func:`_third_order_correction`):
    two passes, the second at the centre and the proxy's own
    (:func:`~pymc_subsample.model.chunks.remembered_passes`). Where the rows are affine in a
    row-free φ(θ) (a non-centred hierarchical model, whose log posterior is not concave in θ), the
    steps are taken in φ instead
    (:func:`~pymc_subsample.control_variates.expansion.expansion_steps`), with B over all rows,
    corrected by the subset likewise where it has at least :data:`MIN_ROWS_PER_GROUP` rows per
    group. If the steps do
    not improve the log posterior, an exact Newton step, then full-data L-BFGS, take over; where a
    Hessian on the way was not negative definite, L-BFGS from the best point seen, at once.
    """
    if tall.n_rows <= 2 * warm_rows:
        theta, _ = find_map_theta(tall, chunk_size=chunk_size, ftol=1e-9, tol=1e-5, polish=False)
        return theta
    rows = np.sort(np.random.default_rng(seed).choice(tall.n_rows, size=warm_rows, replace=False))
    view = tall.regression_view if tall.uses_eta_sums() else None
    in_phi = view is not None and view.phi is not None
    # measured at N = 10⁶, d = 30: full-data L-BFGS needed 15-25 passes; one subset-Hessian step
    # left the centre 0.8 sds from the mode, the steps to the tolerance 0.004 sds
    budget = max(SUBSET_MAP_MIN_EVALUATIONS, SUBSET_MAP_READS * tall.n_rows // warm_rows)
    start, subset = find_map_theta(tall, rows=rows, chunk_size=chunk_size, ftol=1e-9, polish=False,
                                   **({"maxfun": budget} if in_phi else {}))
    if in_phi:
        if not subset.success:
            start = tall.initial_theta  # see SUBSET_MAP_READS
        coordinates = PhiCoordinates(tall, view, chunk_size, compiled=not tall.rows_streamed)
        # B over all rows (a pass with it: 1.4 gradient passes in φ); the subset corrects each step
        # to third order where it has enough rows of every group (1,000 groups, 20 each: B's error
        # is large per group, and the steps crept (−62,272 → −61,988 → −61,974 → −61,948 against
        # the mode's −61,888) until one overshot, when the subset's B was the curvature)
        enough = coordinates.rows_per_group(rows) >= MIN_ROWS_PER_GROUP
        theta, start = expansion_steps(tall, coordinates, start, None, chunk_size, CENTER_TOLERANCE,
                                       correction_rows=rows if enough else None)
        if theta is not None:
            return theta
    theta, start_value, best, concave = _subset_newton_steps(tall, start, rows, chunk_size,
                                                             exact=hessian_passes_are_cheap(tall))
    if theta is not None:
        return theta
    if concave:
        theta = _newton_polish(tall, start, None, 1.0, chunk_size, steps=1)
        if _log_posterior(tall, theta, chunk_size) > start_value:
            return theta
    else:
        # a Hessian on the way was not negative definite: the prior's (a centred hierarchical
        # model's a ~ N(μ, σ), 10⁷ rows: a step of 93 sds from the subset MAP left the concave
        # region) or the rows' own (a non-centred τz). Expansions of the log-likelihood alone in θ,
        # with the prior exact, keep the subset-Newton steps' few passes where the rows are
        # concave (the centred model at 10⁷ rows: 3 passes against 11 of full-data L-BFGS)
        theta, best = expansion_steps(tall, ThetaCoordinates(tall, chunk_size), best, rows, chunk_size,
                                      CENTER_TOLERANCE)
        if theta is not None:
            return theta
    # where that fails too (the rows' log-likelihood not concave along the way), the exact Hessian
    # is not negative definite either: a pass of Jacobians saved (1 s of a 10⁶-row set-up)
    theta, _ = find_map_theta(tall, start=best, chunk_size=chunk_size, ftol=1e-9, tol=1e-5, polish=False)
    return theta


def hessian_passes_are_cheap(tall) -> bool:
    """Whether a full pass that sums the rows' Hessians costs about what a gradient pass does, so
    that the centre's Newton steps take the exact Hessian in the pass they make anyway.

    A distributional regression of at most :data:`JACOBIAN_GRADIENT_MAX_D` parameters reads both from
    the same row terms and η's Jacobian. An
    exact step from the subset MAP (~√(N/n) posterior sds from the mode) lands within the tolerance,
    where the subset's Hessian contracts the distance only by its relative error; and the pass at
    the centre is then the proxy's own (:func:`~pymc_subsample.model.chunks.remembered_passes`).
    Elsewhere a Hessian pass is d Hessian-vector products, or O(m d²) products of η's Jacobian.
    """
    # measured at 10⁶ rows: a Hessian pass costs 1.03-1.45 gradient passes on the zoo's GLMs,
    # 4.5 on a centred hierarchical model (d = 24)
    return tall.uses_eta_sums() and tall.ndim <= JACOBIAN_GRADIENT_MAX_D


def _subset_newton_steps(tall, start, rows, chunk_size, exact=False, max_steps=6):
    """Newton steps with the full-data gradient and the N/n-scaled Hessian of ``rows``, or, where
    ``exact`` (:func:`hessian_passes_are_cheap`), with the full-data Hessian from the same pass and
    each step corrected to third order from ``rows`` (:func:`_third_order_correction`).

    Returns (θ within :data:`CENTER_TOLERANCE` posterior sds of the mode, or None where the steps
    fail: a step that lowers the log posterior, a Hessian that is not negative definite, no
    convergence; the log posterior at ``start``; the best θ seen; whether every Hessian was
    negative definite). The distance is the Newton decrement √(gᵀ(−H)⁻¹g), in posterior sds.
    """
    theta, best, best_value, start_value, last_decrement = start, start, -np.inf, None, None
    scale = tall.n_rows / len(rows)
    for _ in range(max_steps):
        prior, dlp = tall.prior_value_and_grad(theta, setup=True)
        if exact:  # the full-data Hessian in the same pass
            loglik, dll, hll = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, theta,
                                           chunk_size=chunk_size)
        else:
            loglik, dll = chunked_sum(tall, tall.loglik_sum_value_and_grad, theta, chunk_size=chunk_size)
        value = float(prior) + float(loglik)
        value = value if np.isfinite(value) else -np.inf
        start_value = value if start_value is None else start_value
        if value < best_value:
            return None, start_value, best, True
        best, best_value = theta, value
        if not exact:
            _, _, hll = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, theta, rows=rows,
                                    chunk_size=chunk_size)
            hll = scale * hll
        prior_hessian = tall.prior_hessian(theta)
        step, decrement = _newton_step(tall, theta, dlp + dll, hll, prior_hessian)
        if step is None:
            return None, start_value, best, False
        if decrement < CENTER_TOLERANCE:
            return theta, start_value, best, True
        if exact:
            theta = _third_order_correction(tall, theta, step, prior_hessian + hll, dlp, prior_hessian, rows,
                                            chunk_size)
            continue
        # the steps contract the decrement by a steady factor (the subset Hessian's relative error:
        # 18 → 0.41 → 0.009 on logistic at 10⁶ rows); when the next is predicted at half the
        # tolerance, take the step without the gradient pass that would only confirm it
        if last_decrement is not None and decrement * (decrement / last_decrement) < 0.5 * CENTER_TOLERANCE:
            return theta - step, start_value, best, True
        last_decrement = decrement
        theta = theta - step
    return None, start_value, best, True


def _third_order_correction(tall, theta, step, hessian, prior_grad, prior_hessian, rows, chunk_size):
    """θ − ``step`` (an exact Newton step), corrected by how the log posterior's gradient there
    departs from the quadratic model at θ, as the subset ``rows`` (scaled by N/n) and the exact
    prior estimate it: r = ∇log p̃(θ − s) − ∇log p̃(θ) + H̃(θ) s ≈ ½ T[s, s], and the corrected point
    is θ − s − H(θ)⁻¹ r (a Chebyshev step, third order where Newton's is second).

    Why: from the subset MAP (~√(N/n) posterior sds from the mode) one exact step can leave the
    centre above :data:`CENTER_TOLERANCE`, which would take a third full pass; the correction costs
    two small passes over the subset, and the pass that then confirms the centre is also the
    proxy's. The subset needs only estimate r, a second-order term, so its relative error enters the
    distance as a product with the distance left by the exact step. A correction larger than half
    the step is not trusted: θ − s is returned.
    ``hessian``: H(θ); ``prior_grad``, ``prior_hessian``: the log prior's at θ.
    """
    # measured on the zoo's GLMs at 10⁶ rows: a decrement of 17-18 at the subset MAP, 0.12-0.17 sds
    # after one exact step; the subset's relative error is ~2% at 20,000 rows
    scale = tall.n_rows / len(rows)
    new = theta - step
    _, grad, subset_hessian = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, theta, rows=rows,
                                          chunk_size=chunk_size)
    _, new_grad = chunked_sum(tall, tall.loglik_sum_value_and_grad, new, rows=rows, chunk_size=chunk_size)
    _, new_prior_grad = tall.prior_value_and_grad(new, setup=True)
    residual = (new_prior_grad + scale * new_grad) - (prior_grad + scale * grad) \
        + (prior_hessian + scale * subset_hessian) @ step
    correction = np.linalg.solve(hessian, residual)
    if -(correction @ hessian @ correction) > -0.25 * (step @ hessian @ step):
        return new
    return new - correction


def _log_posterior(tall, theta, chunk_size):
    prior, _ = tall.prior_value_and_grad(theta, setup=True)
    (loglik,) = chunked_sum(tall, tall.loglik_sum_value, theta, chunk_size=chunk_size)
    value = float(prior) + float(loglik)
    return value if np.isfinite(value) else -np.inf


def find_map(
    model=None, *, rows=None, chunk_size=DEFAULT_CHUNK_SIZE, progressbar=True, start=None, maxiter=500
):
    """Full-data maximum a posteriori point, summing the log-likelihood over row chunks.

    Memory is bounded by one chunk of rows, so it works where ``pm.find_MAP`` would
    build an N-row graph. The optimiser is L-BFGS on the unconstrained space.

    Parameters
    ----------
    model : pm.Model or TallModel, optional
    rows : array of int, optional
        Fit on these rows only, with their log-likelihood scaled by N / len(rows).
    chunk_size : int
    progressbar : bool
        Print one summary line when done: L-BFGS iterations, full-data passes, final objective.
    start : dict, optional
        Starting point (value variables); defaults to the model's initial point.
    maxiter : int

    Returns
    -------
    dict
        Values of the value variables (transformed) and of the free variables, like
        ``pm.find_MAP``.
    """
    tall = as_tall_model(model)
    theta0 = None if start is None else tall.point_to_theta({**tall.initial_point, **start})
    theta, result = find_map_theta(tall, start=theta0, rows=rows, chunk_size=chunk_size, maxiter=maxiter)
    if progressbar:
        print(
            f"find_map: {result.nit} L-BFGS iterations, {result.nfev} full-data passes, "
            f"-log posterior {result.fun:.6g} ({result.message})"
        )
    if not (result.success or _converged(tall, theta)):
        warnings.warn(
            f"find_map did not converge ({result.message}); the gradient norm at the result is "
            "large. Give a better `start`, or standardise the predictors.",
            RuntimeWarning,
            stacklevel=2,
        )
    return point_from_theta(tall, theta)


def _converged(tall, theta, rtol=1e-6):
    _, dlp = tall.prior_value_and_grad(theta, setup=True)
    _, dll = chunked_sum(tall, tall.loglik_sum_value_and_grad, theta)
    return np.max(np.abs(dlp + dll)) <= rtol * max(1.0, tall.n_rows)


def point_from_theta(tall, theta) -> dict:
    """Value variables and free variables (constrained) at ``theta``."""
    model = tall.model
    values = tall.theta_to_point(theta)
    outputs = model.replace_rvs_by_values(model.free_RVs)
    fn = model.compile_fn(outputs, inputs=model.value_vars, on_unused_input="ignore", point_fn=False)
    free = fn(*[values[v.name] for v in model.value_vars])
    point = dict(values)
    for rv, val in zip(model.free_RVs, free):
        point[rv.name] = np.asarray(val)
    return point


_ = pm  # the public signature mirrors pm.find_MAP
