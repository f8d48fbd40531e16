"""The perturbed HMC-ECS estimate of a regression affine in θ, with only f compiled from the model.

For rows ℓ_k(θ) = f(y_k, η_k(θ)) with η_k = η_k(0) + J_k θ exactly (η_k ∈ R^p;
:mod:`~pymc_subsample.model.distributional`), the estimate of
:meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_with_exact` (Dang et al. 2019
eqs. 4.1-4.5) needs from the model only f(y_k, ·) and ∂f/∂η_j at the batch's η_k, elementwise, and
log p(θ) with its gradient. Everything else is the same arithmetic for every such model:

    η_k = η_k(0) + J_k θ,   u_k = η_k − η_k*,   d_k = f(y_k, η_k) − q_k(u_k)   (q_k: eq. 4.3 in η),
    ℓ̂ − Σq = Σ_{k∈E} d_k + (n_R/m) Σ_{k∈R} d_k,   σ̂² = (n_R²/m²) Σ_{k∈R} (d_k − d̄_R)²,
    ∇_θ (ℓ̂ − σ̂²/2) = Σ_k c_k J_kᵀ (∂f/∂η(η_k) − ∂q_k/∂u),
    c_k = 1 (k ∈ E),   c_k = n_R/m − (n_R²/m²)(d_k − d̄_R) (k ∈ R).

So :class:`EtaPerturbedFunction` compiles one PyTensor function of (θ, η, batch) with outputs log
p(θ), its gradient, f and ∂f/∂η, all elementwise or in θ (one fused loop over the rows), and runs
the rest in :func:`perturbed_sums`, a Numba kernel of this package cached on disk. Why: compiled
as one graph with η = Xθ and its reverse pass, the estimate was the largest Numba compilation of a
first run, larger than PyMC's own ``logp_dlogp``; measured on a cold PyTensor cache (CPU s, m =
1000): logistic 10.4 against 1.9 s for the function here, StudentT 16.7 against 3.3 s. A call
costs 0-15 µs more (three calls from Python where the graph was one; m = 1000, 2026-11-30).

Rows of a family whose f the package writes in Numba itself (one observed variable with y a
column of the data, its other parameters η or constants: :mod:`~pymc_subsample.model.closed_form`)
need no function of f at all: :func:`closed_form_sums` computes η, f, ∂f (:func:`row_differences`),
the sums and the proxy's Σq in one call, and log p(θ) comes from the prior's own compiled function.
Measured at m = 1000 (logistic, N = 200,000, 2026-11-30): an estimate 42.6 → 26 µs at d = 4 and
58 → 32 µs at d = 31 against the function of f. With its row loops vectorised (the elementary
functions below, J a column a row, the terms at θ* in C order) the kernel alone costs 8.1 µs
(d = 4) and 14.2 µs (d = 31) in a Numba loop; called from Python at d = 4, 14-15 µs against 23-30
µs with libm's functions and the terms in F order. The kernels of both routes are in this one
module: Numba's cache of a function is checked against its own file only, so a kernel calling one
of another module would keep running that one's earlier code after an edit. The closed forms (those of
:data:`~pymc_subsample.families.FAMILIES`, ``tests/test_eta_estimate.py`` checks them against the
model's own rows):

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
========================  ========================================================================

J_k and η_k(0) of every row are read once, in one pass through NumPy, and kept
(:func:`~pymc_subsample.model.affine_rows.kept_affine_rows`, by the tall model): a batch reads its
rows' by index, where computing them per batch would cost 80-250 µs (η at d + 1 points on
PyTensor's Python linker), about an iteration. J is kept in the view's sparse form
(:meth:`~pymc_subsample.model.distributional.DistributionalRegression.sparse_affine`): the
columns of the coordinates read densely, and for each group effect read by index (a[g_k]) one
coefficient and one entry a row.

Rows affine in a row-free φ(θ) (a non-centred a = μ + τz read as a[g_k]) run the same kernels in φ,
with φ(θ) and Dφ(θ)ᵀg from a small compiled function of θ (:class:`EtaPerturbedFunction`).
Measured on a cold PyTensor cache, 10⁵ rows, the whole first draw of ``pm.sample`` (wall s, one
core, 2026-11-30): non-centred 11.8 → 8.1, centred 9.9 → 7.3, crossed effects 17.3 → 11.4, against
the estimate as one graph (5.4, 5.8 and 8.0 with θ of static length, which leaves PyTensor's
rewrites no reshape to make a ``SpecifyShape`` of; PyMC's NUTS 7.2, 7.4 and 11.0 s).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt

from pymc_subsample.control_variates.taylor import taylor_sum
from pymc_subsample.model.closed_form import BERNOULLI_LOGIT, NORMAL, NORMAL_KNOWN_SIGMA, POISSON_LOG
from pymc_subsample.model.compile import compile_function, direct_call

__all__ = ["EtaPerturbedFunction", "affine_eta", "closed_form_sums", "perturbed_sums", "replace_rows",
           "row_differences"]

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
            row[:] = offset[v]
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
            row[:] = total
    return eta


@numba.njit(cache=True, fastmath=True)
def perturbed_sums(eta, jacobian, coef, owner, constant_jacobian, slot, dense, first, stride, n_coords,
                   at_eta, centre, pairs, order, subsampled, n_rest, m_rest):
    """(ℓ̂ − Σq − σ̂²/2, its gradient in the ``n_coords`` coordinates η is affine in, σ̂²) of the
    module docstring's formulas.

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
    u = eta - centre[:p]
    df_c, d2f_c = centre[p + 1: 2 * p + 1], centre[2 * p + 1:]
    # slope: ∂d_k/∂η_j = ∂f/∂η_j − ∂q_k/∂u_j; d: f − q_k
    if order >= 1:
        for j in range(p):
            for k in range(m):
                d[k] -= df_c[j, k] * u[j, k]
                slope[j, k] -= df_c[j, k]
    if order == 2:
        for i in range(pairs.shape[0]):
            j, i2 = pairs[i, 0], pairs[i, 1]
            for k in range(m):
                h = d2f_c[i, k]
                if j == i2:
                    d[k] -= 0.5 * h * u[j, k] * u[j, k]
                    slope[j, k] -= h * u[j, k]
                else:
                    d[k] -= h * u[j, k] * u[i2, k]
                    slope[j, k] -= h * u[i2, k]
                    slope[i2, k] -= h * u[j, k]
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
    # ∂(value)/∂d_k: 1 on E; n_R/m − (n_R²/m²)(d_k − d̄) on R (the second from −σ̂²/2)
    c = 1.0 + subsampled * (scale - scale * scale * (d - mean) - 1.0)
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
        for j in range(centre.shape[0]):
            centre[j, k] = terms[j, t]
    return offset, jacobian, coef, owner, centre


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG2E = 1.4426950408889634
# ln 2 in two parts (Cody & Waite): n·LN2_HI is exact for |n| < 2¹¹, so a − n ln 2 keeps a's precision
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
_EXP_MAX = 709.782712893384  # log of the largest double
#: 1/k!, k = 14 … 1: e^r − 1 = r·(Horner's polynomial of these at r)
_EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(14, 0, -1))
#: 1/(2k + 1), k = 9 … 0: atanh(s) = s·(Horner's polynomial of these at s²)
_ATANH_ODD = tuple(1.0 / (2 * k + 1) for k in range(9, -1, -1))
# The row loops call the elementary functions below, not math's: math.exp and math.log are calls
# into libm, one row at a time, which LLVM cannot vectorise; these are arithmetic on the double's
# bits that it runs on 4-8 rows at once (error_model="numpy": Python's division check, a branch
# that raises, also stops it). Measured at m = 1000 (Numba 0.68, AVX-512): Bernoulli's softplus
# 9.2 → 2.3 µs, exp 6 → 1.2 µs. Numba compiles a callee with its first caller's flags, so inside the
# fastmath kernels e^a's reduction a − n ln 2 may be reassociated: within 4.5e-16 + 4e-17·|a| (e^a)
# and 1e-15 (log1p) relative of NumPy's (tests/test_eta_estimate.py).


