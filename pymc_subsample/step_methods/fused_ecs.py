"""HMCECS's iterations where the whole of each runs in Numba, several in one call after warm-up.

Where the estimate is the closed form of :func:`~pymc_subsample.estimators.eta_kernels.closed_form_sums`
with every row's arguments kept (:meth:`FusedECS._eta_nuts`), one call of
:func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_draws` runs K iterations: the block update of the
subsample, the momentum draw and the NUTS transition each, their random numbers from one splitmix64
stream seeded from the chain's generator. During warm-up K = 1, since the step size and the metric
adapt after every transition (PyMC's ``DualAverageAdaptation`` and metric, in Python). After warm-up
they are fixed and the chain's next K iterations depend on nothing Python does between them, so one
call runs up to :data:`DRAWS_AHEAD` of them and ``astep`` hands out one a call: PyMC's step protocol
and every stat per draw are unchanged, and the Python between compiled calls (20-30 µs an iteration
for the draws, the stats and the calls' arguments) is paid once per K draws instead of once per draw.

A draw held ahead is handed out only when ``astep`` is called from the draw before it (the point
PyMC passes in is the one returned last); from any other point the draws held are dropped and the
iteration starts there, on the subsample of the draw last handed out. Within a chain PyMC always
passes the last point back, so nothing is dropped but, at a chain's end, what ``draws`` left unused
(none when PyMC gave ``setup_chain`` the number of draws).

The random numbers are not those of the path through Python (:meth:`CompiledECS._compiled_astep`,
PyMC's generators, one at a time), so the two paths agree in distribution, not draw by draw:
``tests/test_eta_nuts.py`` compares their moments within Monte Carlo standard error.
"""

from __future__ import annotations

import math
import time
from functools import partial

import numpy as np

from pymc_subsample.kernels.compiled_nuts import NUTSResult
from pymc_subsample.kernels.eta_nuts import EtaNUTS
from pymc_subsample.kernels.subsample_update import gather_perturbed
from pymc_subsample.step_methods.compiled_inner import TargetEstimate, _estimate
from pymc_subsample.subsample.batch import GatheredOnUse

__all__ = ["DRAWS_AHEAD", "FusedECS"]

#: the most iterations one call runs after warm-up: 64 iterations are 5-30 ms at m = 1000
DRAWS_AHEAD = 64

class _Ahead:
    """Draws computed ahead: the :class:`~pymc_subsample.kernels.eta_nuts.Draws` of one call, the next
    one to hand out, the seconds of the call per draw, and the subsample of the last draw handed out.
    """

    def __init__(self, draws, seconds_each, subsample, gather, rows, fresh_rows):
        self.draws, self.next, self.seconds_each, self.subsample = draws, 0, seconds_each, subsample
        self.gather = gather  # a subsample's rows from its indices (GatheredOnUse)
        self.rows = rows  # the rows of an estimate
        self.fresh_rows = fresh_rows  # the rows of the estimate at θ₀, made where it was not known

    def continues(self, theta) -> bool:
        """Whether the next draw held is the chain's from ``theta``: the draw last handed out."""
        held = self.draws.theta
        return 0 < self.next < len(held) and theta.tobytes() == held[self.next - 1].tobytes()


