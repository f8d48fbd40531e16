"""Kernels of informed sub-sampling MCMC (Maire, Friel & Alquier 2019, "ISS-MCMC").

One ISS iteration updates the pair (U, θ):

1. *Subset update* — a Metropolis step on U targeting ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²), in
   :mod:`pymc_subsample.kernels.iss_subset`.
2. *Parameter update* — one MH (or HMC) step for θ targeting the scaled sub-posterior
   π̄_n(θ|Y_U) ∝ f(Y_U|θ)^{N/n} π(θ) ("Definition" of the scaled sub-posteriors), in
   :mod:`pymc_subsample.kernels.iss_theta`.

:class:`ISSKernel` is one iteration of both over a :class:`ChainState`, with ε tuned towards a
subset refresh rate (:func:`initial_epsilon`, :func:`adapt_log_epsilon`).
These are plain functions of NumPy arrays and callables; they know nothing of PyMC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pymc_subsample.kernels.iss_subset import SubsetState, SubsetUpdate

if TYPE_CHECKING:
    from pymc_subsample.kernels.iss_theta import ThetaUpdate

__all__ = [
    "ChainState",
    "ISSInfo",
    "ISSKernel",
    "adapt_log_epsilon",
    "check_epsilon",
    "initial_epsilon",
]


def initial_epsilon(delta_sq: float) -> float:
    """ε₀ = 1 / ‖Δ(U₀)‖² for a uniform U₀: a typical uniform subset has weight e^{-1}."""
    return 1.0 / max(float(delta_sq), 1e-300)


def adapt_log_epsilon(log_eps: float, signal: float, target: float, t: int, rate: float = 2.0) -> float:
    """Robbins–Monro step on log ε towards a subset refresh rate ``target``.

    ``signal`` estimates the refresh rate
    (:func:`~pymc_subsample.kernels.iss_subset.stationary_refresh_signal`); above target ε grows
    (more selective), below it shrinks. The step ``rate / (t + 1)^0.6`` decays so ε settles, while
    Σ steps diverges so ε can move by orders of magnitude from ε₀ during tuning.
    """
    return log_eps + rate * (float(signal) - target) / (t + 1.0) ** 0.6


class ChainState(NamedTuple):
    """An ISS chain's state between iterations, besides θ.

    Attributes
    ----------
    subsets : SubsetState
    log_epsilon : float
        log ε (−inf for ε = 0).
    adaptation : float or dict
        The θ update's (:meth:`ThetaUpdate.init_adaptation`).
    theta, logp, grad
        The θ at which log π̄_n(θ|Y_U) (and, for HMC, its gradient) were last evaluated, and
        those values: a θ that comes back unchanged, on the same U, needs no evaluation.
    n_tune_iter : int
        Tuning iterations so far (the Robbins–Monro steps' decay).
    n_refresh, n_phase_iter : int
        Accepted subset swaps and iterations in the current phase (tuning, then sampling).
    """

    subsets: SubsetState
    log_epsilon: float
    adaptation: object
    theta: np.ndarray | None = None
    logp: float = 0.0
    grad: np.ndarray | None = None
    n_tune_iter: int = 0
    n_refresh: int = 0
    n_phase_iter: int = 0

    @property
    def refresh_rate(self) -> float:
        """Fraction of the subset swaps accepted in the current phase (0 before any)."""
        return self.n_refresh / self.n_phase_iter if self.n_phase_iter else 0.0


class ISSInfo(NamedTuple):
    """One ISS-MCMC iteration, under the names of the step's sample stats."""

    subset_accept: float
    refresh_rate: float
    delta_norm: float
    epsilon: float
    n_loglik_evals: int
    acceptance_rate: float
    step_size: float
    diverging: bool


@dataclass(frozen=True)
class ISSKernel:
    """One ISS-MCMC iteration: :class:`SubsetUpdate`, then :class:`ThetaUpdate`, with ε tuned.

    Parameters
    ----------
    subsets : SubsetUpdate
    theta : ThetaUpdate
    epsilon : float or None
        ε of the subset weights; None: ε₀ = 1/‖Δ_n(U₀)‖² (:func:`initial_epsilon`), with log ε
        tuned during warm-up by :func:`adapt_log_epsilon` towards ``target_refresh``.
    target_refresh : float
    """

    subsets: SubsetUpdate
    theta: ThetaUpdate
    epsilon: float | None
    target_refresh: float

    def init(self, rng, n_rows: int, n: int, d: int) -> ChainState:
        """U₀ uniform among the n-row subsets of the N rows, ε₀, and the θ update's adaptation."""
        subsets = self.subsets.init(rng, n_rows, n)
        eps0 = initial_epsilon(subsets.delta_sq) if self.epsilon is None else self.epsilon
        return ChainState(subsets, math.log(eps0) if eps0 > 0 else -np.inf, self.theta.init_adaptation(d))

    def step(self, rng, state: ChainState, theta, target, tune: bool):
        """One iteration from θ.

        ``target(θ, rows)`` is log π̄_n(θ|Y_U) = log π(θ) + (N/n) Σ_{k∈U} ℓ_k(θ) on U's ``rows``
        for MH, and that value with its gradient for HMC.

        Returns
        -------
        state : ChainState
        theta : ndarray
        info : ISSInfo
        """
        evals, refreshed, prob_u = 0, False, 0.0
        subsets, log_eps = state.subsets, state.log_epsilon
        n_refresh, n_phase_iter = state.n_refresh, state.n_phase_iter
        n = subsets.subset.shape[0]
        if self.subsets.swap_size > 0:
            subsets, moved_u = self.subsets.step(rng, subsets, _epsilon(log_eps))
            refreshed, prob_u, evals = moved_u.accepted, moved_u.accept_prob, moved_u.n_loglik_evals
            n_phase_iter += 1
            n_refresh += int(refreshed)
            if tune and self.epsilon is None:
                log_eps = adapt_log_epsilon(log_eps, moved_u.refresh_signal, self.target_refresh,
                                            state.n_tune_iter)
        on_rows = lambda th: target(th, subsets.batch)  # noqa: E731 - U's rows after its update
        logp, grad = state.logp, state.grad
        if refreshed or state.theta is None or not np.array_equal(theta, state.theta):
            logp, grad = self.theta.evaluate(on_rows, theta)
            evals += n
        theta, logp, grad, adaptation, moved = self.theta.step(
            rng, theta, logp, grad, state.adaptation, on_rows, tune, state.n_tune_iter)
        state = ChainState(subsets, log_eps, adaptation, theta.copy(), logp, grad,
                           state.n_tune_iter + int(tune), n_refresh, n_phase_iter)
        info = ISSInfo(prob_u, state.refresh_rate, math.sqrt(subsets.delta_sq), _epsilon(log_eps),
                       int(evals + n * moved.n_target_evals), float(moved.accept_prob),
                       float(moved.step_size), bool(moved.diverging))
        return state, theta, info

    def end_tuning(self, state: ChainState) -> ChainState:
        """The state after warm-up: U's summary re-summed exactly (no floating-point drift of the
        running sums is carried into the draws) and the phase's counts at zero.
        """
        s = state.subsets
        return state._replace(subsets=self.subsets.summarised(s.subset, s.member, s.batch),
                              n_refresh=0, n_phase_iter=0)


def _epsilon(log_epsilon: float) -> float:
    return math.exp(log_epsilon) if np.isfinite(log_epsilon) else 0.0


# ------------------------------------------------------------ validation
def check_epsilon(epsilon, target_refresh):
    """Validate ε ("auto" -> None) and the refresh-rate target of the ε tuning."""
    if not (isinstance(target_refresh, (int, float)) and 0 < target_refresh <= 1):
        raise ValueError(f"target_refresh must be a number in (0, 1]; got {target_refresh!r}.")
    if isinstance(epsilon, str) and epsilon == "auto":
        return None, float(target_refresh)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating, np.integer)) or not (
        np.isfinite(epsilon) and epsilon >= 0
    ):
        raise ValueError(
            f"epsilon must be 'auto' or a finite number >= 0 (0 gives uniform subsets); got {epsilon!r}."
        )
    return float(epsilon), float(target_refresh)
