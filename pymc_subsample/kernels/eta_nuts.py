"""HMC-ECS's iteration with NUTS on the closed-form perturbed estimate, in one Numba call.

For rows affine in θ of a family the package writes in Numba
(:func:`~pymc_subsample.estimators.eta_kernels.closed_form_sums`), the only part of the estimate
compiled from the model is log p(θ) with its gradient, PyTensor's Numba function of the prior.
:func:`eta_nuts_iteration` takes that function as a first-class function (a function pointer of the
signature of the prior's types, :func:`as_prior`), so that it is compiled once per such signature
and loaded from Numba's disk cache by every later process, whatever the model: no compilation per
model. It runs Dang et al. (2019) Algorithm 1 with NUTS as
:func:`~pymc_subsample.kernels.resumable_nuts.ecs_nuts_iteration` does, the same operations in the
same order (the subsample update, eq. 3.5; then :func:`~.resumable_nuts.start` and
:func:`~.resumable_nuts.resume` with the estimate at each new point), with the estimate computed in the
loop where the resumable machine returns to Python for it. The proposal u′ is u with one block of
rows replaced: they are written into u's arguments in place from the rows' arguments kept for all N
(:func:`write_rows`) and written back on rejection, where the path through Python copies every
argument of the batch (24-45 µs an iteration at m = 1000) and gathers its rows from the data. The
same arguments give the same iteration to rounding (``tests/test_eta_nuts.py``).

Why: from Python, an estimate costs the kernel plus 8-12 µs of calls (the prior's, the kernel's 25
arguments, the machine's resumption), 4-8 times an iteration; the proposal's batch and arguments
another 60-150 µs. Measured at m = 1000, N = 200,000, one core, 2026-11-30 (an ``astep`` timed
directly, alternating with the path through Python; ``benchmarks/README.md``): 430-460 → 220 µs an
iteration at d = 4, 860-875 → 375-430 µs at d = 31, the same draws.

Numba's cache is keyed on this file: an edit of :mod:`.resumable_nuts` or of
:mod:`~pymc_subsample.estimators.eta_kernels` needs a fresh cache when developing. On an empty
cache the first call compiles the kernel with everything it calls (measured: 30 s for a first
iteration against 19 s for the kernels of the path through Python, on the same machine).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types

from pymc_subsample.estimators.eta_kernels import closed_form_sums, write_affine_rows

from .compiled_nuts import ECSNUTSResult, _result
from .resumable_nuts import _N_SCALARS, EVALUATE, WRONG_SIZE, finish, resume, start

__all__ = ["EtaNUTS", "as_prior", "eta_nuts_iteration", "prior_signature", "write_rows"]

#: what PyTensor's Numba function of the prior takes: its inputs as one tuple, here (θ,)
PRIOR_ARGUMENTS = (types.UniTuple(types.float64[::1], 1),)


@numba.njit(cache=True, fastmath=True)
def _estimate(prior, fixed, rows, theta):
    """(log p(θ) + ℓ̂ − σ̂²/2, its gradient, σ̂²): what
    :class:`~pymc_subsample.estimators.eta_estimate.EtaPerturbedFunction` gives, in its order of sums.
    """
    code, eta_index, constants, pairs, order, sum_at_centre, x_centre, linear, quadratic = fixed
    (y, offset, jacobian, coef, owner, constant_offset, constant_jacobian, slot, dense, first, stride, centre,
     subsampled, n_rest, m_rest) = rows
    value, grad, sigma2 = closed_form_sums(code, eta_index, constants, y, offset, jacobian, coef, owner,
                                           constant_offset, constant_jacobian, slot, dense, first, stride,
                                           theta, centre, pairs, order, subsampled, n_rest, m_rest,
                                           sum_at_centre, x_centre, linear, quadratic)
    log_prior, prior_grad = prior((theta,))
    return log_prior[()] + value, prior_grad + grad, sigma2


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
        y[k] = kept_y[r]
        for j in range(centre.shape[0]):
            centre[j, k] = kept_terms[j, r]


@numba.njit(cache=True, fastmath=True)
def eta_nuts_iteration(work, ints, rng, priors, fixed, kept, rows, theta, value, grad, extras, fresh,
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
    priors : numba.typed.List
        θ ↦ (log p(θ), ∇log p(θ)), its one item (:func:`as_prior`).
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
    prior = priors[0]
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


class EtaNUTS:
    """HMC-ECS iterations by :func:`eta_nuts_iteration`: the prior, the fixed and kept arguments, and
    the current subsample's arguments (a copy, changed in place from one iteration to the next).

    Parameters
    ----------
    prior : numba.typed.List
        From :func:`as_prior` (:meth:`for_prior` makes it).
    fixed, kept : tuple
        As :func:`eta_nuts_iteration` takes them.
    """

    def __init__(self, prior, fixed, kept):
        self.prior, self.fixed, self.kept = prior, fixed, kept
        self.rows, self.of = None, None

    @classmethod
    def for_prior(cls, prior, fixed, kept) -> EtaNUTS | None:
        """The iterations with ``prior``, a Numba dispatcher compiled for θ, or None where it has no
        signature :func:`eta_nuts_iteration` calls (:func:`prior_signature`).
        """
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

    def iteration(self, machine, theta, start, new_rows, old_rows, start_position, log_u_subsample, momentum,
                  step_size, inverse_mass, randomness, max_treedepth) -> ECSNUTSResult:
        """:func:`eta_nuts_iteration` on ``machine`` (a :class:`~.resumable_nuts.NUTSMachine`) and the
        arguments held; ``start`` = (value, grad, extras) at θ₀ on u, or None to compute them.
        """
        fresh = start is None
        value, grad, extras = (0.0, theta, theta[:1]) if fresh else start
        take, log_ratio, value, grad, extras, status, out = eta_nuts_iteration(
            machine.work, machine.ints, machine.rng, self.prior, self.fixed, self.kept, self.rows, theta,
            float(value), grad, extras, fresh, new_rows, old_rows, int(start_position),
            float(log_u_subsample), momentum, float(step_size), inverse_mass, np.uint64(randomness),
            int(max_treedepth))
        if status == WRONG_SIZE:
            raise ValueError("HMC-ECS's compiled NUTS iteration: an array or the estimate's gradient or "
                             "extras do not fit its machine")
        return ECSNUTSResult(bool(take), float(log_ratio), (float(value), grad, extras), _result(out))
