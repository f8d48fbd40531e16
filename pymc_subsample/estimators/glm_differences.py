"""The differences d_k = ℓ_k(θ) − q_k(θ) of a distributional regression, written in η.

For rows ℓ_k(θ) = f(y_k, η_k(θ)) with η_k ∈ R^p affine in θ (GLMs, Normal or StudentT with unknown
scale, NegativeBinomial, ...: :mod:`pymc_subsample.model.distributional`), the Taylor proxy of
Dang et al. 2019 eq. 4.3 at θ* needs no derivative in θ at all: with u_k = η_k(θ) − η_k(θ*) = J_k(θ − θ*)
exactly,

    ∇ℓ_k(θ*)·v = Σ_j ∂_j f(y_k, η_k*) u_kj,    vᵀH_k(θ*)v = Σ_jl ∂_jl f(y_k, η_k*) u_kj u_kl,

where the derivatives of f are elementwise in η. The generic graph gets the same two numbers by
forward mode twice through the model's graph (Rop of Rop); here η_k*, f, ∂_j f and ∂_jl f at θ*
depend on the row alone, so they are computed once per subsample
(:meth:`~pymc_subsample.model.distributional.DistributionalRegression.row_terms`) and enter the
estimator's graph as inputs: each call evaluates f and η at θ only, and its gradient needs f′ at θ
only. For a StudentT this takes gammaln, digamma and trigamma at θ* out of every leapfrog step, and
the largest fused kernel out of a first run's compilation. Used by
:class:`~pymc_subsample.estimators.target.SubsampledTarget` whenever f reproduces the model's own
per-row log-likelihood (``TallModel.regression_view``, checked numerically once); every other model
keeps the generic graph.

Where η is affine not in θ but in a row-free φ(θ) (:mod:`pymc_subsample.model.row_free`), the same
graph is the difference from the Taylor proxy in η, u_k = η_k(θ) − η_k(θ*) = J_k(φ(θ) − φ(θ*))
still exactly, whose sum :class:`~pymc_subsample.control_variates.taylor.RowFreeTaylorProxy` gives.
"""

from __future__ import annotations

from pymc_subsample.control_variates.taylor import eta_taylor

__all__ = ["glm_differences_graph"]


def glm_differences_graph(view, order, at_center):
    """D = ℓ_batch(θ) − q_batch(θ) of ``view`` (module docstring), as a graph in (θ, batch) and the
    rows' terms at θ*, ``at_center`` (:class:`~pymc_subsample.model.distributional.RowTerms` of
    symbolic vectors, e.g. ``view.row_terms_variables()``).
    """
    etas = view.eta_rows
    u = [eta - eta_center for eta, eta_center in zip(etas, at_center.eta, strict=True)]
    return view.loglik_graph(etas) - eta_taylor(order, at_center, u)
