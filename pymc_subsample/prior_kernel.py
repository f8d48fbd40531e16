"""The log prior log p(θ) and its gradient in closed form, one Numba kernel for every model whose free
variables are of the families below (:mod:`~pymc_subsample.model.closed_form_prior` reads them from the
model's graph).

Why: compiled from the model's graph, the prior is the one function of a model the iterations of
:mod:`~pymc_subsample.kernels.eta_nuts` need; on an empty PyTensor cache its Numba compilation is
most of the set-up (3.3 s of 3.8 s, the linear zoo model at 10⁵ rows, 2026-12-01), and on a warm
one its compilation and loading take 0.1-0.25 s. This kernel is compiled once per installation
(Numba's cache beside this file) and reads the model from arrays. It sits beside the layers, as
:mod:`pymc_subsample.families` does: the model's set-up (:mod:`pymc_subsample.model.closed_form_prior`)
and the kernels (:mod:`pymc_subsample.kernels.eta_nuts`) both call it, and it imports nothing of ours.

Each element e of θ is one element of a free variable, x_e = T⁻¹(θ_e) under its transform (none,
log: x = e^θ, log-odds: x = σ(θ)), with the transform's log-Jacobian added; its family's log-density
reads up to three parameters, each a constant or the value x_j of another element (a hierarchical
prior's μ and σ). By family code, with the derivatives the kernel chains back to θ:

================  ==================================================================================
Normal(μ, σ)      −½z² − log σ − ½ log 2π,  z = (x − μ)/σ:  ∂x = −z/σ, ∂μ = z/σ, ∂σ = (z² − 1)/σ
HalfNormal(0, σ)  the Normal's with μ = 0, plus log 2
Exponential(s)    −log s − x/s (PyMC's scale s = 1/λ):  ∂x = −1/s, ∂s = (x/s − 1)/s
Gamma(α, s)       −log Γ(α) − α log s + (α − 1) log x − x/s:  ∂x = (α − 1)/x − 1/s,
                  ∂α = log x − log s − ψ(α), ∂s = (x/s − α)/s
Beta(a, b)        (a − 1) log x + (b − 1) log(1 − x) − log B(a, b):  ∂x = (a − 1)/x − (b − 1)/(1 − x),
                  ∂a = log x − ψ(a) + ψ(a + b), ∂b = log(1 − x) − ψ(b) + ψ(a + b)
HalfCauchy(0, β)  log 2 − log πβ − log(1 + z²),  z = x/β:  ∂x = −2z/(β(1 + z²)),
                  ∂β = (z² − 1)/(β(1 + z²))
StudentT(ν, μ, σ) log Γ((ν+1)/2) − log Γ(ν/2) − ½ log νπ − log σ − (ν+1)/2 · log(1 + z²/ν):
                  w = (ν + 1)/(ν + z²), ∂x = −w z/σ, ∂μ = w z/σ, ∂σ = (w z² − 1)/σ,
                  ∂ν = ½ψ((ν+1)/2) − ½ψ(ν/2) − 1/(2ν) − ½ log(1 + z²/ν) + w z²/(2ν)
================  ==================================================================================

Potentials (``pm.Potential``) are read where they are a quadratic in θ (a soft constraint such as
−½((β₀ − 2)/0.01)², a soft sum-to-zero): their gradient and Hessian at one point, checked with the
rest of the prior at others.

The constant terms PyMC computes in the constants' own dtypes (log σ of a float32 σ in float32) are
not reproduced: the value carries an ``offset`` measured once against the model's own prior graph
(:func:`~pymc_subsample.model.closed_form_prior.closed_form_prior`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["BETA", "EXPONENTIAL", "GAMMA", "HALF_CAUCHY", "HALF_NORMAL", "IDENTITY", "LOG", "LOG_ODDS",
           "NORMAL", "STUDENT_T", "closed_form_prior", "digamma"]

#: the families of :func:`closed_form_prior`, by code
NORMAL, HALF_NORMAL, EXPONENTIAL, GAMMA, BETA, HALF_CAUCHY, STUDENT_T = range(7)
#: the transforms x = T⁻¹(θ), by code
IDENTITY, LOG, LOG_ODDS = range(3)
#: a family's parameters at most (StudentT's ν, μ, σ)
MAX_PARAMS = 3

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)
_LOG_PI = math.log(math.pi)


@numba.njit(cache=True, error_model="numpy")
def closed_form_prior(prior, theta):
    """(log p(θ), ∇log p(θ)) of the prior ``prior`` = (family (d,), transform (d,), source (d, 3):
    the element of θ whose value x_j is each parameter, or −1 for a constant; constants (d, 3) and
    their logs (d, 3) as the model computes them (a float32 σ's log σ in float32, which a free α
    multiplies in a Gamma's α log s); the potentials' quadratic gᵀu + ½uᵀHu, u = θ − θ₀, as (θ₀ (d,),
    g (d,), H (d, d), or (0, 0) for no potentials); offset (1,)) at ``theta`` (d,), with the
    transforms' log-Jacobians (module docstring).
    """
    family, transform, source, constants, log_constants, centre, slope, curvature, offset = prior
    d = theta.shape[0]
    x, dx = np.empty(d), np.empty(d)
    grad = np.zeros(d)
    value = offset[0]
    for e in range(d):
        t = theta[e]
        if transform[e] == LOG:
            x[e] = math.exp(t)
            dx[e] = x[e]
            value += t
            grad[e] += 1.0
        elif transform[e] == LOG_ODDS:  # log σ(t) + log(1 − σ(t)) = −softplus(−t) − softplus(t)
            s = 1.0 / (1.0 + math.exp(-t))
            x[e], dx[e] = s, s * (1.0 - s)
            value -= abs(t) + 2.0 * math.log1p(math.exp(-abs(t)))
            grad[e] += 1.0 - 2.0 * s
        else:
            x[e], dx[e] = t, 1.0
    p, log_p = np.empty(MAX_PARAMS), np.empty(MAX_PARAMS)
    for e in range(d):
        for i in range(MAX_PARAMS):
            j = source[e, i]
            if j < 0:
                p[i], log_p[i] = constants[e, i], log_constants[e, i]
            else:
                p[i] = x[j]
                log_p[i] = math.log(x[j]) if x[j] > 0.0 else 0.0  # read only for positive parameters
        lp, d_x, d0, d1, d2 = _log_density(family[e], x[e], p, log_p)
        value += lp
        grad[e] += d_x * dx[e]
        if source[e, 0] >= 0:
            grad[source[e, 0]] += d0 * dx[source[e, 0]]
        if source[e, 1] >= 0:
            grad[source[e, 1]] += d1 * dx[source[e, 1]]
        if source[e, 2] >= 0:
            grad[source[e, 2]] += d2 * dx[source[e, 2]]
    if curvature.shape[0]:  # the potentials, a quadratic in θ
        u = theta - centre
        hu = curvature @ u
        value += slope @ u + 0.5 * (u @ hu)
        grad += slope + hu
    return value, grad


@numba.njit(cache=True, error_model="numpy")
def _log_density(family, x, p, log_p):
    """(log-density, ∂x, ∂a, ∂b, ∂c) of one element of ``family`` at ``x`` with parameters
    (a, b, c) = ``p`` and their logs ``log_p`` (module docstring).
    """
    a, b, c = p[0], p[1], p[2]
    if family == NORMAL or family == HALF_NORMAL:  # (μ, σ); HalfNormal's (loc = 0, σ)
        z = (x - a) / b
        lp = -0.5 * z * z - log_p[1] - _HALF_LOG_2PI + (_LOG_2 if family == HALF_NORMAL else 0.0)
        return lp, -z / b, z / b, (z * z - 1.0) / b, 0.0
    if family == EXPONENTIAL:  # (scale,)
        return -log_p[0] - x / a, -1.0 / a, (x / a - 1.0) / a, 0.0, 0.0
    if family == GAMMA:  # (α, scale)
        log_x, log_s = math.log(x), log_p[1]
        lp = -math.lgamma(a) - a * log_s + (a - 1.0) * log_x - x / b
        return lp, (a - 1.0) / x - 1.0 / b, log_x - log_s - digamma(a), (x / b - a) / b, 0.0
    if family == BETA:  # (a, b)
        log_x, log_1mx = math.log(x), math.log1p(-x)
        lp = (a - 1.0) * log_x + (b - 1.0) * log_1mx - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
        both = digamma(a + b)
        return lp, (a - 1.0) / x - (b - 1.0) / (1.0 - x), log_x - digamma(a) + both, \
            log_1mx - digamma(b) + both, 0.0
    if family == HALF_CAUCHY:  # (loc = 0, β)
        z = x / b
        u = 1.0 + z * z
        lp = _LOG_2 - _LOG_PI - log_p[1] - math.log1p(z * z)
        return lp, -2.0 * z / (b * u), 2.0 * z / (b * u), (z * z - 1.0) / (b * u), 0.0
    # STUDENT_T: (ν, μ, σ)
    z = (x - b) / c
    z2 = z * z
    t = math.log1p(z2 / a)
    w = (a + 1.0) / (a + z2)
    lp = (math.lgamma(0.5 * (a + 1.0)) - math.lgamma(0.5 * a) - 0.5 * (log_p[0] + _LOG_PI) - log_p[2]
          - 0.5 * (a + 1.0) * t)
    d_nu = 0.5 * (digamma(0.5 * (a + 1.0)) - digamma(0.5 * a)) - 0.5 / a - 0.5 * t + 0.5 * w * z2 / a
    return lp, -w * z / c, d_nu, w * z / c, (w * z2 - 1.0) / c


@numba.njit(cache=True)
def digamma(x):
    """ψ(x) for x > 0: the recurrence ψ(x) = ψ(x + 1) − 1/x up to x ≥ 10, then the asymptotic series
    ln x − 1/(2x) − Σ B₂ₙ/(2n x²ⁿ) to n = 6 (truncation below 1e-14 there).
    """
    total = 0.0
    while x < 10.0:
        total -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132
                                                                                   - f * 691.0 / 32760)))))
    return total + math.log(x) - 0.5 / x - series
