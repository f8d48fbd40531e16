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
the family's f reproduces the model's own per-row log-likelihood (``TallModel.glm_view``, checked
numerically once); every other model keeps the generic graph.
"""

from __future__ import annotations

import pytensor

from pymc_subsample.control_variates.taylor import truncate
from pymc_subsample.model.glm import GLM_LOGLIK

__all__ = ["glm_differences_graph"]


def glm_differences_graph(glm, order, center):
    """D = ℓ_batch(θ) − q_batch(θ) of the GLM (module docstring), as a graph in (θ, ``center``, batch)."""
    tall = glm.tall
    f = GLM_LOGLIK[glm.family][0]
    sigma = glm.sigma  # None except for the Normal family, whose f is the only one that uses it
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
