r"""``pms.ZigZag``: the Zig-Zag process with control variates (Bierkens, Fearnhead & Roberts 2019).

An exact method: a piecewise-deterministic process whose invariant law is the posterior, with
switching rates estimated from one random row each and simulated by Poisson thinning
(:mod:`pymc_subsample.kernels.zigzag`). Each PyMC draw advances the process by a fixed time
horizon and returns its position; the position of a stationary Zig-Zag process at any fixed time
is a draw of the posterior. The horizon is tuned during warm-up to a target number of switches
per draw, then fixed (so the chain is Markov with the posterior invariant after warm-up).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.state import dataclass_state

from pymc_subsample.control_variates.zigzag_bounds import (
    ROW_CHOICES,
    SUPPORTED,
    check_family,
    glm_row_constants,
    glm_row_sampler,
    quadratic_prior,
)
from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import RunCheck, mean_check
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.kernels import zigzag as kernel
from pymc_subsample.kernels import zigzag_compiled
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.model.glm import linear_predictor_model
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import SubsampleStep, SubsampleStepState, check_positive, pymc_model

__all__ = ["ZigZag", "ZigZagState"]

MAX_NEWTON = 3  # full-data Newton steps at most to bring the default centre to the mode
NEWTON_TOLERANCE = 0.1  # ... until it is within this many Laplace sd (Newton decrement)
MAX_HORIZON = 100.0  # tuned horizon at most this many Laplace sd (initial_horizon)
LOW_EFFICIENCY = 1e-3  # switches per candidate below which a run warns (bounds ≥ 1000x the rates)


@dataclass_state
class ZigZagState(SubsampleStepState):
    velocity: Any = None
    horizon: float = 0.0
    tune_time: float = 0.0
    tune_switches: int = 0
    total_proposed: int = 0
    total_switches: int = 0
    rows: Any = None


@step_state(ZigZagState)
class ZigZag(SubsampleStep):
    r"""Zig-Zag with control variates: pass to ``pm.sample(step=pms.ZigZag(...))``.

    Parameters
    ----------
    vars : list, optional
        All free variables of the model (the default).
    switches_per_draw : float, optional
        Warm-up sets the horizon T of a draw to this many switches at the rate seen so far
        (at most 100 Laplace sd); default 4d, each coordinate flipping about four times per draw,
        since correlated coefficients mix slowest under axis-aligned velocities. Ignored when
        ``horizon`` is given.
    horizon : float, optional
        A fixed time horizon per draw (no tuning).
    center : dict, array or None
        θ* of the control variates and the starting point. None: the default centre of
        :class:`~pymc_subsample.step_methods.base.SubsampleStep`, refined by full-data Newton
        steps until it is within 0.1 Laplace sd of the mode (at most 3 passes): the estimates'
        noise grows with N‖θ − θ*‖. A given centre is used as it is; mixing and the thinning
        efficiency fall as it moves away from the mode.
    rows : {"lipschitz", "uniform"}
        How the row of each candidate switch is drawn. "lipschitz" (default): with probability
        proportional to the row's Lipschitz constant w_k = ‖J_k‖_∞ ‖R⁻ᵀJ_k‖₂, weighted by 1/w_k
        in the estimate, which keeps the thinning bound a mean over rows instead of a maximum
        (9 bytes per row, kept for the run: the running sums of w_k and their guide table).
        "uniform": the paper's uniform rows, whose bound follows the most extreme row and so grows
        with N for unbounded covariates.
    row_batch : int
        Rows gathered at once for the proposals: one gather and one call of η at d + 2 points per batch
        (d + 2 calls where the η graph does not vectorise over θ), and, with ``compiled``, one return
        of the loop to Python.
    compiled : bool
        True (default): each draw's horizon is simulated in one Numba loop
        (:mod:`pymc_subsample.kernels.zigzag_compiled`), which returns to Python only to draw the
        next ``row_batch`` rows; for a family without a compiled score the NumPy kernel runs
        instead (``step.compiled`` says which runs). False: the NumPy kernel
        (:func:`pymc_subsample.kernels.zigzag.step`), one vectorised Python segment per switch.
        Both simulate the same process (the same law, not the same draws for one seed).
    model, chunk_size, rng, client
        See :class:`~pymc_subsample.step_methods.base.SubsampleStep`.

    Notes
    -----
    ``is_exact`` is True: the draws are positions of a process whose invariant law is the
    posterior, whatever the subsample (paper §3); only the Monte Carlo error remains. Supported:
    logistic regression, through the GLM view of :mod:`pymc_subsample.model.glm` (κ = 1/4), with
    a Gaussian or flat prior. The thinning bound uses per-row constants of every row, computed in
    one chunked pass at set-up (kernels.zigzag docstring). One switch costs O(1) rows in N. With
    uniform rows the thinning efficiency (switches per candidate) depends on how far the largest
    |J_kj|‖J_k‖ is above the typical row, so it falls slowly (log N) for Gaussian covariates;
    with Lipschitz-weighted rows (the default) the bound is a mean over rows and does not depend
    on N. It falls with d (the bound uses Cauchy-Schwarz over d coordinates); measured values
    are in ``benchmarks/README.md`` (``benchmarks/exact.py``, ``benchmarks/zigzag_compiled.py``).

    Stats: ``n_switches`` (velocity flips this draw), ``n_proposed_switches`` (thinning
    candidates on the path; ``n_switches / n_proposed_switches`` is the thinning efficiency),
    ``n_loglik_evals`` (rows touched: each candidate reads one row's ∂ℓ/∂η at θ and at θ*,
    counted once; the compiled loop reads one row per candidate, the NumPy kernel's last
    vectorised chunk of a segment may read a few rows past its switch),
    ``n_bound_exceeded`` (candidates whose estimated rate exceeded the bound: must be 0),
    ``horizon`` (T of this draw).
    """

    name = "zigzag"
    is_exact = True
    stats_dtypes_shapes = {
        "n_switches": (np.int64, []),
        "n_proposed_switches": (np.int64, []),
        "n_loglik_evals": (np.int64, []),
        "n_bound_exceeded": (np.int64, []),
        "horizon": (np.float64, []),
    }

    def __init__(self, vars=None, *, switches_per_draw=None, horizon=None, center=None, rows="lipschitz",
                 row_batch=4096, compiled=True, model=None, chunk_size=DEFAULT_CHUNK_SIZE, **kwargs):
        # cheap checks first (arguments and the family), before the centre and the passes
        if switches_per_draw is not None:
            switches_per_draw = check_positive(switches_per_draw, "switches_per_draw")
        if horizon is not None:
            horizon = check_positive(horizon, "horizon")
        self.row_batch = check_positive(row_batch, "row_batch", integer=True)
        if rows not in ROW_CHOICES:
            raise ValueError(f"rows must be one of {ROW_CHOICES}; got {rows!r}.")
        self.row_choice = rows
        check_family(pymc_model(model))
        super().__init__(vars, model=model, center=center, proxy_order=1, chunk_size=chunk_size, **kwargs)
        glm = self.glm
        if center is None:
            self._refine_center(chunk_size)
        center = self.proxy.center
        prior_grad, prior_hess = quadratic_prior(self.tall, center)
        precision = self.target.laplace_precision()
        metric_r = np.linalg.cholesky(precision).T  # RᵀR = P: the bound measures θ − θ* in P's norm
        inv_r = np.linalg.inv(metric_r)
        constants = glm_row_constants(glm, inv_r, rows=rows, chunk_size=chunk_size)
        self.process = kernel.ZigZagCV(
            center=center, prior_grad_center=prior_grad, prior_hessian=prior_hess,
            loglik_grad_center=np.asarray(self.proxy.grad_sum, dtype=float),
            weight_total=constants.weight_total, score=glm.score, curvature=glm.max_curvature,
            lipschitz_a=constants.a, lipschitz_b=constants.b, metric_r=metric_r,
            compiled_score=zigzag_compiled.compiled_score(glm.family, *glm.constants),
        )
        #: whether the draws come from the compiled loop (``compiled`` and a compiled score)
        self.compiled = bool(compiled) and self.process.compiled_score is not None
        self._draw_rows = glm_row_sampler(glm, center, constants, inv_r)
        # measured with 2d: an ESS per draw of 0.13-0.33 on Skin Segmentation (coefficients
        # correlated at ±0.6)
        self.switches_per_draw = 4.0 * self.tall.ndim if switches_per_draw is None else switches_per_draw
        self.fixed_horizon = horizon
        self._initial_horizon = horizon if horizon is not None else kernel.initial_horizon(precision)
        self.reset_tuning()

    def check_model(self, tall):
        """The GLM view (link, affinity of η), before the centre's full passes.

        Its family is a GLM family with a score already: ``check_family`` looked at the distribution first.
        """
        self.glm = linear_predictor_model(tall)

    def _refine_center(self, chunk_size):
        """Newton steps on the full data until θ* is within 0.1 Laplace sd of the mode (≤ 3 passes).

        ZZ-CV's O(1)-in-N cost needs ‖θ* − mode‖ = O(1/√N) (paper §4): the noise of the one-row
        estimates grows with N|θ − θ*|, and the default centre (subset MAP + one Newton step) can
        sit a posterior sd or more from the mode; each step here costs one full pass (Σℓ, A, B).
        """
        # measured: the default centre was 1.0 posterior sd (Mahalanobis, d = 31) from the mode at
        # N = 10⁶ and would be ~3 sd at 10⁷, where the ESS per draw fell 2.4x
        for _ in range(MAX_NEWTON):
            prior_grad = self.tall.prior_value_and_grad(self.proxy.center, setup=True)[1]
            grad = np.asarray(prior_grad) + self.proxy.grad_sum
            step = np.linalg.solve(self.target.laplace_precision(), grad)
            if float(np.sqrt(max(grad @ step, 0.0))) <= NEWTON_TOLERANCE:
                return
            self.target = SubsampledTarget(self.tall, self.proxy.center + step, self.proxy.order,
                                           chunk_size=chunk_size)
            self.proxy = self.target.proxy

    def reset_tuning(self):
        """Fresh per-chain state; PyMC calls it at the start of every chain (and ZigZagState copies it)."""
        self.velocity = self.rows = None  # the first step starts at θ* with a uniform velocity
        self.horizon = self._initial_horizon
        self.tune_time, self.tune_switches = 0.0, 0
        self.total_proposed, self.total_switches = 0, 0

    # ------------------------------------------------------------------- step
    def astep(self, q0: RaveledVars):
        if self.velocity is None:  # start at θ*, where the control variates are best
            state = kernel.init(self.proxy.center, self.rng, self.row_batch)
        else:
            state = kernel.ZigZagState(np.asarray(q0.data, dtype=float), self.velocity, self.rows)
        horizon = self.horizon
        if self.compiled:
            state, info = zigzag_compiled.step(self.rng, state, horizon, self.process, self._draw_rows)
        else:
            state, info = kernel.step(self.rng, state, horizon, self.process, self._draw_rows,
                                      kernel.first_chunk_size(self.total_proposed, self.total_switches))
        self.velocity, self.rows = state.velocity, state.rows
        self.total_proposed += info.proposed
        self.total_switches += info.switches
        if self.tune and self.fixed_horizon is None:
            self.tune_time += info.time
            self.tune_switches += info.switches
            self.horizon = kernel.tuned_horizon(self.switches_per_draw, self.tune_time, self.tune_switches,
                                                horizon, maximum=MAX_HORIZON * self._initial_horizon)
        stats = {"n_switches": info.switches, "n_proposed_switches": info.proposed,
                 "n_loglik_evals": info.rows, "n_bound_exceeded": info.bound_exceeded, "horizon": horizon}
        return RaveledVars(state.theta.astype(q0.data.dtype), q0.point_map_info), [stats]

    # ------------------------------------------------------------ progress bar
    _progress_columns = (
        StatColumn("n_switches", "switches", "{:.0f}"),
        StatColumn("n_proposed_switches", "proposed", "{:.0f}"),
        StatColumn("horizon", "T", compact),
    )

    # ----------------------------------------------------------------- checks
    ess_remedy = ("Raise switches_per_draw (a longer horizon per draw), or pass a center nearer the "
                  "posterior mode so that the control variates are better.")

    def run_checks(self):
        """ESS, bound exceedances (must be none) and the thinning efficiency after warm-up."""
        return super().run_checks() + [
            mean_check(
                "bound", "n_bound_exceeded", lambda v: v > 0,
                "ZigZag: an estimated switching rate exceeded its thinning bound ({value:.3g} per draw "
                "on average), so the draws are not exact. This means the model is outside what the bound "
                f"covers ({SUPPORTED}); use pms.HMCECS, and please report the model."),
            RunCheck(
                "efficiency", _thinning_efficiency, lambda v: bool(np.isfinite(v) and v < LOW_EFFICIENCY),
                "ZigZag: only {value:.2%} of the thinning candidates were switches after warm-up, so "
                "each switch reads many rows. Standardise the covariates (rows with large |x| loosen "
                "the bound for every row) or pass a center nearer the posterior mode."),
        ]


def _thinning_efficiency(thetas, stats) -> float:
    proposed = float(np.sum(stats.get("n_proposed_switches", [])))
    return float(np.sum(stats.get("n_switches", []))) / proposed if proposed > 0 else float("nan")
