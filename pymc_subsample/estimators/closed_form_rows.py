r"""f(y_k, η_k) − f_k* and ∂f/∂η_j of the family table's closed forms, in a Numba kernel of this
package, for the perturbed estimate (:mod:`~pymc_subsample.estimators.eta_estimate`).

Where a model's rows are one observed variable of these families, its y a column of the data (cast
as the model casts it) and its other parameters constants or η
(:func:`~pymc_subsample.model.closed_form.closed_form_rows`), the estimate needs nothing
compiled from the model's rows: η, f, ∂f and the sums run in one cached kernel call
(:func:`~pymc_subsample.estimators.eta_estimate.closed_form_sums`), and only log p(θ) is a
compiled function of the model. Why: the function of f and ∂f that PyTensor compiles is a call from
Python of its own, with η and its outputs as arrays between three calls; measured at m = 1000
(logistic, d = 4, 2026-11-30), 48 µs an estimate with it.

========================  ========================================================================
Bernoulli(logit)          f − f* = yη − softplus(η) − f*,  ∂f = y − σ(η)
Poisson(log)              f − f* = y u − μ*·expm1(u),  ∂f = y − μ* e^u,  u = η − η*,  μ* = −∂²f*
                          (log y! cancels: f* holds it, and μ* = e^{η*} is the row's ∂²f* negated)
Normal(identity, σ)       f − f* = −½ r² − log σ − ½ log 2π − f*,  r = (y − η)/σ,  ∂f = r/σ
Normal(identity, log)     the same with log σ = η₂: ∂f/∂μ = r e^{−η₂},  ∂f/∂η₂ = r² − 1
========================  ========================================================================

The formulas are those of :data:`~pymc_subsample.families.FAMILIES` (tested against them and the
model's own rows in ``tests/test_eta_estimate.py``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_subsample.model.closed_form import BERNOULLI_LOGIT, NORMAL_KNOWN_SIGMA, POISSON_LOG

__all__ = ["row_differences"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@numba.njit(cache=True)
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
        # softplus(x) = max(x, 0) + log(1 + e^{−|x|}): log, not log1p (measured 12% less a row), off by
        # at most 2.2e-16 where e^{−|x|} is below the rounding of 1 + e^{−|x|}
        for k in range(m):
            x = eta[j, k]
            e = math.exp(-abs(x))
            one = 1.0 + e
            d[k] = y[k] * x - (max(x, 0.0) + math.log(one)) - f_c[k]
            slope[j, k] = y[k] - (1.0 if x >= 0.0 else e) / one
    elif code == POISSON_LOG:
        j = eta_index[0]
        curvature = centre[2 * p + 1 + _pair(p, j, j)]
        for k in range(m):
            u = eta[j, k] - centre[j, k]
            rate = -curvature[k]
            grown = math.expm1(u)
            d[k] = y[k] * u - rate * grown
            slope[j, k] = y[k] - rate * (1.0 + grown)
    elif code == NORMAL_KNOWN_SIGMA:
        j, sigma = eta_index[0], constants[1]
        shift = -constants[eta_index.shape[0] + 1] - _HALF_LOG_2PI  # log σ in σ's dtype
        for k in range(m):
            r = (y[k] - eta[j, k]) / sigma
            d[k] = -0.5 * r * r + shift - f_c[k]
            slope[j, k] = r / sigma
    else:  # NORMAL: μ = η_a, log σ = η_b
        a, b = eta_index[0], eta_index[1]
        scale = math.exp(-eta[b, 0]) if constant_eta[b] else 0.0
        for k in range(m):
            w = scale if constant_eta[b] else math.exp(-eta[b, k])
            r = (y[k] - eta[a, k]) * w
            d[k] = -0.5 * r * r - eta[b, k] - _HALF_LOG_2PI - f_c[k]
            slope[a, k] = r * w
            slope[b, k] = r * r - 1.0
    return d, slope


@numba.njit(cache=True)
def _pair(p, j, i):
    """The row of ∂²f/∂η_j∂η_i (j ≤ i) among the (j, l), j ≤ l, of ``RowTerms.flat``."""
    return j * p - j * (j - 1) // 2 + (i - j)
