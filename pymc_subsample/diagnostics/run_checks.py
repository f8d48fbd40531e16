"""A chain's own diagnostics after warm-up, checked while it samples: warn with the remedy.

A PyMC step method is never told that sampling has ended, so the checks run at doubling
checkpoints of the post-warm-up draws (100, 200, 400, …) on everything recorded so far,
and each check warns at most once per chain. Every check is a rate or a mean (ESS per
draw, acceptance rate, mean σ̂²), so a checkpoint's verdict does not depend on how many
draws are still to come. The warnings never stop the run: the user's draws are kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_subsample.diagnostics.bulk_ess import bulk_ess

__all__ = ["RunCheck", "RunMonitor", "drift_check", "ess_check", "mean_check"]

FIRST_CHECK = 100  # draws before the first verdict: ESS and rates are too noisy below


@dataclass(frozen=True)
class RunCheck:
    """One diagnostic: ``statistic(thetas, stats)`` → value; warn when ``fails(value)``.

    ``message`` is formatted with ``value`` and ``draws`` and must say what to change.
    """

    name: str
    statistic: Callable[[np.ndarray, dict], float]
    fails: Callable[[float], bool]
    message: str
    #: the sampler stats ``statistic`` reads (None: any of them), so that a monitor keeps only those
    reads: tuple[str, ...] | None = None


def min_ess_fraction(thetas, stats=None) -> float:
    """Smallest bulk ESS over the coordinates of θ, divided by the number of draws.

    Parameters
    ----------
    thetas : array-like
        Shape (draws, coordinates): one chain's draws.
    stats : dict, optional
        Unused; there so that the function is a :class:`RunCheck` statistic.

    Returns
    -------
    float
        NaN when there are no coordinates or no coordinate has a finite ESS (e.g. NaN draws);
        a constant coordinate counts as ESS = draws, as in ArviZ.
    """
    thetas = np.asarray(thetas, dtype=float)
    if thetas.ndim != 2 or thetas.shape[1] == 0:
        return float("nan")
    ess = bulk_ess(thetas)  # ArviZ's bulk ESS of every coordinate, in one pass
    if not np.any(np.isfinite(ess)):
        return float("nan")
    return float(np.nanmin(ess)) / thetas.shape[0]


def ess_check(step_name: str, remedy: str, fraction: float = 0.01) -> RunCheck:
    """ESS below ``fraction`` of the draws (default 1%): the chain barely moves."""
    return RunCheck(
        "ess", min_ess_fraction, lambda v: v < fraction,
        f"{step_name}: the effective sample size is {{value:.2%}} of the {{draws}} draws after warm-up "
        f"(below {fraction:.0%}), so the chain barely moves and its means are unreliable. {remedy}",
        reads=(),
    )


def mean_check(name: str, key: str, fails: Callable[[float], bool], message: str) -> RunCheck:
    """A check on the post-warm-up mean of the sampler stat ``key`` (NaN entries ignored)."""

    def statistic(thetas, stats):
        values = np.asarray(stats.get(key, []), dtype=float)
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else float("nan")

    return RunCheck(name, statistic, lambda v: bool(np.isfinite(v) and fails(v)), message, reads=(key,))


def drift_check(step_name: str, reference_draws, remedy: str, threshold: float = 20.0) -> RunCheck | None:
    """The chain has moved far from where it ended its warm-up (``reference_draws``, the last ones).

    The statistic is the median over the draws after warm-up of max_j |θ_j − μ_j| / s_j, with μ and
    s the mean and sd of each coordinate over ``reference_draws``: where the estimator's size and
    exact rows were last tuned and the mass matrix adapted. A chain in its stationary
    distribution keeps it near 3 (the largest of d normal deviates, d ≈ 100); one that slides away
    after warm-up (a group scale of crossed group effects collapsing towards 0 while σ̂² grows)
    leaves the reference's range by tens of its sds. Not the Laplace approximation at θ*: on
    non-centred models θ* is the MAP, whose group scales are several times the posterior's, and
    the draws of a chain that agrees with full-data NUTS sit many of its marginal sds away.
    None (no check) with fewer than 50 reference draws.
    """
    # measured: on crossed group effects a group scale went from 0.8 towards 0.001 while σ̂² grew to
    # 10⁸; on a non-centred model the draws of a chain that agrees with full-data NUTS sat 12 of the
    # Laplace approximation's marginal sds from θ*
    reference_draws = np.asarray(reference_draws, dtype=float)
    if reference_draws.ndim != 2 or reference_draws.shape[0] < 50:
        return None
    mean = reference_draws.mean(axis=0)
    # a coordinate that did not move in the window (a stuck chain) is judged against a tiny scale
    scale = np.maximum(reference_draws.std(axis=0), 1e-12 + 1e-6 * np.abs(mean))

    def statistic(thetas, stats=None):
        deviation = np.abs(np.asarray(thetas, dtype=float) - mean) / scale
        return float(np.median(deviation.max(axis=1)))

    return RunCheck(
        "drift", statistic, lambda v: bool(np.isfinite(v) and v > threshold),
        f"{step_name}: half of the {{draws}} draws after warm-up have a coordinate {{value:.3g}} standard "
        f"deviations or more from where the chain ended its warm-up (over {reference_draws.shape[0]} "
        f"draws; above {threshold:g}): the chain has left the region where its estimator was tuned, and "
        f"its draws are likely wrong. {remedy}",
        reads=(),
    )


class RunMonitor:
    """Records θ and stats after warm-up and runs its checks at draws 100, 200, 400, ….

    One monitor belongs to one chain: step methods keep it in their ``@dataclass_state``,
    so ``pm.sample`` gives every chain a fresh copy.
    """

    def __init__(self, checks: list[RunCheck], first_check: int = FIRST_CHECK):
        self.checks = list(checks)
        self.thetas: list[np.ndarray] = []
        self.stats: dict[str, list] = {}
        self.next_check = int(first_check)
        self.warned: set[str] = set()
        # the stats some check reads, or None for all of them (23 stats kept: 6.3 µs a draw, 2: 1.9 µs)
        reads = [check.reads for check in self.checks]
        self.kept = None if any(r is None for r in reads) else frozenset(k for r in reads for k in r)

    def record(self, theta, stats: dict):
        self.thetas.append(np.array(theta, dtype=float))
        for key in stats if self.kept is None else self.kept:
            value = stats.get(key)
            # scalars only (a NumPy scalar is 0-d; arrays are not np.number): no np.ndim per stat
            if isinstance(value, (int, float, bool, np.number, np.bool_)):
                self.stats.setdefault(key, []).append(float(value))
        if len(self.thetas) >= self.next_check:
            self.next_check *= 2
            self.run()

    def run(self) -> list[str]:
        """Evaluate every check not yet failed; warn for each failure and return the messages."""
        if not self.thetas:
            return []
        thetas, messages = np.asarray(self.thetas), []
        for check in self.checks:
            if check.name in self.warned:
                continue
            value = check.statistic(thetas, self.stats)
            if check.fails(value):
                self.warned.add(check.name)
                message = check.message.format(value=value, draws=len(self.thetas))
                messages.append(message)
                warnings.warn(message, UserWarning, stacklevel=2)
        return messages
