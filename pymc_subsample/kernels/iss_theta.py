"""The θ update of informed sub-sampling MCMC (Maire, Friel & Alquier 2019, "ISS-MCMC").

Step 2 of an ISS iteration: one MH (or HMC) step for θ targeting the scaled sub-posterior
π̄_n(θ|Y_U) ∝ f(Y_U|θ)^{N/n} π(θ) ("Definition" of the scaled sub-posteriors), shaped by the
Laplace covariance at θ*, its step size adapted while tuning. :class:`ThetaUpdate` is the step,
the rest its pieces: plain functions of NumPy arrays and callables, without PyMC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pymc_subsample.kernels.iss import adapt_log_epsilon

__all__ = [
    "ThetaInfo",
    "ThetaUpdate",
    "check_inner",
    "check_theta_settings",
    "dual_average_init",
    "dual_average_update",
    "hmc_step",
    "laplace_chol",
    "rw_mh_step",
]


class ThetaInfo(NamedTuple):
    """One θ update: its acceptance probability, step size (the random walk's scale for MH),
    whether it diverged, and the evaluations of the scaled sub-posterior it made.
    """

    accept_prob: float
    step_size: float
    diverging: bool
    n_target_evals: int


@dataclass(frozen=True)
class ThetaUpdate:
    """ISS-MCMC step 2: one θ move on the scaled sub-posterior π̄_n(θ|Y_U), adapted while tuning.

    Parameters
    ----------
    inner : {"mh", "hmc"}
        "mh": :func:`rw_mh_step`, its log scale tuned to ``target_accept`` by the Robbins–Monro
        rule of :func:`adapt_log_epsilon`; "hmc": :func:`hmc_step` with a dual-averaged step size
        (:func:`dual_average_update`).
    chol : ndarray, shape (d, d)
        L of the Laplace covariance P⁻¹ = L Lᵀ at θ* (:func:`laplace_chol`): the proposal's or
        the inverse mass matrix's shape.
    n_leapfrog : int
        Maximum leapfrog steps per HMC transition.
    target_accept : float
    """

    inner: str
    chol: np.ndarray
    n_leapfrog: int
    target_accept: float

    def init_adaptation(self, d: int):
        """The adaptation's start: the random walk's log scale log(2.38/√d) (Roberts, Gelman &
        Gilks 1997), or dual averaging from the step size 0.5/d^¼.
        """
        if self.inner == "mh":
            return math.log(2.38 / math.sqrt(d))
        return dual_average_init(0.5 / d ** 0.25)

    def evaluate(self, target, theta):
        """(log π̄_n, its gradient or None for MH) at θ; ``target`` as in :meth:`step`."""
        return (target(theta), None) if self.inner == "mh" else target(theta)

    def step(self, rng, theta, logp, grad, adaptation, target, tune: bool, t: int):
        """One θ move from θ (with log π̄_n and, for HMC, its gradient at θ).

        ``target`` is θ -> log π̄_n(θ|Y_U) for MH and θ -> (log π̄_n, ∇) for HMC; ``t`` counts the
        tuning iterations so far (the Robbins–Monro step's decay). After tuning, HMC uses the
        dual-averaged step (the last one if there was no tuning).

        Returns
        -------
        theta, logp, grad, adaptation, ThetaInfo
        """
        if self.inner == "mh":
            step = math.exp(adaptation)
            theta, logp, acc, _ = rw_mh_step(rng, theta, logp, target, self.chol, step)
            if tune:
                adaptation = adapt_log_epsilon(adaptation, acc, self.target_accept, t)
            return theta, logp, grad, adaptation, ThetaInfo(acc, step, False, 1)
        tuned = not tune and adaptation["t"] > 0
        step = math.exp(adaptation["log_bar"] if tuned else adaptation["log_step"])
        theta, logp, grad, acc, diverging, n_grad = hmc_step(
            rng, theta, logp, grad, target, step, self.n_leapfrog, self.chol)
        if tune:
            adaptation = dual_average_update(adaptation, acc, self.target_accept)
        return theta, logp, grad, adaptation, ThetaInfo(acc, step, diverging, n_grad)


def laplace_chol(precision):
    """Cholesky factor of the Laplace covariance P⁻¹ at θ*: the θ proposal's (or inverse mass
    matrix's) shape. Every scaled sub-posterior π̄_n(θ|Y_U) has the scale of π(θ|Y) (its power
    N/n), so P⁻¹ is its shape too, up to O(1/√n). A singular P gives a diagonal guess.
    """
    try:
        return np.linalg.cholesky(np.linalg.inv(precision))
    except np.linalg.LinAlgError:
        diag = np.abs(np.diag(precision))
        return np.diag(1.0 / np.sqrt(np.where(diag > 0, diag, 1.0)))


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
def check_inner(inner):
    """Validate the θ update: "mh", or "hmc" (alias "nuts")."""
    if inner in ("mh",):
        return "mh"
    if inner in ("hmc", "nuts"):
        return "hmc"
    raise ValueError(f"inner must be 'mh', 'hmc' or 'nuts'; got {inner!r}.")


def check_theta_settings(target_accept, n_leapfrog):
    """Validate the θ update's acceptance target (None: the default) and its leapfrog steps."""
    if target_accept is not None and not 0 < float(target_accept) < 1:
        raise ValueError(f"target_accept must be in (0, 1); got {target_accept!r}.")
    if isinstance(n_leapfrog, bool) or not isinstance(n_leapfrog, (int, np.integer)) or n_leapfrog < 1:
        raise ValueError(f"n_leapfrog must be a positive integer; got {n_leapfrog!r}.")
    return int(n_leapfrog)
