"""The multinomial NUTS transition of :mod:`.compiled_nuts` as a resumable machine around a Python potential.

The transition is the one of :func:`.compiled_nuts.nuts_transition`, operation for operation: Hoffman
& Gelman (2014, Algorithms 3 and 6) with multinomial sampling of the trajectory (Betancourt 2017,
§A.4: uniform progressive sampling inside a subtree, biased towards the new subtree at the top
level), Stan's generalized turning criterion with its checks across subtree junctions, the iterative
post-order build of a doubling (one merge per trailing 1 bit of the leaf index), splitmix64 uniforms
from one uint64 seed, and a divergence when |ΔH| exceeds :data:`MAX_ENERGY_ERROR`. The same seed,
momentum and potential give the same draw and statistics.

The tree logic is written by reverse communication: :func:`start` and :func:`resume` take only arrays
and scalars and return :data:`EVALUATE` whenever the trajectory needs the potential at a new point
(the point is left in :attr:`NUTSMachine.point`), or :data:`DONE`. Having no function argument, they
are compiled once per Numba cache directory and loaded from it by every later process, whereas a
kernel with the potential compiled in costs 2.1-3.0 s in every process. The potential is any Python
callable ``potential(θ, *args) -> (value, grad, extras)`` (a PyTensor function, NumPy code, a Numba
dispatcher), called by :func:`nuts_transition` between the machine's calls. Numba's cache is keyed on
this file only: an edit of the helpers imported from :mod:`.compiled_nuts` needs a fresh cache.

Everything the transition keeps between evaluations lives in three arrays of a :class:`NUTSMachine`,
made once per chain and reused: ``work`` (float64: the scalars, the integration state, the two edges
of the trajectory, the summed momentum, the subtree records of the draw, the current subtree and the
stack of completed subtrees, and M⁻¹), ``ints`` (the sizes and the loop counters: depth, leaf,
direction, steps, flags) and ``rng`` (the splitmix64 state).

Measured (``benchmarks/resumable_nuts.py``, CPU time on one core, Numba 0.68, PyTensor 3.3): the
first transition in a process costs 3.7-4.2 s with an empty Numba cache and 0.020-0.023 s with it warm,
after Numba's own start-up (0.21 s, paid once by a process calling any Numba function, PyTensor's
NUMBA backend included). On N(0, I) with a dense M⁻¹, a transition costs 5.0 µs (d = 4) and 6.1 µs
(d = 31) beyond its steps, and a leapfrog step 1.1-1.3 µs (d = 4) and 1.7-1.8 µs (d = 31) beyond the
potential's call (the compiled kernel: 0.27 and 0.83 µs with its potential's call; PyMC's ``pm.NUTS``:
19.5-25 µs beyond its logp-and-gradient call); that call costs 1.3 µs for a NumPy Gaussian and 3.3 µs
for a PyTensor function on the NUMBA backend called with ``trust_input=True``. Of the step at d = 4,
0.23 µs is Numba's reference counting of the views into ``work`` (measured by compiling without it).
"""

from __future__ import annotations

import numba
import numpy as np

from .compiled_nuts import (
    MAX_ENERGY_ERROR,
    ECSNUTSResult,
    NUTSResult,
    _begin,
    _copy,
    _dot,
    _grow,
    _kick,
    _kick_drift,
    _leaf,
    _merge_later,
    _result,
    _uniform,
    _velocity,
)

__all__ = [
    "DONE", "EVALUATE", "WRONG_SIZE", "NUTSMachine", "ecs_nuts_iteration", "finish", "nuts_transition",
    "resume", "start",
]

#: status of :func:`start` and :func:`resume`: the transition is over, read it with :func:`finish`
DONE = 0
#: status of :func:`start` and :func:`resume`: evaluate the potential at the machine's point and resume
EVALUATE = 1
#: status of :func:`start` and :func:`resume`: an array's length is not the machine's (nothing written)
WRONG_SIZE = -1

# ints: the sizes the machine was made for, then the counters and flags of the transition
_D, _NE, _LEVELS, _MAX_DEPTH, _DEPTH, _LEAF, _SIDE, _N_STEPS, _DIVERGING, _TURNING = range(10)
_N_INTS = 10
# work[:_N_SCALARS]: the float scalars of the transition (the last two: log π at the two edges)
_STEP, _EPS, _HALF, _H0, _LOG_WEIGHT, _ACCEPT_SUM, _MAX_ERROR, _EDGE_VAL = range(8)
_N_SCALARS = _EDGE_VAL + 2


