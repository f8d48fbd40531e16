"""The centre θ* of the control variates: a full-data MAP computed in row chunks."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
from scipy import linalg, optimize

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
):
    """MAP on the flat unconstrained vector; returns (theta, scipy OptimizeResult).

    With ``rows`` the log-likelihood of those rows is scaled by N / len(rows), so the
    result approximates the full-data MAP (a cheap centre, Dang et al. 2019 §6.5).
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
        options={"maxiter": maxiter, "ftol": ftol, "gtol": tol, "maxcor": 20},
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
    steps are taken in φ instead (:func:`_expansion_steps`), with B over all rows, corrected by the
    subset likewise where it has at least :data:`MIN_ROWS_PER_GROUP` rows per group. If the steps do
    not improve the log posterior, an exact Newton step, then full-data L-BFGS, take over; where a
    Hessian on the way was not negative definite, L-BFGS from the best point seen, at once.
    """
    if tall.n_rows <= 2 * warm_rows:
        theta, _ = find_map_theta(tall, chunk_size=chunk_size, ftol=1e-9, tol=1e-5, polish=False)
        return theta
    rows = np.sort(np.random.default_rng(seed).choice(tall.n_rows, size=warm_rows, replace=False))
    # measured at N = 10⁶, d = 30: full-data L-BFGS needed 15-25 passes; one subset-Hessian step
    # left the centre 0.8 sds from the mode, the steps to the tolerance 0.004 sds
    start, _ = find_map_theta(tall, rows=rows, chunk_size=chunk_size, ftol=1e-9, polish=False)
    view = tall.regression_view if tall.uses_eta_sums() else None
    if view is not None and view.phi is not None:
        coordinates = PhiCoordinates(tall, view, chunk_size)
        # B over all rows (a pass with it: 1.4 gradient passes in φ); the subset corrects each step
        # to third order where it has enough rows of every group (1,000 groups, 20 each: B's error
        # is large per group, and the steps crept (−62,272 → −61,988 → −61,974 → −61,948 against
        # the mode's −61,888) until one overshot, when the subset's B was the curvature)
        enough = coordinates.rows_per_group(rows) >= MIN_ROWS_PER_GROUP
        theta, start = _expansion_steps(tall, coordinates, start, None, chunk_size,
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
        theta, best = _expansion_steps(tall, ThetaCoordinates(tall, chunk_size), best, rows, chunk_size)
        if theta is not None:
            return theta
    # where that fails too (the rows' log-likelihood not concave along the way), the exact Hessian
    # is not negative definite either: a pass of Jacobians saved (1 s of a 10⁶-row set-up)
    theta, _ = find_map_theta(tall, start=best, chunk_size=chunk_size, ftol=1e-9, tol=1e-5, polish=False)
    return theta


class ThetaCoordinates:
    """The log-likelihood's expansion in θ itself (φ(θ) = θ): A its full-data gradient in θ, B the
    Hessian of a subset of rows (:meth:`TallModel.loglik_sum_value_grad_hessian`).
    """

    def __init__(self, tall, chunk_size):
        self.tall, self.chunk_size = tall, chunk_size

    @staticmethod
    def value(theta):
        return np.asarray(theta, dtype=float)

    @staticmethod
    def vjp(theta, weights):
        return weights

    @staticmethod
    def jacobian(theta):
        return np.eye(np.size(theta))

    def gradient_pass(self, theta):
        """(Σ_k ℓ_k, A) over all rows."""
        return chunked_sum(self.tall, self.tall.loglik_sum_value_and_grad, theta, chunk_size=self.chunk_size)

    def curvature(self, theta, rows):
        """B over ``rows`` (unscaled)."""
        return self.full_pass(theta, rows)[2]

    def full_pass(self, theta, rows=None):
        """(Σ_k ℓ_k, A, B) over ``rows`` (all by default)."""
        return chunked_sum(self.tall, self.tall.loglik_sum_value_grad_hessian, theta, rows=rows,
                           chunk_size=self.chunk_size)


class PhiCoordinates:
    """The log-likelihood's expansion in a row-free φ(θ) that the rows are affine in
    (:mod:`pymc_subsample.model.row_free`): A and B from η at the points in φ
    (:meth:`~pymc_subsample.model.distributional.DistributionalRegression.phi_sums`).
    """

    def __init__(self, tall, view, chunk_size):
        self.tall, self.view, self.chunk_size = tall, view, chunk_size
        self.value, self.vjp, self.jacobian = view.phi.value, view.phi.vjp, view.phi.jacobian

    def gradient_pass(self, theta):
        return chunked_sum(self.tall, self.view.phi_gradient_sums, theta, chunk_size=self.chunk_size)

    def curvature(self, theta, rows):
        return self.full_pass(theta, rows)[2]

    def full_pass(self, theta, rows=None):
        """(Σ_k ℓ_k, A, B) in φ over ``rows`` (all by default)."""
        return chunked_sum(self.tall, self.view.phi_sums, theta, rows=rows, chunk_size=self.chunk_size)

    def rows_per_group(self, rows):
        """Rows of ``rows`` per entry of φ's largest group block (inf where φ has none)."""
        sizes = self.view.group_block_sizes(phi=True)
        return len(rows) / max(sizes) if sizes else np.inf


