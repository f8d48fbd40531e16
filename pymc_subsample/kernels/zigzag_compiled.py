r"""The Zig-Zag event loop of :mod:`pymc_subsample.kernels.zigzag`, compiled with Numba.

The same process, bound and estimate as :func:`pymc_subsample.kernels.zigzag.step` (Bierkens,
Fearnhead & Roberts 2019, §2 for the process, §3 for ZZ-CV and its affine bound α + βs), with the
whole horizon of a draw simulated in one compiled loop instead of one Python segment per switch.

**Simulation** (the sequential thinning of the paper's §3.2, one candidate at a time). At a
segment start (θ, v) the loop computes α, β (d,) as :meth:`ZigZagCV.segment` does and, per
coordinate, the first candidate time τ_j of the Poisson process of rate max(0, α_j + β_j s): the
τ solving ∫₀^τ max(0, α_j + β_j s) ds = E_j with E_j exponential (:func:`first_arrival_times`).
The earliest τ_j is the next candidate; its estimate v_j Ê_j^I(θ + τ_j v) reads one fresh row I;
it is a switch with probability max(0, v_j Ê_j^I)/(α_j + β_j τ_j). On a rejection only
coordinate j's next candidate is drawn (its level E_j grows by a fresh exponential): the d
candidate processes are independent and each is Poisson from the segment start, so the other
coordinates' times stay valid. On a switch v_j flips and a segment starts at the switch. Each
candidate reads exactly one row, so ``rows == proposed`` in :class:`ZigZagInfo`.

**Rows and random numbers.** Rows come from ``draw(rng, size)``, in Python (they may come from
disk): :class:`RowStream` holds a batch, the loop consumes it and returns to Python only when it
runs out (or when the uniforms run out), and resumes where it stopped (its state lives in the
arrays it is passed). The loop's randomness is a buffer of uniforms u drawn by the step's NumPy
``Generator`` (exponentials as −log(1 − u)), so the same generator state gives the same path. The
draws are not those of the NumPy kernel for the same seed (it draws K candidate times per
coordinate per segment and reads rows in chunks); the law is the same, which the tests check
against known posteriors within Monte Carlo standard error.

**Scores.** The loop needs the family's ∂ℓ/∂η(y, η) as a Numba scalar function: one small
``@njit`` function per family ZigZag supports, selected by :func:`compiled_score` from the GLM
family's name; a family without one has None, and the step method runs the NumPy kernel.
Compiled functions are cached on disk (``cache=True``), so a second process compiles nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from pymc_subsample.kernels.zigzag import EXCEED_RTOL, ZigZagInfo, ZigZagState

__all__ = [
    "COMPILED_FAMILIES",
    "CompiledScore",
    "bernoulli_logit_score",
    "compiled_score",
    "normal_identity_score",
    "step",
]

DONE, NEED_ROWS, NEED_UNIFORMS = 0, 1, 2  # why the loop returned to Python
BERNOULLI_LOGIT, NORMAL_IDENTITY = 0, 1  # the loop's codes of the families


@njit(cache=True)
def bernoulli_logit_score(y, eta):
    """The Bernoulli-logit score y − σ(η), with σ evaluated on the side where exp does not overflow."""
    if eta >= 0.0:
        return y - 1.0 / (1.0 + math.exp(-eta))
    e = math.exp(eta)
    return y - e / (1.0 + e)


@njit(cache=True)
def normal_identity_score(y, eta, inv_variance):
    """(y − η)/σ² of a Normal(η, σ²) row with σ known."""
    return (y - eta) * inv_variance


@njit(cache=True)
def _score(family, parameter, y, eta):
    if family == BERNOULLI_LOGIT:
        return bernoulli_logit_score(y, eta)
    return normal_identity_score(y, eta, parameter)


@dataclass(frozen=True)
class CompiledScore:
    """The loop's code of a family and its one constant parameter (1/σ² of the Normal, else 0)."""

    family: int
    parameter: float = 0.0


#: GLM family name → the :class:`CompiledScore` of its constant parameters (those of
#: :attr:`LinearPredictorModel.constants`), as in :data:`pymc_subsample.families.FAMILIES`
COMPILED_FAMILIES = {
    "bernoulli_logit": lambda: CompiledScore(BERNOULLI_LOGIT),
    # the NumPy score's own expression for 1/σ², so both paths multiply by the same number
    "normal_identity": lambda sigma: CompiledScore(NORMAL_IDENTITY, float(1.0 / sigma**2)),
}


