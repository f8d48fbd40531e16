"""The minibatch Barker test (Seita et al. 2017) and its correction distribution."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
from scipy.optimize import nnls
from scipy.special import expit, ndtr

from pymc_subsample.kernels.mh_tests.shared import (
    RowStream,
    SequentialTest,
    exact_barker_test,
    mean_var,
    row_differences,
)

__all__ = [
    "BARKER_MIN_CONSTANT",
    "Barker",
    "barker_clt_error",
    "barker_smoothed_error",
    "barker_test",
    "correction_distribution",
    "correction_error",
    "sample_correction",
]


@lru_cache(maxsize=4)
def correction_distribution(n_grid=401, half_width=20.0, ridge=1e-4):
    """Grid and probabilities of X_corr with N(0, 1) + X_corr ≈ Logistic(0, 1) (Seita et al. 2017).

    Solves the regularised least-squares problem of Seita et al. 2017,
    min_u ||M u − v||² + λ||u||² with M_ij = Φ(X_i − Y_j), v_i = S(X_i) (S the logistic
    CDF) on a uniform grid Y over [−20, 20] and twice as many evaluation points X, with
    the added constraint u ≥ 0 (non-negative least squares) so that u is a probability
    vector: clipping the unconstrained solution instead raised the CDF error from 1e-5
    to 3e-3. Computed once per process; sup error ≈ 2e-5 on [−20, 20].
    """
    # measured: about 0.1 s, hence the cache
    y = np.linspace(-half_width, half_width, n_grid)
    x = np.linspace(-half_width, half_width, 2 * n_grid - 1)
    matrix = np.vstack([ndtr(x[:, None] - y[None, :]), math.sqrt(ridge) * np.eye(n_grid)])
    target = np.concatenate([expit(x), np.zeros(n_grid)])
    u, _ = nnls(matrix, target, maxiter=50 * n_grid)
    u = u / u.sum()
    u.setflags(write=False)
    y.setflags(write=False)
    return y, u


@lru_cache(maxsize=1)
def correction_error() -> float:
    """sup_x |P(N(0, 1) + X_corr ≤ x) − S(x)| of :func:`correction_distribution` (S logistic CDF).

    The error the correction distribution itself adds to every minibatch Barker decision
    (Seita et al. 2017, "PDF of the correction distribution"); evaluated on 8001 points of [−25, 25]
    (beyond the grid's [−20, 20], where both CDFs are within 2e−9 of 0 or 1). About 1.7e−5.
    """
    grid, probs = correction_distribution()
    x = np.linspace(-25.0, 25.0, 8001)
    return float(np.max(np.abs(ndtr(x[:, None] - grid[None, :]) @ probs - expit(x))))


def sample_correction(u):
    """X_corr by inverting the CDF of :func:`correction_distribution` at the uniform ``u``."""
    grid, probs = correction_distribution()
    return float(grid[min(int(np.searchsorted(np.cumsum(probs), u)), grid.size - 1)])


# 6.4 E|Z|³ + 2 E|Z| over distributions with E Z² = 1 is smallest, 8.4, for |Z| = 1: E|Z|³ ≥ 1
# by Lyapunov's inequality, and a smaller E|Z| forces a larger E|Z|³ (6.4/√q + 2√q ≥ 8.4 for
# Z = ±1/√q with probability q). Hence the Seita et al. 2017 bound is ≥ 8.4/√b for any terms.
BARKER_MIN_CONSTANT = 8.4


def barker_clt_error(values) -> float:
    """Seita et al.'s (2017) bound (6.4 E|Z|³ + 2 E|Z|)/√b on the acceptance-probability error.

    Seita et al. 2017, "Bounding acceptance probability error":
    sup_y |P{Δ* + X_nc + X_corr < y} − S(y − Δ)| ≤ (6.4 E|X|³ + 2 E|X|)/√b, a
    Berry-Esseen bound for the self-normalised mean, so X is the per-row deviation
    N t_k − Σ t standardised to unit variance: Z = (t_k − t̄)/s. The moments are
    estimated from the b rows read (a plug-in: rare extreme rows that the minibatch has
    not met are invisible to it); with s = 0 the smallest possible value 8.4/√b is used.
    """
    values = np.asarray(values, float)
    b = values.size
    mean, var = mean_var(values)
    if var <= 0.0:
        return BARKER_MIN_CONSTANT / math.sqrt(b)
    z = np.abs(values - mean) / math.sqrt(var)
    return float(6.4 * np.mean(z**3) + 2.0 * np.mean(z)) / math.sqrt(b)


#: sup_x |φ''(x)| = φ(0) = 1/√(2π), φ the standard normal density
_PHI0 = 1.0 / math.sqrt(2.0 * math.pi)
#: E|Z|³ = 2√(2/π) for Z ~ N(0, 1)
_NORMAL_ABS3 = 2.0 * math.sqrt(2.0 / math.pi)


def barker_smoothed_error(values, n_rows, sigma2) -> float:
    r"""A bound on Seita et al.'s acceptance-probability error that shrinks with σ²(Δ*), for small σ².

    The test accepts iff Δ + W + V > 0, W = Δ* − Δ (mean 0, variance σ²) and V = X_nc + X_corr,
    X_nc ~ N(0, 1 − σ²); with G ~ N(0, σ²) in place of W, G + V is the logistic (up to
    :func:`correction_error`). For h(w) = P(V ≤ y − w), Taylor's theorem to second order with the
    first two moments of W and G equal (Lindeberg's replacement step) gives

    .. math:: \sup_y |P(W + V ≤ y) − P(G + V ≤ y)| ≤ \frac{\sup|p_V''|}{6} (E|W|³ + E|G|³),

    and p_V = φ_{1−σ²} * P_{X_corr} has sup|p_V''| ≤ sup|φ''_{1−σ²}| = φ(0)/(1 − σ²)^{3/2}.
    E|G|³ = 2√(2/π) σ³; E|W|³ ≤ (E W⁴)^{3/4} ≤ σ_r³ (3 + κ/b)^{3/4} for the mean of b rows drawn
    with replacement (σ_r² = N² s²/b, κ = m₄/s⁴ the kurtosis of the t_k), which bounds the draw
    without replacement (Hoeffding 1963, Theorem 4, for the convex |·|³). Where the proxy makes
    σ² ≪ 1 this is of order σ³, far below Seita et al.'s Berry-Esseen bound, which stays ≥ 8.4/√b
    however small σ² is. Like theirs, it plugs in the moments of the b rows read: a minibatch that
    has missed rare extreme rows underestimates s², κ and so the bound
    (``tests/test_mh_audit.py``, the spiky population).
    """
    values = np.asarray(values, float)
    b = values.size
    if not 0.0 <= sigma2 < 1.0 or b < 2:
        return math.inf
    mean, var = mean_var(values)
    if var <= 0.0:
        return 0.0
    kurtosis = float(np.mean((values - mean) ** 4)) / var**2
    sigma_r = n_rows * math.sqrt(var / b)
    third = sigma_r**3 * (3.0 + kurtosis / b) ** 0.75 + _NORMAL_ABS3 * sigma2**1.5
    return _PHI0 / (6.0 * (1.0 - sigma2) ** 1.5) * third


def barker_test(row_terms, n_rows, offset, u, rng, *, batch_size, error=None, smoothed=True):
    """Minibatch Barker test of Seita et al. (Seita et al. 2017, "Algorithm").

    Grow a without-replacement minibatch by ``batch_size`` rows until (Seita et al. 2017,
    "Algorithm", step 2)

    * the variance of Δ* = offset + N t̄, estimated as σ² = N² s²/b (1 − b/N), is below 1,
      and
    * the bound on the acceptance-probability error, ε_b = (6.4 E|Z|³ + 2 E|Z|)/√b
      (:func:`barker_clt_error`, Seita et al. 2017 "Bounding acceptance probability error"), or,
      where smaller and ``smoothed``, the bound of :func:`barker_smoothed_error`, of order σ³,
      plus the correction distribution's own CDF error (:func:`correction_error`), is below δ =
      ``error``;

    then accept iff Δ* + X_nc + X_corr > 0 with X_nc ~ N(0, 1 − σ²) and X_corr from the
    precomputed σ = 1 correction distribution (drawn by inverting its CDF at ``u``). While a
    criterion fails, the batch grows to the size at which the current estimates of s² and
    of the moments would meet it (never by less than ``batch_size``), so that reaching
    b ≈ (12/δ)² rows does not take thousands of looks of O(b) work each. When the batch
    reaches N, Δ* = Δ exactly and the exact Barker test Δ + logit(u) > 0 is used, which
    accepts with probability 1/(1 + e^{−Δ}) (not the MH probability min(1, e^Δ): the Barker
    chain has the same target and a lower acceptance rate).

    Parameters
    ----------
    row_terms, n_rows, offset : see :func:`austerity_test`
    u : float
        The uniform; X_corr is its quantile (the exact test uses logit(u)).
    rng : numpy.random.Generator
        Draws the rows and X_nc.
    batch_size : int
    error : float or None
        δ, the allowed error of the acceptance probability: Seita et al. 2017 bounds
        sup_y |P{Δ* + X_nc + X_corr < y} − S(y − Δ)| (S the logistic CDF) by ε_b. Since
        ε_b ≥ 8.4/√b for any terms, the test can stop before N only at b > (8.4/δ)² rows
        (Gaussian terms: about (11.8/δ)²), e.g. δ = 0.01 needs b > 705,600. None: the
        variance criterion only, with no control of the error (the paper's first version,
        "Precomputing correction distribution").
    smoothed : bool, default True
        Also use :func:`barker_smoothed_error` and stop on the smaller of the two bounds. With
        control variates σ²(Δ*) is small after a few hundred rows and δ = 0.01 is met there;
        False: Seita et al.'s bound alone, which needs b > (8.4/δ)² rows whatever σ².

    Returns
    -------
    accept, rows_used, stats
        ``stats["error_bound"]`` is ε_b + the correction error at decision (0 at b = N).
    """
    stream = RowStream(rng, n_rows)
    values = np.empty(0)
    target, eps_corr, reads = min(int(batch_size), n_rows), correction_error(), 0
    while True:
        reads += 1
        values = np.concatenate([values, np.asarray(row_terms(stream.take(target - values.size)), float)])
        b = values.size
        mean, var = mean_var(values)
        delta = offset + n_rows * mean
        if b >= n_rows:
            return exact_barker_test(delta, u), b, {"delta_hat": delta, "loglik_var": 0.0,
                                                    "error_bound": 0.0, "looks": reads}
        sigma2 = n_rows**2 * var / b * (1.0 - b / n_rows)
        needed = b + int(batch_size)
        if b < 2:
            pass
        elif sigma2 >= 1.0:
            # σ² = N² s² (1/b − 1/N) < 1 iff b > N² s² / (N s² + 1) at the current s²
            needed = max(needed, math.floor(n_rows**2 * var / (n_rows * var + 1.0)) + 1)
        elif error is None:
            bound = math.nan
            break
        else:
            clt = barker_clt_error(values)
            smooth = barker_smoothed_error(values, n_rows, sigma2) if smoothed else math.inf
            bound = min(clt, smooth) + eps_corr
            if bound < error:
                break
            if error <= eps_corr:  # met only by the exact test (b = N)
                needed = n_rows
            else:
                # ε_b ∝ 1/√b and the smoothed bound ∝ σ³ ∝ b^{-3/2} at fixed moments: the size at
                # which the first of them would reach δ
                room = error - eps_corr
                sizes = [b * (clt / room) ** 2] + ([b * (smooth / room) ** (2.0 / 3.0)]
                                                   if math.isfinite(smooth) else [])
                needed = max(needed, math.ceil(min(sizes)))
        target = min(needed, n_rows)
    x_nc = rng.normal(0.0, math.sqrt(1.0 - sigma2))
    accept = delta + x_nc + sample_correction(u) > 0
    return bool(accept), b, {"delta_hat": delta, "loglik_var": sigma2, "error_bound": bound,
                             "looks": reads}


@dataclass
class Barker(SequentialTest):
    """:func:`barker_test` on the move's terms t_k, ``subsample_size`` rows at least per look,
    δ = ``error`` (None: the σ²(Δ*) < 1 rule alone). Its acceptance probability is Barker's
    1/(1 + e^{−Δ}), not MH's.
    """

    smoothed: bool = True

    name: ClassVar[str] = "barker"
    error_optional: ClassVar[bool] = True

    @classmethod
    def configure(cls, n_rows, options):
        error = options.error
        if error is not None and error <= correction_error():
            warnings.warn(
                f"SubsampleMH(test='barker', error={error:g}): error is at most the correction "
                f"distribution's own error {correction_error():.2g}, so every step reads all N = {n_rows} "
                "rows (the exact Barker test). Raise error, or pass error=None to stop as soon as "
                "σ²(Δ*) < 1, without control of the error.", UserWarning, stacklevel=2)
        return super().configure(n_rows, options)

    def run(self, rng, u, move, offset, proxied):
        return barker_test(row_differences(move, proxied), move.target.n_rows, offset, u, rng,
                           batch_size=self.subsample_size, error=self.error, smoothed=self.smoothed)
