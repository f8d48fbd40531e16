"""Choosing subsample sizes and block-Poisson parameters from a pilot near the centre.

Both rules target the variance of the log-likelihood estimator, which is what
governs pseudo-marginal efficiency (Dang et al. 2019 §3.1: Var log L̂ ≈ 1 minimises CT;
with correlated blocks larger values are tolerated).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from scipy import stats

from pymc_subsample.subsample.batch import Batch

__all__ = [
    "choose_block_poisson",
    "choose_exact_rows",
    "choose_subsample_size",
    "difference_deviations",
    "laplace_draws",
    "pilot_differences",
    "plausible_laplace_draws",
]


def laplace_draws(rng, center, precision, size):
    """θ ~ N(θ*, precision⁻¹): where the sampler will spend its time."""
    chol = np.linalg.cholesky(np.linalg.inv(precision))
    return center + rng.standard_normal((size, center.size)) @ chol.T


#: the χ²_d quantile that bounds a pilot point's drop in log posterior below the centre's
PLAUSIBLE_QUANTILE = 0.999
#: batches of Laplace draws :func:`plausible_laplace_draws` makes at most
MAX_PILOT_BATCHES = 20


def plausible_laplace_draws(rng, center, precision, size, log_posterior):
    """``size`` draws of N(θ*, precision⁻¹) at which ``log_posterior`` lies at most ½ χ²_d(0.999)
    below its value at θ*, drawn in batches of ``size`` (at most :data:`MAX_PILOT_BATCHES`); where
    fewer qualify, the draws of least drop fill the rest.

    Why: under a Gaussian posterior 2(log p(θ*) − log p(θ)) ~ χ²_d at the Laplace draws, so the bound
    removes one in a thousand of them and the first batch is :func:`laplace_draws`'s. Where the
    posterior is curved in θ (a non-centred a = μ + τz), draws in θ leave its ridge and land where it
    has no mass, and their proxy errors ask for many times the rows that the chain needs until its
    first re-choice of m. ``log_posterior`` needs no row: the proxy's
    (:meth:`~pymc_subsample.estimators.target.SubsampledTarget.proxy_log_posterior`).
    """
    # measured on the non-centred zoo model at 10⁶ rows (d = 23): 6 of 20 Laplace draws dropped by
    # 1,000-26,000 (the bound: 25), σ̂² up to 3,265 at m = 1000 there against ≤ 0.01 at the others;
    # the pilot's m of 54,527 made the first 50 warm-up draws take 18 s
    chol = np.linalg.cholesky(np.linalg.inv(precision))
    bound = 0.5 * stats.chi2.ppf(PLAUSIBLE_QUANTILE, center.size)
    top = log_posterior(center)
    kept, others = [], []
    for _ in range(MAX_PILOT_BATCHES):
        for theta in center + rng.standard_normal((size, center.size)) @ chol.T:
            drop = top - log_posterior(theta)
            drop = drop if np.isfinite(drop) else np.inf
            (kept if drop <= bound else others).append((drop, theta))
        if len(kept) >= size:
            break
    others.sort(key=lambda pair: pair[0])
    return np.array([theta for _, theta in (kept + others)[:size]])


def pilot_differences(rng, target, thetas, pilot_size):
    """Per-θ mean and variance of d_k = ℓ_k − q_k on one uniform pilot subsample.

    The perturbed estimator's σ̂² = (n²/m) Var(d) at each θ needs no call of the estimator: for a
    distributional regression d comes from NumPy (``differences_at_thetas``, nothing compiled), so
    the one estimator a chain runs, with or without rows computed exactly, is the one compiled
    (a pilot that took σ̂² from the estimator without them would compile a second one).

    Returns
    -------
    mean_d, var_d : arrays of shape (len(thetas),)
    """
    # measured with σ̂² from the estimator: crossed effects at 10⁵ rows compiled both estimators,
    # 109 and 160 nodes
    batch = target.tall.gather(rng.integers(0, target.n_rows, size=pilot_size))
    d = target.differences_at_thetas(thetas, batch)
    return d.mean(axis=1), d.var(axis=1, ddof=1)


def choose_subsample_size(n, var_d, target=1.0, minimum=10):
    """Smallest m with σ² = n² Var(d)/m ≤ target, for the 90% quantile of Var(d) over the pilot.

    Using an upper quantile rather than the mean keeps σ̂² near the target in the
    tails of the posterior, where a too-small m makes the chain sticky.
    """
    v = float(np.quantile(np.atleast_1d(var_d), 0.9))
    m = int(np.ceil(n * n * v / target))
    return int(min(max(m, minimum), n))


def choose_block_poisson(n, m, mean_d, var_d, target=1.0, max_lambda=10_000):
    """λ and a for the block-Poisson estimator (Dang et al. 2019 eq. 5.1).

    With D(θ) = n·mean(d) the quantity each mini-batch estimates and σ_m² = n² Var(d)/m its
    variance, each factor is (d̂ − a)/λ with d̂ ~ N(D, σ_m²). Set a = D̄ − λ (D̄ the pilot mean)
    so the factor is centred at 1, and take the smallest λ for which
    Var log|L̂| = λ E[log²|(d̂ − a)/λ|] (X_l ~ Pois(1): Var Σ_{h≤X} Z_h = E[Z²])
    is at most ``target``, averaging over the pilot θ's and over d̂ by Gauss-Hermite
    quadrature. The probability of a negative factor is then Φ(−(D − a)/σ_m), tiny.

    Returns
    -------
    lam : int
    a : float
    var_log : float
        The achieved Var log|L̂| estimate.
    prob_negative : float
        P(L̂ < 0) approximated by the expected number of negative factors.
    """
    big_d = n * np.atleast_1d(mean_d)
    sigma_m = np.sqrt(n * n * np.atleast_1d(var_d) / m)
    d_bar = float(big_d.mean())
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    weights = weights / weights.sum()
    lam = 1
    while True:
        a = d_bar - lam
        x = (big_d[:, None] + sigma_m[:, None] * nodes[None, :] - a) / lam
        ez2 = np.mean(np.sum(weights * np.log(np.abs(x) + 1e-300) ** 2, axis=1))
        var_log = lam * ez2
        if var_log <= target or lam >= max_lambda:
            break
        lam = int(np.ceil(lam * 1.25)) if lam > 8 else lam + 1
    p_neg_factor = float(np.mean(stats.norm.cdf(-(big_d - a) / np.maximum(sigma_m, 1e-300))))
    return lam, float(a), float(var_log), float(min(1.0, lam * p_neg_factor))


@contextmanager
def _no_progress(n_chunks):
    """A pass shown nowhere: ``advance()`` does nothing."""
    yield lambda: None


def difference_deviations(target, thetas, means, chunk_size, candidates, progress=_no_progress):
    """Rows whose differences d_k(θ) = ℓ_k(θ) − q_k(θ) spread most over ``thetas``, in one pass.

    Each row's score is Σ_θ (d_k(θ) − d̄(θ))², its share of the estimator's variance (Dang et al. 2019
    eq. 4.3) summed over the points, with d̄(θ) = ``means`` from a pilot (an error δ in d̄ moves
    every score by δ², far below the scores that matter); the ``candidates`` rows of largest
    score are kept with their squared deviations.

    ``progress(n_chunks)`` is a context manager that shows the pass: it gives ``advance()``, called
    after each chunk (the step method's ``model.chunks.pass_progress``; default: nothing shown).

    Returns
    -------
    rows : int array (c,)
        The kept rows, largest score first.
    squares : array (c, len(thetas))
        (d_k(θ) − d̄(θ))² of those rows.
    totals : array (len(thetas),)
        Σ_k (d_k(θ) − d̄(θ))² over all N rows.
    """
    tall, n = target.tall, target.n_rows
    totals = np.zeros(len(thetas))
    kept_rows, kept_squares = np.zeros(0, dtype=int), np.zeros((0, len(thetas)))
    means = np.asarray(means)[:, None]
    starts = range(0, n, chunk_size)
    tall.full_passes += 1
    kept = target.terms_kept()  # the rows' terms at θ* read, not made again (a sampler's pass)
    with progress(len(starts)) as advance:
        for start in starts:
            batch = tall.row_slice(start, start + chunk_size)
            if kept:
                batch = Batch(batch, rows=np.arange(start, start + len(batch[0])))
            # every θ on one chunk at once: the chunk is read once, its rows' terms at θ* made once
            squares = ((target.differences_at_thetas(thetas, batch) - means) ** 2).T
            totals += squares.sum(axis=0)
            kept_rows = np.concatenate([kept_rows, start + np.arange(squares.shape[0])])
            kept_squares = np.concatenate([kept_squares, squares])
            if kept_rows.size > candidates:
                keep = np.argpartition(-kept_squares.sum(axis=1), candidates - 1)[:candidates]
                kept_rows, kept_squares = kept_rows[keep], kept_squares[keep]
            advance()
    order = np.argsort(-kept_squares.sum(axis=1), kind="stable")
    return kept_rows[order], kept_squares[order], totals


def choose_exact_rows(n, squares, totals, target=1.0, minimum=10, *, at_least=0, extra=0):
    """How many of the top rows (:func:`difference_deviations`) to compute exactly, and m for the rest.

    With the e rows of largest spread in E and the other n_R = n − e rows subsampled, the estimator's
    variance at each pilot θ is σ² = n_R² V_R(θ)/m, V_R(θ) = Σ_{k∉E} (d_k − d̄)²/n_R (eq. 4.3 on R), so
    m(e) = n_R² V_R/target for the 90% quantile of V_R over the points (as
    :func:`choose_subsample_size`). Each estimate then evaluates e + m(e) rows; e is the largest
    value within 10% of its minimum (none where none lowers it). A few rows with a large proxy
    error (the rows of a small group, whose η moves far under the posterior) dominate σ², and
    computing them costs less than the m they would need.

    ``at_least``: the first rows are exact whatever their score; ``extra``: that many more exact rows
    outside the candidates (their squares are taken as negligible).

    Returns
    -------
    e : int
        Rows computed exactly (the first e of the candidates).
    m : int
        Subsample size for the other n − e rows.
    spread : float
        n_R² V_R at that e (σ² at m = 1): the design's σ² is ``spread / m``.
    """
    cumulative = np.vstack([np.zeros((1, totals.size)), np.cumsum(squares, axis=0)])
    e = np.arange(cumulative.shape[0])
    n_rest = np.maximum(n - e - extra, 1)
    var_rest = np.quantile(np.clip(totals - cumulative, 0.0, None), 0.9, axis=1) / n_rest
    m = np.minimum(np.maximum(np.ceil(n_rest * n_rest * var_rest / target), minimum), n_rest).astype(int)
    cost = np.where(e >= at_least, e + m, np.inf)
    # of the choices within 10% of the fewest rows, the most exact rows: the scores come from a few
    # points, and a row left to the subsample whose error was under-scored costs more than the
    # rows a few more exact ones add
    best = int(np.argmin(cost))
    if best > at_least:
        best = int(np.flatnonzero(cost <= 1.1 * cost[best])[-1])
    return best, int(m[best]), float(n_rest[best] * n_rest[best] * var_rest[best])