def compiled_score(family, *constants) -> CompiledScore | None:
    """The compiled score of GLM family ``family`` at its constant parameters, or None (no compiled
    score: the NumPy kernel runs).
    """
    make = COMPILED_FAMILIES.get(family)
    return None if make is None else make(*constants)


@njit(cache=True)
def _arrival(alpha, beta, level):
    """:func:`~pymc_subsample.kernels.zigzag.first_arrival_times` for one coordinate."""
    if alpha > 0.0:
        disc = alpha * alpha + 2.0 * beta * level
        if disc >= 0.0:
            return 2.0 * level / (alpha + math.sqrt(disc))
        return math.inf
    if beta > 0.0:
        return math.sqrt(2.0 * level / beta) - alpha / beta
    return math.inf


@njit(cache=True)
def _start_segment(theta, v, seg, uniforms, upos, center, prior_grad, prior_hess, loglik_grad, na, nb,
                   metric_r):
    """α, β, the exact part and its slope (:meth:`ZigZagCV.segment`), and a first candidate time per
    coordinate, into ``seg``; reads d uniforms from ``upos``.
    """
    d = theta.size
    alpha, beta, exact, slope, level, tau, delta = seg[0], seg[1], seg[2], seg[3], seg[4], seg[5], seg[6]
    for i in range(d):
        delta[i] = theta[i] - center[i]
    spread = 0.0
    for i in range(d):
        r_delta = 0.0
        for k in range(d):  # any R with RᵀR = P, as ZigZagCV.segment takes it (O(d²) a segment)
            r_delta += metric_r[i, k] * delta[k]
        spread += r_delta * r_delta
    spread = math.sqrt(spread)
    for i in range(d):
        h_delta = 0.0
        h_v = 0.0
        for k in range(d):
            h_delta += prior_hess[i, k] * delta[k]
            h_v += prior_hess[i, k] * v[k]
        exact[i] = v[i] * (-(prior_grad[i] + h_delta) - loglik_grad[i])
        slope[i] = -v[i] * h_v
        alpha[i] = exact[i] + na[i] * spread
        beta[i] = slope[i] + nb[i]
        level[i] = -math.log1p(-uniforms[upos + i])
        tau[i] = _arrival(alpha[i], beta[i], level[i])


@njit(cache=True)
def _estimate(j, t, jac_row, y, eta_center, inv_weight, delta, v, exact, slope, weight_total, family,
              parameter):
    """v_j Ê_j^I(θ + t v) from one row I (:meth:`ZigZagCV.estimates`), ``delta`` = θ − θ*."""
    j_delta = 0.0
    j_v = 0.0
    for i in range(delta.size):
        j_delta += jac_row[i] * delta[i]
        j_v += jac_row[i] * v[i]
    eta = eta_center + j_delta + t * j_v
    diff = _score(family, parameter, y, eta) - _score(family, parameter, y, eta_center)
    return exact[j] + slope[j] * t - weight_total * v[j] * inv_weight * diff * jac_row[j]


