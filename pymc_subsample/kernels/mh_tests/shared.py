"""What the accept tests of subsampled Metropolis-Hastings share (no PyMC).

Every test decides whether to move from θ to a proposal θ' when the exact MH
log-ratio is

    Δ = offset + Σ_{k=1}^N t_k,

where ``offset`` holds everything computed exactly (log prior ratio, log proposal
ratio, and Σ_k q_k(θ') − q_k(θ) when Taylor control variates are used) and
t_k = ℓ_k(θ') − ℓ_k(θ) [− (q_k(θ') − q_k(θ))] are per-row terms that a test only
evaluates on the rows it draws, through a callable ``row_terms(idx) -> (len(idx),)``.
Exact MH accepts iff log u < Δ, i.e. iff the mean of the t_k exceeds
μ₀ = (log u − offset)/N (El hanchi 2019, §3.1; Alquier's ISS slides, "Austerity in MCMC-Land").

Each test returns ``(accept, rows_used, stats)`` with ``stats`` a dict holding at
least ``delta_hat`` (the estimate of Δ at decision) and ``loglik_var`` (its variance
estimate, nan where undefined). Randomness comes only from the ``rng`` and the
uniform passed in, so a test with error level → 0 or batch = N reproduces the exact
decision on the same uniform.

The sequential t-tests (austerity, two-sample) and the confidence sampler look at the data
several times; a level ε at every look (El hanchi 2019 Algorithm 1, line 6) lets the
wrong-decision probabilities of the looks add up, to several times ε on hard decisions
(``benchmarks/mh_error_rates.py``). By default all three therefore spend ε over the looks,
level ε_k = (p − 1) ε / (p k^p) at look k with p = 2, as Bardenet et al.'s confidence
sampler does (Alquier's ISS slides), so that Σ_k ε_k ≤ ε bounds the probability that the whole
decision differs from the exact one (under the CLT for the t-tests).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

__all__ = [
    "AcceptOptions",
    "AcceptTest",
    "Estimate",
    "Move",
    "RowStream",
    "SequentialTest",
    "exact_barker_test",
    "exact_mh_test",
    "full_loglik",
    "look_level",
    "look_size",
    "mean_var",
    "remainders",
    "row_differences",
    "row_values",
]


# --------------------------------------------------------------------- exact tests
def exact_mh_test(delta, log_u) -> bool:
    """Exact MH: accept iff log u < Δ (El hanchi 2019 §3.1)."""
    return bool(log_u < delta)


def exact_barker_test(delta, u) -> bool:
    """Exact Barker test: accept iff Δ + X_log > 0 with X_log = logit(u) ~ Logistic(0, 1) (Seita et al. 2017).

    Accepts with probability g(Δ) = 1/(1 + e^{−Δ}), which satisfies detailed balance
    (Barker lemma, Seita et al. 2017).
    """
    return bool(delta + (math.log(u) - math.log1p(-u)) > 0)


# ------------------------------------------------------------------- row streams
class RowStream:
    """Rows 0..N−1 drawn uniformly without replacement, in order.

    New rows come from iid uniform draws with repeats and used rows discarded (the first
    distinct values of an iid sequence are a uniform ordered sample without
    replacement), checked against a boolean mask allocated on the second draw (calloc:
    cheap even for large N); past half the rows, a permutation of the complement is
    drawn once, so the cost never exceeds O(N).
    """

    def __init__(self, rng, n):
        self.rng, self.n = rng, int(n)
        self.count = 0
        self._mask = None
        self._first = None
        self._rest = None

    @property
    def remaining(self) -> int:
        return self.n - self.count

    def take(self, k) -> np.ndarray:
        k = min(int(k), self.remaining)
        if self._first is not None and self._mask is None:
            self._mask = np.zeros(self.n, dtype=bool)
            self._mask[self._first] = True
        if self._rest is None and 2 * (self.count + k) > self.n:
            mask = self._mask if self._mask is not None else np.zeros(self.n, dtype=bool)
            self._rest = self.rng.permutation(np.flatnonzero(~mask))
        if self._rest is not None:
            out, self._rest = self._rest[:k], self._rest[k:]
        else:
            parts, need = [], k
            while need > 0:
                cand = self.rng.integers(0, self.n, size=2 * need + 8)
                _, first = np.unique(cand, return_index=True)
                cand = cand[np.sort(first)]
                if self._mask is not None:
                    cand = cand[~self._mask[cand]]
                for p in parts:
                    cand = cand[~np.isin(cand, p)]
                parts.append(cand[:need])
                need -= parts[-1].size
            out = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.empty(0, np.int64)
            if self._mask is not None:
                self._mask[out] = True
        if self._first is None:
            self._first = out
        self.count += out.size
        return out


def mean_var(values):
    """Mean and unbiased sample variance (0 for a single value)."""
    n = values.size
    mean = float(values.mean())
    var = float(values.var(ddof=1)) if n > 1 else 0.0
    return mean, var


def look_level(error, look, p=2.0) -> float:
    """Level ε_k = (p − 1) ε / (p k^p) of the k-th look (k ≥ 1), so that Σ_k ε_k ≤ ε.

    Σ_{k≥1} k^{−p} ≤ p/(p − 1) for p > 1, hence the union bound over looks: the probability
    that any look stops on the wrong side is at most ε (Alquier's ISS slides, the confidence sampler's
    δ_k; applied here to the t-tests of El hanchi 2019 too, see the module docstring).
    """
    # measured with the austerity test at a level ε at every look: 5.4 % wrong decisions at
    # ε = 0.01 and 23 % at ε = 0.05 on very hard decisions (benchmarks/mh_error_rates.py)
    return (p - 1.0) * error / (p * look**p)


# ------------------------------------------------------------------- the interface
@dataclass(frozen=True, kw_only=True)
class AcceptOptions:
    """The arguments of :class:`~pymc_subsample.SubsampleMH` that configure its accept test; each
    test reads the ones it uses (see that class for their meaning).
    """

    subsample_size: int | None
    error: float | None
    num_blocks: int
    control_variates: bool
    proxy_order: int
    range_bound: Any
    importance_probs: np.ndarray | None
    chunk_size: int


@dataclass(frozen=True)
class Move:
    """One proposed move θ → θ′, as a step method hands it to an accept test.

    ``target`` is the step's :class:`~pymc_subsample.estimators.target.SubsampledTarget`, read
    through plain calls: ``n_rows``, ``differences(θ, batch)`` (ℓ_k(θ) − q_k(θ) on a batch),
    ``proxy.order`` and ``proxy.sum_value_and_grad(θ)`` (Σ_k q_k(θ) first), and its tall model
    ``tall`` with ``gather(idx)``, ``loglik_rows(θ, batch)`` and ``row_slice(start, stop)``.
    """

    target: Any
    theta: np.ndarray
    theta_p: np.ndarray
    log_prior: float  #: log p(θ)
    log_prior_p: float  #: log p(θ′)
    number: int  #: the move's number in the chain, from 1 (for messages)


class Estimate(NamedTuple):
    """The log-posterior estimate at the chain's θ that a test keeps from move to move (pseudo-marginal
    and exact MH): re-estimating it at every move would break the pseudo-marginal argument, and cost
    exact MH N evaluations more.
    """

    theta: np.ndarray
    value: float
    sigma2: float = math.nan  #: σ̂² of the estimate (pseudo-marginal)
    subsample: Any = None  #: the subsample u it was made on (pseudo-marginal)


@dataclass
class AcceptTest(ABC):
    """An accept test of subsampled MH: configured from the step's arguments before any set-up,
    then asked for one decision per move.

    Subclasses name themselves in ``name`` (the step's ``test=``) and are registered in
    :data:`pymc_subsample.kernels.mh_tests.ACCEPT_TESTS`.
    """

    #: rows of one estimate (pseudo-marginal) or added at each look (sequential tests)
    subsample_size: int

    name: ClassVar[str]
    #: targets the posterior exactly (full-data MH only)
    is_exact: ClassVar[bool] = False
    #: ``loglik_var`` is σ̂² of the kept estimate: shown in the progress bar and checked after warm-up
    reports_sigma2: ClassVar[bool] = False
    #: ``error=None`` (no control of the error) is allowed
    error_optional: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def configure(cls, n_rows: int, options: AcceptOptions) -> AcceptTest:
        """The test for N = ``n_rows`` rows; a ValueError for arguments it cannot use."""

    def prepare(self, target, laplace_chol) -> AcceptTest:
        """The test once the step's target is set up (``laplace_chol`` the Laplace covariance's
        Cholesky factor, or None); only what needs a pass over the data (the confidence sampler's
        empirical range bound) differs.
        """
        return self

    @abstractmethod
    def decide(self, rng, u: float, move: Move,
               current: Estimate | None) -> tuple[bool, dict, Estimate | None]:
        """Accept or reject ``move`` on the MH uniform ``u``.

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws the rows read (and any noise of the test, Barker's X_nc).
        u : float
            The MH uniform, drawn by the step after θ′: exact MH accepts iff log u < Δ.
        move : Move
        current : Estimate or None
            The estimate this test kept at the chain's θ; None at a chain's first move. A test
            that finds it made at another θ (θ moved under another step) estimates again.

        Returns
        -------
        accept : bool
        stats : dict
            ``accept`` (min(1, e^Δ̂), or the 0/1 decision of a sequential test), ``batch_size``
            (rows read), ``looks`` (mini-batches read until the decision: 1 for a test of one
            subsample), ``n_loglik_evals`` (evaluations of ℓ_k, at θ* too) and ``loglik_var``.
        current : Estimate or None
            The estimate to keep for the next move (None for tests that keep none).
        """


@dataclass
class SequentialTest(AcceptTest):
    """A test that reads rows until its decision is sure enough (El hanchi 2019 §3.1): it works on
    the terms t_k, the proxy's remainders (``control_variates``) or the plain differences of ℓ_k, with
    the exact part of Δ in ``offset``; each subclass's :meth:`run` decides.
    """

    error: float | None = 0.01
    control_variates: bool = True
    #: points at which ℓ_k is evaluated per row read: θ and θ′ (a two-sample row: one of them)
    points: ClassVar[int] = 2

    @classmethod
    def configure(cls, n_rows, options):
        return cls(look_size(n_rows, options.subsample_size), options.error, options.control_variates)

    def decide(self, rng, u, move, current):
        proxied = self.control_variates and move.target.proxy.order > 0  # an order-0 proxy cancels from t_k
        accept, rows, info = self.run(rng, u, move, self.exact_part(move, proxied), proxied)
        # ℓ_k at each point, and ℓ_k(θ*) for the proxy's terms
        evals = (self.points + proxied) * rows
        return accept, {"accept": float(accept), "batch_size": rows, "n_loglik_evals": evals,
                        "loglik_var": info["loglik_var"], "looks": info["looks"]}, None

    def exact_part(self, move, proxied) -> float:
        """The part of Δ computed exactly: the log prior ratio and, with control variates, the proxy
        sums Σ_k q_k(θ') − Σ_k q_k(θ) (Bardenet, Doucet & Holmes 2017, §7), without which the t_k
        (remainders) do not add up to Δ.
        """
        offset = move.log_prior_p - move.log_prior
        if proxied:
            proxy = move.target.proxy
            offset += proxy.sum_value_and_grad(move.theta_p)[0] - proxy.sum_value_and_grad(move.theta)[0]
        return offset

    @abstractmethod
    def run(self, rng, u, move, offset, proxied) -> tuple[bool, int, dict]:
        """The kernel's ``(accept, rows_used, stats)`` for Δ = ``offset`` + Σ_k t_k."""


def look_size(n_rows, size) -> int:
    """Rows per look: ``size``, or by default ⌈√N⌉ (at least 2), as El hanchi 2019 §3.2."""
    return min(n_rows, max(2, math.ceil(math.sqrt(n_rows)))) if size is None else int(size)


def row_differences(move, proxied):
    """``row_terms(idx)``: the t_k of the rows ``idx`` for ``move``."""
    target = move.target

    def row_terms(idx):
        batch = target.tall.gather(idx)
        at_p = remainders(target, move.theta_p, batch, proxied)
        return at_p - remainders(target, move.theta, batch, proxied)

    return row_terms


def row_values(target, theta, proxied):
    """``row_terms(idx)``: the remainders (or ℓ_k) at one point θ of the rows ``idx``."""
    return lambda idx: remainders(target, theta, target.tall.gather(idx), proxied)


def remainders(target, theta, batch, proxied) -> np.ndarray:
    """ℓ_k(θ) − q_k(θ) on ``batch`` (the proxy's remainders), or ℓ_k(θ) where ``proxied`` is False."""
    return target.differences(theta, batch) if proxied else target.tall.loglik_rows(theta, batch)


def full_loglik(tall, theta, chunk_size) -> float:
    """Σ_k ℓ_k(θ) over all N rows, ``chunk_size`` rows at a time."""
    n = tall.n_rows
    return float(sum(np.sum(tall.loglik_rows(theta, tall.row_slice(a, min(a + chunk_size, n))))
                     for a in range(0, n, chunk_size)))
