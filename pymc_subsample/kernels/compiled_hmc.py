"""HMC and HMC-ECS transitions as Numba loops around a compiled potential: one call per iteration.

PyMC's HMC and NUTS integrate in Python, one call of the potential per leapfrog step. Here the loop
is Numba code that calls the potential's own compiled function (the Numba function PyTensor built
for it, :func:`~pymc_subsample.model.compile.numba_callable`) at every step, so an iteration never
returns to Python. Nothing here knows about PyMC or about subsampling: the potential is any Numba
function ``potential(θ, *args) -> (value, grad, extras)`` (a 0-d array, the gradient, a vector of
extra scalars such as σ̂²), and everything random (the momentum, the uniforms, the proposed rows) is
an argument drawn by the caller, so the same generator gives the same draws.

- :func:`hmc_transition`: L leapfrog steps (Neal 2011, eqs. 5.18-5.20) with a dense inverse mass
  matrix M⁻¹ and the Metropolis accept step min(1, e^{−ΔH}) (eq. 5.23), H(θ, p) = −log π(θ) + ½pᵀM⁻¹p;
  a path whose |ΔH| exceeds :data:`MAX_ENERGY_ERROR`, or whose energy is not finite, diverges: it is
  stopped there and rejected, as in PyMC.
- :func:`ecs_iteration`: Algorithm 1 of Dang et al. (2019): the pseudo-marginal update of the
  subsample u | θ (eq. 3.5), then :func:`hmc_transition` on the estimate of the subsample kept
  (eqs. 3.6-3.7), L + 1 estimates in all.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

__all__ = ["MAX_ENERGY_ERROR", "ECSResult", "HMCResult", "ecs_iteration", "hmc_transition"]

#: |ΔH| beyond which a trajectory is a divergence (PyMC's ``Emax``)
MAX_ENERGY_ERROR = 1000.0


class HMCResult(NamedTuple):
    """One HMC transition: the draw and its potential, and the accept step."""

    theta: np.ndarray  # the end point if accepted, else the start
    value: float
    grad: np.ndarray
    extras: np.ndarray
    accepted: bool
    accept_prob: float  # min(1, e^{−ΔH}); 0 for a divergence
    energy: float  # H at the path's last point
    energy_error: float  # ΔH there
    max_energy_error: float  # the ΔH of largest magnitude along the path
    diverging: bool
    n_steps: int  # leapfrog steps taken (fewer than L after a divergence)


class ECSResult(NamedTuple):
    """One HMC-ECS iteration: the subsample update, then the HMC transition on the subsample kept."""

    subsample_accepted: bool
    subsample_log_ratio: float  # log L̂(θ₀; u′) − log L̂(θ₀; u)
    start: tuple  # (value, grad, extras) at θ₀ on the subsample kept
    hmc: HMCResult


@numba.njit
def _evaluate(potential, theta, args):
    out = potential(theta, *args)
    return out[0][()], out[1].copy(), out[2].copy()


@numba.njit
def _kinetic(inverse_mass, p):
    total = 0.0
    for i in range(p.shape[0]):
        row = 0.0
        for j in range(p.shape[0]):
            row += inverse_mass[i, j] * p[j]
        total += p[i] * row
    return 0.5 * total


@numba.njit
def _transition(potential, args, theta, value, grad, extras, momentum, step_size, n_steps, inverse_mass,
                log_u):
    d = theta.shape[0]
    q, p, g, v, x = theta.copy(), momentum.copy(), grad.copy(), value, extras.copy()
    start_energy = -value + _kinetic(inverse_mass, p)
    error, max_error, taken = 0.0, 0.0, 0
    for _ in range(n_steps):
        for i in range(d):
            p[i] += 0.5 * step_size * g[i]
        for i in range(d):
            drift = 0.0
            for j in range(d):
                drift += inverse_mass[i, j] * p[j]
            q[i] += step_size * drift
        v, g, x = _evaluate(potential, q, args)
        for i in range(d):
            p[i] += 0.5 * step_size * g[i]
        taken += 1
        error = -v + _kinetic(inverse_mass, p) - start_energy
        if np.isnan(error):
            error = np.inf
        if abs(error) > abs(max_error):
            max_error = error
        if not abs(error) <= MAX_ENERGY_ERROR:
            break  # a divergence: the rest of the path cannot be accepted
    diverging = not abs(error) <= MAX_ENERGY_ERROR
    prob = 0.0 if diverging else np.exp(min(0.0, -error))
    accepted = (not diverging) and log_u < -error
    if not accepted:
        q, v, g, x = theta.copy(), value, grad.copy(), extras.copy()
    return q, v, g, x, accepted, prob, start_energy + error, error, max_error, diverging, taken


def hmc_transition(potential, args, theta, start, momentum, step_size, n_steps, inverse_mass,
                   log_u) -> HMCResult:
    """One HMC transition of ``n_steps`` leapfrog steps from θ = ``theta``.

    Parameters
    ----------
    potential : numba function
        ``potential(θ, *args) -> (value, grad, extras)``.
    args : tuple
        Its other arguments.
    start : tuple
        (value, grad, extras) at ``theta``: not evaluated again.
    momentum : array
        p₀ ~ N(0, M).
    log_u : float
        log U, U ~ Uniform(0, 1): the end is accepted when log U < −ΔH.
    """
    value, grad, extras = start
    out = _transition(potential, args, theta, float(value), grad, extras, momentum, float(step_size),
                      int(n_steps), inverse_mass, float(log_u))
    return HMCResult(*out)


@numba.njit
def _ecs(potential, theta, value, grad, extras, current, proposed, log_u_subsample, momentum, step_size,
         n_steps, inverse_mass, log_u):
    proposed_value, proposed_grad, proposed_extras = _evaluate(potential, theta, proposed)
    log_ratio = proposed_value - value
    take = log_u_subsample < log_ratio  # False for a NaN ratio
    if take:
        args, value, grad, extras = proposed, proposed_value, proposed_grad, proposed_extras
    else:
        args = current
    out = _transition(potential, args, theta, value, grad, extras, momentum, step_size, n_steps, inverse_mass,
                      log_u)
    return take, log_ratio, value, grad, extras, out


def ecs_iteration(potential, theta, start, current, proposed, log_u_subsample, momentum, step_size, n_steps,
                  inverse_mass, log_u) -> ECSResult:
    """One HMC-ECS iteration from θ₀ = ``theta``.

    ``start`` is (value, grad, extras) at θ₀ on the current subsample u, whose potential's arguments are
    ``current``; ``proposed`` are those of the proposed u′ (the same types), accepted when
    log U_u < log L̂(θ₀; u′) − log L̂(θ₀; u) (eq. 3.5). The HMC transition (:func:`hmc_transition`) then
    runs on the subsample kept.
    """
    value, grad, extras = start
    take, log_ratio, value, grad, extras, out = _ecs(
        potential, theta, float(value), grad, extras, current, proposed, float(log_u_subsample), momentum,
        float(step_size), int(n_steps), inverse_mass, float(log_u))
    return ECSResult(bool(take), float(log_ratio), (float(value), grad, extras), HMCResult(*out))
