"""HMC with energy-conserving subsampling (Dang, Quiroz, Kohn, Tran & Villani 2019).

One iteration (Algorithm 1) is a Gibbs sweep over (u, θ):

1. u | θ: propose a new block of the subsample and accept it with the ratio of
   estimated likelihoods (eq. 3.5), pseudo-marginal style
   (:func:`~pymc_subsample.kernels.subsample_update.gibbs_step`);
2. θ | u: one step of PyMC's own NUTS (or HMC) on the subsampled potential
   −Û(θ) = log p(θ) + log L̂(θ; u), the same estimate in the dynamics and in the
   acceptance (eqs. 3.6-3.7).

Estimators: ``"perturbed"`` uses L̂ = exp(ℓ̂ − σ̂²/2) (eq. 4.5) and targets a
perturbed posterior within O(1/(n m²)) of the true one (eq. 4.6);
``"signed"`` uses the unbiased block-Poisson estimator (eq. 5.1) on |L̂| and is
simulation-consistent after weighting draws by the ``sign`` stat
(:func:`pymc_subsample.diagnostics.sign_weighted`, eq. 5.3). The estimator's design (m, the rows
computed exactly, λ and a) and its warm-up re-tuning are :mod:`pymc_subsample.kernels.ecs_tuning`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import drift_check, mean_check
from pymc_subsample.estimators.estimate_graph import EstimateGraph
from pymc_subsample.kernels import ecs_tuning
from pymc_subsample.kernels.potential import SubsampledPotential
from pymc_subsample.kernels.subsample_update import GibbsState, draw_subsample, gibbs_step, propose_subsample
from pymc_subsample.kernels.tuning import difference_deviations, pilot_differences
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, pass_progress
from pymc_subsample.model.compile import numba_mode
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    BASE_KWARGS,
    SubsampleStep,
    SubsampleStepState,
    check_size,
    warn_poor,
)
from pymc_subsample.step_methods.compiled_inner import (
    COMPILED_KEYWORDS,
    CompiledECS,
    CompiledHMC,
    compiled_options,
)
from pymc_subsample.step_methods.fused_ecs import FusedECS
from pymc_subsample.step_methods.inner_hmc import (
    CURVED_TARGET_ACCEPT,
    DENSE_ADAPT_MAX_DIM,
    INNER_HMC_STATS,
    MASS_MATRICES,
    TARGET_ACCEPT,
    InnerHMC,
    check_inner_keywords,
    choose_metric,
)
from pymc_subsample.subsample.batch import Batch

__all__ = ["HMCECS"]



@dataclass_state
class HMCECSState(SubsampleStepState):
    inner: Any
    subsample: Any
    current: Any
    current_theta: Any
    started: bool = False
    warmup_thetas: Any = None
    warmup_signs: Any = None
    warmup_warned: bool = False
    draws_ahead: Any = None
    draws_left: Any = None


@step_state(HMCECSState)
class HMCECS(FusedECS, CompiledECS, InnerHMC, SubsampleStep):
    r"""HMC-ECS step method: pass to ``pm.sample(step=pms.HMCECS(...))``.

    Parameters
    ----------
    vars : list, optional
        All free variables of the model (the default).
    subsample_size : int, "auto" or None
        m. ``"auto"`` picks m so that σ̂² ≈ ``target_variance`` (Dang et al. 2019 §3.1) at Laplace draws
        near the centre, then again after 50 and 150 warm-up draws at the chain's own last 25
        draws (the kernel is fixed after warm-up); the choice is in ``self.subsample_size``. None (default):
        perturbed, the larger of min(N, 100) and the "auto" choice, i.e. 100 rows unless
        more are needed to keep σ̂² at its target (fewer would hardly save time: a leapfrog
        step at m ≤ 100 is dominated by fixed per-call costs, ``benchmarks/README.md``;
        more saves a chain whose σ̂² would be far above 1, as on a non-centred hierarchical model
        with the proxy in θ). With "auto" and the
        default, rows whose proxy error dominates σ̂² at those draws (the rows of small groups)
        are computed exactly in every estimate when that takes fewer rows per estimate than a
        larger m (``self.exact_rows``; m then subsamples the other rows, eqs. 4.1-4.3 on them);
        these rows are found by a pass over all N rows, made at set-up where the pilot asks for more
        than the floor, and by each chain's warm-up (or at its end, after fewer than 50 draws).
        Signed: min(N, 1000). A
        warning says when the final choice (at the end of warm-up) is m ≥ N/4, where full-data NUTS
        is faster. For
        ``estimator="signed"`` m is the mini-batch size of each Poisson factor.
    num_blocks : int
        G: one of G blocks of u is refreshed per iteration (ρ ≈ 1 − 1/G, §3.3). For the
        signed estimator max(1, round(λ/G)) of the λ groups are refreshed.
    estimator : {"perturbed", "signed"}
    proxy_order : {0, 1, 2}
        Order of the Taylor control variates (eq. 4.4).
    center : dict, array or None
        θ*; None: the default centre of :class:`~pymc_subsample.step_methods.base.SubsampleStep`
        (the MAP of a random 20,000-row subset refined by full-data Newton steps, or full-data
        L-BFGS when N ≤ 40,000), not ``pms.find_map``.
    inner : {"nuts", "hmc"}
        PyMC's NUTS, or HMC with a fixed ``trajectory_length`` (default 1.2 on the
        Laplace-whitened scale, §6.3) and jittered step size.
    target_accept : float or None
        Dual-averaging target of the inner sampler. None (default): 0.8, or 0.9 where the
        posterior in θ is curved (rows affine in a non-linear row-free φ(θ), as for ``"auto"``
        below), whose tails the adapted metric's step size overshoots (``CURVED_TARGET_ACCEPT``).
    mass_matrix : {"auto", "laplace", "laplace_adapt", "adapt"}
        ``"laplace"``: the precision −(∇²log p(θ*) + Σ_k H_k(θ*)) at the centre, fixed;
        ``"laplace_adapt"``: PyMC's dense adaptation during tuning, started from the Laplace
        covariance; ``"adapt"``: PyMC's diagonal adaptation from its own default.
        ``"auto"`` (default): ``"laplace_adapt"`` where the rows are affine in a non-linear
        row-free φ(θ) (a non-centred ``μ + τ z[g]``: the posterior in θ is curved, and the fixed
        Laplace metric takes much deeper trees than the adapted one), with a first adaptation
        window of 2d draws from 75 parameters on (PyMC's window of 75 draws gives a singular
        matrix beyond: :data:`DENSE_ADAPT_MAX_DIM`); else ``"laplace"`` (on GLMs, the Bambi form,
        StudentT and the centred hierarchical model the Laplace metric is near exact, and
        adapting it gains no ESS/s: ``benchmarks/README.md``).
    target_variance : float
        Target of σ̂² (perturbed, ``subsample_size="auto"``) or of Var log|L̂| (signed).
    compiled : bool or None
        Where the inner sampler's tree or trajectory runs
        (:mod:`~pymc_subsample.step_methods.compiled_inner`).
        None (default): with NUTS, the tree in a Numba state machine cached on disk
        (:mod:`pymc_subsample.kernels.resumable_nuts`: the same transition as PyMC's NUTS, its
        uniforms from one seed per transition) calling the estimate's own compiled function at each
        new point: 1-2 µs of bookkeeping a leapfrog step where PyMC's NUTS spends 20-30 µs; with HMC,
        PyMC's HamiltonianMC. True: the same for NUTS; for HMC, the subsample update and the whole
        trajectory in one Numba call (:mod:`pymc_subsample.kernels.compiled_hmc`, the same draws as
        PyMC's HamiltonianMC to rounding), which needs PyTensor's Numba backend and compiles again
        in every process (1-4 s). Both take, of the keywords for the inner sampler, ``step_scale``,
        ``gamma``, ``k``, ``t0`` (and ``max_treedepth``, ``early_max_treedepth`` for NUTS;
        ``max_steps`` for HMC); with others, None runs PyMC's sampler. False: PyMC's NUTS or
        HamiltonianMC. ``self.compiled`` says whether the compiled path runs.
    **kwargs
        ``rng``, ``chunk_size``; others go to the inner NUTS/HMC.

    Notes
    -----
    ``is_exact`` is False for ``"perturbed"`` (bias O(1/(n m²)), eq. 4.6) and True for
    ``"signed"`` after sign weighting.
    """

    name = "hmcecs"
    row_free_proxy = True
    stats_dtypes_shapes = {
        **INNER_HMC_STATS,
        "subsample_accept": (np.float64, []),
        "loglik_var": (np.float64, []),
        "n_loglik_evals": (np.int64, []),
        "n_grad_evals": (np.int64, []),
        "sign": (np.int64, []),
    }

    def __init__(self, vars=None, *, subsample_size=None, num_blocks=100, estimator="perturbed",
                 proxy_order=2, center=None, inner="nuts", trajectory_length=None, target_accept=None,
                 mass_matrix="auto", model=None, target_variance=1.0, compiled=None, **kwargs):
        _check_arguments(estimator, inner, mass_matrix, proxy_order, target_variance)
        check_inner_keywords("HMCECS", kwargs)
        _check_compiled(compiled, inner, {k: v for k, v in kwargs.items() if k not in BASE_KWARGS})
        self._requested, self.estimator = (subsample_size, num_blocks), estimator
        self.is_exact, self.target_variance = estimator == "signed", float(target_variance)
        base_kwargs = {k: kwargs.pop(k) for k in BASE_KWARGS if k in kwargs}
        super().__init__(vars, model=model, center=center, proxy_order=proxy_order, **base_kwargs)
        precision = self.target.laplace_precision()
        self._laplace_chol = np.linalg.cholesky(np.linalg.inv(precision))
        self.potential, self.design = SubsampledPotential(self.target, estimator), None
        self.started, self.subsample, self.current, self.current_theta = False, None, None, None
        curved = self.target.glm is not None and self.target.glm.phi is not None
        early_steps = ecs_tuning.CURVED_EARLY_STEPS_PER_DRAW if curved else ecs_tuning.EARLY_STEPS_PER_DRAW
        self._setup_design = ecs_tuning.init(estimator, self.tall.n_rows, subsample_size, num_blocks,
                                             self.target_variance, self.proxy.center, precision,
                                             self._differences, self._deviations,
                                             self.target.proxy_log_posterior, early_steps)
        self._use(self._setup_design)
        self.mass_matrix, metric, window = choose_metric(mass_matrix, curved, self.tall.ndim,
                                                         "potential" in kwargs)
        if target_accept is None:
            target_accept = CURVED_TARGET_ACCEPT if curved else TARGET_ACCEPT
        self.inner = self._choose_inner(inner, compiled, metric, precision, trajectory_length, target_accept,
                                        kwargs, window)
        self.warmup_thetas, self.warmup_signs, self.warmup_warned, self._size_warned = [], [], False, False

    def compiles_prior(self, tall) -> bool:
        """True where the perturbed estimate is the closed form of rows affine in θ
        (:class:`~pymc_subsample.estimators.eta_estimate.EtaPerturbedFunction`), which calls the
        model's compiled prior.
        """
        view = tall.regression_view if self.estimator == "perturbed" and tall.uses_eta_sums() else None
        return view is not None and view.phi is None and view.closed_form is not None

    def check_arguments(self, n_rows):
        subsample_size, num_blocks = self._requested
        if subsample_size is not None:
            check_size(subsample_size, "subsample_size", n_rows, allow=("auto",))
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, (int, np.integer)) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive integer; got {num_blocks!r}.")

    def _choose_inner(self, inner, compiled, metric, precision, trajectory_length, target_accept, kwargs,
                      window):
        """:class:`CompiledHMC` where ``compiled`` asks for it (or, None, for NUTS), else PyMC's NUTS or
        HMC on :attr:`potential`.
        """
        options = compiled_options(kwargs, inner)
        self.compiled = bool(compiled or (compiled is None and inner == "nuts" and options is not None))
        self.estimate_graph, self._compiled_args = None, None
        if self.compiled:  # the arguments were checked before the set-up (_check_compiled)
            if inner == "hmc":
                self.estimate_graph = EstimateGraph(self.target, self.estimator)
            path_length = 1.2 if trajectory_length is None else trajectory_length
            built = self._metric(metric, precision, window, diagonal_default=True)
            return CompiledHMC(inner, built, self.tall.ndim, path_length, target_accept, self.rng.spawn(1)[0],
                               **options)
        return self._make_inner(inner, metric, precision, trajectory_length, target_accept, kwargs,
                                adaptation_window=window)

    # ------------------------------------------------- the estimator's design and its functions of the rows
    def _differences(self, rng, thetas):
        return pilot_differences(rng, self.target, thetas, min(self.tall.n_rows, ecs_tuning.PILOT_ROWS))

    def _deviations(self, thetas, means, candidates):
        # a pass at set-up shows the set-up's bar; one in warm-up none, under PyMC's sampling bar (a
        # bar of its own took 0.2 s to close under cProfile, in a 0.7 s pass at 10⁶ rows)
        shown = {} if self.started else {"progress": partial(pass_progress, self.tall)}
        return difference_deviations(self.target, thetas, means, DEFAULT_CHUNK_SIZE, candidates, **shown)

    def _use(self, design):
        """Sample with ``design``: its m, G, exact rows, λ and a on the step and its potential."""
        if self.design is None or design.exact is not self.design.exact:
            self._exact_batch = Batch(self.tall.gather(design.exact), rows=design.exact)
        self.design, self.subsample_size, self.num_blocks = design, design.m, design.num_blocks
        self.exact_rows, self.lam, self.a = design.exact, design.lam, design.a
        self.expected_loglik_var, self.prob_negative = design.expected_loglik_var, design.prob_negative
        self.potential.lam, self.potential.a = design.lam, design.a
        self.potential.n_exact, self.potential.n_rest = design.exact.size, design.n_rest

    def estimate(self, theta):
        """The estimate of the log posterior and its gradient at θ on the chain's current subsample (what
        one leapfrog step evaluates): an object with ``value``, ``grad``, ``loglik_var`` and ``sign``.
        """
        if self.subsample is None:
            self.subsample = self._draw_subsample()
        if self.compiled:
            return self._compiled_estimate(theta)
        return self.potential.estimate(np.asarray(theta, dtype=float), self.subsample)

    def _draw_subsample(self):
        return draw_subsample(self.rng, self.tall, self.design, self._exact_batch)

    def _propose_subsample(self, rng, subsample):
        return propose_subsample(rng, self.tall, self.design, subsample)

    def _retune(self, final=False):
        """The design chosen again at the chain's warm-up draws (:func:`ecs_tuning.retune`)."""
        design, info = ecs_tuning.retune(self.design, self.warmup_thetas, self.warmup_signs,
                                         self._differences, self._deviations, final=final)
        self._use(design)
        if info.redraw:
            self.subsample, self.current = self._draw_subsample(), None
        if info.negative > ecs_tuning.NEGATIVE_WARN and not self.warmup_warned:
            self.warmup_warned = True
            warn_poor(ecs_tuning.negative_signs_message(info.negative, design))
        if info.last_size_choice:
            self._warn_if_size_too_large()

    def _warn_if_size_too_large(self):
        if ecs_tuning.too_large(self.design) and not self._size_warned:
            self._size_warned = True
            warn_poor(ecs_tuning.too_large_message(self.design, self.proxy.order))

    # -------------------------------------------------------------- sampling
    def astep(self, q0):
        evaluated_before = self.potential.n_rows_evaluated
        if not self.started:
            # Each chain starts from a Laplace draw around θ*, as Dang et al. 2019 §6.5 starts at θ*:
            # far from θ* the control variates are poor, σ̂² is huge, and the signed estimator's
            # a (set near θ*) makes |L̂| meaningless, so a chain started at PyMC's default
            # initial point may never reach the posterior. Only the first tuning draw changes.
            self.subsample = self._draw_subsample()
            q0 = self._start_near_center(q0)
        if self.tune:
            self._retune()
        if self.compiled:
            theta, stats = self._compiled_astep(q0)
            q_new = RaveledVars(theta.astype(q0.data.dtype), q0.point_map_info)
            self._record_warmup(q_new)
            return q_new, [stats]
        # 1. u | θ (eq. 3.5)
        state = GibbsState(self.subsample, self.current, self.current_theta)
        gibbs, info = gibbs_step(self.rng, state, q0.data, self._propose_subsample, self.potential.estimate)
        self.subsample, self.current = gibbs.subsample, gibbs.estimate
        # 2. θ | u: PyMC's NUTS/HMC on the subsampled Hamiltonian (eqs. 3.6-3.7)
        self.potential.subsample = self.subsample
        before_inner = self.potential.n_rows_evaluated
        self.potential.record_trajectory(q0.data, self.current)
        q_new, (inner_stats,) = self.inner.astep(q0)
        # The inner sampler evaluated the estimate at every point of its trajectory, the state
        # it returns included: reuse it (value, σ̂², sign at (θ^(j), u^(j)), eq. 5.3) for the next
        # subsample update instead of another pass over the rows.
        self.current = (self.potential.recorded(q_new.data)
                        or self.potential.estimate(q_new.data, self.subsample))
        self.current_theta = np.array(q_new.data, copy=True)
        stats = self._inner_stats(inner_stats)
        stats.update(
            subsample_accept=info.acceptance_probability,
            loglik_var=gibbs.estimate.loglik_var,  # σ̂² at θ^(j-1) with the accepted u^(j)
            n_loglik_evals=self.potential.n_rows_evaluated - evaluated_before,
            n_grad_evals=self.potential.n_rows_evaluated - before_inner,
            sign=self.current.sign,
        )
        self._record_warmup(q_new)
        return q_new, [stats]

    def _record_warmup(self, q_new):
        if self.tune:  # the retuning's points, and the drift check's reference (run_checks)
            self.warmup_thetas.append(np.array(q_new.data, dtype=float))
            if self.estimator == "signed":
                self.warmup_signs.append(self.current.sign)

    # ------------------------------------------------------ tuning and checks
    def reset_tuning(self):
        """Each chain starts from the set-up's design, which its own warm-up chooses again."""
        super().reset_tuning()
        self.warmup_thetas, self.warmup_signs, self.warmup_warned = [], [], False
        self._use(self._setup_design)

    def stop_tuning(self):
        self._retune(final=True)  # a warm-up shorter than SIZE_RETUNE_AT[0] (or none) scores the rows here
        super().stop_tuning()
        self._warn_if_size_too_large()  # a warm-up shorter than SIZE_RETUNE_AT[-1]

    # ---------------------------------------------------------------- progress bar
    def progress_columns(self):
        """σ̂², subsample acceptance, inner step size and divergences (and the sign, signed)."""
        columns = [
            StatColumn("loglik_var", "σ̂²", compact),
            StatColumn("subsample_accept", "u-acc", "{:.2f}"),
            StatColumn("step_size", "step", "{:.3g}"),
            StatColumn("divergences", "div", "{:.0f}"),
        ]
        if self.estimator == "signed":
            columns.append(StatColumn("sign", "sign", "{:+.0f}"))
        return columns

    ess_remedy = ("Increase subsample_size (or use subsample_size='auto') so that σ̂² is near 1, and "
                  "check that the centre is near the posterior mode.")

    def _variance_remedy(self):
        text = _variance_remedy_text(self.design.minimum is not None, self.estimator)
        if self.mass_matrix == "laplace_adapt" and self.tall.ndim >= DENSE_ADAPT_MAX_DIM:
            # measured: the chain left the posterior once PyMC's adapted matrix took over
            text = (f"mass_matrix='laplace_adapt' adapts a dense {self.tall.ndim} × {self.tall.ndim} "
                    "matrix from PyMC's first window of 75 warm-up draws, a singular estimate that can "
                    "carry the chain where the Taylor proxy fails: use the default mass_matrix ('auto') "
                    "or 'laplace'. " + text)
        return text

    def run_checks(self):
        """ESS, mean σ̂², subsample acceptance and (signed) sign fraction after warm-up."""
        target = max(self.target_variance, 1.0)
        checks = super().run_checks() + [
            mean_check(
                "variance", "loglik_var", lambda v: v > 3 * target,
                "HMCECS: the log-likelihood estimator's variance σ̂² averages {value:.3g}, far above "
                f"its target {self.target_variance:g}; the posterior may be biased and mixing slow. "
                + self._variance_remedy()),
            mean_check(
                "accept", "subsample_accept", lambda v: v < 0.05,
                "HMCECS: only {value:.1%} of subsample updates were accepted; the chain on u is sticky. "
                "Increase num_blocks (more correlated proposals) or subsample_size."),
        ]
        warmup = self.warmup_thetas or []
        drift = drift_check(
            "HMCECS", warmup[-max(50, len(warmup) // 4):],
            "Compare with full-data NUTS on a subset of the rows (pms.compare); a longer warm-up (tune=) "
            "or subsample_size='auto' (the default) tunes the estimator where the chain goes.")
        if drift is not None:
            checks.append(drift)
        if self.estimator == "signed":
            # the mean sign s̄ = 2 P(positive) − 1, so P(positive) < 0.6 ⇔ s̄ < 0.2
            checks.append(mean_check(
                "sign", "sign", lambda v: v < 0.2,
                "HMCECS: the mean sign of the signed likelihood estimates is {value:.2f} (below 0.2, i.e. "
                "under 60% positive); sign-weighted estimates will be very noisy. Increase "
                "subsample_size or target a smaller target_variance."))
        return checks


def _check_arguments(estimator, inner, mass_matrix, proxy_order, target_variance):
    """The choices and numbers HMCECS checks before any set-up."""
    choices = {"estimator": ("perturbed", "signed"), "inner": ("nuts", "hmc"), "mass_matrix": MASS_MATRICES}
    for (name, allowed), value in zip(choices.items(), (estimator, inner, mass_matrix)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}; got {value!r}.")
    if estimator == "signed" and proxy_order != 2:
        # With order < 2, Σq has no curvature, so |L̂| = exp(Σq)·Π|(d̂ − a)/λ| grows
        # polynomially in the tails instead of decaying: the signed target is improper.
        raise ValueError(
            "The signed estimator needs proxy_order=2: with lower orders |L̂| does not decay "
            "away from the centre and the chain drifts into the tails. Use proxy_order=2 or "
            "estimator='perturbed'."
        )
    if target_variance <= 0:
        raise ValueError(f"target_variance must be positive; got {target_variance!r}.")


def _check_compiled(compiled, inner, inner_kwargs):
    """``compiled``, checked before any set-up against ``inner`` and the keywords for the inner sampler."""
    if compiled is not None and not isinstance(compiled, bool):
        raise ValueError(f"compiled must be None, True or False; got {compiled!r}.")
    if not compiled:
        return
    if compiled_options(inner_kwargs, inner) is None:
        raise TypeError(f"compiled=True takes only these keywords for the inner sampler ({inner}): "
                        f"{', '.join(COMPILED_KEYWORDS[inner])}; got {sorted(inner_kwargs)}. Pass "
                        "compiled=False to run PyMC's own sampler with them.")
    if inner == "hmc" and not numba_mode():
        raise ValueError("compiled=True with inner='hmc' runs the trajectory in Numba around the estimate's "
                         "Numba function: it needs PyTensor's Numba backend (its default mode). Use "
                         "compile_kwargs={'mode': 'NUMBA'} or compiled=None.")


def _variance_remedy_text(auto, estimator):
    if estimator == "perturbed" and not auto:
        # a fixed m subsamples every row, those with a large proxy error (small groups) too
        return ("Increase subsample_size, or use the default subsample_size (None) or 'auto', which "
                "computes exactly the rows whose Taylor proxy error is large (e.g. the rows of small "
                "groups); or pass a center closer to the posterior mode.")
    return ("Run a longer warm-up (tune), so that m and the rows computed exactly are chosen again at "
            "the chain's own draws, or pass a center closer to the posterior mode; if σ̂² stays high, "
            "full-data NUTS (pm.sample() without step=) is the safer sampler.")
