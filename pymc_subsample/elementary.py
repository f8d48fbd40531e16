"""Elementary functions for the Numba kernels' loops over rows: e^a, e^a − 1, log(1 + v) and e^{−|x|},
as arithmetic on the doubles' bits that LLVM vectorises.

The η estimate's closed forms (:mod:`pymc_subsample.estimators.eta_kernels`) and the rows' terms of
the set-up's passes (:mod:`pymc_subsample.row_terms_kernel`) both call them; this module sits beside
the layers and imports nothing of ours. Numba's cache of a kernel is checked against the kernel's own
file only: after an edit here, empty the callers' caches (``__pycache__/*.nbi``, ``*.nbc``) when
developing.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["exp", "exp_minus_abs", "expm1", "horner", "log1p", "log1p_unit"]

#: LLVM's flag that lets it fuse a multiply and an add into one FMA (Horner's polynomials); not the
#: rest of fastmath, under which it may assume no infinities and fold the selects that return them
_CONTRACT = {"contract"}
_LOG2E = 1.4426950408889634
# ln 2 in two parts (Cody & Waite): n·LN2_HI is exact for |n| < 2¹¹, so a − n ln 2 keeps a's precision
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
_EXP_MAX = 709.782712893384  # log of the largest double
_TWO52_PLUS_BIAS = 2.0**52 + 1022.0  # whose bits' low part is n + 1022 where n is added to it (|n| ≤ 1024)
_TWO52_BITS = np.float64(2.0**52).view(np.int64)
#: 1/k!, k = 14 … 1: e^r − 1 = r·(Horner's polynomial of these at r)
_EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(14, 0, -1))
#: 1/(2k + 1), k = 9 … 0: atanh(s) = s·(Horner's polynomial of these at s²)
_ATANH_ODD = tuple(1.0 / (2 * k + 1) for k in range(9, -1, -1))
# Why not math's: math.exp and math.log are calls into libm, one row at a time, which LLVM cannot
# vectorise; these are arithmetic on the double's bits that it runs on 4-8 rows at once
# (error_model="numpy": Python's division check, a branch that raises, also stops it). Measured at m =
# 1000 (Numba 0.68, AVX-512): Bernoulli's softplus 9.2 → 2.3 µs, exp 6 → 1.2 µs. AVX2 has no conversion
# between doubles and 64-bit integers, so the exponent's arithmetic goes through the bits of 2⁵² + n
# (on an AMD EPYC, znver3, a loop of e^a at m = 1000: 5.2 → 3.5 µs with FMA and without the
# conversions; Horner's polynomial alone 2.5 → 1.5 µs with FMA). Within 4.5e-16 + 4e-17·|a| (e^a) and
# 1e-15 (log1p) relative of NumPy's (tests/test_eta_estimate.py).


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def horner(coefficients, x):
    """Σ_i c_i x^(n−1−i) of the n ``coefficients`` c_0 … c_(n−1), highest power first."""
    p = 0.0
    for c in coefficients:
        p = p * x + c
    return p


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def _exp_parts(a):
    """(2ⁿ⁻¹, e^r − 1) with a = n ln 2 + r, |r| ≤ ln 2 / 2, a clamped to [−708, 709.78]: e^r − 1 by its
    Taylor polynomial to r¹⁴/14! (truncation below 1.2e-17 relative). Half of 2ⁿ, which overflows at
    n = 1024 (a > 709.44).
    """
    a = min(max(a, -708.0), _EXP_MAX)
    n = np.floor(a * _LOG2E + 0.5)  # a double: math.floor gives an int64, a conversion AVX2 lacks
    r = (a - n * _LN2_HI) - n * _LN2_LO
    p = horner(_EXP_TAYLOR, r)
    # 2ⁿ⁻¹ from its exponent bits: 2⁵² + n + 1022 (exact) holds n + 1022 ∈ [1, 2046] in its low bits,
    # shifted into the exponent's; not np.int64(n), a conversion AVX2 lacks, which kept the loop scalar
    biased = np.float64(n + _TWO52_PLUS_BIAS).view(np.int64)
    half = np.int64(biased << 52).view(np.float64)
    return half, p * r


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def exp(a):
    """e^a (+∞ above 709.78; e^{−708} ≈ 3e-308 below −708)."""
    half, grown = _exp_parts(a)
    return 2.0 * (half * grown + half) if a <= _EXP_MAX else np.inf


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def expm1(a):
    """e^a − 1 without cancellation where |a| is small: 2ⁿ(e^r − 1) + (2ⁿ − 1), the second 0 at n = 0."""
    half, grown = _exp_parts(a)
    # both computed and one chosen, not a branch, so that a loop calling it vectorises; above 709,
    # 2ⁿ overflows and e^a − 1 is e^a to rounding
    large = 2.0 * (half * grown + half) - 1.0 if a <= _EXP_MAX else np.inf
    return large if a > 709.0 else 2.0 * half * grown + (2.0 * half - 1.0)


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def log1p(v):
    """log(1 + v) for v ≥ 0: 2 atanh(s) = 2(s + s³/3 + … + s¹⁹/19), |s| ≤ 3 − 2√2, with s = v/(2 + v)
    for v < √2 − 1 (no rounding of 1 + v), else s = (w − 1)/(w + 1) for 1 + v = 2ᵏw, w ∈ [√½, √2),
    plus k ln 2 (truncation below 2.5e-17 relative).
    """
    z = 1.0 + v
    bits = np.float64(z).view(np.int64)
    biased = bits >> 52  # k + 1023
    w = np.int64(bits - ((biased - 1023) << 52)).view(np.float64)  # z / 2ᵏ ∈ [1, 2)
    # k as a double from the bits of 2⁵² + k + 1023, not by a conversion AVX2 lacks
    k = np.int64(_TWO52_BITS | biased).view(np.float64) - (_TWO52_PLUS_BIAS + 1.0)
    up = w > _SQRT2
    w = 0.5 * w if up else w
    k = k + 1.0 if up else k
    small = v < _SQRT2 - 1.0
    s = v / (2.0 + v) if small else (w - 1.0) / (w + 1.0)
    shift = 0.0 if small else k * _LN2
    p = horner(_ATANH_ODD, s * s)
    return 2.0 * s * p + shift


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def log1p_unit(v):
    """log(1 + v) for 0 ≤ v ≤ 1, as :func:`log1p` without the exponent's bits: 1 + v ∈ [1, 2] is
    2ᵏ·w with k = 0 (s = v/(2 + v)) below √2 − 1 and k = 1 above (s = (v − 1)/(v + 3)), so that the
    loop calling it stays arithmetic LLVM vectorises.
    """
    small = v < _SQRT2 - 1.0
    s = v / (2.0 + v) if small else (v - 1.0) / (v + 3.0)
    return 2.0 * s * horner(_ATANH_ODD, s * s) + (0.0 if small else _LN2)


@numba.njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def exp_minus_abs(x):
    """e^{−|x|} elementwise, for softplus(x) = max(x, 0) + log(1 + e^{−|x|}) and σ(x)."""
    # in a loop of its own: with both polynomials in the loop of the softplus, LLVM vectorised it
    # poorly (Bernoulli's rows, measured at m = 1000: 7.4 → 4.5 µs)
    e = np.empty(x.shape[0])
    for k in range(x.shape[0]):
        e[k] = exp(-abs(x[k]))
    return e
