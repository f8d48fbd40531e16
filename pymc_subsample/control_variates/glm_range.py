"""What the confidence sampler's default range bound needs from a GLM: ρ = max_k ||LᵀJ_k|| and M_{r+1}.

For rows ℓ_k = f(y_k, η_k) with η_k affine in θ (Jacobian J_k) and |∂ʲf/∂ηʲ| ≤ M_j (the family
table, :attr:`pymc_subsample.families.Family.derivative_bounds`), the proxy-corrected differences
t_k of ``SubsampleMH(test="confidence")`` are bounded by
:func:`~pymc_subsample.kernels.mh_tests.confidence.glm_taylor_range_bound` from ρ and M_{r+1}; ρ
takes one streamed pass over the N rows with the GLM view's J on each chunk.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_subsample.families import GLM_FAMILIES
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.model.glm import linear_predictor_model, observed_family

__all__ = ["design_radius", "range_bound_family", "terms_derivative"]


def terms_derivative(proxy_order, control_variates) -> int:
    """The order j of the M_j that bounds the confidence sampler's terms: r + 1 for the remainders of
    an order-r proxy, 1 for plain differences (no control variates, or order 0, whose proxy cancels).
    """
    return proxy_order + 1 if control_variates and proxy_order > 0 else 1


def range_bound_family(model, proxy_order, control_variates):
    """(family name, None) where a GLM family with a finite M_j bounds the terms, else (None, why).

    A look at the observed distribution only (no graph, no pass over the rows): the check the step
    makes before any set-up. The Normal family's σ is read later with the GLM view, so a known σ is
    taken as finite here.
    """
    name = observed_family(model)
    if name is None:
        return None, "the model is not a GLM whose family the package knows"
    family = GLM_FAMILIES[name]
    j = terms_derivative(proxy_order, control_variates)
    constants = (1.0,) * sum(link is None for link in family.links)  # σ: finite either way
    if not math.isfinite(family.derivative_bound(j, *constants)):
        terms = f"the remainders of the order-{j - 1} proxy" if j > 1 else "plain differences"
        return None, f"its {name} rows have no finite bound on |∂^{j}f/∂η^{j}|, which bounds {terms}"
    return name, None


def design_radius(tall, chol=None, *, chunk_size=DEFAULT_CHUNK_SIZE):
    """What bounds |J_kᵀv| over the N rows of the GLM view of ``tall``, from one pass: ρ = max_k ||J_k||,
    c_j = max_k |J_kj|, ρ_L = max_k ||LᵀJ_k|| (L = ``chol``; None where it is None), and the family's
    derivative bounds as a function ``j -> M_j``.

    Raises the GLM view's ValueError where η is not affine in θ.
    """
    glm = linear_predictor_model(tall)
    family = GLM_FAMILIES[glm.family]
    radius, laplace, box = 0.0, 0.0, np.zeros(tall.ndim)
    for start in range(0, tall.n_rows, chunk_size):
        jac = glm.eta_jacobian(tall.row_slice(start, min(start + chunk_size, tall.n_rows)))
        radius = max(radius, float(np.sqrt(np.max(np.einsum("ij,ij->i", jac, jac)))))
        np.maximum(box, np.max(np.abs(jac), axis=0), out=box)
        if chol is not None:
            scaled = jac @ np.asarray(chol, float)  # rows (LᵀJ_k)ᵀ
            laplace = max(laplace, float(np.sqrt(np.max(np.einsum("ij,ij->i", scaled, scaled)))))
    return radius, box, (laplace if chol is not None else None), (
        lambda j: family.derivative_bound(j, *glm.constants))
