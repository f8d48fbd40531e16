"""A multinomial NUTS transition as one Numba call around a compiled potential.

The transition is the No-U-Turn sampler of Hoffman & Gelman (2014, Algorithms 3 and 6) in the form
PyMC, Stan and BlackJAX use: the trajectory is doubled in a random direction until it turns back or
reaches ``max_treedepth`` doublings, and the draw is a point of the trajectory chosen with weights
e^{−H} (multinomial sampling, Betancourt 2017, §A.4) by progressive sampling, uniform inside a
subtree and biased towards the new subtree at the top level. A subtree or doubling turns back when
the generalized criterion of Stan (Betancourt 2013; Stan's ``base_nuts``) ρ·M⁻¹p⁻ ≤ 0 or
ρ·M⁻¹p⁺ ≤ 0 holds for its summed momentum ρ and end momenta p±, checked as Stan does for the merged
tree and for the two trees each extended by the first point of the other. A step whose energy error
|ΔH| exceeds :data:`MAX_ENERGY_ERROR`, or is not finite, is a divergence: the doubling that holds
it is discarded and the transition ends, as in PyMC.

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

Each potential gets its own compiled transition, with the potential compiled in (:func:`_kernels`),
which Numba's disk cache never serves (a closure over a dispatcher misses it in every process; a
function with a dispatcher argument is not cached at all). Measured (``benchmarks/compiled_nuts.py``,
CPU seconds, one core): 3.0 s for the first transition with an empty Numba cache, of which 0.8 s
are the helpers here, cached on disk for later processes; 2.1-2.2 s for each further potential;
0.15 s for the HMC-ECS subsample update. A transition costs 4 µs from Python plus 0.29 µs a
leapfrog step around a trivial potential at d = 4 and 0.83 µs at d = 31 (its d × d product by M⁻¹
dominates).
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
def _bits(state):
    """The next splitmix64 output of ``state`` (a uint64[1], advanced in place)."""
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _uniform(state):
    """The next splitmix64 output of ``state`` (a uint64[1], advanced in place) as a float in [0, 1)."""
    return float(_bits(state) >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # the top 53 bits


@numba.njit(cache=True)
def _copy(dst, src):
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@numba.njit(cache=True)
def _velocity(mass, p, out):
    """M⁻¹p into ``out``, with M⁻¹ stored row-major in the flat ``mass``."""
    d = p.shape[0]
    for i in range(d):
        s = 0.0
        for j in range(d):
            s += mass[i * d + j] * p[j]
        out[i] = s


# The integration state is one flat array of 5d: θ, p, v = M⁻¹p, ∇log π and M⁻¹∇log π (one product
# by M⁻¹ a step). A subtree is one flat record: the first point's p and v, the last point's p and v,
# ρ, then its draw (θ, ∇log π, extras, log π, H), then its log weight log Σ e^{−ΔH}.

@numba.njit(cache=True)
def _kick_drift(state, d, eps, half):
    """The leapfrog's first half kick and drift: θ is then the point to evaluate."""
    for i in range(d):
        state[d + i] += half * state[3 * d + i]
        state[2 * d + i] += half * state[4 * d + i]
        state[i] += eps * state[2 * d + i]


@numba.njit(cache=True)
def _kick(state, d, half):
    """The leapfrog's second half kick, with ∇log π and M⁻¹∇log π of the new point in ``state``."""
    for i in range(d):
        state[d + i] += half * state[3 * d + i]
        state[2 * d + i] += half * state[4 * d + i]


@numba.njit(cache=True)
def _leaf(cur, state, x, d, val, h, error):
    """The point of ``state`` (extras ``x``, log π ``val``, energy ``h``) as a subtree of one point."""
    BV, EP, EV, RHO, Q, G, X = d, 2 * d, 3 * d, 4 * d, 5 * d, 6 * d, 7 * d
    VAL = X + x.shape[0]
    for i in range(d):
        cur[i] = cur[EP + i] = cur[RHO + i] = state[d + i]
        cur[BV + i] = cur[EV + i] = state[2 * d + i]
        cur[Q + i], cur[G + i] = state[i], state[3 * d + i]
    _copy(cur[X:VAL], x)
    cur[VAL], cur[VAL + 1], cur[VAL + 2] = val, h, -error


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


