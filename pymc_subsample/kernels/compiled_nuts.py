"""A multinomial NUTS transition as one Numba call around a compiled potential.

The transition is the No-U-Turn sampler of Hoffman & Gelman (2014, Algorithms 3 and 6) in the form
PyMC, Stan and BlackJAX use: the trajectory is doubled in a random direction until it turns back or
reaches ``max_treedepth`` doublings, and the draw is a point of the trajectory chosen with weights
e^{−H} (multinomial sampling, Betancourt 2017, §A.4) by progressive sampling, uniform inside a
subtree and biased towards the new subtree at the top level (Betancourt 2017, §A.4.2). A subtree or
doubling turns back when Stan's generalized criterion ρ·M⁻¹p⁻ ≤ 0 or ρ·M⁻¹p⁺ ≤ 0 holds for its
summed momentum ρ and end momenta p±, checked as Stan does for the merged tree and for the two
trees each extended by the first point of the other. A step whose energy error |ΔH| exceeds
:data:`MAX_ENERGY_ERROR`, or is not finite, is a divergence: the doubling that holds it is
discarded and the transition ends, as in PyMC.

The subtree is built iteratively: leaf n of a subtree of depth j is merged with the completed
subtrees waiting on a stack, one merge per trailing 1 bit of n, which is the post-order of the
recursive Algorithm 6, so checks and random draws come in PyMC's order.

The potential is any Numba function ``potential(θ, *args) -> (value, grad, extras)`` with value
= log π(θ) as a 0-d array, its gradient, and a vector of extra scalars (such as σ̂² of a subsampled
estimator); H(θ, p) = −log π(θ) + ½pᵀM⁻¹p with a dense inverse mass matrix M⁻¹. The momentum
p ~ N(0, M) is drawn by the caller. The uniforms of the transition (directions, progressive
sampling) come from splitmix64 (Steele, Lea & Flood 2014) seeded by one uint64 ``randomness`` that
the caller draws from its numpy Generator, e.g. ``rng.integers(2**64, dtype=np.uint64)``: the same
seed gives the same transition, and Numba's global random state is never used.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

__all__ = ["MAX_ENERGY_ERROR", "ECSNUTSResult", "NUTSResult", "ecs_nuts_iteration", "nuts_transition"]

#: |ΔH| beyond which a step is a divergence (PyMC's ``Emax``)
MAX_ENERGY_ERROR = 1000.0


class NUTSResult(NamedTuple):
    """One NUTS transition: the draw, its potential, and PyMC's NUTS statistics."""

    theta: np.ndarray
    value: float  # log π at the draw
    grad: np.ndarray
    extras: np.ndarray
    tree_depth: int  # doublings, the discarded last one included (PyMC's ``depth``)
    n_steps: int  # leapfrog steps, those of a discarded doubling included (PyMC's ``tree_size``)
    mean_tree_accept: float  # mean of min(1, e^{−ΔH}) over those steps
    energy: float  # H at the draw
    energy_error: float  # H at the draw − H at the start
    max_energy_error: float  # the ΔH of largest magnitude over the steps
    diverging: bool


class ECSNUTSResult(NamedTuple):
    """One HMC-ECS iteration: the subsample update, then the NUTS transition on the subsample kept."""

    subsample_accepted: bool
    subsample_log_ratio: float  # log L̂(θ₀; u′) − log L̂(θ₀; u)
    start: tuple  # (value, grad, extras) at θ₀ on the subsample kept
    nuts: NUTSResult


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True)
def _uniform(state):
    """The next splitmix64 output of ``state`` (a uint64[1], advanced in place) as a float in [0, 1)."""
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # the top 53 bits


@numba.njit(cache=True)
def _copy(dst, src):
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@numba.njit(cache=True)
def _velocity(inverse_mass, p, out):
    d = p.shape[0]
    for i in range(d):
        s = 0.0
        for j in range(d):
            s += inverse_mass[i, j] * p[j]
        out[i] = s


