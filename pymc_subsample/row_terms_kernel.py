"""The rows' terms f, ∂f/∂η_j and ∂²f/∂η_j∂η_l of the closed forms' families at given η, one Numba
kernel for every model whose rows are of them (:mod:`~pymc_subsample.model.closed_form` reads the
families from the model's graph).

Why: the set-up's passes over the rows (the centre's Newton steps, the proxy's sums at θ*, the
terms at θ* of every row that the sampler then reads) computed these terms in NumPy, about 80 ns a
row for the normal family (every elementwise operation a temporary array the size of the chunk, out
of cache at a chunk of 65,536 rows); one loop over the rows computes them in a few. It sits beside
the layers, as :mod:`pymc_subsample.prior_kernel` does: the model layer calls it, and it imports
nothing of ours but the vectorised elementary functions beside it (:mod:`pymc_subsample.elementary`).

By family code, for one term of f = Σ_t f_t with its y and the η of its parameters (r = (y − μ)/σ):

========================  ===========================================================
Bernoulli(logit)          f = yη − softplus(η),  ∂f = y − σ(η),  ∂²f = −σ(η)(1 − σ(η))
Poisson(log)              f = yη − e^η − log y!,  ∂f = y − e^η,  ∂²f = −e^η
Normal(identity, σ)       f = −½r² − log σ − ½ log 2π,  ∂f = r/σ,  ∂²f = −1/σ²
Normal(identity, log)     σ = e^{η₂}: ∂f/∂μ = r/σ, ∂f/∂η₂ = r² − 1, ∂²f/∂μ² = −1/σ²,
                          ∂²f/∂μ∂η₂ = −2r/σ, ∂²f/∂η₂² = −2r²
========================  ===========================================================

The codes are those of :mod:`~pymc_subsample.model.closed_form`; log σ of a constant σ is read from
the constants as the model computes it (in σ's dtype).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_subsample.elementary import exp, exp_minus_abs, log1p_unit

__all__ = ["closed_form_row_terms"]

# the families' codes, as model.closed_form numbers them (a test checks they agree)
_BERNOULLI_LOGIT, _POISSON_LOG, _NORMAL_KNOWN_SIGMA, _NORMAL = range(4)
#: a term's parameters in ``eta_index`` and ``constants`` (whose logs follow)
_MAX_PARAMS = 3
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


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
        if family == _BERNOULLI_LOGIT or family == _POISSON_LOG or family == _NORMAL_KNOWN_SIGMA:
            if pair_row[j, j] < 0:
                raise ValueError("closed_form_row_terms: a second derivative not held")
            d2f = second[pair_row[j, j]]
            if family == _BERNOULLI_LOGIT:
                e = exp_minus_abs(x)
                for k in range(m):
                    v = e[k]
                    rate = (1.0 if x[k] >= 0.0 else v) / (1.0 + v)
                    value[k] += y_t[k] * x[k] - (max(x[k], 0.0) + log1p_unit(v))
                    df[k] += y_t[k] - rate
                    d2f[k] -= rate * (1.0 - rate)
            elif family == _POISSON_LOG:
                for k in range(m):
                    rate = exp(x[k])
                    value[k] += y_t[k] * x[k] - rate
                    df[k] += y_t[k] - rate
                    d2f[k] -= rate
                for k in range(m):  # libm's, one row at a time: in a loop of its own
                    value[k] -= math.lgamma(y_t[k] + 1.0)
            else:
                sigma, log_sigma = constants[t, 1], constants[t, _MAX_PARAMS + 1]
                for k in range(m):
                    r = (y_t[k] - x[k]) / sigma
                    value[k] += -0.5 * r * r - log_sigma - _HALF_LOG_2PI
                    df[k] += r / sigma
                    d2f[k] -= 1.0 / (sigma * sigma)
        elif family == _NORMAL:  # μ = η_j, log σ = η_b
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
        else:
            raise ValueError("closed_form_row_terms: a family without written-out terms")
    return value, first, second