@njit(cache=True)
def _run(theta, v, clock, counters, seg, center, prior_grad, prior_hess, loglik_grad, na, nb, metric_r,
         weight_total, family, parameter, jac, y, eta_center, inv_weight, uniforms):
    """Simulate until the horizon or until the rows or uniforms run out; returns why it stopped.

    ``clock`` = [time left, time elapsed]; ``counters`` = [row position, uniform position, inside a
    segment (0/1), switches, proposed, bound exceeded]; ``seg`` (7, d) = α, β, exact, slope, level,
    τ, θ − θ* of the current segment. All are updated in place, so a call resumes the last one.
    """
    d = theta.size
    alpha, beta, exact, slope, level, tau, delta = seg[0], seg[1], seg[2], seg[3], seg[4], seg[5], seg[6]
    left, elapsed = clock[0], clock[1]
    row, upos, inside = counters[0], counters[1], counters[2]
    switches, proposed, exceeded = counters[3], counters[4], counters[5]
    n_rows, n_uniforms = y.size, uniforms.size
    status = DONE
    while True:
        if inside == 0:
            if not left > 0.0:  # written so that a NaN ends the loop, as it ends the NumPy kernel's
                break
            if upos + d > n_uniforms:
                status = NEED_UNIFORMS
                break
            _start_segment(theta, v, seg, uniforms, upos, center, prior_grad, prior_hess, loglik_grad,
                           na, nb, metric_r)
            upos += d
            inside = 1
        j = 0
        for i in range(1, d):  # the earliest candidate (d is small: a scan beats a heap)
            if tau[i] < tau[j]:
                j = i
        t = tau[j]
        if not t < left:  # no candidate before the horizon (or a NaN time): move to it
            for i in range(d):
                theta[i] += left * v[i]
            elapsed += left
            left = 0.0
            inside = 0
            break
        if row >= n_rows:
            status = NEED_ROWS
            break
        if upos + 2 > n_uniforms:  # one for the thinning, one for the next candidate of j
            status = NEED_UNIFORMS
            break
        rate = _estimate(j, t, jac[row], y[row], eta_center[row], inv_weight[row], delta, v, exact, slope,
                         weight_total, family, parameter)
        bound = alpha[j] + beta[j] * t
        row += 1
        proposed += 1
        if rate > bound * (1.0 + EXCEED_RTOL) + EXCEED_RTOL:
            exceeded += 1
        if uniforms[upos] * bound < rate:  # a switch, with probability max(0, rate)/bound
            upos += 1
            for i in range(d):
                theta[i] += t * v[i]
            v[j] = -v[j]
            left -= t
            elapsed += t
            switches += 1
            inside = 0
        else:
            level[j] += -math.log1p(-uniforms[upos + 1])
            upos += 2
            tau[j] = _arrival(alpha[j], beta[j], level[j])
    clock[0], clock[1] = left, elapsed
    counters[0], counters[1], counters[2] = row, upos, inside
    counters[3], counters[4], counters[5] = switches, proposed, exceeded
    return status


def _as_float(a):
    return np.ascontiguousarray(a, dtype=np.float64)


def step(rng, state: ZigZagState, horizon, process, draw) -> tuple[ZigZagState, ZigZagInfo]:
    """Run the process for time ``horizon`` from ``state`` in the compiled loop (module docstring).

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the rows (through ``draw``) and the loop's uniforms.
    state : ZigZagState
        ``state.rows`` (a :class:`~pymc_subsample.kernels.zigzag.RowStream`) is read and refilled
        in place, its rows and its uniforms alike.
    horizon : float
    process : ZigZagCV
        With ``process.compiled_score`` a :class:`CompiledScore` (:func:`compiled_score`).
    draw : callable
        ``draw(rng, size) -> (jac (size, d), y (size,), eta_center (size,), inv_weight (size,))``.

    Returns
    -------
    state : ZigZagState
        At time ``horizon``.
    info : ZigZagInfo
        As :func:`~pymc_subsample.kernels.zigzag.step`'s, with ``rows == proposed``.
    """
    score = process.compiled_score
    if score is None:
        raise ValueError("this ZigZagCV has no compiled score (compiled_score is None); run "
                         "kernels.zigzag.step, the NumPy kernel, instead.")
    theta = _as_float(np.array(state.theta, dtype=float))
    v = _as_float(np.array(state.velocity, dtype=float))
    rows = state.rows
    constants = (_as_float(process.center), _as_float(process.prior_grad_center),
                 _as_float(process.prior_hessian), _as_float(process.loglik_grad_center),
                 _as_float(process._na), _as_float(process._nb), _as_float(process.metric_r),
                 float(process.weight_total), int(score.family), float(score.parameter))
    clock = np.array([float(horizon), 0.0])
    counters = np.zeros(6, dtype=np.int64)
    seg = np.empty((7, theta.size))
    if rows.jac is None:
        rows.refill(draw, rng)
    if rows.uniforms is None:
        rows.refill_uniforms(rng)
    rows_read = 0
    while True:
        counters[0], counters[1] = rows.pos, rows.uniform_pos
        status = _run(theta, v, clock, counters, seg, *constants, rows.jac, rows.y, rows.eta_center,
                      rows.inv_weight, rows.uniforms)
        rows_read += int(counters[0]) - rows.pos
        rows.pos, rows.uniform_pos = int(counters[0]), int(counters[1])
        if status == DONE:
            break
        if status == NEED_ROWS:
            rows.refill(draw, rng)
        else:
            rows.refill_uniforms(rng)
    switches, proposed, exceeded = (int(c) for c in counters[3:])
    return ZigZagState(theta, v, rows), ZigZagInfo(switches, proposed, rows_read, exceeded, float(clock[1]))