def _expansion_steps(tall, coordinates, start, rows, chunk_size, correction_rows=None, max_steps=10):
    """Maximise the log posterior with the log-likelihood replaced by its second-order expansion in
    φ = ``coordinates.value(θ)`` at the current point θ_j, log p(θ) + Σ_k ℓ_k + Aᵀ Δφ + ½ Δφᵀ B Δφ
    (Δφ = φ(θ) − φ(θ_j); A the full-data gradient in φ, one pass; B from ``rows`` scaled by N/n, or
    over all rows in the same pass where ``rows`` is None), its diagonal bounded away from zero where
    a coordinate's step would exceed :data:`TRUST_RADIUS` (:func:`_trust_region`), by L-BFGS in θ
    without the rows with no coordinate of φ moving more than :data:`STEP_BOUND`
    (:func:`_bounded_expansion_maximum`), then expand again there.

    φ is a row-free φ(θ) that the rows are affine in (:class:`PhiCoordinates`, a non-centred
    hierarchical model) or θ itself (:class:`ThetaCoordinates`, where the prior is not concave).
    Why: such a log posterior is not concave in θ (τ z; a centred a ~ N(μ, σ)), so the Newton steps
    of :func:`_subset_newton_steps` can fail, and full-data L-BFGS takes many passes. The expansion
    keeps the non-concave part exact (φ's own non-linearity, the prior) and is second order in the
    rows' η only, so each step contracts the distance to the mode by about the subset B's relative
    error, as the Newton steps in θ do for a concave model; the optimiser's many evaluations cost no
    rows.
    With B over all rows (``rows`` None; the set-up's sums as matrix products) each step is exact
    to second order in η, and with ``correction_rows`` it is corrected to third order
    (:func:`_corrected_sums`), so that the second pass with B is the proxy's.

    Returns (θ within :data:`CENTER_TOLERANCE` posterior sds of the mode as the expansion predicts
    it, or None where a step lowered the log posterior or the steps did not converge; the best θ
    seen). The predicted distance is √(2·gain) of the expansion's maximum over θ_j.
    """
    # measured: full-data L-BFGS took 11-12 passes (non-centred at 10⁶ rows: 0.6 s of a 1.3 s
    # set-up; centred at 10⁷: 1.7 s). On the non-centred model (r = 21) a pass with B costs 1.4
    # gradient passes in φ; at 10⁶ rows 2 passes with B and the correction reach the centre
    # (33 → 0.018 sds), against 3 gradient passes with the subset's B and the proxy's pass
    theta = best = np.asarray(start, dtype=float)
    best_value, last_distance = -np.inf, None
    for _ in range(max_steps):
        if rows is None:  # B over all rows, in the same pass as Σℓ and A
            total, linear, quadratic = coordinates.full_pass(theta)
        else:
            total, linear = coordinates.gradient_pass(theta)
        prior, _ = tall.prior_value_and_grad(theta, setup=True)
        value = float(prior) + float(total)
        if not np.isfinite(value) or value < best_value:
            return None, best
        best, best_value = theta, value
        if rows is not None:
            quadratic = (tall.n_rows / len(rows)) * coordinates.curvature(theta, rows)
        if not _concave(quadratic):  # the expansion would have no maximum: not the rows' own shape
            return None, best
        result, damped = _bounded_expansion_maximum(tall, coordinates, theta, linear, quadratic)
        distance = np.sqrt(2.0 * max(-result.fun - float(prior), 0.0))
        if distance < CENTER_TOLERANCE and not damped:
            return theta, best
        if rows is None and correction_rows is not None:
            # exact B: the expansion's error is third order in η; the subset estimates how A and B
            # change along the step, and the expansion at the new point is maximised with them
            # (:func:`_corrected_sums`): the next pass confirms that point, and serves the proxy
            linear, quadratic = _corrected_sums(tall, coordinates, theta, result.x, linear, quadratic,
                                                correction_rows)
            if _concave(quadratic):
                theta = _bounded_expansion_maximum(tall, coordinates, result.x, linear, quadratic)[0].x
                continue
        # the distance contracts by a steady factor (as in _subset_newton_steps): when the next is
        # predicted at half the tolerance, take the step without the pass that would only confirm it
        if last_distance is not None and distance * (distance / last_distance) < 0.5 * CENTER_TOLERANCE:
            return result.x, best
        last_distance, theta = (None if damped else distance), result.x
    return None, best


