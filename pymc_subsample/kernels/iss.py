"""Kernels of informed sub-sampling MCMC (Maire, Friel & Alquier 2019, "ISS-MCMC").

One ISS iteration updates the pair (U, θ):

1. *Subset update* — propose U' by swapping r rows of U for r rows outside U
   (a symmetric proposal R), accept with probability
   1 ∧ exp{−ε(‖Δ_n(U')‖² − ‖Δ_n(U)‖²)}, i.e. a Metropolis step targeting
   ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²) ("From sufficient statistics to summary statistics").
2. *Parameter update* — one MH (or HMC) step for θ targeting the scaled sub-posterior
   π̄_n(θ|Y_U) ∝ f(Y_U|θ)^{N/n} π(θ) ("Definition" of the scaled sub-posteriors).

These are plain functions of NumPy arrays and callables; they know nothing of PyMC.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "adapt_log_epsilon",
    "check_epsilon",
    "check_inner",
    "dual_average_init",
    "dual_average_update",
    "hmc_step",
    "initial_epsilon",
    "propose_swap",
    "resolve_subset_size",
    "resolve_swap_size",
    "stationary_refresh_signal",
    "rw_mh_step",
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


def initial_epsilon(delta_sq: float) -> float:
    """ε₀ = 1 / ‖Δ(U₀)‖² for a uniform U₀: a typical uniform subset has weight e^{-1}."""
    return 1.0 / max(float(delta_sq), 1e-300)


def adapt_log_epsilon(log_eps: float, signal: float, target: float, t: int, rate: float = 2.0) -> float:
    """Robbins–Monro step on log ε towards a subset refresh rate ``target``.

    ``signal`` estimates the refresh rate (see :func:`stationary_refresh_signal`);
    above target ε grows (more selective), below it shrinks. The step
    ``rate / (t + 1)^0.6`` decays so ε settles, while Σ steps diverges so ε can move
    by orders of magnitude from ε₀ during tuning.
    """
    return log_eps + rate * (float(signal) - target) / (t + 1.0) ** 0.6


# ---------------------------------------------------------------- θ update
def rw_mh_step(rng, theta, logp, logp_fn, chol, scale):
    """Random-walk MH with a Laplace-shaped proposal θ' = θ + scale · L z.

    ``L`` is the Cholesky factor of the inverse negative Hessian of a scaled
    sub-posterior at its mode (the "Laplace-informed" proposal): the slides'
    step 2 of ISS-MCMC with a symmetric Q, so the Q terms cancel.

    Returns
    -------
    theta, logp, accept_prob, accepted
    """
    prop = theta + scale * (chol @ rng.standard_normal(theta.shape[0]))
    logp_prop = float(logp_fn(prop))
    log_a = logp_prop - logp if np.isfinite(logp_prop) else -np.inf
    prob = float(min(1.0, math.exp(min(log_a, 0.0)))) if np.isfinite(log_a) else 0.0
    if np.log(rng.random()) < log_a:
        return prop, logp_prop, prob, True
    return theta, logp, prob, False


def hmc_step(rng, theta, logp, grad, logp_grad_fn, step_size, n_steps, chol, max_energy_error=1000.0):
    """One HMC transition (leapfrog, Gaussian momentum with covariance M = (L Lᵀ)⁻¹).

    Working in the whitened coordinates x = L⁻¹θ makes the mass matrix the identity:
    the gradient in x is Lᵀ ∇θ. ``n_steps`` is jittered uniformly in [⌈n/2⌉, n] to
    avoid periodic orbits.

    Returns
    -------
    theta, logp, grad, accept_prob, diverging, n_grad
    """
    # a diverging path overflows on its way to being rejected: no need to warn about that
    with np.errstate(over="ignore", invalid="ignore"):
        return _hmc_step(rng, theta, logp, grad, logp_grad_fn, step_size, n_steps, chol,
                         max_energy_error)


def _hmc_step(rng, theta, logp, grad, logp_grad_fn, step_size, n_steps, chol, max_energy_error):
    steps = int(rng.integers(max(1, (n_steps + 1) // 2), n_steps + 1))
    p0 = rng.standard_normal(theta.shape[0])
    p = p0 + 0.5 * step_size * (chol.T @ grad)
    x_theta, g, lp = theta.copy(), grad, logp
    n_grad = 0
    diverging = False
    for i in range(steps):
        x_theta = x_theta + step_size * (chol @ p)
        lp, g = logp_grad_fn(x_theta)
        lp = float(lp)
        n_grad += 1
        if not np.isfinite(lp):
            diverging = True
            break
        if i < steps - 1:
            p = p + step_size * (chol.T @ g)
    if diverging:
        return theta, logp, grad, 0.0, True, n_grad
    p = p + 0.5 * step_size * (chol.T @ g)
    energy_change = (lp - 0.5 * p @ p) - (logp - 0.5 * p0 @ p0)
    if not np.isfinite(energy_change) or energy_change < -max_energy_error:
        return theta, logp, grad, 0.0, True, n_grad
    prob = float(min(1.0, math.exp(min(energy_change, 0.0))))
    if rng.random() < prob:
        return x_theta, lp, np.asarray(g, dtype=float), prob, False, n_grad
    return theta, logp, grad, prob, False, n_grad


def dual_average_init(step_size: float) -> dict:
    """State of Nesterov dual averaging (Hoffman & Gelman 2014, as in PyMC's NUTS)."""
    return {"log_step": math.log(step_size), "log_bar": 0.0, "h_bar": 0.0,
            "mu": math.log(10.0 * step_size), "t": 0}


def dual_average_update(da: dict, accept_prob: float, target: float,
                        gamma=0.05, t0=10.0, kappa=0.75) -> dict:
    """One dual-averaging update of the log step size towards ``target`` acceptance."""
    t = da["t"] + 1
    h_bar = (1 - 1 / (t + t0)) * da["h_bar"] + (target - accept_prob) / (t + t0)
    log_step = da["mu"] - math.sqrt(t) / gamma * h_bar
    eta = t ** (-kappa)
    log_bar = eta * log_step + (1 - eta) * da["log_bar"]
    return {"log_step": log_step, "log_bar": log_bar, "h_bar": h_bar, "mu": da["mu"], "t": t}


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


def check_inner(inner):
    """Validate the θ update: "mh", or "hmc" (alias "nuts")."""
    if inner in ("mh",):
        return "mh"
    if inner in ("hmc", "nuts"):
        return "hmc"
    raise ValueError(f"inner must be 'mh', 'hmc' or 'nuts'; got {inner!r}.")
