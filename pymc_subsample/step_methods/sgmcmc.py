"""Stochastic-gradient step methods: SGLD and SGHMC (SGFS/OSGFS is in :mod:`.sgfs`).

Thin PyMC step methods over :class:`~pymc_subsample.step_methods.sg_base.SGStep`, the dynamics of
:mod:`pymc_subsample.kernels.sg_dynamics`, the default step sizes of
:mod:`pymc_subsample.kernels.sg_tuning` and the gradient estimators of
:class:`pymc_subsample.estimators.sg_gradients.SGGradient`. None of them has an accept/reject
step, so none is exact (``is_exact = False``): each targets an approximation whose bias grows with
the step size and the gradient noise. Every piece of per-chain mutable state (iteration counter,
SAGA table) lives in the ``@dataclass_state`` classes, so ``pm.sample`` restarts each chain from
the same state.
"""

from __future__ import annotations

import math

import numpy as np
from pymc.step_methods.state import dataclass_state

from pymc_subsample.estimators.sg_gradients import SGGradient
from pymc_subsample.estimators.sg_terms import estimator_covariance
from pymc_subsample.kernels import sg_dynamics as dyn
from pymc_subsample.kernels import sg_tuning
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import check_positive, warn_poor
from pymc_subsample.step_methods.sg_base import SGState, SGStep, check_gradient, step_size_schedule

__all__ = ["SGHMC", "SGLD"]


@dataclass_state
class SGLDState(SGState):
    saga: object
    noise_warned: bool


@step_state(SGLDState)
class SGLD(SGStep):
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
        ``model``, ``center``, ``proxy_order``, ``chunk_size``, ``rng`` of :class:`SubsampleStep`.
    """

    name = "sgld"

    def __init__(self, vars=None, *, step_size=None, batch_size=None, gradient="cv", schedule=None,
                 preconditioner="auto", noise_adjust=False, thin=None, init_at_center=True, lipschitz=None,
                 strong_convexity=None, **kwargs):
        auto = step_size is None and schedule is None
        self._eps = None if auto else step_size_schedule(step_size, schedule)
        # thin=None: ⌈1/ε⌉ once the default ε is known, else 1
        self.thin = check_positive(thin, "thin", integer=True) if thin is not None else (None if auto else 1)
        self.noise_adjust = bool(noise_adjust)
        check_gradient(gradient)  # before the (costly) centre and proxy
        self.saga, self.noise_warned = None, False
        super().__init__(vars, batch_size=batch_size, init_at_center=init_at_center, **kwargs)
        self.estimator = SGGradient(self.target, gradient, self.default_batch_size(),
                                    lipschitz=lipschitz, strong_convexity=strong_convexity)
        if isinstance(preconditioner, str) and preconditioner == "auto":
            preconditioner = "laplace" if auto else None
        self.whitening = self.whitened(preconditioner)
        if auto:
            eps = sg_tuning.langevin_step_size(self.gradient_noise())
            self._eps = lambda t: eps
            self.thin = self.thin or min(50, math.ceil(1.0 / eps))

    def update(self, theta):
        eps = float(self._eps(self.iteration))
        if eps <= 0 or not np.isfinite(eps):
            raise ValueError(f"The step-size schedule gave ε = {eps!r} at t = {self.iteration}.")
        evals = 0
        if self.estimator.uses_table and self.saga is None:
            self.saga = self.estimator.new_table()
            evals += self.tall.n_rows
        grad, terms, n_ev = self.estimator(self.rng, theta, self.saga, eps)
        whiten, factor, grad_var = self.whitening, None, 0.0
        if terms is not None:
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
        theta, diverging = self.finite(whiten.to_theta(z), theta)
        if self.saga is not None:  # a rejected non-finite step must not poison the drift sum
            self.saga.record_drift(0.0 if diverging else eps**2 * float(grad @ grad))
        self.iteration += 1
        return theta, {"n_grad_evals": evals + n_ev, "step_size": eps, "grad_var": grad_var,
                       "diverging": diverging}


@dataclass_state
class SGHMCState(SGState):
    pass


@step_state(SGHMCState)
class SGHMC(SGStep):
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

    def __init__(self, vars=None, *, step_size=None, num_steps=None, friction=1.0, gradient="cv",
                 batch_size=None, mass_matrix="auto", init_at_center=True, lipschitz=None, **kwargs):
        auto = step_size is None
        self.step_size = None if auto else check_positive(step_size, "step_size")
        self.num_steps = None if num_steps is None else check_positive(num_steps, "num_steps", integer=True)
        if not auto and self.num_steps is None:
            raise ValueError("num_steps is required with an explicit step_size (Dang et al. 2019 use "
                             "εL ≈ 1.2); or leave both to their defaults.")
        self.friction = check_positive(friction, "friction")
        if gradient in ("saga", "is-saga", "adaptive"):
            raise ValueError(f"SGHMC supports gradient 'plain', 'cv', 'is' or 'full'; got {gradient!r} "
                             "(SAGA tables are for SGLD).")
        check_gradient(gradient, ("plain", "cv", "is", "full"))
        self.thin = 1  # a draw is one trajectory of num_steps gradient estimates
        super().__init__(vars, batch_size=batch_size, init_at_center=init_at_center, **kwargs)
        self.estimator = SGGradient(self.target, gradient, self.default_batch_size(), lipschitz=lipschitz)
        is_auto = isinstance(mass_matrix, str) and mass_matrix == "auto"
        mass = None if is_auto else self.precision(mass_matrix)
        # defaults: identity mass and friction C·I in the coordinates whitened by the Laplace
        # precision (a mass M = P in θ would leave the friction C·I unscaled, i.e. ~0 there)
        self.whitening = self.whitened("laplace" if is_auto and auto else None)
        self.mass_inv = None if mass is None else np.linalg.inv(mass)
        if auto:
            self.step_size = sg_tuning.sghmc_step_size(self.gradient_noise(), self.friction)
        # εL = π/2: on N(0, I) with unit mass and no friction, a trajectory of length π/2 maps
        # θ to the freshly drawn momentum, an independent draw (Dang et al. 2019 uses εL ≈ 1.2)
        self.num_steps = self.num_steps or max(1, math.ceil(0.5 * math.pi / self.step_size))

    def update(self, start):
        record = {"evals": 0, "var": float("nan")}
        whiten = self.whitening

        def grad_fn(z):
            grad, terms, n_ev = self.estimator(self.rng, whiten.to_theta(z))
            record["evals"] += n_ev
            record["var"] = 0.0 if terms is None else estimator_covariance(terms, full=False)[1]
            return whiten.gradient(grad), None

        z, _ = dyn.sghmc_step(self.rng, whiten.to_z(start), grad_fn, self.step_size, self.num_steps,
                              self.friction, self.mass_inv)
        theta, diverging = self.finite(whiten.to_theta(z), start)
        self.iteration += 1
        return theta, {"n_grad_evals": record["evals"], "step_size": self.step_size,
                       "grad_var": record["var"], "diverging": diverging}
