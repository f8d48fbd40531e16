"""What ``pms.SubsampleMH`` checks and derives outside its moves: the proposal's arguments, the
confidence sampler's default range bound for a GLM (:func:`default_range_bound`, :func:`glm_range_bound`)
and the moves per draw after warm-up (:func:`adapted_thin`).
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm

from pymc_subsample.control_variates.glm_range import design_radius, range_bound_family, terms_derivative
from pymc_subsample.diagnostics.run_checks import min_ess_fraction
from pymc_subsample.kernels.mh_tests import glm_taylor_range_bound, linear_predictor_bound
from pymc_subsample.kernels.proposals import PROPOSALS
from pymc_subsample.model.tall import TallModel

__all__ = ["adapted_thin", "check_step_arguments", "default_range_bound", "glm_range_bound"]

#: the default ``thin`` grows at the end of warm-up where the chain's last half of warm-up draws
#: has an integrated autocorrelation time τ̂ (draws per effective draw, worst coordinate) above
#: THIN_TAU_LIMIT: to thin·τ̂/THIN_TAU_TARGET moves, at most THIN_GROWTH_LIMIT × the default
THIN_TAU_LIMIT = 4.0
THIN_TAU_TARGET = 2.0
THIN_GROWTH_LIMIT = 10
THIN_MIN_DRAWS = 100  # warm-up draws in that last half, at least, to estimate τ̂


def default_range_bound(model, proxy_order, control_variates):
    """``"glm"`` where the model's family bounds the confidence sampler's terms
    (:func:`~pymc_subsample.control_variates.glm_range.range_bound_family`), else the ValueError that
    asks for a ``range_bound``; a look at the observed distribution only, before any set-up.
    """
    model = model.model if isinstance(model, TallModel) else pm.modelcontext(model)
    family, why = range_bound_family(model, proxy_order, control_variates)
    if family is None:
        raise ValueError(
            f"test='confidence' needs a bound C(θ, θ') on max_k |t_k| for its concentration inequality, "
            f"and none can be derived here: {why}. Pass range_bound=callable(theta, theta_prop) (e.g. "
            "pms.logistic_range_bound(X, center)) or range_bound='empirical' (a heuristic that voids "
            "the δ guarantee), or use another test.")
    return "glm"


def glm_range_bound(tall, proxy, laplace_chol, control_variates, chunk_size):
    """C(θ, θ') of the GLM view of ``tall`` (:func:`~pymc_subsample.kernels.mh_tests.glm_taylor_range_bound`)
    for the terms the confidence sampler reads: the remainders of ``proxy`` (``control_variates``) or
    plain differences; the rows' radii from one pass over them, M_j from the family table.
    """
    try:
        radius, box, laplace, derivative = design_radius(tall, laplace_chol, chunk_size=chunk_size)
    except ValueError as err:  # η not affine in θ: the Taylor bound in η does not apply
        raise ValueError(f"test='confidence' derives its range bound for GLMs with η affine in the free "
                         f"variables; here: {err} Pass range_bound=callable(theta, theta_prop) or "
                         "'empirical', or use another test.") from None
    inv = None if laplace_chol is None else np.linalg.inv(laplace_chol)
    order = proxy.order if control_variates else None
    m = derivative(terms_derivative(proxy.order, control_variates))
    return glm_taylor_range_bound(linear_predictor_bound(radius, box, laplace, inv), proxy.center, m, order)


def check_step_arguments(proposal, scale, target_accept):
    """The proposal's arguments, before any set-up."""
    if proposal not in PROPOSALS:
        raise ValueError(f"Unknown proposal {proposal!r}; choose 'laplace' or 'random-walk'.")
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must be in (0, 1); got {target_accept!r}.")
    if scale is not None and not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number; got {scale!r}.")


def adapted_thin(warmup_draws, thin, default_thin, since=0) -> int:
    """Moves per draw after warm-up from the warm-up draws ``warmup_draws`` (each ``thin`` moves
    apart) of the kernel that samples on: those from draw ``since`` on (the proposal's last change)
    where they are fewer than the last half yet at least :data:`THIN_MIN_DRAWS`, else the last half.
    ``thin`` where their τ̂ = draws / min ESS is at most :data:`THIN_TAU_LIMIT` or where there
    are fewer than THIN_MIN_DRAWS of them, else ⌈thin·τ̂ / THIN_TAU_TARGET⌉, at most
    THIN_GROWTH_LIMIT × ``default_thin``.
    """
    k = len(warmup_draws)
    start = max(k // 2, since) if k - since >= THIN_MIN_DRAWS else k // 2
    draws = np.asarray(warmup_draws[start:], dtype=float)
    if len(draws) < THIN_MIN_DRAWS:
        return thin
    tau = 1.0 / max(min_ess_fraction(draws), 1.0 / len(draws))  # nan (constant draws): kept
    if not tau > THIN_TAU_LIMIT:
        return thin
    return int(min(math.ceil(thin * tau / THIN_TAU_TARGET), THIN_GROWTH_LIMIT * default_thin))