@numba.njit(cache=True, error_model="numpy")
def _horner(coefficients, x):
    """Σ_i c_i x^(n−1−i) of the n ``coefficients`` c_0 … c_(n−1), highest power first."""
    p = 0.0
    for c in coefficients:
        p = p * x + c
    return p


@numba.njit(cache=True, error_model="numpy")
def _exp_parts(a):
    """(2ⁿ⁻¹, e^r − 1) with a = n ln 2 + r, |r| ≤ ln 2 / 2, a clamped to [−708, 709.78]: e^r − 1 by its
    Taylor polynomial to r¹⁴/14! (truncation below 1.2e-17 relative). Half of 2ⁿ, which overflows at
    n = 1024 (a > 709.44).
    """
    a = min(max(a, -708.0), _EXP_MAX)
    n = math.floor(a * _LOG2E + 0.5)
    r = (a - n * _LN2_HI) - n * _LN2_LO
    p = _horner(_EXP_TAYLOR, r)
    half = np.int64((np.int64(n) + 1022) << 52).view(np.float64)  # 2ⁿ⁻¹ from its exponent bits
    return half, p * r


@numba.njit(cache=True, error_model="numpy")
def _exp(a):
    """e^a (+∞ above 709.78; e^{−708} ≈ 3e-308 below −708)."""
    half, grown = _exp_parts(a)
    return 2.0 * (half * grown + half) if a <= _EXP_MAX else np.inf


