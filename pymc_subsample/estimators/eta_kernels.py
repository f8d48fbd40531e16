"""The Numba kernels of the η estimate (:mod:`~pymc_subsample.estimators.eta_estimate`): η from the
rows' kept η(0) and sparse J, the perturbed sums and their gradient, and the closed forms of f.

They import nothing but NumPy, Numba, ψ from :mod:`pymc_subsample.prior_kernel`, the vectorised
elementary functions of :mod:`pymc_subsample.elementary` and the families' codes of
:mod:`pymc_subsample.row_terms_kernel`, so that the kernels that run a whole
HMC-ECS iteration (:mod:`pymc_subsample.kernels.eta_nuts`) can call them without reaching PyMC or
PyTensor.

:func:`closed_form_sums` computes η, f, ∂f (:func:`row_differences`), the sums and the proxy's Σq in one
call for rows of families whose f the package writes here (observed variables on every row, f = Σ_t f_t,
with y a column of the data, their other parameters η or constants:
:mod:`~pymc_subsample.model.closed_form`). With its row loops vectorised (the elementary functions of
:mod:`pymc_subsample.elementary`, J a column a row, the terms at θ* in C order) it costs 8.1 µs (d = 4)
and 14.2 µs (d = 31) in a Numba loop at m = 1000 (2026-11-30, AVX-512); called from Python at d = 4,
14-15 µs against 23-30 µs with libm's functions and the terms in F order. On AVX2 (AMD EPYC, znver3,
2026-12-01) the logistic zoo model's (d = 5) takes 8-9 µs, the centred hierarchical model's 11-13 µs,
StudentT's 21 µs, where loops that AVX2 could not vectorise (conversions between doubles and 64-bit
integers, calls, branches a row) took 11, 16 and 44 µs. The kernels of both routes are in this
one module: Numba's cache of a function is checked against its own file only, so a kernel calling one of
another module keeps running that one's earlier code after an edit (an edit of
:mod:`pymc_subsample.elementary` or :mod:`pymc_subsample.prior_kernel` needs this module's cache emptied
when developing). The closed forms (those of :data:`~pymc_subsample.families.FAMILIES`,
``tests/test_eta_estimate.py`` checks them against the model's own rows), by their code:

========================  ========================================================================
Bernoulli(logit)          f − f* = yη − softplus(η) − f*,  ∂f = y − σ(η)
Poisson(log)              f − f* = y u − μ*·expm1(u),  ∂f = y − μ* e^u,  u = η − η*,  μ* = −∂²f*
                          (log y! cancels: f* holds it, and μ* = e^{η*} is the row's ∂²f* negated)
Normal(identity, σ)       f − f* = −½ r² − log σ − ½ log 2π − f*,  r = (y − η)/σ,  ∂f = r/σ
Normal(identity, log)     the same with log σ = η₂: ∂f/∂μ = r e^{−η₂},  ∂f/∂η₂ = r² − 1
StudentT(log, identity,   f = log Γ((ν+1)/2) − log Γ(ν/2) − ½ log νπ − log σ − (ν+1)/2 · t,
log)                      z = (y − μ)/σ,  t = log1p(z²/ν),  w = (ν+1)/(ν+z²):
                          ∂f/∂μ = w z/σ,  ∂f/∂log σ = w z² − 1,
                          ∂f/∂log ν = ν/2 (ψ((ν+1)/2) − ψ(ν/2)) − ½ − ν t/2 + w z²/2
NegativeBinomial(log,     f = log Γ(y + n) − log Γ(n) − log y! + n log p + y log(1 − p),  n = e^{η₁}
logit)                    (or a constant), log p = −softplus(−η₂), log(1 − p) = −softplus(η₂):
                          ∂f/∂η₁ = n (ψ(y + n) − ψ(n) + log p),  ∂f/∂η₂ = n(1 − p) − y p
                          (the formula of :data:`~pymc_subsample.families.FAMILIES`, as f* was
                          computed: no Poisson limit above n = 10¹⁰, where PyMC's logp switches)
========================  ========================================================================
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_subsample.elementary import exp as _exp
from pymc_subsample.elementary import exp_minus_abs as _exp_minus_abs
from pymc_subsample.elementary import expm1 as _expm1
from pymc_subsample.elementary import log1p as _log1p
from pymc_subsample.elementary import log1p_unit as _log1p_unit
from pymc_subsample.prior_kernel import digamma as _digamma
from pymc_subsample.row_terms_kernel import (  # the closed forms' codes, by which row_differences reads them
    BERNOULLI_LOGIT,
    NEGATIVE_BINOMIAL,
    NORMAL,
    NORMAL_KNOWN_SIGMA,
    POISSON_LOG,
    STUDENT_T,
)
from pymc_subsample.row_terms_kernel import MAX_PARAMS as _MAX_PARAMS

__all__ = ["BERNOULLI_LOGIT", "NEGATIVE_BINOMIAL", "NORMAL", "NORMAL_KNOWN_SIGMA", "POISSON_LOG", "STUDENT_T",
           "affine_eta", "closed_form_differences",
           "closed_form_sums", "perturbed_sums", "replace_rows", "row_differences", "write_affine_rows"]

#: counts below this read log Γ(y + n) − log Γ(n), ψ(y + n) − ψ(n) and log y! from tables made once a
#: call (:func:`_count_tables`) where n is the same on every row; larger or non-integer y call lgamma
COUNT_TABLE = 256


@numba.njit(cache=True, fastmath=True)
def affine_eta(offset, jacobian, coef, owner, constant_offset, constant_jacobian, slot, dense, first, stride,
               x):
    """η (p, m) at coordinates ``x`` of :class:`~pymc_subsample.model.affine_rows.AffineRows`' arrays:
    η_k = η_k(0) + J_k x, each constant η_j on every row.
    """
    # loops, not np.dot: as fast at these sizes, and Numba compiles them in a fraction of the time;
    # along the rows, so that each is contiguous and LLVM vectorises it without reordering a sum
    m, n_dense = offset.shape[1], dense.shape[0]
    eta = np.empty((slot.shape[0], m))
    for j in range(slot.shape[0]):
        row = eta[j]
        if slot[j] >= 0:
            v = slot[j]
            start = offset[v]
            for k in range(m):  # a loop, not row[:] = …: Numba's slice assignment took 2 µs at m = 1000
                row[k] = start[k]
            for i in range(n_dense):
                value, column = x[dense[i]], jacobian[v, i]
                for k in range(m):
                    row[k] += column[k] * value
            for b in range(first.shape[0]):
                coefs, owners = coef[v, b], owner[b]
                for k in range(m):
                    row[k] += coefs[k] * x[first[b] + stride[b] * owners[k]]
        else:
            c = -1 - slot[j]
            total = constant_offset[c]
            for i in range(n_dense):
                total += constant_jacobian[c, i] * x[dense[i]]
            for k in range(m):
                row[k] = total
    return eta


@numba.njit(cache=True, fastmath=True)
def perturbed_sums(eta, jacobian, coef, owner, constant_jacobian, slot, dense, first, stride, n_coords,
                   at_eta, centre, pairs, order, subsampled, n_rest, m_rest):
    """(ℓ̂ − Σq − σ̂²/2, its gradient in the ``n_coords`` coordinates η is affine in, σ̂²) of the
    formulas of :mod:`~pymc_subsample.estimators.eta_estimate`'s docstring.

    ``eta`` (p, m) at the coordinates; ``jacobian`` .. ``stride``: J as
    :class:`~pymc_subsample.model.affine_rows.AffineRows` holds it; ``at_eta`` (1 + p, m): f and
    ∂f/∂η_j at ``eta``;
    ``centre`` (2p + 1 + n_pairs, m): the rows' terms at θ* (η*, f*, ∂f*, ∂²f*: the order of
    :meth:`~pymc_subsample.model.distributional.RowTerms.flat`), with ``pairs`` (n_pairs, 2) the
    (j, l), j ≤ l, of ∂²f*; the proxy of ``order`` 0, 1 or 2; ``subsampled`` (m,) 1 for the rows
    of R, 0 for those of E; n_R; m = Σ subsampled.
    """
    p = eta.shape[0]
    return _sums(eta, at_eta[0] - centre[p], at_eta[1:].copy(), jacobian, coef, owner, constant_jacobian,
                 slot, dense, first, stride, n_coords, centre, pairs, order, subsampled, n_rest, m_rest)


@numba.njit(cache=True, fastmath=True)
def closed_form_sums(code, eta_index, constants, y, offset, jacobian, coef, owner, constant_offset,
                     constant_jacobian, slot, dense, first, stride, x, centre, pairs, order, subsampled,
                     n_rest, m_rest, sum_at_centre, x_centre, linear, quadratic):
    """:func:`perturbed_sums` at coordinates ``x`` with η (:func:`affine_eta`) and f, ∂f of a
    family of :mod:`~pymc_subsample.model.closed_form` (``code``, ``eta_index``,
    ``constants``, the rows' ``y``) in the same call, plus the proxy's Σq = Σf* + AᵀΔx + ½ΔxᵀBΔx
    (``sum_at_centre``, ``x_centre``, A = ``linear``, B = ``quadratic``, truncated at ``order``;
    Dang et al. 2019 eq. 4.7): the estimate but for log p(θ) (and, in φ, the pullback to θ).
    """
    eta = affine_eta(offset, jacobian, coef, owner, constant_offset, constant_jacobian, slot, dense, first,
                     stride, x)
    d, slope = row_differences(code, eta_index, constants, slot < 0, y, eta, centre)
    value, grad, sigma2 = _sums(eta, d, slope, jacobian, coef, owner, constant_jacobian, slot, dense, first,
                                stride, x.shape[0], centre, pairs, order, subsampled, n_rest, m_rest)
    value += sum_at_centre
    if order >= 1:
        n = x.shape[0]
        delta = x - x_centre
        for i in range(n):
            value += linear[i] * delta[i]
            grad[i] += linear[i]
        if order == 2:
            for i in range(n):
                row = quadratic[i]
                curved = 0.0
                for t in range(n):
                    curved += row[t] * delta[t]
                value += 0.5 * delta[i] * curved
                grad[i] += curved
    return value, grad, sigma2


@numba.njit(cache=True, fastmath=True)
def _sums(eta, d, slope, jacobian, coef, owner, constant_jacobian, slot, dense, first, stride, n_coords,
          centre, pairs, order, subsampled, n_rest, m_rest):
    """:func:`perturbed_sums` from d = f − f* (m,) and ∂f/∂η_j (p, m), both changed in place."""
    p, m = eta.shape
    _minus_taylor(eta, d, slope, centre, pairs, order)
    total, s1 = 0.0, 0.0
    for k in range(m):
        total += d[k]
        s1 += subsampled[k] * d[k]
    mean = s1 / m_rest
    s2 = 0.0
    for k in range(m):
        s2 += subsampled[k] * (d[k] - mean) ** 2
    scale = n_rest / m_rest
    sigma2 = scale * scale * s2
    value = (total - s1) + scale * s1 - 0.5 * sigma2
    # ∂(value)/∂d_k: 1 on E; n_R/m − (n_R²/m²)(d_k − d̄) on R (the second from −σ̂²/2); one loop, where
    # the array expression made five temporaries (1.5-2 µs at m = 1000)
    c = np.empty(m)
    for k in range(m):
        c[k] = 1.0 + subsampled[k] * (scale - scale * scale * (d[k] - mean) - 1.0)
    grad = np.zeros(n_coords)
    weights = np.empty(m)
    for j in range(p):
        v = slot[j]
        for k in range(m):
            weights[k] = slope[j, k] * c[k]
        if v >= 0:  # Σ_k w_k J_k: one sum along the rows per column of J
            for i in range(dense.shape[0]):
                column, total = jacobian[v, i], 0.0
                for k in range(m):
                    total += weights[k] * column[k]
                grad[dense[i]] += total
            for b in range(first.shape[0]):
                coefs, owners = coef[v, b], owner[b]
                for k in range(m):
                    grad[first[b] + stride[b] * owners[k]] += weights[k] * coefs[k]
        else:
            total = weights.sum()
            for i in range(dense.shape[0]):
                grad[dense[i]] += total * constant_jacobian[-1 - v, i]
    return value, grad, sigma2


@numba.njit(cache=True, fastmath=True)
def _minus_taylor(eta, d, slope, centre, pairs, order):
    """d_k = f − f* − (q_k − f*) and ∂d_k/∂η_j = ∂f/∂η_j − ∂q_k/∂u_j from f − f* and ∂f/∂η_j, in place:
    the proxy q_k of ``order`` in u = η − η* from the rows' terms at θ* ``centre`` (eq. 4.3 in η).
    """
    p, m = eta.shape
    u = np.empty((p, m))
    for j in range(p):  # loops, not eta − centre[:p]: Numba's array expression costs 2 µs at m = 1000
        for k in range(m):
            u[j, k] = eta[j, k] - centre[j, k]
    df_c, d2f_c = centre[p + 1: 2 * p + 1], centre[2 * p + 1:]
    if order >= 1:
        for j in range(p):
            for k in range(m):
                d[k] -= df_c[j, k] * u[j, k]
                slope[j, k] -= df_c[j, k]
    if order == 2:
        for i in range(pairs.shape[0]):
            j, i2 = pairs[i, 0], pairs[i, 1]
            h = d2f_c[i]
            if j == i2:  # outside the loops over rows, so that each is one vectorised stream
                for k in range(m):
                    d[k] -= 0.5 * h[k] * u[j, k] * u[j, k]
                    slope[j, k] -= h[k] * u[j, k]
            else:
                for k in range(m):
                    d[k] -= h[k] * u[j, k] * u[i2, k]
                    slope[j, k] -= h[k] * u[i2, k]
                    slope[i2, k] -= h[k] * u[j, k]


@numba.njit(cache=True, fastmath=True)
def closed_form_differences(code, eta_index, constants, y, offset, jacobian, coef, owner, constant_offset,
                            constant_jacobian, slot, dense, first, stride, thetas, centre, pairs, order):
    """d_k(θ) = f(y_k, η_k(θ)) − q_k(θ) of the rows at each row of ``thetas`` (k, d), shape (k, m): the
    differences whose spread over the warm-up's points chooses the rows computed exactly
    (:func:`~pymc_subsample.kernels.tuning.difference_deviations`), in the arithmetic of
    :func:`closed_form_sums` (arguments as there, the coordinates θ).
    """
    out = np.empty((thetas.shape[0], y.shape[1]))
    for t in range(thetas.shape[0]):
        eta = affine_eta(offset, jacobian, coef, owner, constant_offset, constant_jacobian, slot, dense,
                         first, stride, thetas[t])
        d, slope = row_differences(code, eta_index, constants, slot < 0, y, eta, centre)
        _minus_taylor(eta, d, slope, centre, pairs, order)
        out[t] = d
    return out


@numba.njit(cache=True)
def replace_rows(offset, jacobian, coef, owner, centre, kept_offset, kept_jacobian, kept_coef, kept_owner,
                 terms, rows, start):
    """Copies of a batch's η(0), J, block coefficients, block entries (as
    :class:`~pymc_subsample.model.affine_rows.AffineRows`) and terms at θ* ``centre``, with the
    positions from ``start`` on holding the kept rows ``rows`` (of a
    :class:`~pymc_subsample.model.affine_rows.KeptAffineRows`) and their ``terms`` (n_terms,
    len(rows)): a block update's proposal in one call.
    """
    offset, jacobian, coef, owner = offset.copy(), jacobian.copy(), coef.copy(), owner.copy()
    centre = centre.copy()
    write_affine_rows(offset, jacobian, coef, owner, kept_offset, kept_jacobian, kept_coef, kept_owner, rows,
                      start)
    for t in range(rows.shape[0]):
        for j in range(centre.shape[0]):
            centre[j, start + t] = terms[j, t]
    return offset, jacobian, coef, owner, centre


@numba.njit(cache=True)
def write_affine_rows(offset, jacobian, coef, owner, kept_offset, kept_jacobian, kept_coef, kept_owner, rows,
                      start):
    """Write the η(0), J, block coefficients and block entries of the kept rows ``rows`` (of a
    :class:`~pymc_subsample.model.affine_rows.KeptAffineRows`) into a batch's, in place, at the
    positions from ``start`` on.
    """
    for t in range(rows.shape[0]):
        k, r = start + t, rows[t]
        for v in range(offset.shape[0]):
            offset[v, k] = kept_offset[v, r]
            for i in range(jacobian.shape[1]):
                jacobian[v, i, k] = kept_jacobian[v, r, i]
            for b in range(coef.shape[1]):
                coef[v, b, k] = kept_coef[v, b, r]
        for b in range(owner.shape[0]):
            owner[b, k] = kept_owner[b, r]


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
@numba.njit(cache=True, error_model="numpy")
def row_differences(code, eta_index, constants, constant_eta, y, eta, centre):
    """(f(y_k, η_k) − f_k* (m,), ∂f/∂η_j (p, m)) at ``eta`` (p, m) of the rows' terms, f = Σ_t f_t, each
    of the family ``code[t]`` (module docstring) with its parameters' η ``eta_index[t]``, its
    ``constants[t]`` (:class:`~pymc_subsample.model.closed_form.ClosedFormRows`) and its y ``y[t]``;
    with the rows' terms at θ* ``centre`` as :func:`perturbed_sums` reads them; ``constant_eta`` (p,):
    the η_j the same on every row (their exponentials taken once).
    """
    p, m = eta.shape
    d = np.zeros(m)
    slope = np.zeros((p, m))
    f_c = centre[p]
    relative = False  # d holds f − f* already (a Poisson term, alone)
    for t in range(code.shape[0]):
        family, index, values, y_t = code[t], eta_index[t], constants[t], y[t]
        if family == BERNOULLI_LOGIT:
            _bernoulli_logit(index[0], y_t, eta, d, slope)
        elif family == POISSON_LOG:
            j = index[0]
            curvature = centre[2 * p + 1 + _pair(p, j, j)]
            for k in range(m):
                u = eta[j, k] - centre[j, k]
                rate = -curvature[k]
                grown = _expm1(u)
                d[k] += y_t[k] * u - rate * grown
                slope[j, k] += y_t[k] - rate * (1.0 + grown)
            relative = True
        elif family == NORMAL_KNOWN_SIGMA:
            j, sigma = index[0], values[1]
            shift = -values[_MAX_PARAMS + 1] - _HALF_LOG_2PI  # log σ in σ's dtype
            for k in range(m):
                r = (y_t[k] - eta[j, k]) / sigma
                d[k] += -0.5 * r * r + shift
                slope[j, k] += r / sigma
        elif family == NORMAL:  # μ = η_a, log σ = η_b
            _normal(index[0], index[1], constant_eta[index[1]], y_t, eta, d, slope)
        elif family == NEGATIVE_BINOMIAL:  # log n = η_a (or n a constant), logit p = η_b
            _negative_binomial(index, values, constant_eta, y_t, eta, d, slope)
        else:  # STUDENT_T: log ν = η_a, μ = η_b, log σ = η_c; ν's functions once where it is one scalar
            _student_t(index, constant_eta, y_t, eta, d, slope)
    if not relative:
        for k in range(m):
            d[k] -= f_c[k]
    return d, slope


@numba.njit(cache=True, error_model="numpy")
def _normal(a, b, constant_sigma, y, eta, d, slope):
    """A normal term of :func:`row_differences` (μ = η_a, log σ = η_b), f and ∂f added to ``d`` and
    ``slope``; 1/σ once where σ is the same on every row (a loop of its own, in which e^{−η_b} a row is
    not computed and discarded).
    """
    m = y.shape[0]
    if constant_sigma:
        w, log_sigma = _exp(-eta[b, 0]), eta[b, 0]
        for k in range(m):
            r = (y[k] - eta[a, k]) * w
            d[k] += -0.5 * r * r - log_sigma - _HALF_LOG_2PI
            slope[a, k] += r * w
            slope[b, k] += r * r - 1.0
    else:
        for k in range(m):
            w = _exp(-eta[b, k])
            r = (y[k] - eta[a, k]) * w
            d[k] += -0.5 * r * r - eta[b, k] - _HALF_LOG_2PI
            slope[a, k] += r * w
            slope[b, k] += r * r - 1.0


@numba.njit(cache=True, error_model="numpy")
def _bernoulli_logit(j, y, eta, d, slope):
    """A Bernoulli-logit term of :func:`row_differences`, f and ∂f added to ``d`` and ``slope``."""
    m = y.shape[0]
    e = _exp_minus_abs(eta[j])
    for k in range(m):
        x, v = eta[j, k], e[k]
        d[k] += y[k] * x - (max(x, 0.0) + _log1p_unit(v))
        slope[j, k] += y[k] - (1.0 if x >= 0.0 else v) / (1.0 + v)


@numba.njit(cache=True, error_model="numpy")
def _student_t(index, constant_eta, y, eta, d, slope):
    """A StudentT term of :func:`row_differences` (log ν = η_a, μ = η_b, log σ = η_c), f and ∂f added."""
    a, b, c = index[0], index[1], index[2]
    m = y.shape[0]
    # ν's terms a row first, then the rest in a loop without log Γ and ψ, which LLVM vectorises (a
    # callee for the row, inlined by Numba or not, kept it scalar: 27-46 µs against 9 at m = 1000)
    heads, dheads, nus = np.empty(m), np.empty(m), np.empty(m)
    head, dhead, nu = _student_t_shape(eta[a, 0])
    for k in range(m):
        if not constant_eta[a]:
            head, dhead, nu = _student_t_shape(eta[a, k])
        heads[k], dheads[k], nus[k] = head, dhead, nu
    for k in range(m):
        nu = nus[k]
        inv_sigma = _exp(-eta[c, k])
        z = (y[k] - eta[b, k]) * inv_sigma
        z2 = z * z
        t = _log1p(z2 / nu)
        w = (nu + 1.0) / (nu + z2)
        d[k] += heads[k] - eta[c, k] - 0.5 * (nu + 1.0) * t
        slope[b, k] += w * z * inv_sigma
        slope[c, k] += w * z2 - 1.0
        slope[a, k] += dheads[k] - 0.5 * nu * t + 0.5 * w * z2


@numba.njit(cache=True, error_model="numpy")
def _negative_binomial(index, values, constant_eta, y, eta, d, slope):
    """A negative binomial term of :func:`row_differences` (module docstring), f and ∂f added.

    Where n is the same on every row, the terms of y alone come from :func:`_count_tables` for integer
    y < :data:`COUNT_TABLE` (a table lookup a row, against lgamma and ψ a row: counts are mostly small).
    """
    a, b = index[0], index[1]
    m = y.shape[0]
    one_n = a < 0 or constant_eta[a]
    n = values[0] if a < 0 else _exp(eta[a, 0])
    size = 0
    if one_n:
        largest = 0.0
        for k in range(m):
            largest = max(largest, y[k])
        size = int(min(largest, COUNT_TABLE - 1.0)) + 1
    lg, dg, lf = _count_tables(n, size)
    lg_n, dg_n = math.lgamma(n), _digamma(n)
    e = _exp_minus_abs(eta[b])
    for k in range(m):
        if not one_n:
            n = _exp(eta[a, k])
            lg_n, dg_n = math.lgamma(n), _digamma(n)
        x, v, count = eta[b, k], e[k], y[k]
        softplus_abs = _log1p_unit(v)
        log_p, log_q = -(max(-x, 0.0) + softplus_abs), -(max(x, 0.0) + softplus_abs)
        p = (1.0 if x >= 0.0 else v) / (1.0 + v)
        c = int(count) if 0.0 <= count < size else -1
        if c >= 0 and c == count:
            gamma_ratio, digamma_diff, log_factorial = lg[c], dg[c], lf[c]
        else:
            gamma_ratio = math.lgamma(count + n) - lg_n
            digamma_diff = _digamma(count + n) - dg_n
            log_factorial = math.lgamma(count + 1.0)
        d[k] += gamma_ratio - log_factorial + n * log_p + count * log_q
        slope[b, k] += n * (1.0 - p) - count * p
        if a >= 0:
            slope[a, k] += n * (digamma_diff + log_p)


@numba.njit(cache=True, error_model="numpy")
def _count_tables(n, size):
    """The tables log Γ(c + n) − log Γ(n), ψ(c + n) − ψ(n) and log c! for c = 0 … size − 1, by their
    recurrences (Γ(x + 1) = xΓ(x), ψ(x + 1) = ψ(x) + 1/x): relative rounding within c·ε.
    """
    lg, dg, lf = np.zeros(size), np.zeros(size), np.zeros(size)
    for c in range(1, size):
        t = n + (c - 1)
        lg[c] = lg[c - 1] + math.log(t)
        dg[c] = dg[c - 1] + 1.0 / t
        lf[c] = lf[c - 1] + math.log(c)
    return lg, dg, lf


@numba.njit(cache=True)
def _student_t_shape(log_nu):
    """(log Γ((ν+1)/2) − log Γ(ν/2) − ½ log νπ, ν/2 (ψ((ν+1)/2) − ψ(ν/2)) − ½, ν) at ν = e^{log ν}: the
    StudentT's terms of ν alone.
    """
    nu = math.exp(log_nu)
    head = math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * (log_nu + math.log(math.pi))
    return head, 0.5 * nu * (_digamma(0.5 * (nu + 1.0)) - _digamma(0.5 * nu)) - 0.5, nu


@numba.njit(cache=True)
def _pair(p, j, i):
    """The row of ∂²f/∂η_j∂η_i (j ≤ i) among the (j, l), j ≤ l, of ``RowTerms.flat``."""
    return j * p - j * (j - 1) // 2 + (i - j)
