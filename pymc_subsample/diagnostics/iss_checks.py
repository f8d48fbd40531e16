"""The post-warm-up checks of an ISS chain (Maire, Friel & Alquier 2019, "ISS-MCMC").

ISS's error is controlled only asymptotically (Theorem 2 bounds it through δ_{n,ε}), so each
chain is checked against the Laplace approximation N(θ*, P⁻¹) at the full-data centre θ*
(:func:`laplace_checks`), and its subset refresh rate is judged against the slides' 1%
(:func:`check_refresh_rate` on a result, :func:`refresh_message` during a run).
"""

from __future__ import annotations

import warnings

import arviz_stats
import numpy as np

from pymc_subsample.diagnostics.run_checks import RunCheck

__all__ = [
    "MIN_REFRESH_RATE",
    "SHIFT_LIMIT",
    "SPREAD_LIMIT",
    "SPREAD_MARGIN_SE",
    "check_refresh_rate",
    "laplace_checks",
    "laplace_discrepancy",
    "refresh_message",
]

MIN_REFRESH_RATE = 0.01  # the slides' advice: refresh subsets at least 1% of the time

# Thresholds of the Laplace checks (see laplace_checks). For tall data the posterior of the
# unconstrained θ is Gaussian up to O(1/√N) (Bernstein–von Mises), so a chain that samples
# it has sd ≈ the Laplace sd and mean ≈ θ*, up to Monte Carlo error and θ*'s small offset
# from the mode. ISS instead samples a mixture over subsets U ~ ν_{n,ε} of scaled
# sub-posteriors whose modes are spread around θ* (Alquier's ISS slides, Theorem 2 bounds the error only
# through δ_{n,ε}): its variance is Var_Laplace + Var_U(mode of π̄_n(·|Y_U)).
# * SPREAD_LIMIT = 1.5: the mixture adds more than 1.25× the posterior variance
#   (1.5² − 1), i.e. credible intervals 50% too wide. The chain's sd ratio is compared
#   after taking off SPREAD_MARGIN_SE = 0.5 standard errors of the log of a sample sd,
#   1/√(2 ESS): ISS chains have ESS 5–20 at the first checkpoints. Measured on zoo GLMs
#   (N = 20,000, summary="map", 6 seeds each, checkpoints 100–1600), the plain ratio of runs
#   that widen by 1.1–1.3 crossed 1.5 by chance in 2 of 12 chains, with the margin in none;
#   a margin of a full standard error also stayed silent there, but by draw 200 it flagged
#   the spread of only 3 of the 12 chains of summary="moments" (widened 1.5–5×), against 7
#   of 12 with 0.5 (by draw 1600: 9 and 10; the shift check flagged all 12 by draw 200).
#   A false alarm costs a needless warning, a miss a silently wrong posterior: 0.5.
# * SHIFT_LIMIT = 2: the chain's mean sits 2 posterior sds from θ*, where the posterior has
#   under 5% of its mass beyond; a right sampler's running mean gets there only with an ESS
#   of ~1 (a chain that has not moved, also worth a warning), so no Monte Carlo allowance.
#   Chains with summary="moments" crossed it by draw 200 in 12 of 12.
SPREAD_LIMIT = 1.5
SPREAD_MARGIN_SE = 0.5
SHIFT_LIMIT = 2.0


def laplace_discrepancy(thetas, center, laplace_sd):
    """How far a chain is from the Laplace approximation N(θ*, P⁻¹), per coordinate.

    Parameters
    ----------
    thetas : array, shape (draws, d)
        The chain's unconstrained draws.
    center : array, shape (d,)
        θ*, the full-data centre.
    laplace_sd : array, shape (d,)
        √diag(P⁻¹), the Laplace standard deviations at θ*.

    Returns
    -------
    spread : float
        max_j sd_j(chain) / laplace_sd_j.
    spread_lower : float
        max_j of the same ratio times exp(−SPREAD_MARGIN_SE/√(2 ESS_j)): the ratio less half
        a standard error on the log scale, since the log of a sample sd has standard error
        ≈ 1/√(2 ESS) (ESS: ArviZ's bulk ESS of coordinate j). ISS chains are sticky (ESS
        5–20 in the first 100–200 draws), so the plain ratio of a run that widens by 1.2–1.3
        reaches 1.5 by chance.
    shift : float
        max_j |mean_j(chain) − θ*_j| / laplace_sd_j.

    All three are NaN when there are fewer than 2 draws or nothing is finite; a NaN never
    fails a check (a diagnostic must not break the run).
    """
    nan = float("nan")
    with np.errstate(all="ignore"):
        thetas = np.asarray(thetas, dtype=float)
        if thetas.ndim != 2 or thetas.shape[0] < 2:
            return nan, nan, nan
        sd = np.asarray(laplace_sd, dtype=float)
        ratio = thetas.std(axis=0, ddof=1) / sd
        shift = np.abs(thetas.mean(axis=0) - np.asarray(center, dtype=float)) / sd
        ess = np.array([_ess(thetas[:, j]) for j in range(thetas.shape[1])])
        lower = ratio * np.exp(-SPREAD_MARGIN_SE / np.sqrt(2.0 * ess))

    def largest(x):
        x = x[np.isfinite(x)]
        return float(x.max()) if x.size else nan

    return largest(ratio), largest(lower), largest(shift)


