"""The subset update of informed sub-sampling MCMC (Maire, Friel & Alquier 2019, "ISS-MCMC").

Step 1 of an ISS iteration: propose U' by swapping r rows of U for r rows outside U (a symmetric
proposal R), accept with probability 1 ∧ exp{−ε(‖Δ_n(U')‖² − ‖Δ_n(U)‖²)}, i.e. a Metropolis step
targeting ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²) ("From sufficient statistics to summary statistics").
:class:`SubsetUpdate` is the step, the rest its pieces: plain functions of NumPy arrays and
callables, without PyMC.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "SubsetInfo",
    "SubsetState",
    "SubsetUpdate",
    "propose_swap",
    "resolve_subset_size",
    "resolve_swap_size",
    "stationary_refresh_signal",
    "subset_log_accept",
]


def resolve_subset_size(subset_size, n_rows: int) -> int:
    """Subset size from "sqrt" (n = ⌈√N⌉, the slides' n ∝ N^{1/2}, "Implementing ISS-MCMC") or an int."""
    if isinstance(subset_size, str) and subset_size == "sqrt":
        return max(1, min(n_rows, math.ceil(math.sqrt(n_rows))))
    if isinstance(subset_size, bool) or not isinstance(subset_size, (int, np.integer)) or not (
        1 <= subset_size <= n_rows
    ):
        raise ValueError(
            f"subset_size must be 'sqrt' or an integer between 1 and the number of rows N = {n_rows}; "
            f"got {subset_size!r}."
        )
    return int(subset_size)


def resolve_swap_size(swap_size, n: int, n_rows: int) -> int:
    """Rows exchanged per subset proposal: default 1, and 0 when n = N (the subset cannot
    change); an explicit value is at most min(n, N − n).

    Why one row. With ε tuned to a refresh rate (Alquier's ISS slides, "Implementing ISS-MCMC"), the ε
    reached is what makes a typical proposal's change of ‖Δ_n‖² cost O(1) in
    ε(‖Δ_n(U')‖² − ‖Δ_n(U)‖²). A swap of r rows moves Δ_n about √r times as far as one
    row, so that ε scales as 1/r, and the spread of Δ_n under ν_{n,ε} ∝ exp(−ε‖Δ_n‖²),
    ~1/√(2ε) per coordinate, as √r. That spread is the spread of the subsets' scaled
    sub-posteriors, i.e. the widening of the θ-marginal, while the number of accepted
    moves needed to cross ν_{n,ε} — (spread / step)² — does not depend on r, so one row
    widens the θ-marginal least at the same refresh rate and cost (benchmarks/README.md).
    """
    # measured: r = n // 100 (10 rows at n = 1000) left the AR(2) σ-marginal at N = 10⁶ 1.54× too
    # wide with the "map" summary and 5.5× with "moments"; r = 1 gave 1.02× and 1.45×, at the same
    # refresh rate and cost
    outside = n_rows - n
    if swap_size is None:
        return 1 if outside > 0 else 0
    if isinstance(swap_size, bool) or not isinstance(swap_size, (int, np.integer)) or not (
        1 <= swap_size <= max(1, min(n, outside))
    ):
        raise ValueError(
            f"swap_size must be an integer between 1 and min(n, N - n) = {min(n, outside)}; "
            f"got {swap_size!r}."
        )
    return int(swap_size) if outside > 0 else 0


def propose_swap(rng, member, n: int, swap_size: int):
    """Positions of U to replace and the rows to put there (symmetric proposal R).

    Parameters
    ----------
    rng : numpy.random.Generator
    member : ndarray of bool, shape (N,)
        Membership mask of the current subset (O(1) look-ups; the proposal costs
        O(swap_size) expected when n ≪ N, never O(N)).
    n : int
        Subset size.
    swap_size : int

    Returns
    -------
    positions : ndarray of int, shape (r,)
        Distinct positions in the subset's index vector, uniform.
    rows : ndarray of int, shape (r,)
        Distinct rows outside U, uniform. Both choices are uniform, so R(U, U') = R(U', U).
    """
    n_rows = member.shape[0]
    if swap_size > n_rows - n:
        raise ValueError(f"cannot swap {swap_size} rows: only N - n = {n_rows - n} rows are outside U.")
    positions = rng.choice(n, size=swap_size, replace=False)
    rows = np.empty(0, dtype=np.int64)
    while rows.size < swap_size:
        # rejection from the complement: expected N / (N - n) draws per row
        cand = rng.integers(0, n_rows, size=2 * (swap_size - rows.size) + 2)
        cand = cand[~member[cand]]
        rows = np.concatenate([rows, cand])
        _, first = np.unique(rows, return_index=True)
        rows = rows[np.sort(first)]
    return positions, rows[:swap_size]


def subset_log_accept(epsilon: float, delta_sq: float, new_delta_sq: float) -> float:
    """Logarithm of the subset acceptance ratio exp{−ε(‖Δ(U')‖² − ‖Δ(U)‖²)} (0 when ε = 0)."""
    if epsilon == 0.0:
        return 0.0
    return -epsilon * (new_delta_sq - delta_sq)


def stationary_refresh_signal(prob: float, delta_sq: float, new_delta_sq: float) -> float:
    """An estimate of the refresh rate the subset chain has *at stationarity*.

    By detailed balance on ν_ε, accepted moves that lower ‖Δ‖² are as frequent as
    accepted moves that raise it, so 2·P(accept)·1[uphill] + 1[tie] has the
    stationary refresh rate as its mean. Unlike the raw acceptance it ignores the
    downhill moves of the transient from a uniform U₀, which would otherwise push ε far
    above the value that gives ``target_refresh`` once the chain has settled.
    """
    if new_delta_sq > delta_sq:
        return 2.0 * prob
    return 1.0 if new_delta_sq == delta_sq else 0.0


class SubsetState(NamedTuple):
    """The subset chain's state (ISS-MCMC step 1).

    Attributes
    ----------
    subset : ndarray of int, shape (n,)
        The rows of U, by position: a swap replaces the rows at some positions.
    member : ndarray of bool, shape (N,)
        U's membership mask, for O(1) look-ups in :func:`propose_swap`.
    batch : tuple of ndarray
        U's rows, in the order of ``subset``.
    subset_sum : ndarray or None
        Σ_{k∈U} s(y_k) for a summary in sum form (``summary.incremental``), else None.
    summary_value : ndarray or None
        S(Y_U) for a summary in mean form, else None.
    delta_sq : float
        ‖Δ_n(U)‖².
    """

    subset: np.ndarray
    member: np.ndarray
    batch: tuple
    subset_sum: np.ndarray | None
    summary_value: np.ndarray | None
    delta_sq: float


class SubsetInfo(NamedTuple):
    """One subset update: whether it was accepted, its acceptance probability, the refresh
    signal of :func:`stationary_refresh_signal` and the per-row likelihood evaluations it made.
    """

    accepted: bool
    accept_prob: float
    refresh_signal: float
    n_loglik_evals: int


@dataclass(frozen=True)
class SubsetUpdate:
    """ISS-MCMC step 1: a Metropolis step on ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²).

    Parameters
    ----------
    summary : object
        The summary statistics S (:mod:`pymc_subsample.subsample.summaries`): ``incremental``,
        ``row_stats(rows)`` and ``delta(sum, n)`` for the sum form Δ = S(Y) − (N/n) S(Y_U), or
        ``value(rows) -> (S(Y_U), passes)`` and ``delta(value)`` for the mean form Δ = S(Y) − S(Y_U).
    gather : callable
        Row indices -> the rows' data, a tuple of arrays.
    swap_size : int
        Rows exchanged per proposal (:func:`resolve_swap_size`).
    """

    summary: object
    gather: Callable
    swap_size: int

    def init(self, rng, n_rows: int, n: int) -> SubsetState:
        """U₀ uniform among the n-row subsets of the N rows, with its summary."""
        subset = np.sort(rng.choice(n_rows, size=n, replace=False))
        member = np.zeros(n_rows, dtype=bool)
        member[subset] = True
        return self.summarised(subset, member, self.gather(subset))

    def summarised(self, subset, member, batch) -> SubsetState:
        """U's state with its summary and ‖Δ_n(U)‖² computed afresh from its rows (in sum form, an
        exact re-sum that removes the floating-point drift of the running sums).
        """
        S = self.summary
        if S.incremental:
            total = S.row_stats(batch).sum(axis=0)
            return SubsetState(subset, member, batch, total, None, _squared(S.delta(total, len(subset))))
        value, _ = self.summary_of(subset, batch)
        return SubsetState(subset, member, batch, None, value, _squared(S.delta(value)))

    def summary_of(self, subset, batch):
        """S(Y_U) of a summary in mean form on the rows of U in row-index order, and its passes.

        The batch holds U's rows in the order the swaps left them; sorting makes S, and so
        Δ_n(U), a function of the set U alone, to the last bit (floating-point sums depend on
        order), as the subset acceptance ratio of ISS-MCMC needs. O(n log n), small beside the
        n-row passes of the summary itself.
        """
        order = np.argsort(subset, kind="stable")
        return self.summary.value(tuple(a[order] for a in batch))

    def step(self, rng, state: SubsetState, epsilon: float) -> tuple[SubsetState, SubsetInfo]:
        """Swap ``swap_size`` rows; accept w.p. 1 ∧ exp{−ε(‖Δ(U')‖² − ‖Δ(U)‖²)}.

        An accepted swap updates U's arrays in place, in O(swap_size) (never O(N) for the mask),
        and returns the state with its new summary.
        """
        S, n = self.summary, state.subset.shape[0]
        pos, rows = propose_swap(rng, state.member, n, self.swap_size)
        new_rows = self.gather(rows)
        evals = 0
        if S.incremental:
            out_stats = S.row_stats(tuple(a[pos] for a in state.batch)).sum(axis=0)
            new_sum = state.subset_sum - out_stats + S.row_stats(new_rows).sum(axis=0)
            new_dsq = _squared(S.delta(new_sum, n))
        else:
            batch = tuple(a.copy() for a in state.batch)
            for a, r in zip(batch, new_rows, strict=True):
                a[pos] = r
            subset = state.subset.copy()
            subset[pos] = rows
            value, passes = self.summary_of(subset, batch)
            new_dsq = _squared(S.delta(value))
            evals = n * passes
        log_a = subset_log_accept(epsilon, state.delta_sq, new_dsq)
        prob = 1.0 if log_a >= 0 else math.exp(log_a)
        accepted = bool(log_a >= 0 or math.log(rng.random()) < log_a)
        info = SubsetInfo(accepted, prob, stationary_refresh_signal(prob, state.delta_sq, new_dsq), evals)
        if not accepted:
            return state, info
        state.member[state.subset[pos]] = False
        state.member[rows] = True
        state.subset[pos] = rows
        if S.incremental:
            for a, r in zip(state.batch, new_rows, strict=True):
                a[pos] = r
            return state._replace(subset_sum=new_sum, delta_sq=new_dsq), info
        return state._replace(batch=batch, summary_value=value, delta_sq=new_dsq), info


def _squared(delta) -> float:
    return float(delta @ delta)
