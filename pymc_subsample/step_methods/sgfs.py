"""``pms.SGFS``: stochastic-gradient Fisher scoring and its optimised form OSGFS (El hanchi 2018).

A thin PyMC step method over :class:`~pymc_subsample.step_methods.sg_base.SGStep`, the updates of
:mod:`pymc_subsample.kernels.sg_dynamics` (``osgfs_step``, ``sgfs_step``, the step fraction of
eq. 16 and criterion 17) and the plain gradient estimator of
:class:`~pymc_subsample.estimators.sg_gradients.SGGradient`. No accept/reject step, so not exact
(``is_exact = False``). The running Fisher estimate and the convergence window are per-chain
state, in ``SGFSState``, so ``pm.sample`` restarts each chain from the same state.
"""

from __future__ import annotations

import math

import numpy as np
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import StatColumn
from pymc_subsample.diagnostics.run_checks import mean_check
from pymc_subsample.estimators.sg_gradients import SGGradient
from pymc_subsample.kernels import sg_dynamics as dyn
from pymc_subsample.kernels import sg_tuning
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import check_positive, warn_poor
from pymc_subsample.step_methods.sg_base import SGState, SGStep

__all__ = ["SGFS", "drop_unconverged"]


@dataclass_state
class SGFSState(SGState):
    fisher: object
    window: object
    converged: bool
    noise_warned: bool


@step_state(SGFSState)
class SGFS(SGStep):
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
    stats_dtypes_shapes = {**SGStep.stats_dtypes_shapes, "converged": (bool, [])}
    _progress_columns = SGStep._progress_columns + (
        StatColumn("converged", "conv", lambda v: "yes" if v else "no"),
    )

    def __init__(self, vars=None, *, optimized=True, batch_size=None, k=None, c=0.1, b=1.0, step_size=1.0,
                 thin=None, init_at_center=True, **kwargs):
        self.optimized = bool(optimized)
        self.k_fixed = None if k is None else check_positive(k, "k")
        self.c, self.b = check_positive(c, "c"), check_positive(b, "b")
        self.sgfs_eps = check_positive(step_size, "step_size")
        if self.k_fixed is not None and self.k_fixed >= 1 or self.c >= 1 or self.b > 2:
            raise ValueError("k and c must lie in (0, 1) (El hanchi 2018 eq. 10) and b in (0, 2] (eq. 17).")
        self.thin = None if thin is None else check_positive(thin, "thin", integer=True)
        self.fisher, self.window, self.converged, self.noise_warned = None, None, False, False
        super().__init__(vars, batch_size=batch_size, init_at_center=init_at_center, **kwargs)
        self.whitening = sg_tuning.Whitening(self.target.center)  # identity: SGFS preconditions itself
        n, auto = self.tall.n_rows, batch_size is None
        self.m = self.tall.check_subsample_size(sg_tuning.osgfs_batch_size(n, self.c) if auto else batch_size,
                                                "batch_size")
        if self.m < 2:
            raise ValueError("SGFS needs batch_size ≥ 2 to estimate the gradient covariance C.")
        self.estimator = SGGradient(self.target, "plain", self.m)
        self.prior_prec = -np.asarray(self.tall.prior_hessian(self.proxy.center), dtype=float)
        self.window_size = sg_tuning.osgfs_window(n, self.m, self.k_fixed or self.c)
        self.thin = self.thin or (self.window_size if auto else 1)

    def run_checks(self):
        return super().run_checks() + [mean_check(
            "converged", "converged", lambda v: v == 0.0,
            "SGFS: the convergence criterion (17) never held in the {draws} draws after warm-up, so "
            "the draws may still be moving towards the posterior. Run longer (more tune draws), "
            "raise batch_size, or raise b.")]

    def update(self, start):
        n, m, d = self.tall.n_rows, self.m, self.tall.ndim
        grad, terms, evals = self.estimator(self.rng, start)
        batch_cov = np.cov(terms / n, rowvar=False).reshape(d, d)
        self.iteration += 1
        i = self.iteration
        self.fisher = batch_cov if self.fisher is None else (1 - 1 / i) * self.fisher + batch_cov / i
        n_c = n * self.fisher
        hess = n_c + self.prior_prec
        hess = hess + 1e-12 * np.trace(hess) * np.eye(d)  # keeps H invertible at i = 1 when |S| ≤ d
        if self.optimized:
            k = self.k_fixed or dyn.osgfs_k(n, m, hess, n_c, self.c)
            theta, ok = dyn.osgfs_step(self.rng, start, grad, self.fisher, hess, n, m, k)
            if not ok and not self.noise_warned:
                self.noise_warned = True
                warn_poor("OSGFS: the noise covariance of eq. (8) is not positive definite; it was "
                          "clipped. Lower k or c, or raise batch_size.")
            step = 0.5 * k
        else:
            k = self.c
            theta = dyn.sgfs_step(self.rng, start, grad, self.fisher, n, m, self.sgfs_eps)
            step = self.sgfs_eps
        theta, diverging = self.finite(theta, start)
        if self.window is None:
            self.window = np.zeros((self.window_size, d))
        self.window[(i - 1) % self.window_size] = grad
        n_win = min(math.ceil(1 / k), self.window_size)
        if not self.converged and i >= n_win:
            recent = self.window[[(i - 1 - j) % self.window_size for j in range(n_win)]]
            self.converged = dyn.osgfs_convergence(recent, n_c, self.prior_prec, n, m, self.b)
        return theta, {"n_grad_evals": evals, "step_size": step, "converged": self.converged,
                       "grad_var": float(np.trace(batch_cov)) * n**2 / m, "diverging": diverging}


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
