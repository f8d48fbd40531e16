"""HMC-ECS's iteration with NUTS on the closed-form perturbed estimate, in one Numba call.

For rows affine in θ of a family the package writes in Numba
(:func:`~pymc_subsample.estimators.eta_kernels.closed_form_sums`), the only part of the estimate
that may be compiled from the model is log p(θ) with its gradient: none where the prior is of the
families of :mod:`~pymc_subsample.prior_kernel` (its arrays passed in), else PyTensor's
Numba function of the prior. :func:`eta_nuts_iteration` takes that function as a first-class
function (a function pointer of the signature of the prior's types, :func:`as_prior`), so that it
is compiled once per such signature and loaded from Numba's disk cache by every later process,
whatever the model: no compilation per model (:func:`log_prior` chooses between the two kinds).
It runs Dang et al. (2019) Algorithm 1 with NUTS as
:func:`~pymc_subsample.kernels.resumable_nuts.ecs_nuts_iteration` does, the same operations in the
same order (the subsample update, eq. 3.5; then :func:`~.resumable_nuts.start` and
:func:`~.resumable_nuts.resume` with the estimate at each new point), with the estimate computed in the
loop where the resumable machine returns to Python for it. The proposal u′ is u with one block of
rows replaced: they are written into u's arguments in place from the rows' arguments kept for all N
(:func:`write_rows`) and written back on rejection, where the path through Python copies every
argument of the batch (24-45 µs an iteration at m = 1000) and gathers its rows from the data. The
same arguments give the same iteration to rounding (``tests/test_eta_nuts.py``).

:func:`eta_nuts_draws` runs K such iterations in one call and draws their random numbers itself,
from one splitmix64 stream (the block and its rows, log U, the momentum p = F z, the transition's
seed), so that nothing returns to Python between them: HMCECS runs K = 1 during warm-up and up to 64
after it (:mod:`~pymc_subsample.step_methods.fused_ecs`).

Why: from Python, an estimate costs the kernel plus 8-12 µs of calls (the prior's, the kernel's 25
arguments, the machine's resumption), 4-8 times an iteration; the proposal's batch and arguments
another 60-150 µs. Measured at m = 1000, N = 200,000, one core, 2026-11-30 (an ``astep`` timed
directly, alternating with the path through Python; ``benchmarks/README.md``): 430-460 → 220 µs an
iteration at d = 4, 860-875 → 375-430 µs at d = 31, the same draws. Of the 220 µs at d = 4, the
call of :func:`eta_nuts_iteration` was 75 (of which 17-24 µs the conversion of its arguments and
results); the random draws, the calls' arguments and the stats around it most of the rest, which
:func:`eta_nuts_draws` pays once per K iterations: 0.10 ms a draw inside ``pm.sample`` at d = 4,
0.27 ms at d = 31.

Numba's cache is keyed on this file: an edit of :mod:`.resumable_nuts` or of
:mod:`~pymc_subsample.estimators.eta_kernels` needs a fresh cache when developing. On an empty
cache the first call compiles the kernel with everything it calls (measured: 30 s for a first
iteration against 19 s for the kernels of the path through Python, on the same machine).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from numba import types
from numba.extending import overload

from pymc_subsample.estimators.eta_kernels import closed_form_sums, write_affine_rows
from pymc_subsample.prior_kernel import closed_form_prior

from .compiled_nuts import _bits, _uniform
from .resumable_nuts import _N_SCALARS, EVALUATE, WRONG_SIZE, finish, resume, start

__all__ = ["DRAW_STATS", "Draws", "EtaNUTS", "as_prior", "eta_nuts_draws", "eta_nuts_iteration",
           "prior_signature", "write_rows"]

#: what PyTensor's Numba function of the prior takes: its inputs as one tuple, here (θ,)
PRIOR_ARGUMENTS = (types.UniTuple(types.float64[::1], 1),)


def log_prior(prior, theta):
    """(log p(θ), ∇log p(θ)) from ``prior``: the typed list of PyTensor's Numba function of the prior
    (:func:`as_prior`), or the arrays of the package's closed-form prior
    (:func:`~pymc_subsample.prior_kernel.closed_form_prior`). Called from Numba only,
    where each kind compiles its own kernel once per installation.
    """
    raise NotImplementedError("called from Numba code only")


@overload(log_prior, jit_options={"cache": True})
def _log_prior(prior, theta):
    if isinstance(prior, types.ListType):
        def from_function(prior, theta):
            value, grad = prior[0]((theta,))
            return value[()], grad
        return from_function

    def from_arrays(prior, theta):
        return closed_form_prior(prior, theta)
    return from_arrays


@numba.njit(cache=True, fastmath=True)
def _estimate(prior, fixed, rows, theta):
    """(log p(θ) + ℓ̂ − σ̂²/2, its gradient, σ̂²): what
    :class:`~pymc_subsample.estimators.eta_estimate.EtaPerturbedFunction` gives, in its order of sums;
    ``prior`` as :func:`log_prior` takes it.
    """
    code, eta_index, constants, pairs, order, sum_at_centre, x_centre, linear, quadratic = fixed
    (y, offset, jacobian, coef, owner, constant_offset, constant_jacobian, slot, dense, first, stride, centre,
     subsampled, n_rest, m_rest) = rows
    value, grad, sigma2 = closed_form_sums(code, eta_index, constants, y, offset, jacobian, coef, owner,
                                           constant_offset, constant_jacobian, slot, dense, first, stride,
                                           theta, centre, pairs, order, subsampled, n_rest, m_rest,
                                           sum_at_centre, x_centre, linear, quadratic)
    prior_value, prior_grad = log_prior(prior, theta)
    return prior_value + value, prior_grad + grad, sigma2


def _list_of(prior):
    out = numba.typed.List()
    out.append(prior)
    return out


def prior_signature(prior):
    """The signature of ``prior`` (a Numba dispatcher, called from Python with θ once) that
    :func:`eta_nuts_iteration` calls, θ ↦ (log p(θ) as a 0-d array, ∇log p(θ)), or None where it
    has none (another dtype, other arguments): that prior takes the path through Python.
    """
    for signature in getattr(prior, "nopython_signatures", ()):
        out = signature.return_type
        if (tuple(signature.args) == PRIOR_ARGUMENTS and isinstance(out, types.BaseTuple) and len(out) == 2
                and all(isinstance(t, types.Array) and t.dtype == types.float64 for t in out)
                and (out[0].ndim, out[1].ndim) == (0, 1)):
            return signature
    return None


_LISTERS = {}


def as_prior(prior, signature):
    """``prior``, a Numba dispatcher compiled for ``signature`` (:func:`prior_signature`), as
    :func:`eta_nuts_iteration` takes it: a typed list holding its function pointer. Passed as the
    dispatcher itself, the kernel would be compiled for each prior; passed as a first-class function
    to an explicit signature, each call looked for the conversion in Python (87 µs a call, against
    2 µs for the list; measured 2026-11-30). The list is made by a function of that signature alone
    (one per signature, on Numba's disk cache), so no model's prior compiles anything (a typed list
    made from Python compiled its constructor in every process, 0.3 s).
    """
    function_type = types.FunctionType(signature)
    make = _LISTERS.get(function_type)
    if make is None:
        make = _LISTERS[function_type] = numba.njit(types.ListType(function_type)(function_type),
                                                    cache=True)(_list_of)
    return make(prior)


@numba.njit(cache=True)
def write_rows(rows, kept, data_rows, start):
    """Write the kept rows ``data_rows`` (y, η(0), J, block coefficients and entries, terms at θ*)
    into the positions from ``start`` on of a subsample's arguments ``rows``, in place.
    """
    y, centre = rows[0], rows[11]
    kept_y, kept_offset, kept_jacobian, kept_coef, kept_owner, kept_terms = kept
    write_affine_rows(rows[1], rows[2], rows[3], rows[4], kept_offset, kept_jacobian, kept_coef, kept_owner,
                      data_rows, start)
    for t in range(data_rows.shape[0]):
        k, r = start + t, data_rows[t]
        for term in range(y.shape[0]):
            y[term, k] = kept_y[term, r]
        for j in range(centre.shape[0]):
            centre[j, k] = kept_terms[j, r]


@numba.njit(cache=True, fastmath=True)
def eta_nuts_iteration(work, ints, rng, prior, fixed, kept, rows, theta, value, grad, extras, fresh,
                       new_rows, old_rows, start_position, log_u_subsample, momentum, step_size, inverse_mass,
                       seed, max_treedepth):
    """One HMC-ECS iteration from θ₀ = ``theta`` on a :class:`~.resumable_nuts.NUTSMachine`'s arrays,
    its subsample update made in place.

    The proposal u′ replaces the rows ``old_rows`` of the current subsample u at the positions from
    ``start_position`` on by the rows ``new_rows`` (one block, Dang et al. 2019 §3.3): they are
    written into ``rows`` from the kept ones, and written back where u′ is rejected (eq. 3.5); NUTS
    then runs on the subsample kept (eqs. 3.6-3.7).

    Parameters
    ----------
    work, ints, rng : ndarray
        The machine's arrays.
    prior : numba.typed.List or tuple
        The prior as :func:`log_prior` takes it.
    fixed : tuple
        The estimate's arguments the same for every subsample: the family's code, η index and
        constants, the proxy's pairs (j, l) of ∂²f* and order, Σq's Σf*, x*, A and B.
    kept : tuple
        y, η(0), J, block coefficients, block entries and terms at θ* of all N rows.
    rows : tuple
        The arguments on u, changed in place: y, the rows'
        :class:`~pymc_subsample.model.affine_rows.AffineRows`, their terms at θ*, the mask of the
        subsampled rows, n_R, m.
    theta, value, grad, extras
        θ₀ and the estimate there on u (its extras: σ̂²); with ``fresh``, computed here instead.
    new_rows, old_rows, start_position
        The block's rows in u′ and in u, and its first position among the arguments' rows.
    log_u_subsample, momentum, step_size, inverse_mass, seed, max_treedepth
        As for :func:`~.resumable_nuts.ecs_nuts_iteration`.

    Returns
    -------
    tuple
        (whether u′ was taken, log L̂(θ₀; u′) − log L̂(θ₀; u), the value, gradient and extras at θ₀ on
        the subsample kept, the machine's status (``WRONG_SIZE`` where an array does not fit it), the
        transition as :func:`~.resumable_nuts.finish` gives it).
    """
    if fresh:
        value, grad, sigma2 = _estimate(prior, fixed, rows, theta)
        extras = np.array([sigma2])
    write_rows(rows, kept, new_rows, start_position)
    out_value, out_grad, out_sigma2 = _estimate(prior, fixed, rows, theta)
    log_ratio = out_value - value
    take = log_u_subsample < log_ratio  # False for a NaN ratio
    if take:
        value, grad, extras = out_value, out_grad, np.array([out_sigma2])
    else:
        write_rows(rows, kept, old_rows, start_position)
    status = start(work, ints, rng, theta, value, grad, extras, momentum, step_size, inverse_mass, seed,
                   max_treedepth)
    point = work[_N_SCALARS:_N_SCALARS + theta.shape[0]]  # the machine's point (NUTSMachine.point)
    at_point = np.empty(1)
    while status == EVALUATE:
        step_value, step_grad, at_point[0] = _estimate(prior, fixed, rows, point)
        status = resume(work, ints, rng, step_value, step_grad, at_point)
    return take, log_ratio, value, grad, extras, status, finish(work, ints)


#: the columns of :func:`eta_nuts_draws`'s stats, one row an iteration
DRAW_STATS = ("subsample_accepted", "subsample_log_ratio", "start_sigma2", "tree_depth", "n_steps",
              "mean_tree_accept", "energy", "energy_error", "max_energy_error", "diverging", "value")


@numba.njit(cache=True)
def _row_outside(stream, n, exact):
    """A row uniform over the ``n`` rows not in ``exact`` (sorted): uniform over all n, drawn again
    where it is in ``exact`` (as :func:`~.subsample_update.draw_rest`). ⌊u·n⌋ of a 53-bit u: a row's
    probability is off 1/n by at most 2⁻⁵³ relative per row of n.
    """
    while True:
        r = min(np.int64(_uniform(stream) * n), n - 1)
        k = np.searchsorted(exact, r)
        if k == exact.shape[0] or exact[k] != r:
            return r


@numba.njit(cache=True)
def _standard_normals(stream, out):
    """Fill ``out`` with N(0, 1) draws, two a pair of uniforms (Box-Muller)."""
    for i in range(0, out.shape[0], 2):
        radius = np.sqrt(-2.0 * np.log(1.0 - _uniform(stream)))  # 1 − u ∈ (0, 1]
        angle = 2.0 * np.pi * _uniform(stream)
        out[i] = radius * np.cos(angle)
        if i + 1 < out.shape[0]:
            out[i + 1] = radius * np.sin(angle)


@numba.njit(cache=True, fastmath=True)
def eta_nuts_draws(work, ints, rng, prior, fixed, kept, rows, idx, bounds, exact, n, exact_before, theta,
                   value, grad, extras, fresh, step_size, inverse_mass, momentum_factor, seed, max_treedepth,
                   out_theta, out_grad, out_stats, out_idx):
    """K = ``out_theta.shape[0]`` HMC-ECS iterations from θ₀ = ``theta``, each as
    :func:`eta_nuts_iteration`, with their random numbers drawn here from one splitmix64 stream
    seeded by ``seed``: per iteration the block (uniform over the G blocks), its rows (uniform over
    the rows not computed exactly, eq. 4.2), log U of the subsample update (eq. 3.5), the momentum
    p = F z ~ N(0, M) and the NUTS transition's seed.

    Parameters
    ----------
    work, ints, rng, prior, fixed, kept, rows
        As for :func:`eta_nuts_iteration`; ``rows`` are those of the subsample ``idx``.
    idx : ndarray of int64
        u's rows not computed exactly, changed in place to those of the subsample kept.
    bounds : ndarray of int64
        The G + 1 edges of the blocks' positions in ``idx``.
    exact : ndarray of int64
        The rows computed exactly, sorted; ``exact_before`` of them come before ``idx``'s in ``rows``.
    n : int
        N.
    theta, value, grad, extras, fresh
        θ₀, the estimate there on u (``fresh``: computed here instead).
    step_size, inverse_mass, max_treedepth
        NUTS's ε, M⁻¹ and tree depth, the same for the K transitions.
    momentum_factor : ndarray
        F with F Fᵀ = M.
    out_theta, out_grad, out_stats, out_idx : ndarray
        (K, d), (K, d), (K, len(:data:`DRAW_STATS`)), (K, m): per iteration the draw, the gradient
        there, the stats and u's rows after it.

    Returns
    -------
    tuple
        (the machine's status, the value, gradient and extras at the last draw); where the status is
        ``WRONG_SIZE``, the iterations stop there.
    """
    stream = np.empty(1, dtype=np.uint64)
    stream[0] = seed
    d, blocks = theta.shape[0], bounds.shape[0] - 1
    largest = 0
    for b in range(blocks):
        largest = max(largest, bounds[b + 1] - bounds[b])
    new_rows, old_rows = np.empty(largest, dtype=np.int64), np.empty(largest, dtype=np.int64)
    z, momentum = np.empty(d), np.empty(d)
    status = 0
    for it in range(out_theta.shape[0]):
        b = min(np.int64(_uniform(stream) * blocks), blocks - 1)
        lo, size = bounds[b], bounds[b + 1] - bounds[b]
        for t in range(size):
            new_rows[t], old_rows[t] = _row_outside(stream, n, exact), idx[lo + t]
        log_u = np.log(_uniform(stream))
        _standard_normals(stream, z)
        for i in range(d):
            total = 0.0
            for j in range(d):
                total += momentum_factor[i, j] * z[j]
            momentum[i] = total
        take, log_ratio, start_value, start_grad, start_extras, status, out = eta_nuts_iteration(
            work, ints, rng, prior, fixed, kept, rows, theta, value, grad, extras, fresh, new_rows[:size],
            old_rows[:size], exact_before + lo, log_u, momentum, step_size, inverse_mass, _bits(stream),
            max_treedepth)
        if status == WRONG_SIZE:
            return status, value, grad, extras
        if take:
            idx[lo:lo + size] = new_rows[:size]
        theta, value, grad, extras = out[0], out[1], out[2], out[3]
        fresh = False
        out_theta[it], out_grad[it], out_idx[it] = theta, grad, idx
        row = out_stats[it]
        row[0], row[1], row[2] = take, log_ratio, start_extras[0]
        row[3], row[4], row[5], row[6], row[7], row[8] = out[4], out[5], out[6], out[7], out[8], out[9]
        row[9], row[10] = out[10], value
    return status, value, grad, extras


class Draws(NamedTuple):
    """K iterations of :func:`eta_nuts_draws`: per iteration the draw, the gradient there, the stats
    (columns :data:`DRAW_STATS`) and u's rows not computed exactly; the value, gradient and extras at
    the last draw on the last u.
    """

    theta: np.ndarray
    grad: np.ndarray
    stats: np.ndarray
    idx: np.ndarray
    last: tuple


class EtaNUTS:
    """HMC-ECS iterations by :func:`eta_nuts_draws`: the prior, the fixed and kept arguments, and
    the current subsample's arguments (a copy, changed in place from one iteration to the next).

    Parameters
    ----------
    prior : numba.typed.List or tuple
        As :func:`log_prior` takes it (:meth:`for_prior` makes it).
    fixed, kept : tuple
        As :func:`eta_nuts_iteration` takes them.
    """

    def __init__(self, prior, fixed, kept):
        self.prior, self.fixed, self.kept = prior, fixed, kept
        self.rows, self.of = None, None

    @classmethod
    def for_prior(cls, prior, fixed, kept) -> EtaNUTS | None:
        """The iterations with ``prior``: a closed-form prior's arrays
        (:class:`~pymc_subsample.model.closed_form_prior.ClosedFormPrior`), or a Numba dispatcher
        compiled for θ; None where the dispatcher has no signature :func:`eta_nuts_iteration` calls
        (:func:`prior_signature`).
        """
        if isinstance(prior, tuple):  # the arrays of the closed-form prior
            return cls(tuple(prior), fixed, kept)
        signature = prior_signature(prior)
        return None if signature is None else cls(as_prior(prior, signature), fixed, kept)

    def holds(self, key) -> bool:
        """Whether the arguments held are those of ``key`` (its items the same objects)."""
        return self.of is not None and all(a is b for a, b in zip(self.of, key, strict=True))

    def hold(self, key, rows):
        """Hold a copy of ``rows``, the arguments on the subsample named ``key``."""
        self.rows = tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in rows)
        self.of = key

    def hold_as(self, key):
        """The arguments held are now those of ``key`` (after an iteration took u′)."""
        self.of = key

    def draws(self, machine, theta, start, idx, layout, step_size, inverse_mass, momentum_factor, seed,
              max_treedepth, count) -> Draws:
        """``count`` iterations by :func:`eta_nuts_draws` from θ₀ = ``theta`` on the subsample ``idx``
        (the rows held; a copy is changed), ``start`` = (value, grad, extras) at θ₀ on u, or None to
        compute them; ``layout`` = (the
        blocks' edges, the rows computed exactly sorted, N, how many of them come first in the rows
        held).
        """
        fresh = start is None
        value, grad, extras = (0.0, theta, theta[:1]) if fresh else start
        d, m = theta.shape[0], idx.shape[0]
        out = Draws(np.empty((count, d)), np.empty((count, d)), np.empty((count, len(DRAW_STATS))),
                    np.empty((count, m), dtype=np.int64), None)
        bounds, exact, n, exact_before = layout
        status, value, grad, extras = eta_nuts_draws(
            machine.work, machine.ints, machine.rng, self.prior, self.fixed, self.kept, self.rows,
            np.array(idx, dtype=np.int64), bounds, exact, int(n), int(exact_before), theta, float(value),
            grad, extras, fresh, float(step_size), inverse_mass, momentum_factor, np.uint64(seed),
            int(max_treedepth), out.theta, out.grad, out.stats, out.idx)
        if status == WRONG_SIZE:
            raise ValueError("HMC-ECS's compiled NUTS iteration: an array or the estimate's gradient or "
                             "extras do not fit its machine")
        return out._replace(last=(float(value), grad, extras))
