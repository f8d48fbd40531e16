"""The differences d_k = ℓ_k(θ) − q_k(θ) of a GLM, written in the linear predictor η.

For a row ℓ_k(θ) = f(y_k, η_k(θ)) with η_k affine in θ (the GLM view,
:mod:`pymc_subsample.model.glm`), the Taylor proxy of seed 004 eq. 4.3 at θ* needs no
derivative in θ at all: with u_k = η_k(θ) − η_k(θ*) = J_k·(θ − θ*) exactly,

    ∇ℓ_k(θ*)·v = f'(y_k, η_k*) u_k,    vᵀH_k(θ*)v = f''(y_k, η_k*) u_k²,

where f' and f'' are elementwise derivatives in η. The generic graph gets the same two numbers by
forward mode twice through the model's graph (Rop of Rop); here they are elementwise functions of
η*, so the estimator's graph holds two mat-vecs of the batch (η at θ and at θ*) and one more in
its gradient (reverse mode through η only), and compiles in a fraction of the time. Used by
:class:`~pymc_subsample.estimators.target.SubsampledTarget` whenever the model is such a GLM and
the family's f reproduces the model's own per-row log-likelihood (checked numerically once);
every other model keeps the generic graph.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from scipy.special import gammaln

from pymc_subsample.control_variates.taylor import truncate
from pymc_subsample.model.glm import linear_predictor_model, observed_family

__all__ = ["GLM_LOGLIK", "glm_differences_graph", "glm_view_for_estimator"]

_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)

#: family → (f(y, η, σ) in PyTensor, the same in NumPy): the per-row log-likelihood in η
GLM_LOGLIK = {
    "bernoulli_logit": (
        lambda y, eta, sigma: y * eta - pt.softplus(eta),
        lambda y, eta, sigma: y * eta - np.logaddexp(0.0, eta),
    ),
    "poisson_log": (
        lambda y, eta, sigma: y * eta - pt.exp(eta) - pt.gammaln(y + 1.0),
        lambda y, eta, sigma: y * eta - np.exp(eta) - gammaln(y + 1.0),
    ),
    "normal_identity": (
        lambda y, eta, sigma: -0.5 * ((y - eta) / sigma) ** 2 - np.log(sigma) - _HALF_LOG_2PI,
        lambda y, eta, sigma: -0.5 * ((y - eta) / sigma) ** 2 - np.log(sigma) - _HALF_LOG_2PI,
    ),
}


def glm_view_for_estimator(tall, center, n_checks=3, rtol=1e-9):
    """The GLM view of ``tall`` if the estimator can use it, else None (never an error).

    A cheap look at the observed distribution first; then the GLM view (η affine in θ, checked by
    the view); then the change of Σ_k f(y_k, η_k) from ``center`` to ``n_checks`` points around it
    against the change of the model's own Σ_k ℓ_k, on a few rows (any term f does not know about
    would show here). Changes, not values: d and q only ever use differences of f, so a constant
    per row may differ (PyMC's Normal, for one, rounds log √(2π) to float32).
    """
    if observed_family(tall.model) not in GLM_LOGLIK:
        return None
    try:
        glm = linear_predictor_model(tall)
    except ValueError:  # not affine, unknown σ, another link: the generic graph handles it
        return None
    rng = np.random.default_rng(0)
    batch = tall.gather(rng.choice(tall.n_rows, size=min(16, tall.n_rows), replace=False))
    f = GLM_LOGLIK[glm.family][1]
    y = glm.observed(batch)
    def both(theta):
        model_sum = float(tall.loglik_sum_value_and_grad(theta, batch)[0])
        return model_sum, float(np.sum(f(y, glm.eta(theta, batch), glm.sigma)))

    model_center, f_center = both(center)
    for _ in range(n_checks):
        model_sum, f_sum = both(center + rng.normal(scale=0.5, size=tall.ndim))
        expected = model_sum - model_center
        if not np.isclose(f_sum - f_center, expected, rtol=rtol, atol=rtol * (1.0 + abs(model_sum))):
            return None
    return glm


def glm_differences_graph(glm, order, center):
    """D = ℓ_batch(θ) − q_batch(θ) of the GLM (module docstring), as a graph in (θ, ``center``, batch)."""
    tall = glm.tall
    f = GLM_LOGLIK[glm.family][0]
    sigma = glm.sigma if glm.sigma is not None else 1.0
    eta = glm.eta_rows
    y = glm.observed_rows
    eta_center = pytensor.graph_replace(eta, {tall.theta: center}, strict=False)
    at_center = f(y, eta_center, sigma)
    slope = curvature = None
    if order >= 1:
        # elementwise f'(η*), f''(η*): rows are independent, so the gradient of the sum is per row
        first = pytensor.grad(at_center.sum(), eta_center)
        u = eta - eta_center
        slope = first * u
        if order == 2:
            second = pytensor.grad(first.sum(), eta_center)
            curvature = second * u * u
    return f(y, eta, sigma) - truncate(order, at_center, slope, curvature)