@numba.njit(cache=True, error_model="numpy")
def _expm1(a):
    """e^a − 1 without cancellation where |a| is small: 2ⁿ(e^r − 1) + (2ⁿ − 1), the second 0 at n = 0."""
    if a > 709.0:
        return _exp(a) - 1.0
    half, grown = _exp_parts(a)
    return 2.0 * half * grown + (2.0 * half - 1.0)


@numba.njit(cache=True, error_model="numpy")
def _log1p(v):
    """log(1 + v) for v ≥ 0: 2 atanh(s) = 2(s + s³/3 + … + s¹⁹/19), |s| ≤ 3 − 2√2, with s = v/(2 + v)
    for v < √2 − 1 (no rounding of 1 + v), else s = (w − 1)/(w + 1) for 1 + v = 2ᵏw, w ∈ [√½, √2),
    plus k ln 2 (truncation below 2.5e-17 relative).
    """
    z = 1.0 + v
    bits = np.float64(z).view(np.int64)
    k = (bits >> 52) - 1023
    w = np.int64(bits - (k << 52)).view(np.float64)  # z / 2ᵏ ∈ [1, 2)
    up = w > _SQRT2
    w = 0.5 * w if up else w
    k = k + 1 if up else k
    small = v < _SQRT2 - 1.0
    s = v / (2.0 + v) if small else (w - 1.0) / (w + 1.0)
    shift = 0.0 if small else k * _LN2
    p = _horner(_ATANH_ODD, s * s)
    return 2.0 * s * p + shift


