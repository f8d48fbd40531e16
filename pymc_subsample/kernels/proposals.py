"""Gaussian random-walk proposals for subsampled MH and their scale adaptation (plain NumPy)."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "PROPOSALS",
    "adapt_log_scale",
    "adapted_cholesky",
    "initial_proposal",
    "laplace_cholesky",
    "random_walk_proposal",
]

#: the random walks of ``SubsampleMH(proposal=...)``: covariance scale² Σ (Σ the Laplace covariance)
#: or scale² I
PROPOSALS = ("laplace", "random-walk")


def laplace_cholesky(precision):
    """Cholesky factor L of Σ = precision⁻¹ (LLᵀ = Σ) for the Laplace proposal.

    The Laplace precision −(∇²log p(θ*) + Σ_k H_k(θ*)) must be positive definite at
    the centre; if it is not (the centre is not a mode), a ValueError says what to change.
    """
    precision = 0.5 * (np.asarray(precision, float) + np.asarray(precision, float).T)
    try:
        chol_prec = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        raise ValueError(
            "The Laplace precision −(prior Hessian + Σ_k H_k) at the centre is not positive "
            "definite, so proposal='laplace' has no covariance. Pass center=None (the full-data "
            "MAP) or a mode, or use proposal='random-walk' with an explicit scale."
        ) from None
    # Σ = (C Cᵀ)⁻¹ = C⁻ᵀ C⁻¹, so L = C⁻ᵀ satisfies L Lᵀ = Σ.
    return np.linalg.inv(chol_prec).T


def initial_proposal(precision, proposal, scale=None):
    """The Laplace covariance's Cholesky factor L (LLᵀ = Σ = ``precision``⁻¹), the proposal's factor
    and its initial scale, for ``proposal`` in :data:`PROPOSALS`.

    "laplace": the factor is L, which must exist (else :func:`laplace_cholesky`'s ValueError);
    "random-walk": None (the identity), and L is None where ``precision`` is not positive definite.
    The scale is ``scale``, or 2.38/√d, optimal for a Gaussian target (Roberts, Gelman & Gilks 1997),
    times √(tr Σ / d) for "random-walk" (0.1 without Σ).
    """
    try:
        laplace = laplace_cholesky(precision)
    except ValueError:
        if proposal == "laplace":
            raise
        laplace = None
    d = np.shape(precision)[0]
    if scale is None:
        scale = 2.38 / math.sqrt(d)
        if proposal == "random-walk":
            var_mean = None if laplace is None else float(np.sum(laplace**2) / d)
            scale *= math.sqrt(var_mean) if var_mean else 0.1
    return laplace, (laplace if proposal == "laplace" else None), scale


def random_walk_proposal(rng, theta, scale, chol=None):
    """θ' = θ + scale · L z, z ~ N(0, I) (L = I for the isotropic random walk): symmetric."""
    z = rng.standard_normal(theta.shape[0])
    step = chol @ z if chol is not None else z
    return theta + scale * step


def adapt_log_scale(log_scale, accepted, iteration, target, *, rate=0.6, delay=10.0):
    """Robbins-Monro step log s ← log s + (a − target)/(t + t₀)^rate, during tuning only.

    ``accepted`` is the 0/1 decision (sequential tests give no acceptance probability).
    The step sizes are summable in square and not in sum (rate in (0.5, 1]), so the
    scale settles; it is frozen when tuning stops, which keeps the chain Markov. The delay
    t₀ = 10 keeps the first steps from multiplying the scale by e^0.77 per acceptance,
    which made sequential tests read all N rows early in tuning.
    """
    return log_scale + (float(accepted) - target) / math.pow(iteration + delay, rate)


def adapted_cholesky(draws, chol, *, tolerance=2.0):
    """Cholesky factor of the covariance of warm-up ``draws`` (k, d), or None where it agrees with
    the current proposal's L Lᵀ (``chol``) within the noise of k draws and a factor ``tolerance``.

    The covariance is PyMC's regularised estimate (``QuadPotentialFullAdapt``):
    k/(k + 5) C + 10⁻³·5/(k + 5) I. The comparison uses the generalised eigenvalues of C against
    L Lᵀ, the variances of C along L's axes, which for k independent draws from N(0, L Lᵀ) fall
    within the Marchenko-Pastur edges (1 ± √(d/k))²; they must lie within those edges widened by
    ``tolerance``. Where the Laplace approximation fits (GLMs) the proposal is kept, so its exact
    curvature is not traded for a noisy estimate (at d = 31 and 50 draws the smallest eigenvalue of
    a sample covariance is ~0.05 of the true one, the lower edge (1 − √(d/k))²); where it does not
    (a non-centred μ + τz, whose mode's curvature overstates μ's posterior variance many times),
    the draws' covariance replaces it (Haario et al. 2001's adaptive Metropolis, during warm-up
    only). Fewer than 2d draws: None.
    """
    # measured: on the non-centred μ + τz model the mode's curvature gave μ 10× the posterior variance
    draws = np.asarray(draws, dtype=float)
    k, d = draws.shape
    if k < 2 * d:
        return None
    sample = np.atleast_2d(np.cov(draws, rowvar=False))
    inv = np.linalg.inv(chol)
    ratios = np.linalg.eigvalsh(inv @ sample @ inv.T)
    spread = math.sqrt(d / k)
    if ratios.min() > (1 - spread) ** 2 / tolerance and ratios.max() < (1 + spread) ** 2 * tolerance:
        return None
    return np.linalg.cholesky(k / (k + 5.0) * sample + 1e-3 * 5.0 / (k + 5.0) * np.eye(d))