def _bounded_expansion_maximum(tall, coordinates, theta, linear, quadratic):
    """:func:`_expansion_maximum` with the curvature B − λI, for the least λ of 0, λ₀, 4λ₀, …
    (λ₀ = max|A| / :data:`STEP_BOUND`, at most :data:`MAX_DAMPINGS` raises) whose maximum moves no
    coordinate of φ by more than :data:`STEP_BOUND`; and whether λ > 0.

    Why: where B is singular along a direction of φ that leaves every row's η as it is (crossed
    group effects: the intercept against all effects of one factor), A has only a rounding-sized part
    along it, and an undamped maximum moves φ far along it and off it, beyond the expansion's
    validity. :func:`_trust_region` bounds each coordinate's own curvature, not such a direction.
    λI is zero at the fixed point's step (Δφ = 0) and absent where the steps are small.
    """
    # measured on crossed effects (16 and 100 Zipf-sized groups) at 10⁶ rows: undamped, the first
    # maximum moved the intercept by 15 and the effects by 75-91, the log posterior fell by 82,000
    # where the expansion predicted a rise of 26,000, and full-data L-BFGS took 225 passes
    start = coordinates.value(theta)
    damping, identity = 0.0, np.eye(np.size(linear))
    for _ in range(MAX_DAMPINGS + 1):
        result = _expansion_maximum(tall, coordinates, theta, linear, quadratic - damping * identity,
                                    bound=STEP_BOUND)
        if np.abs(coordinates.value(result.x) - start).max() <= STEP_BOUND:
            break
        damping = 4.0 * damping if damping else np.abs(linear).max() / STEP_BOUND
    return result, damping > 0


def _expansion_maximum(tall, coordinates, theta, linear, quadratic, bound=None):
    """The maximum of the expansion at θ with gradient ``linear`` and curvature ``quadratic`` in φ
    (scipy's OptimizeResult: ``x`` the point, ``fun`` minus its value); with a ``bound``, the search
    stops at the first iterate that moves a coordinate of φ by more than it.

    L-BFGS runs in coordinates u with θ = θ_j + L⁻ᵀu, LLᵀ = −(JᵀBJ + ∇²log p(θ_j)) the expansion's
    Gauss-Newton curvature at θ_j (J = ∂φ/∂θ): there the objective's Hessian is near the identity,
    where in θ its condition number is that of the N-scaled B against the prior's. Where that
    curvature is not positive definite, L-BFGS runs in θ itself.
    """
    # measured on crossed group effects at 10⁵ rows: 224-581 L-BFGS iterations per maximum in θ,
    # 2-18 in u, the same maxima
    quadratic = _trust_region(linear, quadratic)
    expansion = (tall, coordinates, coordinates.value(theta), linear, quadratic)
    chol = _expansion_preconditioner(tall, coordinates, theta, quadratic)
    options = {"maxiter": 1000, "ftol": 1e-12, "gtol": 1e-5, "maxcor": 10}

    def to_theta(x):
        return x if chol is None else theta + linalg.solve_triangular(chol, x, trans="T", lower=True)

    def out_of_bound(intermediate_result):  # scipy passes an OptimizeResult to this name
        # measured (crossed effects, 10⁶ rows): an unbounded search took all 1,000 iterations
        if np.abs(coordinates.value(to_theta(intermediate_result.x)) - expansion[2]).max() > bound:
            raise StopIteration

    callback = None if bound is None else out_of_bound
    if chol is None:
        return optimize.minimize(_negative_expansion, theta, args=expansion, jac=True, method="L-BFGS-B",
                                 options=options, callback=callback)

    def in_u(u):
        value, grad = _negative_expansion(to_theta(u), *expansion)
        return value, linalg.solve_triangular(chol, grad, lower=True)

    result = optimize.minimize(in_u, np.zeros_like(theta), jac=True, method="L-BFGS-B", options=options,
                               callback=callback)
    result.x = to_theta(result.x)
    return result


