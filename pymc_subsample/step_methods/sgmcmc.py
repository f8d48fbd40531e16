"""Stochastic-gradient step methods: SGLD, SGHMC and SGFS/OSGFS.

Thin PyMC step methods over :mod:`pymc_subsample.kernels.sg_dynamics` and
:class:`pymc_subsample.estimators.sg_gradients.SGGradient`. None of them has an
accept/reject step, so none is exact (``is_exact = False``): each targets an
approximation whose bias grows with the step size and the gradient noise.
Every piece of per-chain mutable state (iteration counter, SAGA table, running
Fisher estimate, convergence window) lives in the ``@dataclass_state`` classes,
so ``pm.sample`` restarts each chain from the same state.
"""

from __future__ import annotations

import math

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import mean_check
from pymc_subsample.estimators.sg_gradients import GRADIENTS, SGGradient
from pymc_subsample.estimators.sg_terms import estimator_covariance
from pymc_subsample.kernels import sg_dynamics as dyn
from pymc_subsample.kernels import sg_tuning
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    SubsampleStep,
    SubsampleStepState,
    check_positive,
    check_size,
    warn_poor,
)

__all__ = ["SGFS", "SGHMC", "SGLD", "drop_unconverged"]

_STATS = {
    "n_grad_evals": (np.int64, []),
    "step_size": (np.float64, []),
    "grad_var": (np.float64, []),
    "diverging": (bool, []),
}

#: progress-bar columns of the SG steps: the step size ε and the variance (trace of the covariance) of
#: the gradient estimator, the two knobs of their bias
_PROGRESS_COLUMNS = (
    StatColumn("step_size", "step", "{:.3g}"),
    StatColumn("grad_var", "grad-var", compact),
)

_DIVERGED = ("{name}: θ became non-finite (the chain diverged); the move was rejected and the chain "
             "stays put. Reduce step_size, or use a lower-variance gradient (cv, adaptive, larger batch).")


class _SGChecks:
    """Checks shared by the SG step methods: ``batch_size`` before set-up, ESS (base) and divergences."""

    _batch_request = None  # the user's batch_size, checked against N before the costly set-up

    def check_arguments(self, n_rows):
        if self._batch_request is not None:
            check_size(self._batch_request, "batch_size", n_rows)

    ess_remedy = ("Use the default step_size (None) and gradient='cv', or raise thin so that each "
                  "draw spans more steps.")

    def run_checks(self):
        return super().run_checks() + [mean_check(
            "diverging", "diverging", lambda v: v > 0.0,
            f"{type(self).__name__}: {{value:.1%}} of the draws after warm-up diverged (θ became "
            "non-finite and the move was rejected). Reduce step_size, or use a lower-variance "
            "gradient (cv, adaptive, larger batch).")]


def _finite(name, state_owner, new, old):
    """Return (θ, diverged): a non-finite update is rejected and warned about once per chain."""
    if np.all(np.isfinite(new)):
        return new, False
    if not state_owner.diverge_warned:
        state_owner.diverge_warned = True
        warn_poor(_DIVERGED.format(name=name))
    return old, True


def _schedule(step_size, schedule):
    """Map iteration t to ε_t.

    None/"constant": ε; ("polynomial", a, b, γ): a (b + t)^-γ (Welling & Teh); or a callable.
    """
    if schedule is None or (isinstance(schedule, str) and schedule == "constant"):
        if step_size is None:
            raise ValueError(
                "step_size is required (a positive number), unless schedule gives the step sizes."
            )
        eps = check_positive(step_size, "step_size")
        return lambda t: eps
    if callable(schedule):
        return schedule
    if isinstance(schedule, tuple) and len(schedule) == 4 and schedule[0] == "polynomial":
        a, b, gamma = (check_positive(v, n) for v, n in zip(schedule[1:], ("a", "b", "gamma"), strict=True))
        return lambda t: a * (b + t) ** (-gamma)
    raise ValueError(
        "schedule must be None or 'constant' (use step_size), ('polynomial', a, b, gamma) for "
        f"ε_t = a (b + t)^-γ, or a callable t -> ε_t; got {schedule!r}."
    )


def _check_gradient(gradient, allowed=GRADIENTS):
    if not isinstance(gradient, str) or gradient not in allowed:
        raise ValueError(f"gradient must be one of {', '.join(map(repr, allowed))}; got {gradient!r}.")


def _batch_default(tall, batch_size):
    return math.ceil(math.sqrt(tall.n_rows)) if batch_size is None else batch_size


