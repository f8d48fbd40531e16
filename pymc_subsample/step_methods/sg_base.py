"""What the stochastic-gradient step methods (SGLD, SGHMC, SGFS) share: :class:`SGStep`.

A draw is ``thin`` updates of θ (:meth:`SGStep.update`, each subclass's dynamics from
:mod:`pymc_subsample.kernels.sg_dynamics`), from a chain start at a Laplace draw around θ*. None
of the dynamics has an accept/reject step, so none is exact (``is_exact = False``): each targets
an approximation whose bias grows with the step size and the gradient noise. A non-finite θ is a
divergence: the move is rejected, and warned about once per chain.
"""

from __future__ import annotations

import math

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import mean_check
from pymc_subsample.estimators.sg_gradients import GRADIENTS
from pymc_subsample.kernels import sg_tuning
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    SubsampleStep,
    SubsampleStepState,
    check_positive,
    check_size,
    warn_poor,
)

__all__ = ["SGState", "SGStep", "check_gradient", "step_size_schedule"]

_DIVERGED = ("{name}: θ became non-finite (the chain diverged); the move was rejected and the chain "
             "stays put. Reduce step_size, or use a lower-variance gradient (cv, adaptive, larger batch).")


@dataclass_state
class SGState(SubsampleStepState):
    """Per-chain state of every SG step.

    The inner iteration t, whether the chain has started, and whether it has warned of a divergence.
    """

    iteration: int
    started: bool
    diverge_warned: bool


@step_state(SGState)
class SGStep(SubsampleStep):
    """Base of the SG step methods: the draw loop, the chain's start, divergences and checks.

    A subclass sets ``estimator`` (an :class:`~pymc_subsample.estimators.sg_gradients.SGGradient`),
    ``whitening`` (:class:`~pymc_subsample.kernels.sg_tuning.Whitening`), ``thin`` and
    ``init_at_center``, and defines :meth:`update`.
    """

    is_exact = False
    stats_dtypes_shapes = {
        "n_grad_evals": (np.int64, []),
        "step_size": (np.float64, []),
        "grad_var": (np.float64, []),
        "diverging": (bool, []),
    }
    #: the step size ε and the variance (trace of the covariance) of the gradient estimator, the two
    #: knobs of the bias
    _progress_columns = (
        StatColumn("step_size", "step", "{:.3g}"),
        StatColumn("grad_var", "grad-var", compact),
    )
    ess_remedy = ("Use the default step_size (None) and gradient='cv', or raise thin so that each "
                  "draw spans more steps.")

    def __init__(self, vars=None, *, batch_size=None, init_at_center=True, **kwargs):
        self._batch_request = batch_size  # checked against N before the costly set-up
        self.init_at_center = bool(init_at_center)
        self.iteration, self.started, self.diverge_warned = 0, False, False
        super().__init__(vars, **kwargs)

    def check_arguments(self, n_rows):
        if self._batch_request is not None:
            check_size(self._batch_request, "batch_size", n_rows)

    def run_checks(self):
        return super().run_checks() + [mean_check(
            "diverging", "diverging", lambda v: v > 0.0,
            f"{type(self).__name__}: {{value:.1%}} of the draws after warm-up diverged (θ became "
            "non-finite and the move was rejected). Reduce step_size, or use a lower-variance "
            "gradient (cv, adaptive, larger batch).")]

    # ------------------------------------------------------------------ set-up
    def default_batch_size(self):
        """Rows per estimate: ``batch_size``, or m = ⌈√N⌉ (El hanchi 2019 §3)."""
        n = self.tall.n_rows
        return math.ceil(math.sqrt(n)) if self._batch_request is None else self._batch_request

    def precision(self, matrix):
        """None, the Laplace precision at θ* ("laplace") or a given positive definite (d, d) matrix."""
        if matrix is None:
            return None
        if isinstance(matrix, str) and matrix == "laplace":
            return self.target.laplace_precision()
        mat = np.asarray(matrix, dtype=float)
        d = self.tall.ndim
        try:
            if mat.shape != (d, d):
                raise np.linalg.LinAlgError
            np.linalg.cholesky(mat)
        except (np.linalg.LinAlgError, ValueError):
            raise ValueError(f"The preconditioner / mass_matrix must be None, 'laplace' or a positive "
                             f"definite ({d}, {d}) matrix; got {matrix!r}.") from None
        return mat

    def whitened(self, matrix):
        """The :class:`~pymc_subsample.kernels.sg_tuning.Whitening` at θ* by :meth:`precision`."""
        return sg_tuning.Whitening(self.target.center, self.precision(matrix))

    def gradient_noise(self):
        """The estimator's noise s in the step's whitened units (``sg_tuning.estimator_noise``)."""
        return sg_tuning.estimator_noise(self.estimator, self.whitening)

    # -------------------------------------------------------------------- step
    def astep(self, q0):
        theta = self._start(np.asarray(q0.data, dtype=float).copy())
        evals, diverging = 0, False
        for _ in range(self.thin):
            theta, stats = self.update(theta)
            evals, diverging = evals + stats["n_grad_evals"], diverging or stats["diverging"]
        stats.update(n_grad_evals=evals, diverging=diverging)
        return RaveledVars(theta, q0.point_map_info), [stats]

    def update(self, theta):
        """One inner update from θ: the θ after it and its stats (subclasses)."""
        raise NotImplementedError

    def _start(self, theta):
        """The chain's first θ: a Laplace draw around θ* (θ* itself without whitening), once per chain."""
        if self.init_at_center and not self.started:
            theta = self.whitening.to_theta(self.rng.standard_normal(theta.shape[0])) \
                if self.whitening.chol is not None else self.target.center.copy()
        self.started = True
        return theta

    def finite(self, new, old):
        """(θ, diverged): a non-finite update is rejected, and warned about once per chain."""
        if np.all(np.isfinite(new)):
            return new, False
        if not self.diverge_warned:
            self.diverge_warned = True
            warn_poor(_DIVERGED.format(name=type(self).__name__))
        return old, True


def step_size_schedule(step_size, schedule):
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


def check_gradient(gradient, allowed=GRADIENTS):
    """A gradient estimator's name among ``allowed``, else a ValueError that lists them."""
    if not isinstance(gradient, str) or gradient not in allowed:
        raise ValueError(f"gradient must be one of {', '.join(map(repr, allowed))}; got {gradient!r}.")