def _expansion_preconditioner(tall, coordinates, theta, quadratic):
    """Lower Cholesky factor of −(JᵀBJ + ∇²log p(θ)), or None where it is not positive definite."""
    jacobian = coordinates.jacobian(theta)  # (r, d)
    curvature = -(jacobian.T @ quadratic @ jacobian + tall.prior_hessian(theta))
    try:
        return np.linalg.cholesky(0.5 * (curvature + curvature.T))
    except np.linalg.LinAlgError:
        return None


def _corrected_sums(tall, coordinates, theta, new_theta, linear, quadratic, rows):
    """Full-data A and B at ``new_theta`` predicted from their exact values at θ and the change of
    the subset ``rows``' own (scaled by N/n) beyond the expansion: A' = A + BΔφ + (N/n)(A_s' − A_s −
    B_sΔφ), B' = B + (N/n)(B_s' − B_s). The subset estimates only the third-order change, so its
    relative error multiplies the distance left after an exact step.
    """
    # measured on the non-centred zoo model at 10⁶ rows: 33 → 0.59 sds after one step, within the
    # tolerance after the corrected one: 2 full passes, where without the correction a third was needed
    scale = tall.n_rows / len(rows)
    delta = coordinates.value(new_theta) - coordinates.value(theta)
    _, subset_linear, subset_quadratic = coordinates.full_pass(theta, rows)
    _, new_subset_linear, new_subset_quadratic = coordinates.full_pass(new_theta, rows)
    third_order = new_subset_linear - subset_linear - subset_quadratic @ delta
    new_linear = linear + quadratic @ delta + scale * third_order
    return new_linear, quadratic + scale * (new_subset_quadratic - subset_quadratic)


# measured with 1,000 groups at 10⁶ rows: 8 passes with a radius of 2, 6 with 4
#: the largest step along one coordinate of φ (a group effect: η's own scale) that an expansion is
#: trusted with, where its curvature there is weak
TRUST_RADIUS = 4.0
#: the largest step along any coordinate of φ that an expansion's maximum may take
#: (:func:`_bounded_expansion_maximum`): a backstop beyond :func:`_trust_region`'s per-coordinate
#: damping, which it leaves to act first
STEP_BOUND = 2 * TRUST_RADIUS
#: how often :func:`_bounded_expansion_maximum` raises its damping
MAX_DAMPINGS = 6


def _trust_region(linear, quadratic):
    """B with its diagonal made at least |A_i| / :data:`TRUST_RADIUS` in magnitude, so that no
    coordinate's Newton step exceeds the radius.

    Where the expansion point sits where the rows saturate (a group whose subset rows were all 0 at
    the subset MAP: p(1 − p) ≈ 0), B is nearly flat along that group while the full-data gradient A
    pulls hard, and the undamped expansion's maximum is far off, so that the steps fail and
    full-data L-BFGS takes over. The damping leaves the fixed point as it is (Δφ = 0 there) and is
    inactive near the mode, where the steps are small.
    """
    # measured undamped with 1,000 groups, 10⁵ rows: log posterior −64,526 → −82,714, the steps
    # failed and full-data L-BFGS took 48 passes
    diagonal = np.diag(quadratic)
    floor = -np.abs(linear) / TRUST_RADIUS
    damping = np.minimum(floor - diagonal, 0.0)  # ≤ 0: only ever more curvature
    if not damping.any():
        return quadratic
    return quadratic + np.diag(damping)


def _concave(quadratic, rtol=1e-8):
    """Whether ½ Δφᵀ B Δφ is concave (B negative semi-definite, to rounding): parameters that no
    row reads (a centred model's μ and σ) leave B singular, and the prior bounds those directions.
    """
    eigenvalues = np.linalg.eigvalsh(0.5 * (quadratic + quadratic.T))
    return bool(eigenvalues.max() <= rtol * max(np.abs(eigenvalues).max(), 1e-300))


def _negative_expansion(theta, tall, coordinates, expansion_point, linear, quadratic):
    """−(log p(θ) + Aᵀ Δφ + ½ Δφᵀ B Δφ) and its gradient, Δφ = φ(θ) − ``expansion_point``."""
    prior, prior_grad = tall.prior_value_and_grad(theta, setup=True)
    delta = coordinates.value(theta) - expansion_point
    curved = quadratic @ delta  # once for the value and the gradient (d = 2,003: 2 ms a product)
    objective = float(prior) + linear @ delta + 0.5 * delta @ curved
    if not np.isfinite(objective):
        return np.inf, np.zeros_like(theta)
    return -objective, -(prior_grad + coordinates.vjp(theta, linear + curved))


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