def _precision(step, matrix):
    """None, the Laplace precision at θ* ("laplace") or a given positive definite (d, d) matrix."""
    if matrix is None:
        return None
    if isinstance(matrix, str) and matrix == "laplace":
        return step.target.laplace_precision()
    mat = np.asarray(matrix, dtype=float)
    d = step.tall.ndim
    try:
        if mat.shape != (d, d):
            raise np.linalg.LinAlgError
        np.linalg.cholesky(mat)
    except (np.linalg.LinAlgError, ValueError):
        raise ValueError(f"The preconditioner / mass_matrix must be None, 'laplace' or a positive "
                         f"definite ({d}, {d}) matrix; got {matrix!r}.") from None
    return mat


def _whitening(step, matrix):
    return sg_tuning.Whitening(step.target.center, _precision(step, matrix))


def _gradient_noise(step):
    """Noise s (:func:`~pymc_subsample.kernels.sg_tuning.whitened_gradient_noise`) of a step's estimator."""
    table = step.estimator.new_table() if step.estimator.uses_table else None
    rng = np.random.default_rng(0)  # set-up is deterministic: every chain gets the same ε
    return sg_tuning.whitened_gradient_noise(
        lambda theta: step.estimator(rng, theta, table, 0.1)[1], step.whitening, rng)


def _start(step, theta):
    """The chain's first θ: a Laplace draw around θ* (θ* itself without whitening), once per chain."""
    if step.init_at_center and not step.started:
        theta = step.whitening.to_theta(step.rng.standard_normal(theta.shape[0])) \
            if step.whitening.chol is not None else step.target.center.copy()
    step.started = True
    return theta


@dataclass_state
class SGLDState(SubsampleStepState):
    iteration: int
    saga: object
    started: bool
    noise_warned: bool
    diverge_warned: bool