@numba.njit(cache=True)
def _dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@numba.njit(cache=True)
def _dot_sum(a, b, v):
    """(a + b)·v without forming a + b."""
    s = 0.0
    for i in range(v.shape[0]):
        s += (a[i] + b[i]) * v[i]
    return s


@numba.njit(cache=True)
def _turning(a_sum, a_begin_v, a_end_p, a_end_v, b_sum, b_begin_p, b_begin_v, b_end_v, extra):
    """Stan's generalized U-turn criterion for the merge of tree A with tree B built after it.

    "begin" and "end" are the first and last points in the order of integration, so A's end and B's
    begin are adjacent. The merged tree turns when ρ·v ≤ 0 at either end (v = M⁻¹p). With ``extra``,
    A extended by B's first point and B extended by A's last point are checked as well: a U-turn
    that happens across the junction is invisible to both subtrees and to the merged tree's ends.
    """
    if _dot_sum(a_sum, b_sum, a_begin_v) <= 0.0 or _dot_sum(a_sum, b_sum, b_end_v) <= 0.0:
        return True
    if extra:
        if _dot_sum(a_sum, b_begin_p, a_begin_v) <= 0.0 or _dot_sum(a_sum, b_begin_p, b_begin_v) <= 0.0:
            return True
        if _dot_sum(a_end_p, b_sum, a_end_v) <= 0.0 or _dot_sum(a_end_p, b_sum, b_end_v) <= 0.0:
            return True
    return False