@numba.njit(cache=True)
def _layout(d, ne, levels):
    """Offsets in ``work`` of the state, edges, ρ, extras, current subtree, draw, stack, M⁻¹; its size.

    A subtree record is the one of :mod:`.compiled_nuts`: the first point's p and v, the last point's
    p and v, ρ, then its draw (θ, ∇log π, extras, log π, H), then its log weight: 7d + ne + 3 floats.
    """
    rec = 7 * d + ne + 3
    state = _N_SCALARS
    edges = state + 5 * d  # the integration state is θ, p, v = M⁻¹p, ∇log π, M⁻¹∇log π
    rho = edges + 10 * d
    x = rho + d
    cur = x + ne
    draw = cur + rec
    stack = draw + rec
    mass = stack + levels * rec
    return state, edges, rho, x, cur, draw, stack, mass, mass + d * d


@numba.njit(cache=True)
def _views(work, ints):
    """The state, the two edges, ρ, the extras, the current subtree, the draw, the stack, M⁻¹ (row-major).

    All are 1-d: a reshape costs 0.07 µs a call (measured), a tenth of a step's work at d = 4.
    """
    state, edges, rho, x, cur, draw, stack, mass, end = _layout(ints[_D], ints[_NE], ints[_LEVELS])
    return (work[state:edges], work[edges:rho], work[rho:x], work[x:cur], work[cur:draw], work[draw:stack],
            work[stack:mass], work[mass:end])


@numba.njit(cache=True)
def _next_doubling(work, ints, rng):
    """Draw the direction of the next doubling and take its first step, or end the transition."""
    if ints[_DEPTH] >= ints[_MAX_DEPTH] or ints[_DIVERGING] or ints[_TURNING]:
        return DONE
    state, edges = _views(work, ints)[:2]
    side = 1 if _uniform(rng) < 0.5 else 0  # PyMC's direction draw: forward when u < ½
    eps = work[_STEP] if side == 1 else -work[_STEP]
    work[_EPS], work[_HALF] = eps, 0.5 * eps
    ints[_SIDE], ints[_LEAF] = side, 0
    d = ints[_D]
    _copy(state, edges[side * 5 * d:(side + 1) * 5 * d])
    _kick_drift(state, d, eps, 0.5 * eps)
    return EVALUATE


@numba.njit(cache=True)
def start(work, ints, rng, theta, value, grad, extras, momentum, step_size, inverse_mass, seed,
          max_treedepth):
    """Begin a transition from θ = ``theta`` with (``value``, ``grad``, ``extras``) there.

    The arguments are those of :func:`nuts_transition` with the machine's ``work``, ``ints``, ``rng``
    first, ``value`` a float and ``seed`` a uint64. Returns :data:`EVALUATE`, :data:`DONE` or
    :data:`WRONG_SIZE`.
    """
    d = ints[_D]
    # the copies below do not check bounds: a wrong length would read or write past an array
    if (theta.shape[0] != d or grad.shape[0] != d or momentum.shape[0] != d or extras.shape[0] != ints[_NE]
            or inverse_mass.shape[0] != d or inverse_mass.shape[1] != d or max_treedepth > ints[_LEVELS]):
        return WRONG_SIZE
    state, edges, rho, x, cur, draw, stack, mass = _views(work, ints)
    for i in range(d):  # a copy, so that the caller's M⁻¹ may change between evaluations
        for j in range(d):
            mass[i * d + j] = inverse_mass[i, j]
    rng[0] = seed
    h0 = _begin(state, rho, draw, theta, value, grad, extras, momentum, mass)
    for s in range(2):
        _copy(edges[s * 5 * d:(s + 1) * 5 * d], state)
        work[_EDGE_VAL + s] = value
    work[_STEP], work[_H0] = step_size, h0
    work[_LOG_WEIGHT], work[_ACCEPT_SUM], work[_MAX_ERROR] = 0.0, 0.0, 0.0
    ints[_MAX_DEPTH], ints[_DEPTH], ints[_N_STEPS] = max_treedepth, 0, 0
    ints[_DIVERGING], ints[_TURNING] = 0, 0
    return _next_doubling(work, ints, rng)