@step_state(SGLDState)
class SGLD(_SGChecks, SubsampleStep):
    """Stochastic-gradient Langevin dynamics with variance-reduced gradients (El hanchi 2019).

    θ' = θ + ε ĝ(θ) + √(2ε) ξ (El hanchi 2019 Alg. 2; Dang et al. 2019 §6.2's ε is 2× this ε).

    Bias: no Metropolis correction, so even with the exact gradient the stationary law
    is off by O(ε) (on N(0, σ²) its variance is σ²/(1 − ε/(2σ²))), and gradient noise
    inflates it by about ε Cov(ĝ)/2 (El hanchi 2019 §4.2). ``noise_adjust`` removes the
    second part when ĝ is Gaussian; decreasing schedules remove both asymptotically.

    Defaults (``step_size=None``): the dynamics run in the coordinates whitened by the
    Laplace precision P = C Cᵀ at θ* (preconditioned Langevin θ' = θ + ε P⁻¹ĝ + √(2ε) C⁻ᵀξ),
    where the posterior is ≈ N(0, I). ε is then the largest step whose stationary sd on
    that Gaussian is at most 5% too wide given the gradient noise measured at four
    Laplace draws (:func:`~pymc_subsample.kernels.sg_tuning.langevin_step_size`):
    ε ≈ 0.19 for a low-noise ``"cv"`` gradient, smaller for noisier estimators. ``thin``
    then defaults to ⌈1/ε⌉ inner steps per draw (capped at 50), about one relaxation
    time, and each chain starts at a Laplace draw around θ*.

    Parameters
    ----------
    step_size : float, optional
        ε (constant schedule). Default None: the rule above, in whitened coordinates.
    batch_size : int, optional
        m, rows per gradient estimate (default ⌈√N⌉, El hanchi 2019 §3).
    gradient : {"plain", "cv", "saga", "is", "is-saga", "adaptive", "full"}
        Estimator (see :mod:`pymc_subsample.estimators.sg_gradients`); "adaptive" is the
        adaptive IS-SAGA of El hanchi 2019 §5.1, "full" the exact gradient (LD).
    schedule : None, "constant", ("polynomial", a, b, gamma) or callable
        ε_t over inner iterations t: a (b + t)^-γ is Welling & Teh's decreasing schedule.
    preconditioner : "auto", "laplace", None or ndarray
        Precision P whose Cholesky factor whitens θ. "auto": "laplace" when ``step_size``
        and ``schedule`` are None, else None (the papers' unpreconditioned dynamics, where
        ε is in the units of θ).
    noise_adjust : bool
        Inject N(0, 2εI − ε² Ĉov(ĝ)) instead of N(0, 2εI) (El hanchi 2019 §5.2.2, in whitened
        coordinates when preconditioned); warns when that matrix is not positive definite
        (ε too large for the estimator's noise).
    thin : int, optional
        Inner iterations per stored draw (default: ⌈1/ε⌉ ≤ 50 with the default step size, else 1).
    init_at_center : bool, default True
        Start each chain at a Laplace draw around θ* (at θ* without a preconditioner)
        instead of PyMC's initial point, where the control variates may be poor.
    lipschitz, strong_convexity
        Passed to :class:`SGGradient` for the importance-sampling estimators.
    **kwargs
        ``model``, ``center``, ``proxy_order``, ``chunk_size`` of :class:`SubsampleStep`.
    """

    name = "sgld"
    is_exact = False
    stats_dtypes_shapes = dict(_STATS)
    _progress_columns = _PROGRESS_COLUMNS

    def __init__(self, vars=None, *, step_size=None, batch_size=None, gradient="cv", schedule=None,
                 preconditioner="auto", noise_adjust=False, thin=None, init_at_center=True, lipschitz=None,
                 strong_convexity=None, **kwargs):
        auto = step_size is None and schedule is None
        self._eps = None if auto else _schedule(step_size, schedule)
        # thin=None: ⌈1/ε⌉ once the default ε is known, else 1
        self.thin = check_positive(thin, "thin", integer=True) if thin is not None else (None if auto else 1)
        self.noise_adjust, self.init_at_center = bool(noise_adjust), bool(init_at_center)
        _check_gradient(gradient)  # before the (costly) centre and proxy
        self._batch_request = batch_size
        super().__init__(vars, **kwargs)
        self.estimator = SGGradient(self.target, gradient, _batch_default(self.tall, batch_size),
                                    lipschitz=lipschitz, strong_convexity=strong_convexity)
        if isinstance(preconditioner, str) and preconditioner == "auto":
            preconditioner = "laplace" if auto else None
        self.whitening = _whitening(self, preconditioner)
        if auto:
            eps = sg_tuning.langevin_step_size(_gradient_noise(self))
            self._eps = lambda t: eps
            self.thin = self.thin or min(50, math.ceil(1.0 / eps))
        self.iteration, self.saga, self.started = 0, None, False
        self.noise_warned, self.diverge_warned = False, False


    def astep(self, q0):
        theta = _start(self, np.asarray(q0.data, dtype=float).copy())
        whiten = self.whitening
        evals, grad_var, diverging = 0, float("nan"), False
        for _ in range(self.thin):
            eps = float(self._eps(self.iteration))
            if eps <= 0 or not np.isfinite(eps):
                raise ValueError(f"The step-size schedule gave ε = {eps!r} at t = {self.iteration}.")
            if self.estimator.uses_table and self.saga is None:
                self.saga = self.estimator.new_table()
                evals += self.tall.n_rows
            grad, terms, n_ev = self.estimator(self.rng, theta, self.saga, eps)
            evals += n_ev
            factor = None
            if terms is None:
                grad_var = 0.0
            else:
                cov, grad_var = estimator_covariance(terms, full=self.noise_adjust)
                if cov is not None and np.all(np.isfinite(cov)):
                    factor, ok = dyn.adjusted_noise_factor(eps, whiten.covariance(cov))
                    if not ok and not self.noise_warned:
                        self.noise_warned = True
                        warn_poor(
                            "SGLD noise adjustment: 2εI − ε²Cov(ĝ) is not positive definite, so the "
                            "gradient noise exceeds the Langevin noise; the injected noise was clipped. "
                            "Reduce step_size or use a lower-variance gradient (cv, adaptive)."
                        )
            z = dyn.langevin_step(self.rng, whiten.to_z(theta), whiten.gradient(grad), eps, factor)
            moved = whiten.to_theta(z)
            theta, div = _finite("SGLD", self, moved, theta)
            diverging |= div
            if self.saga is not None:  # a rejected non-finite step must not poison the drift sum
                self.saga.record_drift(0.0 if div else eps**2 * float(grad @ grad))
            self.iteration += 1
        stats = {"n_grad_evals": evals, "step_size": eps, "grad_var": grad_var, "diverging": diverging}
        return RaveledVars(theta, q0.point_map_info), [stats]


@dataclass_state
class SGHMCState(SubsampleStepState):
    iteration: int
    started: bool
    diverge_warned: bool