@numba.njit(cache=True)
def _merge_later(old, cur, rng, d, extra):
    """Merge subtree ``old`` with ``cur``, built after it, into ``cur`` (flat records of :func:`_kernels`'s
    layout): False, ``cur`` unchanged, where the merged tree turns back (:func:`_turning`, with the
    checks across the junction where ``extra``); else its draw is ``old``'s with probability
    w_old / (w_old + w_cur) (uniform progressive sampling inside a subtree), its weight the sum, its
    first point ``old``'s and ρ the sum.
    """
    BV, EP, EV, RHO, Q = d, 2 * d, 3 * d, 4 * d, 5 * d
    W = cur.shape[0] - 1
    if _turning(old[RHO:Q], old[BV:EP], old[EP:EV], old[EV:RHO], cur[RHO:Q], cur[:BV], cur[BV:EP],
                cur[EV:RHO], extra):
        return False
    merged = np.logaddexp(old[W], cur[W])
    if not np.log(_uniform(rng)) < cur[W] - merged:  # uniform: keep the earlier half's draw
        _copy(cur[Q:W], old[Q:W])
    cur[W] = merged
    _copy(cur[:EP], old[:EP])  # the merged tree begins where the earlier half does
    for i in range(d):
        cur[RHO + i] += old[RHO + i]
    return True


@numba.njit(cache=True)
def _begin(state, rho, draw, theta, value, grad, extras, momentum, mass):
    """The integration state at the start (θ₀, p₀ and their products by M⁻¹), ρ = p₀ and the draw
    record = the start; returns H₀.
    """
    d = theta.shape[0]
    Q, G, X = 5 * d, 6 * d, 7 * d
    VAL = X + extras.shape[0]
    _copy(state[:d], theta)
    _copy(state[d:2 * d], momentum)
    _velocity(mass, momentum, state[2 * d:3 * d])
    _copy(state[3 * d:4 * d], grad)
    _velocity(mass, grad, state[4 * d:])
    h0 = -value + 0.5 * _dot(state[d:2 * d], state[2 * d:3 * d])
    _copy(rho, state[d:2 * d])
    _copy(draw[Q:G], theta)
    _copy(draw[G:X], grad)
    _copy(draw[X:VAL], extras)
    draw[VAL], draw[VAL + 1] = value, h0
    return h0


@numba.njit(cache=True)
def _grow(draw, cur, log_weight, rng, rho, far, near, d, depth):
    """The end of a doubling that added the subtree ``cur`` next to the trajectory's ``near`` edge:
    the biased progressive draw (the new half with probability min(1, w_new / w_old)), the turning
    check of the whole trajectory and its summed momentum ρ. Returns (log weight, turning).
    """
    BV, EP, EV, RHO, Q = d, 2 * d, 3 * d, 4 * d, 5 * d
    W = cur.shape[0] - 1
    if np.log(_uniform(rng)) < cur[W] - log_weight:
        _copy(draw[Q:W], cur[Q:W])
    log_weight = np.logaddexp(log_weight, cur[W])
    # the old trajectory in integration order runs from the far edge to the edge grown from
    turning = _turning(rho, far[2 * d:3 * d], near[d:2 * d], near[2 * d:3 * d], cur[RHO:Q], cur[:BV],
                       cur[BV:EP], cur[EV:RHO], depth > 0)
    for i in range(d):
        rho[i] += cur[RHO + i]
    return log_weight, turning


#: the kernels of each potential seen, kept as long as Numba keeps their code
_KERNELS = {}