@numba.njit(cache=True, error_model="numpy")
def row_differences(code, eta_index, constants, constant_eta, y, eta, centre):
    """(f(y_k, η_k) − f_k* (m,), ∂f/∂η_j (p, m)) of the family ``code`` (module docstring) at ``eta``
    (p, m), with the rows' terms at θ* ``centre`` as :func:`perturbed_sums` reads them;
    ``constant_eta`` (p,): the η_j the same on every row (their exponentials taken once).
    """
    p, m = eta.shape
    d = np.empty(m)
    slope = np.zeros((p, m))
    f_c = centre[p]
    if code == BERNOULLI_LOGIT:
        j = eta_index[0]
        # softplus(x) = max(x, 0) + log(1 + e^{−|x|})
        for k in range(m):
            x = eta[j, k]
            e = _exp(-abs(x))
            d[k] = y[k] * x - (max(x, 0.0) + _log1p(e)) - f_c[k]
            slope[j, k] = y[k] - (1.0 if x >= 0.0 else e) / (1.0 + e)
    elif code == POISSON_LOG:
        j = eta_index[0]
        curvature = centre[2 * p + 1 + _pair(p, j, j)]
        for k in range(m):
            u = eta[j, k] - centre[j, k]
            rate = -curvature[k]
            grown = _expm1(u)
            d[k] = y[k] * u - rate * grown
            slope[j, k] = y[k] - rate * (1.0 + grown)
    elif code == NORMAL_KNOWN_SIGMA:
        j, sigma = eta_index[0], constants[1]
        shift = -constants[eta_index.shape[0] + 1] - _HALF_LOG_2PI  # log σ in σ's dtype
        for k in range(m):
            r = (y[k] - eta[j, k]) / sigma
            d[k] = -0.5 * r * r + shift - f_c[k]
            slope[j, k] = r / sigma
    elif code == NORMAL:  # μ = η_a, log σ = η_b
        a, b = eta_index[0], eta_index[1]
        scale = _exp(-eta[b, 0]) if constant_eta[b] else 0.0
        for k in range(m):
            w = scale if constant_eta[b] else _exp(-eta[b, k])
            r = (y[k] - eta[a, k]) * w
            d[k] = -0.5 * r * r - eta[b, k] - _HALF_LOG_2PI - f_c[k]
            slope[a, k] = r * w
            slope[b, k] = r * r - 1.0
    else:  # STUDENT_T: log ν = η_a, μ = η_b, log σ = η_c; ν's functions once where it is one scalar
        a, b, c = eta_index[0], eta_index[1], eta_index[2]
        head, dhead, nu = _student_t_shape(eta[a, 0])
        for k in range(m):
            if not constant_eta[a]:
                head, dhead, nu = _student_t_shape(eta[a, k])
            inv_sigma = _exp(-eta[c, k])
            z = (y[k] - eta[b, k]) * inv_sigma
            z2 = z * z
            t = _log1p(z2 / nu)
            w = (nu + 1.0) / (nu + z2)
            d[k] = head - eta[c, k] - 0.5 * (nu + 1.0) * t - f_c[k]
            slope[b, k] = w * z * inv_sigma
            slope[c, k] = w * z2 - 1.0
            slope[a, k] = dhead - 0.5 * nu * t + 0.5 * w * z2
    return d, slope


@numba.njit(cache=True)
def _student_t_shape(log_nu):
    """(log Γ((ν+1)/2) − log Γ(ν/2) − ½ log νπ, ν/2 (ψ((ν+1)/2) − ψ(ν/2)) − ½, ν) at ν = e^{log ν}: the
    StudentT's terms of ν alone.
    """
    nu = math.exp(log_nu)
    head = math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * (log_nu + math.log(math.pi))
    return head, 0.5 * nu * (_digamma(0.5 * (nu + 1.0)) - _digamma(0.5 * nu)) - 0.5, nu


@numba.njit(cache=True)
def _digamma(x):
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


@numba.njit(cache=True)
def _pair(p, j, i):
    """The row of ∂²f/∂η_j∂η_i (j ≤ i) among the (j, l), j ≤ l, of ``RowTerms.flat``."""
    return j * p - j * (j - 1) // 2 + (i - j)