@numba.njit(cache=True)
def resume(work, ints, rng, value, grad, extras):
    """Finish the leapfrog step at the machine's point with log π = ``value``, its gradient and extras.

    Then the leaf joins the trajectory: energy error, divergence, the merges of the completed subtrees
    with their turning checks, and at the end of a doubling the biased progressive draw and the turning
    check of the whole trajectory. Returns :data:`EVALUATE` for the next step, :data:`DONE` or
    :data:`WRONG_SIZE`.
    """
    d, depth = ints[_D], ints[_DEPTH]
    if grad.shape[0] != d or extras.shape[0] != ints[_NE]:
        return WRONG_SIZE
    state, edges, rho, x, cur, draw, stack, mass = _views(work, ints)
    p, v, g, mg = state[d:2 * d], state[2 * d:3 * d], state[3 * d:4 * d], state[4 * d:]
    W = 7 * d + x.shape[0] + 2
    half, val = work[_HALF], value
    _copy(g, grad)
    _copy(x, extras)
    _velocity(mass, g, mg)
    _kick(state, d, half)  # the leapfrog's second half kick
    ints[_N_STEPS] += 1
    h = -val + 0.5 * _dot(p, v)
    error = h - work[_H0]
    if np.isnan(error):
        error = np.inf
    work[_ACCEPT_SUM] += 1.0 if error <= 0.0 else np.exp(-error)
    if abs(error) > abs(work[_MAX_ERROR]):
        work[_MAX_ERROR] = error
    if not abs(error) <= MAX_ENERGY_ERROR:  # the doubling is discarded with the transition's end
        ints[_DIVERGING], ints[_DEPTH] = 1, depth + 1
        return DONE
    _leaf(cur, state, x, d, val, h, error)
    n, k = ints[_LEAF], 0
    while (n >> k) & 1:  # leaf n completes one subtree per trailing 1 bit
        if not _merge_later(stack[k * (W + 1):(k + 1) * (W + 1)], cur, rng, d, k > 0):
            ints[_TURNING], ints[_DEPTH] = 1, depth + 1
            return DONE
        k += 1
    if k < depth:
        _copy(stack[k * (W + 1):(k + 1) * (W + 1)], cur)
    if n + 1 < (1 << depth):
        ints[_LEAF] = n + 1
        _kick_drift(state, d, work[_EPS], half)
        return EVALUATE
    depth += 1
    ints[_DEPTH] = depth
    side = ints[_SIDE]
    far, near = edges[(1 - side) * 5 * d:(2 - side) * 5 * d], edges[side * 5 * d:(side + 1) * 5 * d]
    work[_LOG_WEIGHT], turning = _grow(draw, cur, work[_LOG_WEIGHT], rng, rho, far, near, d, depth)
    if turning:
        ints[_TURNING] = 1
    _copy(near, state)
    work[_EDGE_VAL + side] = val
    return _next_doubling(work, ints, rng)


@numba.njit(cache=True)
def finish(work, ints):
    """The finished transition as the tuple of :class:`~.compiled_nuts.NUTSResult`'s fields."""
    d, n_steps = ints[_D], ints[_N_STEPS]
    draw = _views(work, ints)[5]
    G, X, VAL = 6 * d, 7 * d, 7 * d + ints[_NE]
    return (draw[5 * d:G].copy(), draw[VAL], draw[G:X].copy(), draw[X:VAL].copy(), ints[_DEPTH], n_steps,
            work[_ACCEPT_SUM] / max(n_steps, 1), draw[VAL + 1], draw[VAL + 1] - work[_H0], work[_MAX_ERROR],
            ints[_DIVERGING] != 0)


class NUTSMachine:
    """The preallocated state of NUTS transitions in d dimensions with ``n_extras`` extras.

    Parameters
    ----------
    d : int
        The dimension of θ.
    n_extras : int
        The length of the potential's vector of extras.
    max_treedepth : int
        The largest ``max_treedepth`` of the transitions run on this machine (it sizes the stack).

    Attributes
    ----------
    work, ints, rng : ndarray
        float64, int64 and uint64 arrays of the transition's state, the first arguments of
        :func:`start`, :func:`resume` and :func:`finish`.
    point : ndarray
        θ to evaluate after :data:`EVALUATE`: a view into ``work`` that the next step overwrites,
        so a potential must neither modify it nor keep it.
    """

    def __init__(self, d, n_extras=1, max_treedepth=10):
        levels = max(int(max_treedepth), 1)
        offsets = _layout(int(d), int(n_extras), levels)
        self.work = np.zeros(offsets[-1])
        self.ints = np.zeros(_N_INTS, dtype=np.int64)
        self.ints[[_D, _NE, _LEVELS]] = d, n_extras, levels
        self.rng = np.zeros(1, dtype=np.uint64)
        self.point = self.work[offsets[0]:offsets[0] + d]

    def fits(self, d, n_extras, max_treedepth):
        """Whether transitions of these sizes can run on this machine."""
        ints = self.ints
        return ints[_D] == d and ints[_NE] == n_extras and ints[_LEVELS] >= max_treedepth