@numba.njit
def _nuts(potential, args, theta, value, grad, extras, momentum, step_size, inverse_mass, seed,
          max_treedepth):
    d, ne, levels = theta.shape[0], extras.shape[0], max(max_treedepth, 1)
    rng = np.empty(1, dtype=np.uint64)
    rng[0] = seed
    v0 = np.empty(d)
    _velocity(inverse_mass, momentum, v0)
    h0 = -value + 0.5 * _dot(momentum, v0)
    # The ends of the trajectory (0: earliest in time, 1: latest), to integrate from and to check.
    edge_q, edge_p, edge_v, edge_g = np.empty((2, d)), np.empty((2, d)), np.empty((2, d)), np.empty((2, d))
    edge_val = np.empty(2)
    for s in range(2):
        _copy(edge_q[s], theta)
        _copy(edge_p[s], momentum)
        _copy(edge_v[s], v0)
        _copy(edge_g[s], grad)
        edge_val[s] = value
    rho = momentum.copy()
    draw_q, draw_g, draw_x = theta.copy(), grad.copy(), extras.copy()
    draw_val, draw_h, log_weight = value, h0, 0.0
    # Completed left siblings waiting for their right sibling, one per level of the subtree.
    st_bp, st_bv = np.empty((levels, d)), np.empty((levels, d))
    st_ep, st_ev, st_rho = np.empty((levels, d)), np.empty((levels, d)), np.empty((levels, d))
    st_q, st_g, st_x = np.empty((levels, d)), np.empty((levels, d)), np.empty((levels, ne))
    st_val, st_h, st_w = np.empty(levels), np.empty(levels), np.empty(levels)
    # The subtree being merged upwards: the current leaf, then the merges that end at it.
    c_bp, c_bv, c_rho = np.empty(d), np.empty(d), np.empty(d)
    c_q, c_g, c_x = np.empty(d), np.empty(d), np.empty(ne)
    q, p, v, g, x = np.empty(d), np.empty(d), np.empty(d), np.empty(d), np.empty(ne)
    val = c_val = c_h = c_w = 0.0
    accept_sum, max_error, n_steps, depth = 0.0, 0.0, 0, 0
    diverging = turning = False
    while depth < max_treedepth and not (diverging or turning):
        side = 1 if _uniform(rng) < 0.5 else 0  # PyMC's direction draw: forward when u < ½
        eps = step_size if side == 1 else -step_size
        val = edge_val[side]
        _copy(q, edge_q[side])
        _copy(p, edge_p[side])
        _copy(g, edge_g[side])
        for n in range(1 << depth):
            for i in range(d):
                p[i] += 0.5 * eps * g[i]
            _velocity(inverse_mass, p, v)
            for i in range(d):
                q[i] += eps * v[i]
            out = potential(q, *args)
            val = out[0][()]
            _copy(g, out[1])
            _copy(x, out[2])
            for i in range(d):
                p[i] += 0.5 * eps * g[i]
            _velocity(inverse_mass, p, v)
            n_steps += 1
            h = -val + 0.5 * _dot(p, v)
            error = h - h0
            if np.isnan(error):
                error = np.inf
            accept_sum += 1.0 if error <= 0.0 else np.exp(-error)
            if abs(error) > abs(max_error):
                max_error = error
            if not abs(error) <= MAX_ENERGY_ERROR:
                diverging = True
                break
            _copy(c_bp, p)
            _copy(c_bv, v)
            _copy(c_rho, p)
            _copy(c_q, q)
            _copy(c_g, g)
            _copy(c_x, x)
            c_val, c_h, c_w = val, h, -error
            k = 0
            while (n >> k) & 1:  # leaf n completes one subtree per trailing 1 bit
                if _turning(st_rho[k], st_bv[k], st_ep[k], st_ev[k], c_rho, c_bp, c_bv, v, k > 0):
                    turning = True
                    break
                merged = np.logaddexp(st_w[k], c_w)
                if not np.log(_uniform(rng)) < c_w - merged:  # uniform: keep the earlier half's draw
                    _copy(c_q, st_q[k])
                    _copy(c_g, st_g[k])
                    _copy(c_x, st_x[k])
                    c_val, c_h = st_val[k], st_h[k]
                c_w = merged
                _copy(c_bp, st_bp[k])
                _copy(c_bv, st_bv[k])
                for i in range(d):
                    c_rho[i] += st_rho[k, i]
                k += 1
            if turning:
                break
            if k < depth:
                _copy(st_bp[k], c_bp)
                _copy(st_bv[k], c_bv)
                _copy(st_ep[k], p)
                _copy(st_ev[k], v)
                _copy(st_rho[k], c_rho)
                _copy(st_q[k], c_q)
                _copy(st_g[k], c_g)
                _copy(st_x[k], c_x)
                st_val[k], st_h[k], st_w[k] = c_val, c_h, c_w
        depth += 1
        if diverging or turning:
            break  # the doubling is discarded: the draw stays in the trajectory before it
        # Biased progressive sampling: the new half is taken with probability min(1, w_new / w_old).
        if np.log(_uniform(rng)) < c_w - log_weight:
            _copy(draw_q, c_q)
            _copy(draw_g, c_g)
            _copy(draw_x, c_x)
            draw_val, draw_h = c_val, c_h
        log_weight = np.logaddexp(log_weight, c_w)
        # The old trajectory in integration order runs from the far edge to the edge grown from.
        far = 1 - side
        turning = _turning(rho, edge_v[far], edge_p[side], edge_v[side], c_rho, c_bp, c_bv, v, True)
        for i in range(d):
            rho[i] += c_rho[i]
        _copy(edge_q[side], q)
        _copy(edge_p[side], p)
        _copy(edge_v[side], v)
        _copy(edge_g[side], g)
        edge_val[side] = val
    return (draw_q, draw_val, draw_g, draw_x, depth, n_steps, accept_sum / max(n_steps, 1), draw_h,
            draw_h - h0, max_error, diverging)


def _result(out):
    q, val, g, x, depth, n_steps, accept, h, error, max_error, diverging = out
    return NUTSResult(q, float(val), g, x, int(depth), int(n_steps), float(accept), float(h), float(error),
                      float(max_error), bool(diverging))