class EtaPerturbedFunction:
    """The perturbed estimate (θ, n_R, m, r, batch pieces) ↦ (log p(θ) + ℓ̂ − Σq − σ̂²/2, gradient, σ̂²)
    of a target whose rows are affine in θ, called as the target's compiled
    :meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_function` is; its arguments
    after θ from :meth:`arguments`.

    Rows affine in a row-free φ(θ) (:mod:`~pymc_subsample.model.row_free`) take η from φ and the
    gradient in φ, g, back to θ as Dφ(θ)ᵀg; their proxy's sum Σq = Σf* + AᵀΔφ + ½ΔφᵀBΔφ
    (:class:`~pymc_subsample.control_variates.taylor.RowFreeTaylorProxy`) is added here, in φ, to
    the value and to g, as the target's graph of the whole estimate holds it. A second compiled
    function of θ alone gives φ(θ), log p(θ) and ∇log p(θ) + Dφ(θ)ᵀc: called with c = 0 for φ,
    then with c = g.

    Rows of a family of :mod:`~pymc_subsample.model.closed_form` (``closed_form``) need no
    function of f: η, f and the sums are one call of :func:`closed_form_sums`, and in θ log p(θ)
    comes from the tall model's function of the prior
    (:meth:`~pymc_subsample.model.tall.TallModel.prior_function`).
    """

    def __init__(self, target, affine):
        view, tall = target.glm, target.tall
        self.order, self.n_eta = target.order, view.n_eta
        self.pairs = np.array(view.pairs, dtype=np.int64).reshape(-1, 2)
        self.constant = affine.constant
        self.in_phi = view.phi is not None
        self.closed_form = view.closed_form
        self.rows_function = self.phi_function = self.prior_function = None
        prior = not self.in_phi
        if self.closed_form is not None and prior:
            self.prior_function = direct_call(tall.prior_function())
        if self.closed_form is None:
            key = ("EtaPerturbedFunction", "prior, f and ∂f/∂η" if prior else "f and ∂f/∂η", self.constant)
            self.rows_function = tall.kept_function(
                key, lambda: _rows_function(tall, view, self.constant, prior))
        proxy = target.proxy
        if self.in_phi:
            self.n_coords = view.phi.size
            sums = (proxy.phi_center, proxy.phi_grad_sum, proxy.phi_hess_sum)
            self.phi_function = view.phi.prior_and_pullback(tall)
            self._no_weights = np.zeros(self.n_coords)
        else:
            self.n_coords = tall.ndim
            sums = (proxy.center, proxy.grad_sum, proxy.hess_sum)
        # Σq as a Taylor polynomial in the coordinates η is affine in (θ, or φ): the value and gradient
        # hold it (SubsampledTarget.perturbed_adds_sum_q)
        self.sum_q = (float(proxy.loglik_sum), *(np.ascontiguousarray(v, dtype=float) for v in sums))

    def arguments(self, batch, terms, affine, subsampled, n_rest) -> tuple:
        """The arguments after θ on ``batch`` with the rows' ``terms`` at θ* (flat, as
        :class:`~pymc_subsample.model.distributional.RowTerms`) and their
        :class:`~pymc_subsample.model.affine_rows.AffineRows` ``affine``: the rows marked 1 in
        ``subsampled`` a subsample of ``n_rest`` rows, the others computed exactly. In place of the
        batch, the closed form's y where there is one.
        """
        centre = np.array(terms, dtype=float, order="C")  # a copy: with_rows changes its own copy only
        return (float(n_rest), float(subsampled.sum()), subsampled, affine, self._rows(batch), centre)

    def with_rows(self, arguments, changed, batch, terms, kept, rows) -> tuple:
        """:meth:`arguments` of ``batch``, made from another batch's ``arguments`` by replacing the
        positions ``changed`` (a slice) with the rows ``rows``: their terms at θ* ``terms`` (n_terms,
        c), their η(0) and J read from ``kept`` (the
        :class:`~pymc_subsample.model.affine_rows.KeptAffineRows` of all N rows).
        """
        n_rest, m_rest, subsampled, parent, parent_y, parent_centre = arguments
        offset, jacobian, coef, owner, centre = replace_rows(
            parent.offset, parent.jacobian, parent.coef, parent.owner, parent_centre, kept.offset,
            kept.jacobian, kept.coef, kept.owner, terms, np.asarray(rows, dtype=np.int64), changed.start)
        affine = parent._replace(offset=offset, jacobian=jacobian, coef=coef, owner=owner)
        if self.closed_form is None:
            return (n_rest, m_rest, subsampled, affine, self._rows(batch), centre)
        y = parent_y.copy()  # the changed rows' y only, cast as the model casts them
        y[changed] = self.closed_form.y(tuple(column[changed] for column in batch))
        return (n_rest, m_rest, subsampled, affine, y, centre)

    def _rows(self, batch):
        """What the estimate reads of ``batch``'s rows: the closed form's y, or every row leaf for f."""
        return tuple(batch) if self.closed_form is None else self.closed_form.y(batch)

    def __call__(self, theta, n_rest, m_rest, subsampled, affine, batch, centre):
        x = self.phi_function(theta, self._no_weights)[0] if self.in_phi else theta
        if self.closed_form is not None:  # Σq included
            form = self.closed_form
            value, grad, sigma2 = closed_form_sums(form.code, form.eta_index, form.constants, batch, *affine,
                                                   x, centre, self.pairs, self.order, subsampled, n_rest,
                                                   m_rest, *self.sum_q)
            prior = None if self.in_phi else self.prior_function(theta)
        else:
            value, grad, sigma2, prior = self._sums_from_f(theta, x, affine, batch, centre, subsampled,
                                                           n_rest, m_rest)
            # in NumPy: B(x − x*) is BLAS's product here, measured faster than a loop of its own
            # kernel at r = 119 (crossed effects)
            sum_q, sum_q_grad = taylor_sum(self.order, x, *self.sum_q)
            value, grad = value + sum_q, grad + sum_q_grad
        if self.in_phi:
            _, prior, grad = self.phi_function(theta, grad)
            return float(prior) + value, grad, sigma2
        return float(prior[0]) + value, prior[1] + grad, sigma2

    def _sums_from_f(self, theta, x, affine, batch, centre, subsampled, n_rest, m_rest):
        """(value, gradient, σ̂², (log p, ∇log p) or None in φ) with f from the compiled rows function."""
        eta = affine_eta(*affine, x)
        etas = [np.array(e[0]) if c else e for e, c in zip(eta, self.constant, strict=True)]
        prior = None
        if self.in_phi:
            at_eta = self.rows_function(*etas, *batch)
        else:
            log_prior, prior_grad, *at_eta = self.rows_function(theta, *etas, *batch)
            prior = (log_prior, prior_grad)
        sparse_jacobian = (affine.jacobian, affine.coef, affine.owner, affine.constant_jacobian, affine.slot,
                           affine.dense, affine.first, affine.stride)
        return (*perturbed_sums(eta, *sparse_jacobian, self.n_coords, np.array(at_eta), centre, self.pairs,
                                self.order, subsampled, n_rest, m_rest), prior)


