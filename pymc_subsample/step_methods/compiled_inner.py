"""HMCECS's iterations with their NUTS tree or HMC trajectory in Numba.

PyMC's NUTS and HamiltonianMC run their trees and trajectories in Python, 20-30 µs of bookkeeping a
leapfrog step around the potential's call. Here:

- NUTS (the default): the tree runs in a Numba state machine cached on disk
  (:mod:`pymc_subsample.kernels.resumable_nuts`) that hands each new point back to Python, which
  calls the target's own per-call estimate (:class:`TargetEstimate`, the function PyMC's NUTS path
  calls, in whatever mode PyTensor compiled it) and resumes the machine: 1-2 µs of bookkeeping a
  step, and no compilation in a process once the machine is in Numba's cache; where the estimate is
  the closed form of :func:`~pymc_subsample.estimators.eta_kernels.closed_form_sums` with every
  row's arguments kept, whole iterations run in Numba instead, several a call after warm-up
  (:mod:`~pymc_subsample.step_methods.fused_ecs`);
- HMC with ``compiled=True``: the subsample update and the whole trajectory in one Numba call
  (:mod:`pymc_subsample.kernels.compiled_hmc`) around the Numba function of the estimate graph
  (:class:`~pymc_subsample.estimators.estimate_graph.EstimateGraph`), which Numba compiles again in
  every process (1-4 s).

What stays in Python is what PyMC's samplers do between transitions, with PyMC's own pieces: the step
size's dual averaging (``DualAverageAdaptation``, PyMC's defaults), the metric (the Laplace metric, or
PyMC's adaptive ones, whose momentum draw and ``update`` are theirs); for HMC the jittered step size
U(0.85, 1.15)·ε and L = ⌊path length / ε⌋ steps as ``pm.HamiltonianMC``, for NUTS a tree depth of at
most 8 in the first 200 warm-up draws and 10 after, as ``pm.NUTS``.
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_subsample.estimators.loglik import block_poisson_spread_and_sign
from pymc_subsample.kernels.compiled_hmc import ecs_iteration
from pymc_subsample.kernels.resumable_nuts import NUTSMachine, ecs_nuts_iteration
from pymc_subsample.model.compile import numba_callable
from pymc_subsample.pymc_protocol import step_state

__all__ = ["CompiledECS", "CompiledHMC", "CompiledHMCState", "TargetEstimate", "compiled_options"]

#: keywords of ``pm.HamiltonianMC`` and ``pm.NUTS`` that the compiled transitions take too (with
#: PyMC's defaults)
COMPILED_KEYWORDS = {"hmc": ("step_scale", "max_steps", "gamma", "k", "t0"),
                     "nuts": ("step_scale", "max_treedepth", "early_max_treedepth", "gamma", "k", "t0")}
#: PyMC's NUTS: the lower tree depth of its first warm-up draws, and how many draws it holds for
EARLY_DRAWS = 200


def compiled_options(kwargs, inner) -> dict | None:
    """The keywords of ``kwargs`` for the compiled ``inner`` sampler, or None where ``kwargs`` holds
    others (those only PyMC's own sampler takes).
    """
    if set(kwargs) - set(COMPILED_KEYWORDS[inner]):
        return None
    return dict(kwargs)


@dataclass_state
class CompiledHMCState(DataClassState):
    step_adapt: Any
    metric: Any
    rng: Any
    tune: bool
    divergences: int
    inverse_mass: Any
    iter_count: int


@step_state(CompiledHMCState)
class CompiledHMC(WithSamplingState):
    """The step size, metric and stats of NUTS or HMC whose transitions run compiled.

    Parameters
    ----------
    kind : {"nuts", "hmc"}
    metric : pymc QuadPotential
        Draws the momentum (``random``), gives M⁻¹ (``velocity``) and adapts (``update``).
    ndim : int
    path_length : float
        εL of HMC, on the metric's scale.
    target_accept : float
        Dual-averaging target.
    rng : numpy.random.Generator
    step_scale, max_steps, max_treedepth, early_max_treedepth, gamma, k, t0
        As ``pm.HamiltonianMC`` and ``pm.NUTS``: the first step size is ``step_scale / ndim**0.25``.
    """

    def __init__(self, kind, metric, ndim, path_length, target_accept, rng, *, step_scale=0.25,
                 max_steps=1024, max_treedepth=10, early_max_treedepth=8, gamma=0.05, k=0.75, t0=10):
        self.kind, self.metric = kind, metric
        self.path_length, self.max_steps = float(path_length), int(max_steps)
        self.max_treedepth, self.early_max_treedepth = int(max_treedepth), int(early_max_treedepth)
        self.target_accept = target_accept
        self.step_adapt = DualAverageAdaptation(step_scale / ndim**0.25, target_accept, gamma, k, t0)
        self.rng, self.tune, self.divergences, self.iter_count = rng, True, 0, 0
        self.inverse_mass = self._momentum_factor = self._fixed_stats = None
        self._probe = np.random.default_rng(0).standard_normal(ndim)

    def setup_chain(self, rng, tune, draws):
        """The chain's generator, and one spawned from it for the metric's momentum draws."""
        self.rng = rng
        self.metric.set_rng(rng.spawn(1)[0])

    def reset_tuning(self):
        self.step_adapt.reset()
        self.metric.reset()
        self.tune, self.divergences, self.inverse_mass, self.iter_count = True, 0, None, 0

    def stop_tuning(self):
        self.tune = False
        self.inverse_mass = None  # read once more: the last warm-up draw may have adapted the metric
        self._fixed_stats = None

    def draw(self):
        """(p₀ ~ N(0, M), ε, M⁻¹, and HMC's L or NUTS's seed and tree depth) for one transition.

        HMC: ε jittered and L = ⌊path length / ε⌋, drawn in the order PyMC's HamiltonianMC draws them
        (so that both give the same draws from the same generators). NUTS: ε as adapted, and one
        uint64 seeding the transition's own uniforms (:mod:`~pymc_subsample.kernels.compiled_nuts`).
        """
        momentum = self.metric.random()
        step_size = self.step_adapt.current(self.tune)
        if self.kind == "hmc":
            step_size *= self.rng.uniform(0.85, 1.15)
            extra = min(self.max_steps, max(1, int(self.path_length / step_size)))
        else:
            extra = (self.rng.integers(2**64, dtype=np.uint64), self._max_treedepth())
        return momentum, step_size, self._current_inverse_mass(), extra

    def fixed_for_draws(self):
        """(F with F Fᵀ = M, ε, M⁻¹, the tree depth) of the next NUTS transitions: what
        :func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_draws` takes to draw each momentum itself.
        With M⁻¹ = L Lᵀ (Cholesky), F = L⁻ᵀ; computed again only when M⁻¹ changed.
        """
        inverse_mass = self._current_inverse_mass()
        if self._momentum_factor is None or self._momentum_factor[0] is not inverse_mass:
            factor = np.linalg.inv(np.linalg.cholesky(inverse_mass)).T
            self._momentum_factor = (inverse_mass, np.ascontiguousarray(factor))
        step_size = self.step_adapt.current(self.tune)
        return self._momentum_factor[1], step_size, inverse_mass, self._max_treedepth()

    def _max_treedepth(self) -> int:
        """NUTS's tree depth at most in the next transition: lower in the first warm-up draws, as PyMC's."""
        early = self.tune and self.iter_count < EARLY_DRAWS
        return self.early_max_treedepth if early else self.max_treedepth

    def _current_inverse_mass(self):
        """M⁻¹ as a matrix: the metric's velocity map of the unit vectors, computed again during warm-up
        only when the velocity of a fixed probe vector changed (PyMC's adaptive metrics change at
        window ends, and only while tuning).
        """
        if self.inverse_mass is not None and not self.tune:
            return self.inverse_mass[0]
        probe = self.metric.velocity(self._probe)
        if self.inverse_mass is None or not np.array_equal(probe, self.inverse_mass[1]):
            eye = np.eye(len(self._probe))
            matrix = np.column_stack([self.metric.velocity(e) for e in eye])
            self.inverse_mass = (np.ascontiguousarray(matrix), probe)
        return self.inverse_mass[0]

    def _step_size_stats(self) -> dict:
        """The dual averaging's stats; after warm-up they no longer change, and are computed once."""
        if self.tune:
            return self.step_adapt.stats()
        if self._fixed_stats is None:
            self._fixed_stats = self.step_adapt.stats()
        return self._fixed_stats

    def update(self, result, perf_start) -> dict:
        """Adapt after one transition; its stats under ArviZ's names (as :data:`INNER_HMC_STATS`), with
        ``step_size`` and ``step_size_bar`` the dual averaging's after its update, as PyMC's
        HamiltonianMC reports them.
        """
        accept = result.accept_prob if self.kind == "hmc" else result.mean_tree_accept
        self.step_adapt.update(accept, self.tune)
        self.metric.update(result.theta, result.grad, self.tune)
        self.iter_count += 1
        if result.diverging and not self.tune:
            self.divergences += 1
        return {
            "diverging": bool(result.diverging),
            "divergences": self.divergences,
            "energy": result.energy,
            "energy_error": result.energy_error,
            "max_energy_error": result.max_energy_error,
            **self._step_size_stats(),
            "acceptance_rate": accept,
            "n_steps": result.n_steps,
            "tree_depth": 0 if self.kind == "hmc" else result.tree_depth,
            "perf_counter_diff": time.perf_counter() - perf_start,
        }


class CompiledECS:
    """Mixin of :class:`~pymc_subsample.step_methods.hmcecs.HMCECS`: its iteration with NUTS's tree in
    :mod:`~pymc_subsample.kernels.resumable_nuts` or HMC's trajectory in one call of
    :func:`~pymc_subsample.kernels.compiled_hmc.ecs_iteration` (``self.inner`` a :class:`CompiledHMC`).

    NUTS evaluates the target's own per-call function (:class:`TargetEstimate`), the one PyMC's NUTS
    path evaluates, so a first run compiles nothing more; HMC's loop calls the Numba function of
    ``self.estimate_graph`` (an :class:`~pymc_subsample.estimators.estimate_graph.EstimateGraph`).
    """

    def _numba_potential(self):
        """The Numba function of the estimate graph's compiled function (HMC)."""
        potential = numba_callable(self.estimate_graph.function())
        if potential is None:
            raise RuntimeError("compiled=True with inner='hmc': the estimate's function was not compiled by "
                               "PyTensor's Numba linker; pass compiled=False.")
        return potential

    def _nuts_machine(self, max_treedepth):
        """The chain's :class:`NUTSMachine` (its arrays, reused from one transition to the next)."""
        d, extras = self.tall.ndim, 2 if self.estimator == "signed" else 1
        machine = getattr(self, "_machine", None)
        if machine is None or not machine.fits(d, extras, max_treedepth):
            machine = self._machine = NUTSMachine(d, extras, max(max_treedepth, self.inner.max_treedepth))
        return machine

    def _args_for(self, subsample, parent=None) -> tuple:
        """(the potential's arguments on ``subsample``, what a proposal from it reuses); ``parent``: the
        subsample it was proposed from, with what it reuses (its rows' terms at θ*).
        """
        batch = subsample.rows.batch if self.estimator == "signed" else subsample.batch
        if self.inner.kind == "nuts":
            return (TargetEstimate(self, batch, subsample),), None
        parent_terms = None if parent is None else (parent[0].rows.batch if self.estimator == "signed"
                                                    else parent[0].batch, parent[1])
        terms = self.target.center_args(batch, parent_terms) if self.target.glm is not None else ()
        graph, design = self.estimate_graph, self.design
        if self.estimator == "signed":
            shared = graph.shared_args(batch_size=design.m, a=design.a, lam=design.lam)
        else:
            shared = graph.shared_args(n_rest=self.potential.n_rest, n_exact=self.potential.n_exact,
                                       rows=self.potential.rows_in(subsample))
        return tuple(graph.batch_args(batch, terms, self.potential.n_exact)) + tuple(shared), terms

    def _current_args(self) -> tuple:
        """The potential's arguments on the current subsample (kept while it is current)."""
        if self._compiled_args is None or self._compiled_args[0] is not self.subsample:
            self._compiled_args = (self.subsample, *self._args_for(self.subsample))
        return self._compiled_args[1]

    def _evaluate(self, theta, args):
        if self.inner.kind == "nuts":
            return args[0](theta)
        return self.estimate_graph.function()(theta, *args)

    def _compiled_estimate(self, theta):
        """The estimate at θ on the current subsample."""
        theta = np.asarray(theta, dtype=self.tall.theta.dtype)
        value, grad, extras = self._evaluate(theta, self._current_args())
        return _estimate(float(value), grad, extras)

    def _compiled_astep(self, q0):
        """One HMC-ECS iteration; (θ, stats) as :meth:`HMCECS.astep`."""
        eta_nuts = self._eta_nuts()
        if eta_nuts is not None:
            return self._eta_nuts_astep(eta_nuts, q0)
        perf_start = time.perf_counter()
        theta = np.asarray(q0.data, dtype=self.tall.theta.dtype)
        current = self._current_args()
        rows_read = 0  # the rows of the estimates: the start's where it is not known, u′'s at θ₀, the path's
        if self.current is None or not np.array_equal(self.current_theta, theta):
            self.current = _estimate(*self._evaluate(theta, current))
            rows_read = self.potential.rows_in(self.subsample)
        proposal = self._propose_subsample(self.rng, self.subsample)
        proposed, proposed_reuse = self._args_for(proposal, (self.subsample, self._compiled_args[2]))
        momentum, step_size, inverse_mass, extra = self.inner.draw()
        momentum, inverse_mass = momentum.astype(theta.dtype), inverse_mass.astype(theta.dtype)
        log_u_subsample = math.log(self.rng.random())  # U(0, 1) as rng.uniform() draws it
        start = (self.current.value, np.asarray(self.current.grad, dtype=theta.dtype), self.current.extras)
        if self.inner.kind == "hmc":
            result = ecs_iteration(self._numba_potential(), theta, start, current, proposed, log_u_subsample,
                                   momentum, step_size, extra, inverse_mass, np.log(self.inner.rng.uniform()))
            transition = result.hmc
        else:
            seed, max_treedepth = extra
            result = ecs_nuts_iteration(_call, theta, start, current, proposed, log_u_subsample, momentum,
                                        step_size, inverse_mass, seed, max_treedepth,
                                        machine=self._nuts_machine(max_treedepth))
            transition = result.nuts
        if result.subsample_accepted:
            self.subsample, self._compiled_args = proposal, (proposal, proposed, proposed_reuse)
        rows_before = rows_read + self.potential.rows_in(proposal)
        return transition.theta, self._finish(result, perf_start, rows_before)

    def _finish(self, result, perf_start, rows_before):
        """The state after an iteration's ``result`` and its stats; ``rows_before``: the rows of the
        estimates made before the transition.
        """
        transition = result.hmc if self.inner.kind == "hmc" else result.nuts
        rows = self.potential.rows_in(self.subsample)
        n_loglik = rows_before + rows * transition.n_steps
        self.potential.n_rows_evaluated += n_loglik
        self.current = _estimate(transition.value, transition.grad, transition.extras)
        self.current_theta = np.array(transition.theta, copy=True)
        stats = self.inner.update(transition, perf_start)
        stats.update(
            subsample_accept=float(np.exp(min(0.0, result.subsample_log_ratio)))
            if np.isfinite(result.subsample_log_ratio) else 0.0,
            loglik_var=float(result.start[2][0]),  # σ̂² at θ^(j-1) with the accepted u^(j)
            n_loglik_evals=n_loglik,
            n_grad_evals=rows * transition.n_steps,
            sign=self.current.sign,
        )
        return stats


def _call(theta, estimate):
    """The resumable machine's potential: the bound estimate of the subsample its arguments name."""
    return estimate(theta)


class TargetEstimate:
    """θ ↦ (value, grad, extras) on one batch by the target's own per-call function
    (:meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_function` or
    :meth:`~pymc_subsample.estimators.target.SubsampledTarget.signed_function`), its other arguments
    bound once per batch; extras as :class:`~pymc_subsample.estimators.estimate_graph.EstimateGraph`'s.
    """

    def __init__(self, step, batch, subsample):
        target, self.step, self.subsample = step.target, step, subsample
        self.target, self.signed = target, step.estimator == "signed"
        self.rows = len(batch[0]) if batch else 0
        self.args = None
        self.adds_sum_q = False  # the signed function's value: Σq added by the target where not in its graph
        if self.signed:
            design = step.design
            self.m, self.a = design.m, float(design.a)
            self.function = target.signed_function()
            if self.rows:
                self.args = target.signed_arguments(batch, design.m, design.a, design.lam)
        else:
            self.function = target.perturbed_function()
            self.adds_sum_q = target.perturbed_adds_sum_q
            if self.rows:
                self.args = target.perturbed_arguments(batch, step.potential.n_exact, step.potential.n_rest)

    @property
    def fused_rows(self) -> tuple:
        """The arguments on this batch as :func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_iteration`
        takes them (the perturbed estimate of an
        :class:`~pymc_subsample.estimators.eta_estimate.EtaPerturbedFunction`).
        """
        return self.function.fused_rows(self.args)

    def __call__(self, theta):
        if self.rows == 0:  # no mini-batch drawn (signed): the potential's own special case
            est = self.step.potential.estimate(theta, self.subsample)
            return est.value, est.grad, np.array([est.loglik_var, est.sign], dtype=float)
        value, grad, third = self.function(theta, *self.args)
        if not self.adds_sum_q:
            value, grad = self.target.add_sum_q(theta, value, grad)
        if not self.signed:
            return value, grad, np.array([third])
        variance, sign = block_poisson_spread_and_sign(third, self.target.n_rows, self.m, self.a)
        return value, grad, np.array([variance, float(sign)])


class _Estimate(NamedTuple):
    """The estimate at a point as :class:`~pymc_subsample.kernels.potential.Estimate` has it, with the
    extras vector of the compiled function kept for the next call.
    """

    value: float
    grad: np.ndarray
    loglik_var: float
    sign: int
    extras: np.ndarray


def _estimate(value, grad, extras) -> _Estimate:
    extras = np.asarray(extras, dtype="float64")
    sign = int(extras[1]) if extras.size > 1 else 1
    return _Estimate(float(value), np.asarray(grad), float(extras[0]), sign, extras)