def _kernels(potential):
    """The NUTS transition and the subsample update with ``potential`` compiled in, made once a potential.

    The potential is a free variable of the kernels rather than an argument: Numba types a dispatcher
    argument in Python at every call (7.5 µs measured, against 0.6 µs for the other ten arguments),
    and a kernel calling another compiled function is optimised again together with its code (2.5 s
    measured for the HMC-ECS iteration around the transition), so the two are separate entry points.
    """
    kernels = _KERNELS.get(potential)
    if kernels is not None:
        return kernels

    @numba.njit
    def transition(args, theta, value, grad, extras, momentum, step_size, inverse_mass, seed, max_treedepth):
        d, ne, levels = theta.shape[0], extras.shape[0], max(max_treedepth, 1)
        rng = np.empty(1, dtype=np.uint64)
        rng[0] = seed
        # A subtree is one flat record (the layout above), so that a push, a merge or a draw is one
        # copy of a range (each copy loop is compiled apiece: 1.8 s of LLVM time with a copy per vector)
        Q, G, X = 5 * d, 6 * d, 7 * d
        VAL, H, W = X + ne, X + ne + 1, X + ne + 2
        cur, draw, stack = np.empty(W + 1), np.empty(W + 1), np.empty((levels, W + 1))
        # the integration state, and the same at the two ends of the trajectory (0: earliest in time,
        # 1: latest)
        state, edges, edge_val = np.empty(5 * d), np.empty((2, 5 * d)), np.empty(2)
        q, p, v, g, mg = state[:d], state[d:2 * d], state[2 * d:3 * d], state[3 * d:4 * d], state[4 * d:]
        x, rho = np.empty(ne), np.empty(d)
        mass = np.ascontiguousarray(inverse_mass).ravel()
        h0 = _begin(state, rho, draw, theta, value, grad, extras, momentum, mass)
        for s in range(2):
            _copy(edges[s], state)
            edge_val[s] = value
        log_weight, val = 0.0, value
        accept_sum, max_error, n_steps, depth = 0.0, 0.0, 0, 0
        diverging = turning = False
        while depth < max_treedepth and not (diverging or turning):
            side = 1 if _uniform(rng) < 0.5 else 0  # PyMC's direction draw: forward when u < ½
            eps = step_size if side == 1 else -step_size
            half = 0.5 * eps
            _copy(state, edges[side])
            val = edge_val[side]
            for n in range(1 << depth):
                _kick_drift(state, d, eps, half)  # leapfrog: half kick, drift, half kick
                out = potential(q, *args)
                val = out[0][()]
                _copy(g, out[1])
                _copy(x, out[2])
                _velocity(mass, g, mg)
                _kick(state, d, half)
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
                _leaf(cur, state, x, d, val, h, error)
                k = 0
                while (n >> k) & 1:  # leaf n completes one subtree per trailing 1 bit
                    if not _merge_later(stack[k], cur, rng, d, k > 0):
                        turning = True
                        break
                    k += 1
                if turning:
                    break
                if k < depth:
                    _copy(stack[k], cur)
            depth += 1
            if diverging or turning:
                break  # the doubling is discarded: the draw stays in the trajectory before it
            far, near = edges[1 - side], edges[side]
            log_weight, turning = _grow(draw, cur, log_weight, rng, rho, far, near, d, depth)
            _copy(near, state)
            edge_val[side] = val
        return (draw[Q:G].copy(), draw[VAL], draw[G:X].copy(), draw[X:VAL].copy(), depth, n_steps,
                accept_sum / max(n_steps, 1), draw[H], draw[H] - h0, max_error, diverging)

    @numba.njit
    def subsample_update(theta, value, grad, extras, current, proposed, log_u_subsample):
        out = potential(theta, *proposed)
        proposed_value = out[0][()]
        log_ratio = proposed_value - value
        take = log_u_subsample < log_ratio  # False for a NaN ratio
        if take:
            return take, log_ratio, proposed_value, out[1].copy(), out[2].copy()
        return take, log_ratio, value, grad, extras

    kernels = _KERNELS[potential] = (transition, subsample_update)
    return kernels


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
    transition, _ = _kernels(potential)
    return _result(transition(args, theta, float(value), grad, extras, momentum, float(step_size),
                              inverse_mass, np.uint64(randomness), int(max_treedepth)))


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
    transition, subsample_update = _kernels(potential)
    take, log_ratio, value, grad, extras = subsample_update(theta, float(value), grad, extras, current,
                                                            proposed, float(log_u_subsample))
    out = transition(proposed if take else current, theta, value, grad, extras, momentum, float(step_size),
                     inverse_mass, np.uint64(randomness), int(max_treedepth))
    return ECSNUTSResult(bool(take), float(log_ratio), (float(value), grad, extras), _result(out))