class FusedECS:
    """Mixin of :class:`~pymc_subsample.step_methods.hmcecs.HMCECS` (before
    :class:`~pymc_subsample.step_methods.compiled_inner.CompiledECS`): the iterations of
    :func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_draws` (module docstring).
    """

    draws_ahead = None  # an _Ahead: fields of the step's sampling state (HMCECSState)
    draws_left = None

    def setup_chain(self, rng, tune, draws):
        """No draws held carry over into a chain; it runs ``draws`` after warm-up."""
        self.draws_ahead, self.draws_left = None, int(draws)
        super().setup_chain(rng, tune, draws)

    def _eta_nuts(self):
        """The :class:`~pymc_subsample.kernels.eta_nuts.EtaNUTS` that runs NUTS's whole iteration in
        Numba, where it can (the perturbed estimate of
        :func:`~pymc_subsample.estimators.eta_kernels.closed_form_sums` in θ, with every row's
        arguments kept and a prior of the signature it calls), else None.
        """
        if not hasattr(self, "_eta_nuts_state"):
            state = None
            if self.inner.kind == "nuts" and self.estimator == "perturbed":
                fused_fixed = getattr(self.target.perturbed_function(), "fused_fixed", None)
                parts = fused_fixed() if fused_fixed is not None else None
                kept = self.target.eta_kept_rows() if parts is not None else None
                state = EtaNUTS.for_prior(*parts, kept) if kept is not None else None
            self._eta_nuts_state = state
        return self._eta_nuts_state

    def _eta_nuts_astep(self, eta_nuts, q0):
        """One iteration by ``eta_nuts``: the next draw held where ``q0`` is the last one handed out
        after warm-up, else the draws of a new call from ``q0``; (θ, stats) as :meth:`HMCECS.astep`.
        """
        theta = np.asarray(q0.data, dtype=np.float64)
        ahead = self.draws_ahead
        if self.tune or ahead is None or not ahead.continues(theta):
            ahead = self.draws_ahead = self._draws_from(eta_nuts, theta)
        return self._hand_out(eta_nuts, ahead)

    def _draws_from(self, eta_nuts, theta) -> _Ahead:
        """The chain's next iterations from θ, K = 1 during warm-up."""
        perf_start = time.perf_counter()
        subsample, design = self.subsample, self.design
        key = (subsample, design)
        if not eta_nuts.holds(key):
            eta_nuts.hold(key, TargetEstimate(self, subsample.batch, subsample).fused_rows)
        fresh = self.current is None or theta.tobytes() != self.current_theta.tobytes()
        left = self.draws_left if self.draws_left and self.draws_left > 0 else DRAWS_AHEAD
        count = 1 if self.tune else min(DRAWS_AHEAD, left)
        momentum_factor, step_size, inverse_mass, max_treedepth = self.inner.fixed_for_draws()
        start = None if fresh else (self.current.value, self.current.grad, self.current.extras)
        draws = eta_nuts.draws(self._nuts_machine(max_treedepth), theta, start, subsample.idx,
                               self._block_layout(), step_size, inverse_mass, momentum_factor,
                               self.rng.integers(2**64, dtype=np.uint64), max_treedepth, count)
        self.current = None  # the estimate at the last draw, set when it is handed out
        eta_nuts.hold_as(None)  # the rows held are the last draw's u, made when it is handed out
        rows = self.potential.rows_in(subsample)
        gather = partial(gather_perturbed, self.tall, design, self._exact_batch)
        return _Ahead(draws, (time.perf_counter() - perf_start) / count, subsample, gather, rows,
                      rows if fresh else 0)

    def _block_layout(self) -> tuple:
        """(the blocks' edges, the rows computed exactly sorted, N, their number) of the design."""
        design = self.design
        cached = getattr(self, "_layout_of", None)
        if cached is None or cached[0] is not design:
            bounds = np.array([b.start for b in design.blocks] + [design.blocks[-1].stop], dtype=np.int64)
            exact = np.sort(np.asarray(design.exact, dtype=np.int64))
            cached = self._layout_of = (design, (bounds, exact, int(design.n), int(design.exact.size)))
        return cached[1]

    def _hand_out(self, eta_nuts, ahead):
        """The next draw of ``ahead``: the chain's state after it, its stats."""
        perf_start = time.perf_counter() - ahead.seconds_each
        j, draws = ahead.next, ahead.draws
        ahead.next += 1
        (accepted, log_ratio, start_sigma2, depth, n_steps, accept, energy, energy_error, max_energy_error,
         diverging, value) = draws.stats[j].tolist()  # eta_nuts.DRAW_STATS
        if accepted:
            ahead.subsample = GatheredOnUse(draws.idx[j], ahead.gather)
        self.subsample = ahead.subsample
        theta, grad = draws.theta[j], draws.grad[j]
        if ahead.next == len(draws.theta):  # the draw the rows held and the last estimate are at
            self.current = _estimate(*draws.last)
            self.current_theta = theta.copy()
            eta_nuts.hold_as((self.subsample, self.design))
        if not self.tune and self.draws_left is not None:
            self.draws_left -= 1
        n_steps = int(n_steps)
        transition = NUTSResult(theta, value, grad, None, int(depth), n_steps, accept, energy, energy_error,
                                max_energy_error, bool(diverging))
        stats = self.inner.update(transition, perf_start)
        rows, fresh_rows, ahead.fresh_rows = ahead.rows, ahead.fresh_rows, 0
        n_loglik = fresh_rows + rows + rows * n_steps  # u′ at θ₀, then the path's
        self.potential.n_rows_evaluated += n_loglik
        stats.update(
            subsample_accept=math.exp(min(0.0, log_ratio)) if math.isfinite(log_ratio) else 0.0,
            loglik_var=start_sigma2,  # σ̂² at θ^(j-1) with the accepted u^(j)
            n_loglik_evals=n_loglik,
            n_grad_evals=rows * n_steps,
            sign=1.0,
        )
        return theta, stats  # a row of the draws' array, which nothing writes again; astep copies it