def _transition(potential, args, theta, value, grad, extras, momentum, step_size, inverse_mass, randomness,
                max_treedepth, machine):
    if machine is None or not machine.fits(theta.shape[0], extras.shape[0], max_treedepth):
        machine = NUTSMachine(theta.shape[0], extras.shape[0], max_treedepth)
    work, ints, rng, point = machine.work, machine.ints, machine.rng, machine.point
    status = start(work, ints, rng, theta, float(value), grad, extras, momentum, float(step_size),
                   inverse_mass, np.uint64(randomness), int(max_treedepth))
    while status == EVALUATE:
        value, grad, extras = potential(point, *args)
        status = resume(work, ints, rng, float(value), grad, extras)
    if status == WRONG_SIZE:
        raise ValueError(f"NUTS on a machine of d = {ints[_D]} with {ints[_NE]} extras and max_treedepth at "
                         f"most {ints[_LEVELS]}: an array or the potential's gradient or extras do not fit")
    return _result(finish(work, ints))


def nuts_transition(potential, theta, start, momentum, step_size, inverse_mass, randomness, max_treedepth=10,
                    machine=None) -> NUTSResult:
    """One multinomial NUTS transition from θ = ``theta``, calling ``potential`` from Python.

    Hoffman & Gelman (2014), Algorithms 3 and 6, with multinomial sampling (Betancourt 2017, §A.4)
    and Stan's generalized turning criterion: the transition of :func:`.compiled_nuts.nuts_transition`,
    with the same draw and statistics for the same arguments.

    Parameters
    ----------
    potential : callable
        ``potential(θ) -> (value, grad, extras)``: log π(θ) (a float or 0-d array), its gradient, a
        float64 (d,) array, and a float64 vector of extra scalars returned with the draw. θ is the
        machine's :attr:`~NUTSMachine.point`: not to be modified or kept.
    theta, start, momentum, step_size, inverse_mass, randomness, max_treedepth
        As for :func:`.compiled_nuts.nuts_transition`.
    machine : NUTSMachine, optional
        The state to run on, reused across transitions; one is made when it is None or of other sizes.

    Returns
    -------
    NUTSResult
        The draw and PyMC's NUTS statistics; after a divergence or a turning subtree in a doubling,
        the draw is taken from the trajectory before that doubling.
    """
    value, grad, extras = start
    return _transition(potential, (), theta, value, grad, extras, momentum, step_size, inverse_mass,
                       randomness, max_treedepth, machine)


def ecs_nuts_iteration(potential, theta, start, current, proposed, log_u_subsample, momentum, step_size,
                       inverse_mass, randomness, max_treedepth=10, machine=None) -> ECSNUTSResult:
    """One HMC-ECS iteration with a NUTS transition, from θ₀ = ``theta``, calling ``potential`` from Python.

    Dang et al. (2019), Algorithm 1, with :func:`nuts_transition` in place of fixed-length HMC: the
    proposed subsample u′ replaces u when log U_u < log L̂(θ₀; u′) − log L̂(θ₀; u) (eq. 3.5), then NUTS
    runs on the estimate of the subsample kept (eqs. 3.6-3.7). The iteration of
    :func:`.compiled_nuts.ecs_nuts_iteration`.

    Parameters
    ----------
    potential : callable
        ``potential(θ, *args) -> (value, grad, extras)``, as for :func:`nuts_transition` with the
        subsample's arguments ``args``.
    theta : ndarray
        θ₀.
    start : tuple
        (value, grad, extras) at θ₀ on the current subsample u.
    current, proposed : tuple
        The potential's other arguments for u and for u′.
    log_u_subsample : float
        log U_u, U_u ~ Uniform(0, 1).
    momentum, step_size, inverse_mass, randomness, max_treedepth, machine
        As for :func:`nuts_transition`.

    Returns
    -------
    ECSNUTSResult
        Whether u′ was taken, the log ratio, (value, grad, extras) at θ₀ on the subsample kept, and
        the NUTS transition run on it.
    """
    value, grad, extras = start
    value = float(value)
    out = potential(theta, *proposed)
    log_ratio = float(out[0]) - value
    take = bool(log_u_subsample < log_ratio)  # False for a NaN ratio
    if take:
        value, grad, extras = float(out[0]), np.array(out[1], dtype=float), np.array(out[2], dtype=float)
    nuts = _transition(potential, proposed if take else current, theta, value, grad, extras, momentum,
                       step_size, inverse_mass, randomness, max_treedepth, machine)
    return ECSNUTSResult(take, log_ratio, (value, grad, extras), nuts)