@step_state(SGHMCState)
class SGHMC(_SGChecks, SubsampleStep):
    """Stochastic-gradient HMC with friction, Dang et al. 2019 §6.2 (Chen et al. 2014).

    Each draw resamples p ~ N(0, M) and runs ``num_steps`` steps of
    θ += ε M⁻¹p;  p += ε ĝ(θ) − ε C M⁻¹p + N(0, 2Cε), with B̂ = 0 and C = friction·I.

    Bias: no accept/reject, so the draws follow the discretised dynamics whose error
    grows with ε, and B̂ = 0 ignores the gradient noise (its covariance ε Cov(ĝ)/2
    adds to the friction noise); small ε and low-variance gradients (cv) keep both small.

    Defaults (``step_size=None``): the dynamics run with unit mass and friction in the
    coordinates whitened by the Laplace precision at θ* (see :class:`SGLD`); ε is the largest
    step ≤ 0.5 whose stationary sd on N(0, I) is at most 5% too wide given the measured
    gradient noise (:func:`~pymc_subsample.kernels.sg_tuning.sghmc_step_size`, a discrete
    Lyapunov equation), and L = ⌈(π/2)/ε⌉.

    Parameters
    ----------
    step_size : float, optional
        ε; default None: the rule above.
    num_steps : int, optional
        L, gradient estimates per draw (Dang et al. 2019 sets εL ≈ 1.2); default ⌈(π/2)/ε⌉, the
        trajectory after which, on N(0, I) without friction, θ equals the drawn momentum.
    friction : float
        C = friction · I.
    gradient, batch_size
        As :class:`SGLD`.
    mass_matrix : "auto", None, "laplace" or ndarray
        M in θ: identity, the Laplace precision at θ* (Dang et al. 2019 §6.4), or given. "auto":
        whitened coordinates with unit mass when ``step_size`` is None, else identity.
    init_at_center : bool, default True
        Start each chain at a Laplace draw around θ* (see :class:`SGLD`).
    """

    name = "sghmc"
    is_exact = False
    stats_dtypes_shapes = dict(_STATS)
    _progress_columns = _PROGRESS_COLUMNS

    def __init__(self, vars=None, *, step_size=None, num_steps=None, friction=1.0, gradient="cv",
                 batch_size=None, mass_matrix="auto", init_at_center=True, lipschitz=None, **kwargs):
        auto = step_size is None
        self.step_size = None if auto else check_positive(step_size, "step_size")
        self.num_steps = None if num_steps is None else check_positive(num_steps, "num_steps", integer=True)
        if not auto and self.num_steps is None:
            raise ValueError("num_steps is required with an explicit step_size (seed 004 uses εL ≈ 1.2); "
                             "or leave both to their defaults.")
        self.friction = check_positive(friction, "friction")
        self.init_at_center = bool(init_at_center)
        if gradient in ("saga", "is-saga", "adaptive"):
            raise ValueError(f"SGHMC supports gradient 'plain', 'cv', 'is' or 'full'; got {gradient!r} "
                             "(SAGA tables are for SGLD).")
        _check_gradient(gradient, ("plain", "cv", "is", "full"))
        self._batch_request = batch_size
        super().__init__(vars, **kwargs)
        self.estimator = SGGradient(self.target, gradient, _batch_default(self.tall, batch_size),
                                    lipschitz=lipschitz)
        is_auto = isinstance(mass_matrix, str) and mass_matrix == "auto"
        whiten = is_auto and auto
        mass = None if is_auto else _precision(self, mass_matrix)
        # defaults: identity mass and friction C·I in the coordinates whitened by the Laplace
        # precision (a mass M = P in θ would leave the friction C·I unscaled, i.e. ~0 there)
        self.whitening = _whitening(self, "laplace" if whiten else None)
        self.mass_inv = None if mass is None else np.linalg.inv(mass)
        if auto:
            self.step_size = sg_tuning.sghmc_step_size(_gradient_noise(self), self.friction)
        # εL = π/2: on N(0, I) with unit mass and no friction, a trajectory of length π/2 maps
        # θ to the freshly drawn momentum, an independent draw (Dang et al. 2019 uses εL ≈ 1.2)
        self.num_steps = self.num_steps or max(1, math.ceil(0.5 * math.pi / self.step_size))
        self.iteration, self.started, self.diverge_warned = 0, False, False

    def astep(self, q0):
        record = {"evals": 0, "var": float("nan")}

        whiten = self.whitening

        def grad_fn(z):
            grad, terms, n_ev = self.estimator(self.rng, whiten.to_theta(z))
            record["evals"] += n_ev
            record["var"] = 0.0 if terms is None else estimator_covariance(terms, full=False)[1]
            return whiten.gradient(grad), None

        start = _start(self, np.asarray(q0.data, dtype=float))
        z, _ = dyn.sghmc_step(self.rng, whiten.to_z(start), grad_fn, self.step_size, self.num_steps,
                              self.friction, self.mass_inv)
        theta = whiten.to_theta(z)
        theta, diverging = _finite("SGHMC", self, theta, start)
        self.iteration += 1
        stats = {"n_grad_evals": record["evals"], "step_size": self.step_size, "grad_var": record["var"],
                 "diverging": diverging}
        return RaveledVars(theta, q0.point_map_info), [stats]


