"""The rows' terms f, ∂f/∂η_j and ∂²f/∂η_j∂η_l of the closed forms' families at given η, one Numba
kernel for every model whose rows are of them (:mod:`~pymc_subsample.model.closed_form` reads the
families from the model's graph).

Why: the set-up's passes over the rows (the centre's Newton steps, the proxy's sums at θ*, the
terms at θ* of every row that the sampler then reads) computed these terms in NumPy, about 80 ns a
row for the normal family (every elementwise operation a temporary array the size of the chunk, out
of cache at a chunk of 65,536 rows); one loop over the rows computes them in a few. It sits beside
the layers, as :mod:`pymc_subsample.prior_kernel` does: the model layer calls it, and it imports
nothing of ours but the modules beside it (the vectorised elementary functions of
:mod:`pymc_subsample.elementary`, ψ of :mod:`pymc_subsample.prior_kernel`). ψ′
(:func:`trigamma_scalar`) is here, for StudentT's terms and for the model layer's NumPy ufunc of it.

By family code, for one term of f = Σ_t f_t with its y and the η of its parameters (r = (y − μ)/σ):

========================  ===========================================================
Bernoulli(logit)          f = yη − softplus(η),  ∂f = y − σ(η),  ∂²f = −σ(η)(1 − σ(η))
Poisson(log)              f = yη − e^η − log y!,  ∂f = y − e^η,  ∂²f = −e^η
Normal(identity, σ)       f = −½r² − log σ − ½ log 2π,  ∂f = r/σ,  ∂²f = −1/σ²
Normal(identity, log)     σ = e^{η₂}: ∂f/∂μ = r/σ, ∂f/∂η₂ = r² − 1, ∂²f/∂μ² = −1/σ²,
                          ∂²f/∂μ∂η₂ = −2r/σ, ∂²f/∂η₂² = −2r²
StudentT(log, identity,   f = A(ν) − log σ − (ν+1)/2 · log(1 + q),  A(ν) = log Γ((ν+1)/2) −
log)                      log Γ(ν/2) − ½ log νπ,  q = z²/ν,  z = (y − μ)/σ,  ρ = 1/(1 + q),
                          in η = (log ν, μ, log σ):
                          ∂f/∂μ = (ν+1)/ν · zρ/σ,  ∂f/∂log σ = (ν+1)(1 − ρ) − 1,
                          ∂f/∂log ν = νA′ − ν/2 log(1 + q) + (ν+1)(1 − ρ)/2,
                          ∂²f/∂μ² = (ν+1)/ν · ρ²(q − 1)/σ²,  ∂²f/∂μ∂log σ = −2(ν+1)/ν · zρ²/σ,
                          ∂²f/∂log σ² = −2(ν+1)qρ²,  ∂²f/∂μ∂log ν = zρ²(νq − 1)/(νσ),
                          ∂²f/∂log σ∂log ν = ν(1 − ρ) − (ν+1)qρ²,
                          ∂²f/∂log ν² = νA′ + ν²A″ − ν/2 log(1 + q) + νqρ/2 + ν(1 − ρ)/2
                          − (ν+1)qρ²/2,  νA′ = ν/2 (ψ((ν+1)/2) − ψ(ν/2)) − ½,
                          ν²A″ = ν²/4 (ψ′((ν+1)/2) − ψ′(ν/2)) + ½
========================  ===========================================================

log σ of a constant σ is read from the constants as the model computes it (in σ's dtype).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_subsample.elementary import exp, exp_minus_abs, log1p_unit
from pymc_subsample.prior_kernel import digamma

__all__ = ["BERNOULLI_LOGIT", "MAX_PARAMS", "NEGATIVE_BINOMIAL", "NORMAL", "NORMAL_KNOWN_SIGMA",
           "POISSON_LOG", "STUDENT_T", "TRIGAMMA_ASYMPTOTIC", "closed_form_row_terms", "trigamma_scalar"]

#: the closed forms' families, by code: the model layer names a model's rows by them
#: (:mod:`~pymc_subsample.model.closed_form`), and this kernel and the η estimate's
#: (:mod:`~pymc_subsample.estimators.eta_kernels`) compute them; defined here, beside the layers, once
BERNOULLI_LOGIT, POISSON_LOG, NORMAL_KNOWN_SIGMA, NORMAL, STUDENT_T, NEGATIVE_BINOMIAL = range(6)
#: the most parameters of a family (StudentT's ν, μ, σ): a term's ``eta_index`` and ``constants``
#: (whose logs follow) hold this many
MAX_PARAMS = 3
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_PI = math.log(math.pi)

#: ψ′(x) = Σ_{i≥0} 1/(x + i)²: the recurrence ψ′(x) = ψ′(x + 1) + 1/x² below it, the asymptotic
#: series above it (its first omitted term is below 10⁻¹⁵ of ψ′ there)
TRIGAMMA_ASYMPTOTIC = 10.0


def trigamma_scalar(x):
    """ψ′(x) of a float: for x ≤ 0 the reflection ψ′(1 − x) + ψ′(x) = π²/sin²(πx) (∞ at the poles
    0, −1, …), then the recurrence up to :data:`TRIGAMMA_ASYMPTOTIC` and the asymptotic series
    ψ′(x) ~ 1/x + 1/(2x²) + Σ_k B_2k / x^(2k+1) (Abramowitz and Stegun 6.4.12), to 3·10⁻¹² relative
    of SciPy's ``polygamma(1, x)`` (a test checks it).
    """
    if math.isnan(x):
        return x
    head, sign = 0.0, 1.0
    if x <= 0.0:
        if x == math.floor(x):
            return math.inf
        s = math.sin(math.pi * x)
        head, sign, x = math.pi * math.pi / (s * s), -1.0, 1.0 - x
    total = 0.0
    while x < TRIGAMMA_ASYMPTOTIC:
        total += 1.0 / (x * x)
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    # Bernoulli numbers B2 … B12: 1/6, −1/30, 1/42, −1/30, 5/66, −691/2730
    tail = 5.0 / 66 - inv2 * 691.0 / 2730
    for bernoulli in (-1.0 / 30, 1.0 / 42, -1.0 / 30, 1.0 / 6):
        tail = bernoulli + inv2 * tail
    return head + sign * (total + inv + 0.5 * inv2 + inv * inv2 * tail)


_trigamma = numba.njit(cache=True)(trigamma_scalar)


@numba.njit(cache=True, error_model="numpy")
def closed_form_row_terms(code, eta_index, constants, y, etas, pair_row):
    """(f (m,), ∂f/∂η_j (p, m), ∂²f/∂η_j∂η_l (n_pairs, m)) of the rows at ``etas`` (p, m).

    Parameters
    ----------
    code, eta_index, constants : ndarray
        Each term's family (T,), the η of its parameters (T, 3; −1 for a constant) and its
        constants (T, 6: the values, then their logs), as
        :class:`~pymc_subsample.model.closed_form.ClosedFormRows` holds them.
    y : ndarray (T, m)
        Each term's observed values, as the model casts them, in float64.
    etas : ndarray (p, m)
        η_j of every row.
    pair_row : ndarray of int64 (p, p)
        The row of the output's second derivatives holding ∂²f/∂η_j∂η_l, j ≤ l (−1 for a pair
        not held).
    """
    # the row loops call the elementary functions of pymc_subsample.elementary, which LLVM vectorises
    # (libm's are one call a row), each output row a 1-d view of its own
    p, m = etas.shape
    value = np.zeros(m)
    first = np.zeros((p, m))
    second = np.zeros((max(1, pair_row.max() + 1), m))
    for t in range(code.shape[0]):
        family, y_t, j = code[t], y[t], eta_index[t, 0]
        x, df = etas[j], first[j]
        if family == BERNOULLI_LOGIT or family == POISSON_LOG or family == NORMAL_KNOWN_SIGMA:
            if pair_row[j, j] < 0:
                raise ValueError("closed_form_row_terms: a second derivative not held")
            d2f = second[pair_row[j, j]]
            if family == BERNOULLI_LOGIT:
                e = exp_minus_abs(x)
                for k in range(m):
                    v = e[k]
                    rate = (1.0 if x[k] >= 0.0 else v) / (1.0 + v)
                    value[k] += y_t[k] * x[k] - (max(x[k], 0.0) + log1p_unit(v))
                    df[k] += y_t[k] - rate
                    d2f[k] -= rate * (1.0 - rate)
            elif family == POISSON_LOG:
                for k in range(m):
                    rate = exp(x[k])
                    value[k] += y_t[k] * x[k] - rate
                    df[k] += y_t[k] - rate
                    d2f[k] -= rate
                for k in range(m):  # libm's, one row at a time: in a loop of its own
                    value[k] -= math.lgamma(y_t[k] + 1.0)
            else:
                sigma, log_sigma = constants[t, 1], constants[t, MAX_PARAMS + 1]
                for k in range(m):
                    r = (y_t[k] - x[k]) / sigma
                    value[k] += -0.5 * r * r - log_sigma - _HALF_LOG_2PI
                    df[k] += r / sigma
                    d2f[k] -= 1.0 / (sigma * sigma)
        elif family == NORMAL:  # μ = η_j, log σ = η_b
            b = eta_index[t, 1]
            rows = (pair_row[j, j], pair_row[min(j, b), max(j, b)], pair_row[b, b])
            if min(rows) < 0:
                raise ValueError("closed_form_row_terms: a second derivative not held")
            log_sigma, df_b = etas[b], first[b]
            d2f_jj, d2f_jb, d2f_bb = second[rows[0]], second[rows[1]], second[rows[2]]
            for k in range(m):
                w = exp(-log_sigma[k])
                r = (y_t[k] - x[k]) * w
                value[k] += -0.5 * r * r - log_sigma[k] - _HALF_LOG_2PI
                df[k] += r * w
                df_b[k] += r * r - 1.0
                d2f_jj[k] -= w * w
                d2f_jb[k] -= 2.0 * r * w
                d2f_bb[k] -= 2.0 * r * r
        elif family == STUDENT_T:
            _student_t(eta_index[t], y_t, etas, pair_row, value, first, second)
        else:
            raise ValueError("closed_form_row_terms: a family without written-out terms")
    return value, first, second


@numba.njit(cache=True, error_model="numpy")
def _student_t(index, y, etas, pair_row, value, first, second):
    """A StudentT term of :func:`closed_form_row_terms` (log ν = η_a, μ = η_b, log σ = η_c), added
    to ``value``, ``first`` and ``second`` (module docstring's notation, with q = z²/ν, ρ = 1/(1 + q)
    and ν's functions computed again only where ν changes from one row to the next).
    """
    a, b, c = index[0], index[1], index[2]
    rows = np.empty((3, 3), dtype=np.int64)
    for i, x in enumerate((a, b, c)):
        for j, w in enumerate((a, b, c)):
            rows[i, j] = pair_row[min(x, w), max(x, w)]
    if rows.min() < 0:
        raise ValueError("closed_form_row_terms: a second derivative not held")
    log_nu = np.nan
    head = d_head = dd_head = nu = 0.0
    for k in range(y.shape[0]):
        if etas[a, k] != log_nu:  # lgamma, ψ, ψ′ once where ν is one scalar
            log_nu = etas[a, k]
            nu = math.exp(log_nu)
            half, half_up = 0.5 * nu, 0.5 * (nu + 1.0)
            head = math.lgamma(half_up) - math.lgamma(half) - 0.5 * (log_nu + _LOG_PI)
            d_head = half * (digamma(half_up) - digamma(half)) - 0.5  # ν A′(ν)
            dd_head = 0.25 * nu * nu * (_trigamma(half_up) - _trigamma(half)) + 0.5  # ν² A″(ν)
        s = math.exp(-etas[c, k])
        z = (y[k] - etas[b, k]) * s
        q = z * z / nu
        rho = 1.0 / (1.0 + q)
        t = math.log1p(q)
        grown = (nu + 1.0) / nu
        value[k] += head - etas[c, k] - 0.5 * (nu + 1.0) * t
        first[b, k] += grown * z * s * rho
        first[c, k] += (nu + 1.0) * (1.0 - rho) - 1.0
        first[a, k] += d_head - 0.5 * nu * t + 0.5 * (nu + 1.0) * (1.0 - rho)
        second[rows[1, 1], k] += grown * s * s * rho * rho * (q - 1.0)
        second[rows[1, 2], k] -= 2.0 * grown * z * s * rho * rho
        second[rows[2, 2], k] -= 2.0 * (nu + 1.0) * q * rho * rho
        second[rows[0, 1], k] += z * s * rho * rho * (nu * q - 1.0) / nu
        second[rows[0, 2], k] += nu * (1.0 - rho) - (nu + 1.0) * q * rho * rho
        second[rows[0, 0], k] += (d_head + dd_head - 0.5 * nu * t + 0.5 * nu * q * rho
                                  + 0.5 * nu * (1.0 - rho) - 0.5 * (nu + 1.0) * q * rho * rho)