def _rows_function(tall, view, constant, prior):
    """f(y_k, η_k) and ∂f/∂η_j (one value a row each) as a function of (η_1..η_p, batch), with the
    η_j that are the same on every row (``constant``) scalars; with ``prior``, log p(θ) and its
    gradient before them, and θ the first input.

    Why scalars: f's special functions of such an η (a StudentT's ν and σ, a negative binomial's α)
    are then computed once a call, not once a row; their rows' ∂f/∂η_j come by forward mode.
    """
    # measured at m = 1000 (StudentT): 83 µs a call with η_ν and η_σ as vectors
    etas = [pt.dscalar(f"eta_{j}") if c else pt.dvector(f"eta_{j}") for j, c in enumerate(constant)]
    value = view.loglik_graph(etas)
    one = pt.constant(1.0, dtype="float64")
    slopes = [pytensor.pushforward(value, eta, one, disconnected_outputs="ignore") if c else
              pytensor.grad(value.sum(), eta, disconnected_inputs="ignore")
              for eta, c in zip(etas, constant, strict=True)]
    # every output one value a row: a slope that does not depend on the row is broadcast
    slopes = [pt.second(value, slope) for slope in slopes]
    if not prior:
        return compile_function([*etas, *tall.batch_inputs], [value, *slopes])
    log_prior = tall.prior_graph
    return compile_function([tall.theta, *etas, *tall.batch_inputs],
                            [log_prior, tall.gradient(log_prior), value, *slopes])