@dataclass_state
class SGFSState(SubsampleStepState):
    iteration: int
    started: bool
    fisher: object
    window: object
    converged: bool
    noise_warned: bool
    diverge_warned: bool


@step_state(SGFSState)
class SGFS(_SGChecks, SubsampleStep):
    """Stochastic-gradient Fisher scoring; ``optimized=True`` is OSGFS (El hanchi 2018 Alg. 1).

    OSGFS: C ← (1 − 1/i) C + (1/i) cov(batch gradients); H = NC + G (eq. 9);
    D = (k/2) H⁻¹ (eq. 10) with k from eq. (16); θ' = θ + D ĝ + N(0, 2D − (N²/|S|)DCD − DHD)
    (eq. 8), with ĝ the plain estimator (eq. 3). ``optimized=False`` is the original
    SGFS preconditioned step (:func:`~pymc_subsample.kernels.sg_dynamics.sgfs_step`).

    Bias: the stationary covariance is H⁻¹ only when the posterior is Gaussian, C is
    constant and the gradient noise is Gaussian (large |S|); otherwise it is the
    Laplace-like approximation of El hanchi 2018 §2.3. Draws before the convergence
    criterion (17) first holds are recorded with ``converged = False``: drop them
    (:func:`drop_unconverged`) before summarising.

    Defaults: OSGFS's step fraction k of eq. (16) is at most 4|S|/(N + |S|) (the noise of
    eq. 8 stays positive only then), so each step moves θ by a fraction k/2 of its distance
    to the mode, whatever |S|: small batches make many slow steps. The default |S| is the
    smallest that lets k reach its cap c, |S| = cN/(4 − c) (2.6% of the rows at c = 0.1),
    between ⌈√N⌉ and 50,000 rows, and ``thin`` = ⌈1/k_min⌉ steps per draw (about 0.4 of a
    relaxation time: ≈ 10 steps at the cap).

    Parameters
    ----------
    batch_size : int, optional
        |S| ≥ 2 (the per-batch gradient covariance estimates C); default above.
    thin : int, optional
        Inner iterations per stored draw (default above with the default batch size, else 1).
    init_at_center : bool, default True
        Start each chain at θ* instead of PyMC's initial point.
    k : float, optional
        Fixed step fraction (default: eq. 16 at each iteration).
    c : float
        Cap of k in eq. (16) (seed: 0.1).
    b : float
        Tolerance of criterion (17), in (0, 2].
    step_size : float
        ε of the original SGFS (``optimized=False`` only; noise matrix B = I).
    """

    name = "sgfs"
    is_exact = False
    stats_dtypes_shapes = {**_STATS, "converged": (bool, [])}
    _progress_columns = _PROGRESS_COLUMNS + (
        StatColumn("converged", "conv", lambda v: "yes" if v else "no"),
    )

    def __init__(self, vars=None, *, optimized=True, batch_size=None, k=None, c=0.1, b=1.0, step_size=1.0,
                 thin=None, init_at_center=True, **kwargs):
        self.optimized = bool(optimized)
        self.k_fixed = None if k is None else check_positive(k, "k")
        self.c, self.b = check_positive(c, "c"), check_positive(b, "b")
        self.sgfs_eps = check_positive(step_size, "step_size")
        if self.k_fixed is not None and self.k_fixed >= 1 or self.c >= 1 or self.b > 2:
            raise ValueError("k and c must lie in (0, 1) (seed 003 eq. 10) and b in (0, 2] (eq. 17).")
        self.thin = None if thin is None else check_positive(thin, "thin", integer=True)
        self.init_at_center = bool(init_at_center)
        self._batch_request = batch_size
        super().__init__(vars, **kwargs)
        self.whitening = sg_tuning.Whitening(self.target.center)  # identity: SGFS preconditions itself
        n, auto = self.tall.n_rows, batch_size is None
        if auto:
            at_cap = min(math.ceil(self.c * n / (4 - self.c)), 50_000)
            batch_size = min(n, max(math.ceil(math.sqrt(n)), at_cap))
        self.m = self.tall.check_subsample_size(batch_size, "batch_size")
        if self.m < 2:
            raise ValueError("SGFS needs batch_size ≥ 2 to estimate the gradient covariance C.")
        self.estimator = SGGradient(self.target, "plain", self.m)
        self.prior_prec = -np.asarray(self.tall.prior_hessian(self.proxy.center), dtype=float)
        k_min = min(self.k_fixed or self.c, 4 * self.m / (n + self.m))
        self.window_size = math.ceil(1 / k_min)
        self.thin = self.thin or (self.window_size if auto else 1)
        self.iteration, self.fisher, self.window = 0, None, None
        self.converged, self.noise_warned, self.diverge_warned = False, False, False
        self.started = False

    def run_checks(self):
        return super().run_checks() + [mean_check(
            "converged", "converged", lambda v: v == 0.0,
            "SGFS: the convergence criterion (17) never held in the {draws} draws after warm-up, so "
            "the draws may still be moving towards the posterior. Run longer (more tune draws), "
            "raise batch_size, or raise b.")]

    def astep(self, q0):
        theta = _start(self, np.asarray(q0.data, dtype=float))
        evals, diverging = 0, False
        for _ in range(self.thin):
            theta, stats = self._one_step(theta)
            evals, diverging = evals + stats["n_grad_evals"], diverging or stats["diverging"]
        stats.update(n_grad_evals=evals, diverging=diverging)
        return RaveledVars(theta, q0.point_map_info), [stats]

    def _one_step(self, start):
        theta = start.copy()
        n, m, d = self.tall.n_rows, self.m, self.tall.ndim
        grad, terms, evals = self.estimator(self.rng, theta)
        batch_cov = np.cov(terms / n, rowvar=False).reshape(d, d)
        self.iteration += 1
        i = self.iteration
        self.fisher = batch_cov if self.fisher is None else (1 - 1 / i) * self.fisher + batch_cov / i
        n_c = n * self.fisher
        hess = n_c + self.prior_prec
        hess = hess + 1e-12 * np.trace(hess) * np.eye(d)  # keeps H invertible at i = 1 when |S| ≤ d
        if self.optimized:
            k = self.k_fixed or dyn.osgfs_k(n, m, hess, n_c, self.c)
            d_mat = 0.5 * k * np.linalg.inv(hess)
            factor, ok = dyn.psd_factor(dyn.osgfs_noise_cov(d_mat, n, m, self.fisher, hess))
            if not ok and not self.noise_warned:
                self.noise_warned = True
                warn_poor("OSGFS: the noise covariance of eq. (8) is not positive definite; it was "
                          "clipped. Lower k or c, or raise batch_size.")
            theta = theta + d_mat @ grad + factor @ self.rng.standard_normal(d)
            step = 0.5 * k
        else:
            k = self.c
            theta = dyn.sgfs_step(self.rng, theta, grad, self.fisher, n, m, self.sgfs_eps)
            step = self.sgfs_eps
        theta, diverging = _finite("SGFS", self, theta, start)
        if self.window is None:
            self.window = np.zeros((self.window_size, d))
        self.window[(i - 1) % self.window_size] = grad
        n_win = min(math.ceil(1 / k), self.window_size)
        if not self.converged and i >= n_win:
            recent = self.window[[(i - 1 - j) % self.window_size for j in range(n_win)]]
            self.converged = dyn.osgfs_convergence(recent, n_c, self.prior_prec, n, m, self.b)
        stats = {"n_grad_evals": evals, "step_size": step, "grad_var": float(np.trace(batch_cov)) * n**2 / m,
                 "converged": self.converged, "diverging": diverging}
        return theta, stats


def drop_unconverged(idata):
    """Drop the draws recorded before SGFS's convergence criterion (17) held.

    Keeps the same draws in every chain (from the latest first-converged draw over
    chains) so the result stays rectangular; raises if some chain never converged.
    """
    conv = np.asarray(idata.sample_stats["converged"].values, dtype=bool)
    if not conv.any(axis=1).all():
        raise ValueError("Some chains never met the convergence criterion (17): run more draws or "
                         "tuning steps, or raise b.")
    start = int(max(np.argmax(row) for row in conv))
    return idata.isel(draw=slice(start, None))