def nuts_transition(potential, args, theta, start, momentum, step_size, inverse_mass, randomness,
                    max_treedepth=10) -> NUTSResult:
    """One multinomial NUTS transition from θ = ``theta``.

    Hoffman & Gelman (2014), Algorithms 3 and 6, with multinomial sampling of the trajectory
    (Betancourt 2017, §A.4: biased progressive sampling across doublings, uniform inside a
    subtree) and Stan's generalized U-turn criterion with its checks across subtree junctions.

    Parameters
    ----------
    potential : numba function
        ``potential(θ, *args) -> (value, grad, extras)``: log π(θ) as a 0-d float64 array, its
        gradient (d,), and a float64 vector of extra scalars returned with the draw.
    args : tuple
        Its other arguments.
    theta : ndarray
        The current point, float64 (d,).
    start : tuple
        (value, grad, extras) at ``theta``: not evaluated again.
    momentum : ndarray
        p₀ ~ N(0, M), drawn by the caller.
    step_size : float
        The leapfrog step size ε.
    inverse_mass : ndarray
        M⁻¹, float64 (d, d).
    randomness : int or numpy.uint64
        Seed of the transition's splitmix64 stream (directions and progressive sampling).
    max_treedepth : int
        Doublings at most: 2^max_treedepth − 1 leapfrog steps.

    Returns
    -------
    NUTSResult
        The draw and PyMC's NUTS statistics. After a divergence or a U-turn in a doubling, the
        draw is taken from the trajectory before that doubling: the start itself when the first
        step diverges.
    """
    value, grad, extras = start
    return _result(_nuts(potential, args, theta, float(value), grad, extras, momentum, float(step_size),
                         inverse_mass, np.uint64(randomness), int(max_treedepth)))


@numba.njit
def _subsample_update(potential, theta, value, grad, extras, current, proposed, log_u_subsample):
    out = potential(theta, *proposed)
    proposed_value = out[0][()]
    log_ratio = proposed_value - value
    take = log_u_subsample < log_ratio  # False for a NaN ratio
    if take:
        return take, log_ratio, proposed_value, out[1].copy(), out[2].copy()
    return take, log_ratio, value, grad, extras


def ecs_nuts_iteration(potential, theta, start, current, proposed, log_u_subsample, momentum, step_size,
                       inverse_mass, randomness, max_treedepth=10) -> ECSNUTSResult:
    """One HMC-ECS iteration with a NUTS transition, from θ₀ = ``theta``.

    Dang et al. (2019), Algorithm 1, with :func:`nuts_transition` in place of fixed-length HMC:
    the proposed subsample u′ replaces u when log U_u < log L̂(θ₀; u′) − log L̂(θ₀; u) (eq. 3.5),
    then NUTS runs on the estimate of the subsample kept (eqs. 3.6-3.7).

    Parameters
    ----------
    potential : numba function
        As for :func:`nuts_transition`.
    theta : ndarray
        θ₀.
    start : tuple
        (value, grad, extras) at θ₀ on the current subsample u.
    current, proposed : tuple
        The potential's other arguments for u and for u′ (the same types).
    log_u_subsample : float
        log U_u, U_u ~ Uniform(0, 1).
    momentum, step_size, inverse_mass, randomness, max_treedepth
        As for :func:`nuts_transition`.

    Returns
    -------
    ECSNUTSResult
        Whether u′ was taken, the log ratio, (value, grad, extras) at θ₀ on the subsample kept,
        and the NUTS transition run on it.
    """
    value, grad, extras = start
    # Two calls rather than one compiled function around _nuts: Numba optimises a caller together
    # with the code of its callees, which cost 2.5 s more compilation for one dispatch (~µs) saved.
    take, log_ratio, value, grad, extras = _subsample_update(potential, theta, float(value), grad, extras,
                                                             current, proposed, float(log_u_subsample))
    args = proposed if take else current
    out = _nuts(potential, args, theta, value, grad, extras, momentum, float(step_size), inverse_mass,
                np.uint64(randomness), int(max_treedepth))
    return ECSNUTSResult(bool(take), float(log_ratio), (float(value), grad, extras), _result(out))
