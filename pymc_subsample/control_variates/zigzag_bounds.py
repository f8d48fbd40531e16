"""What the Zig-Zag thinning bound needs from a model: per-row Lipschitz constants and a quadratic prior.

For a GLM row ℓ_k = f(y_k, η_k), η_k affine in θ with Jacobian J_k, and |f''| ≤ κ, the change of
∂_jℓ_k between θ* and θ is at most κ |J_kj| |J_k·(θ − θ*)| (the quantity behind seed 000's
Lipschitz importance-sampling bounds, here per coordinate). The bound of
:mod:`pymc_subsample.kernels.zigzag` needs its maximum over all N rows, per coordinate, in two
norms: one streamed pass over the rows, with the GLM view's J on each chunk.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.kernels.zigzag import row_lipschitz_maxima
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE

__all__ = ["glm_lipschitz_maxima", "glm_row_sampler", "quadratic_prior"]


def glm_lipschitz_maxima(glm, inv_r, *, chunk_size=DEFAULT_CHUNK_SIZE):
    """max_k |J_kj| ‖R⁻ᵀJ_k‖₂ and max_k |J_kj| ‖J_k‖₁ over the N rows of ``glm.tall`` (one pass).

    Parameters
    ----------
    glm : LinearPredictorModel
    inv_r : ndarray (d, d)
        R⁻¹, R the upper Cholesky factor of the metric of the bound.
    chunk_size : int
        Rows per chunk (contiguous views of the row data, no copy).

    Returns
    -------
    a, b : ndarray (d,)
        The constants of :class:`~pymc_subsample.kernels.zigzag.ZigZagCV` (without κ).
    """
    tall = glm.tall
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    a = np.zeros(tall.ndim)
    b = np.zeros(tall.ndim)
    for start in range(0, tall.n_rows, chunk_size):
        batch = tall.row_slice(start, min(start + chunk_size, tall.n_rows))
        chunk_a, chunk_b = row_lipschitz_maxima(glm.eta_jacobian(batch), inv_r)
        np.maximum(a, chunk_a, out=a)
        np.maximum(b, chunk_b, out=b)
    return a, b


def glm_row_sampler(glm, center):
    """``draw(rng, size) -> (J (size, d), y (size,), η(θ*) (size,))`` for uniform rows with replacement.

    Rows are gathered once per batch of proposals (``RowStream``), so a proposal costs no
    compiled call: the kernel evaluates ∂ℓ/∂η of its row in NumPy from these arrays.
    """
    tall = glm.tall
    center = np.asarray(center, dtype=float)

    def draw(rng, size):
        idx = rng.integers(0, tall.n_rows, size=size)
        batch = tall.gather(idx)
        jac = glm.eta_jacobian(batch)
        return jac, glm.observed(batch), glm.eta(center, batch)

    return draw


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