def _ess(x) -> float:
    """Bulk ESS of one coordinate, at least 1 (ArviZ gives NaN or n for a constant chain)."""
    try:
        value = float(arviz_stats.ess(np.asarray(x, dtype=float)[None, :]))
    except (ValueError, FloatingPointError):
        value = float("nan")
    return max(1.0, value) if np.isfinite(value) else 1.0


def _remedy(summary_kind=None, swap_size=None):
    """What to change, for the message of the Laplace checks (no advice to use what is used)."""
    better = "" if summary_kind == "map" else ", the sub-posterior mode as summary (summary='map')"
    swap = ", swap_size=1" if swap_size is not None and swap_size > 1 else ""
    return (
        "ISS samples a mixture of scaled sub-posteriors over the subsets it keeps (Maire, Friel and Alquier, "
        "Theorem 2: the error is controlled by ε and n only asymptotically). Use a larger "
        f"subset_size{better}{swap}, or a smaller target_refresh (a larger ε); or an estimator-based "
        "subsampler, pms.HMCECS or pms.SubsampleMH, whose accuracy does not rest on finding "
        "representative subsets. (The reference N(θ*, P⁻¹) assumes the unconstrained posterior "
        "is close to Gaussian, as it is for tall data.)"
    )


def laplace_checks(center, laplace_sd, spread_limit=SPREAD_LIMIT, shift_limit=SHIFT_LIMIT,
                   summary_kind=None, swap_size=None):
    """Post-warm-up checks of an ISS chain against the Laplace approximation at θ*.

    Two :class:`~pymc_subsample.diagnostics.run_checks.RunCheck` s, run by a
    ``RunMonitor`` at 100, 200, 400, … draws after warm-up on all draws so far, each
    warning at most once per chain (the thresholds are explained at ``SPREAD_LIMIT``):

    * ``laplace_spread``: some coordinate's sd exceeds ``spread_limit`` × its Laplace sd
      by more than half a Monte Carlo standard error (``spread_lower`` of
      :func:`laplace_discrepancy`);
    * ``laplace_shift``: some coordinate's mean is more than ``shift_limit`` Laplace sds
      from θ*.

    Parameters
    ----------
    center, laplace_sd : array, shape (d,)
        θ* and √diag(P⁻¹) (see :func:`laplace_discrepancy`).
    spread_limit, shift_limit : float
    summary_kind : str, optional
        The ISS summary in use ("map", "moments", "callable"): the message does not
        suggest the one already used.
    swap_size : int, optional
        The ISS swap size in use: above 1 the message suggests 1.

    Returns
    -------
    list of RunCheck
    """
    center = np.asarray(center, dtype=float).copy()
    laplace_sd = np.asarray(laplace_sd, dtype=float).copy()

    def spread(thetas, stats):
        return laplace_discrepancy(thetas, center, laplace_sd)[1]  # less half a standard error

    def shift(thetas, stats):
        return laplace_discrepancy(thetas, center, laplace_sd)[2]

    return [
        RunCheck(
            "laplace_spread", spread, lambda v: bool(np.isfinite(v) and v > spread_limit),
            f"ISS: after {{draws}} draws the chain's standard deviation is at least {{value:.2f}} "
            f"times the Laplace standard deviation at the full-data centre θ* in some coordinate "
            f"(allowing for Monte Carlo error; warning above {spread_limit:g}): the "
            f"marginals are much wider than the data support. " + _remedy(summary_kind, swap_size),
        ),
        RunCheck(
            "laplace_shift", shift, lambda v: bool(np.isfinite(v) and v > shift_limit),
            f"ISS: after {{draws}} draws the chain's mean is {{value:.2f}} Laplace standard "
            f"deviations from the full-data centre θ* in some coordinate (warning above "
            f"{shift_limit:g}): the subsets it keeps are centred away from the full-data "
            f"posterior, or the chain has hardly moved. " + _remedy(summary_kind, swap_size),
        ),
    ]


def refresh_message(rate, iters, when="after tuning"):
    """The warning of a subset refresh rate below 1% over ``iters`` iterations."""
    return (
        f"ISS subset refresh rate {rate:.2%} over {iters} iterations {when} is below "
        f"{MIN_REFRESH_RATE:.0%}: the chain is stuck on few subsets and the approximation can be "
        "poor (Maire, Friel and Alquier, 'Implementing ISS-MCMC'). Lower epsilon, use epsilon='auto', "
        "or a smaller swap_size."
    )


def check_refresh_rate(idata, threshold=MIN_REFRESH_RATE):
    """Warn when any chain's final ``refresh_rate`` in ``idata`` is below ``threshold``.

    Returns
    -------
    ndarray
        The final refresh rate of each chain.
    """
    rates = np.asarray(idata.sample_stats["refresh_rate"])[:, -1]
    bad = np.flatnonzero(rates < threshold)
    if bad.size:
        warnings.warn(
            f"ISS refresh rate below {threshold:.0%} in chains {bad.tolist()} "
            f"(rates {np.round(rates[bad], 4).tolist()}); lower epsilon or use epsilon='auto'.",
            UserWarning, stacklevel=2,
        )
    return rates
