"""``pms.ISS``: informed sub-sampling MCMC (Maire, Friel & Alquier 2019).

A thin PyMC step method over :mod:`pymc_subsample.kernels.iss`. Each iteration
updates the subset U (a Metropolis step on ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²)) and then θ
(one MH or HMC step on the scaled sub-posterior (N/n) Σ_{k∈U} ℓ_k(θ) + log π(θ)),
as in the slides' "ISS-MCMC" algorithm. The result is *approximate*: the θ-marginal
targets a mixture of scaled sub-posteriors whose distance to π(θ|Y) is controlled by
ε and n ("Theoretical analysis of ISS-MCMC", Theorem 2), so ``is_exact = False``.

Because the error is only controlled asymptotically, each chain is checked after warm-up
against the Laplace approximation at the full-data centre θ* (the one every step method
shares through :class:`~pymc_subsample.estimators.target.SubsampledTarget`), and warns
when its spread or location is far from what the data support (:func:`laplace_checks`).
"""

from __future__ import annotations

import math
import warnings

import arviz_stats
import numpy as np
import pymc as pm
from pymc.logprob.utils import ParameterValueError
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import ProgressBarMixin, StatColumn
from pymc_subsample.diagnostics.run_checks import RunCheck, RunMonitor, ess_check
from pymc_subsample.kernels import iss as K
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.model.tall import TallModel
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    RequestedModeMixin,
    SubsampleStepState,
    centred_target,
    check_positive,
    warn_poor,
)
from pymc_subsample.subsample.summaries import make_summary

__all__ = ["ISS", "ISSState", "check_refresh_rate", "laplace_checks", "laplace_discrepancy"]

MIN_REFRESH_RATE = 0.01  # the slides' advice: refresh subsets at least 1% of the time
_WARN_AFTER = 500  # the refresh rate is judged every 500 post-tuning iterations (warns once)
MAX_THIN = 50  # cap of the default iterations per draw

# Thresholds of the Laplace checks (see laplace_checks). For tall data the posterior of the
# unconstrained θ is Gaussian up to O(1/√N) (Bernstein–von Mises), so a chain that samples
# it has sd ≈ the Laplace sd and mean ≈ θ*, up to Monte Carlo error and θ*'s small offset
# from the mode. ISS instead samples a mixture over subsets U ~ ν_{n,ε} of scaled
# sub-posteriors whose modes are spread around θ* (Alquier's ISS slides, Theorem 2 bounds the error only
# through δ_{n,ε}): its variance is Var_Laplace + Var_U(mode of π̄_n(·|Y_U)).
# * SPREAD_LIMIT = 1.5: the mixture adds more than 1.25× the posterior variance
#   (1.5² − 1), i.e. credible intervals 50% too wide. The chain's sd ratio is compared
#   after taking off SPREAD_MARGIN_SE = 0.5 standard errors of the log of a sample sd,
#   1/√(2 ESS): ISS chains have ESS 5–20 at the first checkpoints. Measured on zoo GLMs
#   (N = 20,000, summary="map", 6 seeds each, checkpoints 100–1600), the plain ratio of runs
#   that widen by 1.1–1.3 crossed 1.5 by chance in 2 of 12 chains, with the margin in none;
#   a margin of a full standard error also stayed silent there, but by draw 200 it flagged
#   the spread of only 3 of the 12 chains of summary="moments" (widened 1.5–5×), against 7
#   of 12 with 0.5 (by draw 1600: 9 and 10; the shift check flagged all 12 by draw 200).
#   A false alarm costs a needless warning, a miss a silently wrong posterior: 0.5.
# * SHIFT_LIMIT = 2: the chain's mean sits 2 posterior sds from θ*, where the posterior has
#   under 5% of its mass beyond; a right sampler's running mean gets there only with an ESS
#   of ~1 (a chain that has not moved, also worth a warning), so no Monte Carlo allowance.
#   Chains with summary="moments" crossed it by draw 200 in 12 of 12.
SPREAD_LIMIT = 1.5
SPREAD_MARGIN_SE = 0.5
SHIFT_LIMIT = 2.0


@dataclass_state
class ISSState(SubsampleStepState):
    """Per-chain state: reset by ``pm.sample`` between chains sampled in sequence."""

    subset: np.ndarray | None = None
    member: np.ndarray | None = None
    batch: tuple | None = None
    subset_sum: np.ndarray | None = None
    summary_value: np.ndarray | None = None
    delta_sq: float = 0.0
    log_epsilon: float = 0.0
    log_scale: float = 0.0
    da: dict | None = None
    theta_cache: np.ndarray | None = None
    logp_cache: float = 0.0
    grad_cache: np.ndarray | None = None
    n_tune_iter: int = 0
    n_refresh: int = 0
    n_phase_iter: int = 0
    warned: bool = False
    # the post-warm-up Laplace checks of this chain (a RunMonitor, built at the first draw)
    monitor: object = None


@step_state(ISSState)
class ISS(RequestedModeMixin, ProgressBarMixin, ArrayStepShared):
    """Informed sub-sampling MCMC (Alquier's ISS slides, "ISS-MCMC").

    Parameters
    ----------
    vars : list, optional
        Must be all of the model's free variables (or None).
    subset_size : "sqrt" or int
        n, the rows in the subset; "sqrt" gives n = ⌈√N⌉ ("Implementing ISS-MCMC").
    epsilon : "auto" or float ≥ 0
        ε of the subset weights. "auto" starts from ε₀ = 1/‖Δ_n(U₀)‖² for the first
        (uniform) subset and tunes log ε by Robbins–Monro during tuning so the subset
        refresh rate approaches ``target_refresh``; it is fixed afterwards. ε = 0 gives
        uniform subsets (every swap is accepted).
    summary : "map", "moments" or callable
        The summary statistics S, see :mod:`pymc_subsample.subsample.summaries`:
        "map" (default) is the mode of the scaled sub-posterior, the slides' recommended
        S ("Choice of summary statistics", item 3), standardised so Δ is the offset of a
        subset's sub-posterior mode from θ* in posterior sds; "moments" uses the sum form
        Δ = S(Y) − (N/n) S(Y_U) of standardised column moments (updated in O(swap_size)
        per proposal). "map" and a callable use the mean form Δ = S(Y) − S(Y_U),
        recomputed on the n rows of each proposed subset, taken in row-index order so
        that Δ is a function of the subset alone. Why "map" is the default: on zoo GLMs
        "moments" (with swap n // 100) leaves means several posterior sds from full-data
        NUTS and sds far too wide, where "map" with swap 1 keeps both close to NUTS's, for
        more time per iteration (benchmarks/README.md).
    swap_size : int, optional
        Rows exchanged per subset proposal; default 1 (see ``kernels.iss.resolve_swap_size``:
        at a given refresh rate a swap of r rows lets ε be only ~1/r as large, and widens
        the θ-marginal accordingly).
    inner : {"mh", "hmc", "nuts"}
        θ update. "mh": random-walk MH whose proposal covariance is the Laplace
        covariance at θ* (scale tuned to ``target_accept``; a scaled sub-posterior has
        the scale of π(θ|Y) because of its N/n power).
        "hmc" (alias "nuts"): HMC with ``n_leapfrog`` jittered leapfrog steps, the same
        Laplace covariance as inverse mass matrix and a dual-averaged step size; it is
        *not* PyMC's NUTS tree (documented simplification).
    model : pm.Model or TallModel, optional
        A ``TallModel`` is used as is, so several ISS steps share compiled functions.
    center : dict, array or None
        θ*, the full-data centre: a point, a flat unconstrained vector, or None for the
        default of every step method (``resolve_center``: MAP of a 20,000-row subset and
        full-data Newton steps). With the Laplace precision P at θ* (one chunked pass)
        it gives the θ proposal's shape P⁻¹, the "map" summary's S(Y) and its
        standardisation, and the reference of the post-warm-up Laplace checks.
    init_at_center : bool, default True
        Start each chain's θ at θ* instead of PyMC's initial point, as SubsampleMH does:
        from the initial point (often hundreds of posterior sds away for tall data) the
        random-walk θ update spends most of a warm-up travelling.
    target_refresh : float in (0, 1]
        Subset refresh rate aimed at by ``epsilon="auto"`` (default 0.05; the slides ask
        for at least 0.01).
    target_accept : float, optional
        θ acceptance target: 0.8 for HMC, 0.44 (d = 1) or 0.3 for MH.
    n_leapfrog : int
        Maximum leapfrog steps per HMC transition.
    thin : int, optional
        ISS-MCMC iterations (subset update, then θ update) per draw. Default min(50, 2d)
        for ``inner="mh"`` and 1 for HMC: a tuned random walk moves about 0.33/d of an
        independent draw per step on a near-Gaussian target (Roberts, Gelman & Gilks
        1997), and with one iteration per draw a chain's ESS is a small fraction of its draws
        (``benchmarks/README.md``). More iterations also let the subset chain, which θ
        follows, move further per draw.
    chunk_size : int
        Rows per chunk of the full-data passes at set-up.
    rng, initial_point
        As in PyMC's step methods (``pm.sample`` reseeds ``rng`` per chain).

    Notes
    -----
    Diagnostics (warnings; they never stop the run):

    * ESS: once per chain when the bulk ESS after warm-up is below 1% of the draws, at
      100, 200, 400, … draws (the check every step method runs);
    * refresh rate: once per chain when the subset refresh rate after tuning is below 1%
      at a multiple of 500 draws, or, for a fixed ε, at the end of ≥ 500 tuning
      iterations (see also :func:`check_refresh_rate` on the result);
    * Laplace checks (:func:`laplace_checks`): at 100, 200, 400, … draws after warm-up,
      once per chain and check, when a coordinate's sd exceeds 1.5× its Laplace sd at θ*
      by more than its Monte Carlo error, or its mean is more than 2 Laplace sds from θ*.
      ISS widens the marginals (Alquier's ISS slides, Theorem 2 bounds its error only through
      δ_{n,ε}); these say when by much. They assume the unconstrained posterior is close
      to Gaussian, as it is for tall data.

    Stats (per draw, over its ``thin`` iterations): ``subset_accept`` (mean acceptance
    probability of the subset proposals), ``refresh_rate`` (fraction of accepted subset
    swaps so far in the current phase; reset when tuning stops), ``delta_norm``
    (‖Δ_n(U)‖ at the end of the draw), ``epsilon``, ``n_loglik_evals`` (per-row
    likelihood evaluations, summed), ``acceptance_rate`` (mean θ acceptance
    probability), ``step_size`` and ``diverging`` (any iteration diverged).
    """

    name = "iss"
    is_exact = False
    stats_dtypes_shapes = {
        "subset_accept": (float, []),
        "refresh_rate": (float, []),
        "delta_norm": (float, []),
        "epsilon": (float, []),
        "n_loglik_evals": (int, []),
        "acceptance_rate": (float, []),
        "step_size": (float, []),
        "diverging": (bool, []),
        "tune": (bool, []),
    }
    #: progress bar: subset refresh rate (tuned to ``target_refresh`` through ε), ε, θ acceptance
    _progress_columns = (
        StatColumn("refresh_rate", "refresh", "{:.3f}"),
        StatColumn("epsilon", "ε", "{:.3g}"),
        StatColumn("acceptance_rate", "acc", "{:.2f}"),
    )

    # measured on zoo GLMs (linear and Poisson, N = 50,000, 1 chain of 300 + 300 or 3000 + 1000):
    # summary="moments" with swap n // 100 left means 2.3–8.2 posterior sds from full-data NUTS and
    # largest sd ratios of 2.4–6.5, with bulk ESS 1–10; "map" with swap 1 kept means within 0.30 sd
    # and sds within 0.86–1.29×, with ESS 141–190 in 3000 draws, for 2–3.5× the time per iteration
    def __init__(self, vars=None, *, subset_size="sqrt", epsilon="auto", summary="map",
                 swap_size=None, inner="mh", model=None, center=None, init_at_center=True,
                 target_refresh=0.05, target_accept=None, n_leapfrog=8, thin=None,
                 chunk_size=DEFAULT_CHUNK_SIZE, rng=None, initial_point=None, compile_kwargs=None):
        if isinstance(model, TallModel):
            tall = model  # reuse its compiled functions (several ISS runs on one model)
        else:
            tall = TallModel(pm.modelcontext(model), vars)
        self.tall = tall
        self.n = K.resolve_subset_size(subset_size, tall.n_rows)
        self.swap_size = K.resolve_swap_size(swap_size, self.n, tall.n_rows)
        self.epsilon, self.target_refresh = K.check_epsilon(epsilon, target_refresh)
        self.inner = K.check_inner(inner)
        d = tall.ndim
        default_accept = 0.8 if self.inner == "hmc" else (0.44 if d == 1 else 0.3)
        self.target_accept = float(default_accept if target_accept is None else target_accept)
        if not 0 < self.target_accept < 1:
            raise ValueError(f"target_accept must be in (0, 1); got {target_accept!r}.")
        if isinstance(n_leapfrog, bool) or not isinstance(n_leapfrog, (int, np.integer)) or n_leapfrog < 1:
            raise ValueError(f"n_leapfrog must be a positive integer; got {n_leapfrog!r}.")
        self.n_leapfrog = int(n_leapfrog)
        # 2d iterations per draw for the random-walk θ update (see the docstring); HMC moves far
        # enough in one. measured with one iteration per draw: the zoo GLMs (d = 3-5, N = 100,000,
        # 1000 draws) had ESS 43-61
        self.thin = (check_positive(thin, "thin", integer=True) if thin is not None
                     else min(MAX_THIN, 2 * d) if self.inner == "mh" else 1)
        self.init_at_center = bool(init_at_center)
        if not (callable(summary) or (isinstance(summary, str) and summary in ("moments", "map"))):
            make_summary(summary, tall)  # its ValueError, before the set-up passes
        self.scale = tall.n_rows / self.n  # the N/n power of the scaled sub-posterior
        # one target, as in every step method: θ* and the Laplace precision P at θ*; glm="affine" as
        # SubsampleStep.row_free_proxy
        self.target = centred_target(tall, center, 2, chunk_size, glm="affine")
        precision, self.laplace_ok = self._laplace_precision()
        self.laplace_sd = np.sqrt(np.clip(np.diag(np.linalg.pinv(precision)), 1e-300, None))
        self.summary = make_summary(summary, tall, chunk_size=chunk_size,
                                    full_map=self.target.center, full_hessian=-precision)
        self.chol = _laplace_chol(precision)
        self.tune = True
        self._init_state_fields()
        super().__init__(tall.value_vars, shared={}, rng=rng)

    # ------------------------------------------------------------------ set-up
    def _init_state_fields(self):
        for name, value in ISSState.__dataclass_fields__.items():
            if name not in ("tune", "var_names", "rng"):
                setattr(self, name, value.default)

    def _laplace_precision(self):
        """P from the shared target, and whether it is a Laplace precision at all.

        ``laplace_precision`` falls back to the identity, with its own warning, when the
        Hessian at θ* is not negative definite; the Laplace checks are then skipped.
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            precision = self.target.laplace_precision()
        for w in caught:  # the user still sees the target's warning
            warnings.warn(w.message, w.category, stacklevel=3)
        fallback = any("not negative definite" in str(w.message) for w in caught)
        return precision, not fallback

    def _init_chain(self):
        """Draw U₀ uniformly with this chain's rng, gather its rows and its summary."""
        tall, n = self.tall, self.n
        self.subset = np.sort(self.rng.choice(tall.n_rows, size=n, replace=False))
        self.member = np.zeros(tall.n_rows, dtype=bool)
        self.member[self.subset] = True
        self.batch = tall.gather(self.subset)
        self._set_summary_from_batch()
        eps0 = K.initial_epsilon(self.delta_sq) if self.epsilon is None else self.epsilon
        self.log_epsilon = math.log(eps0) if eps0 > 0 else -np.inf
        self.log_scale = math.log(2.38 / math.sqrt(tall.ndim)) if self.inner == "mh" else 0.0
        self.da = K.dual_average_init(0.5 / tall.ndim ** 0.25) if self.inner == "hmc" else None
        self.n_refresh = self.n_phase_iter = self.n_tune_iter = 0

    def _set_summary_from_batch(self):
        S = self.summary
        if S.incremental:
            self.subset_sum = S.row_stats(self.batch).sum(axis=0)
            delta = S.delta(self.subset_sum, self.n)
        else:
            self.summary_value, _ = self._summary_of(self.subset, self.batch)
            delta = S.delta(self.summary_value)
        self.delta_sq = float(delta @ delta)

    def _summary_of(self, subset, batch):
        """S(Y_U) of a non-incremental summary on the rows of U in row-index order.

        The batch holds U's rows in the order the swaps left them; sorting makes S, and so
        Δ_n(U), a function of the set U alone, to the last bit (floating-point sums depend
        on order), as the subset acceptance ratio of the ISS slides' (Alquier) ISS-MCMC needs. O(n log n),
        small beside the n-row passes of the summary itself.
        """
        order = np.argsort(subset, kind="stable")
        return self.summary.value(tuple(a[order] for a in batch))

    # ----------------------------------------------------------------- targets
    # A proposal outside the support (e.g. a scale that underflows to 0) raises PyMC's
    # ParameterValueError; it is a point of zero density, so it becomes -inf (rejected).
    def _logp(self, theta):
        try:
            lp, _ = self.tall.prior_value_and_grad(theta)
            return float(lp) + self.scale * float(np.sum(self.tall.loglik_rows(theta, self.batch)))
        except ParameterValueError:
            return -np.inf

    def _logp_grad(self, theta):
        try:
            lp, dlp = self.tall.prior_value_and_grad(theta)
            ll, dll = self.tall.loglik_sum_value_and_grad(theta, self.batch)
        except ParameterValueError:
            return -np.inf, np.zeros_like(theta)
        return float(lp) + self.scale * float(ll), dlp + self.scale * dll

    # -------------------------------------------------------------------- step
    def _subset_update(self):
        """Swap ``swap_size`` rows; accept w.p. 1 ∧ exp{−ε(‖Δ(U')‖² − ‖Δ(U)‖²)}."""
        S, rng, n = self.summary, self.rng, self.n
        pos, rows = K.propose_swap(rng, self.member, n, self.swap_size)
        new_rows = self.tall.gather(rows)
        evals = 0
        if S.incremental:
            out_stats = S.row_stats(tuple(a[pos] for a in self.batch)).sum(axis=0)
            new_sum = self.subset_sum - out_stats + S.row_stats(new_rows).sum(axis=0)
            new_delta = S.delta(new_sum, n)
        else:
            cand = tuple(a.copy() for a in self.batch)
            for a, r in zip(cand, new_rows, strict=True):
                a[pos] = r
            cand_subset = self.subset.copy()
            cand_subset[pos] = rows
            value, passes = self._summary_of(cand_subset, cand)
            new_delta = S.delta(value)
            evals = n * passes
        new_dsq = float(new_delta @ new_delta)
        eps = math.exp(self.log_epsilon) if np.isfinite(self.log_epsilon) else 0.0
        log_a = K.subset_log_accept(eps, self.delta_sq, new_dsq)
        prob = 1.0 if log_a >= 0 else math.exp(log_a)
        accepted = bool(log_a >= 0 or math.log(rng.random()) < log_a)
        old_dsq = self.delta_sq
        if accepted:
            self.member[self.subset[pos]] = False
            self.member[rows] = True
            self.subset[pos] = rows
            if S.incremental:
                for a, r in zip(self.batch, new_rows, strict=True):
                    a[pos] = r
                self.subset_sum = new_sum
            else:
                self.batch, self.summary_value = cand, value
            self.delta_sq = new_dsq
        return accepted, prob, K.stationary_refresh_signal(prob, old_dsq, new_dsq), evals

    def astep(self, q0):
        theta = np.asarray(q0.data, dtype=float)
        if self.subset is None:
            self._init_chain()
            if self.init_at_center:
                # measured from PyMC's initial point instead: most of a 300-iteration warm-up spent
                # travelling, and a post-warm-up ESS of 0.8% of the draws on a 4,000-row linear model
                theta = self.target.center.copy()
        iterations = []
        for _ in range(self.thin):
            theta, stats = self._iteration(theta)
            iterations.append(stats)
        stats = iterations[-1] | {
            "subset_accept": float(np.mean([s["subset_accept"] for s in iterations])),
            "n_loglik_evals": int(sum(s["n_loglik_evals"] for s in iterations)),
            "acceptance_rate": float(np.mean([s["acceptance_rate"] for s in iterations])),
            "diverging": any(s["diverging"] for s in iterations),
        }
        if not self.tune:
            # post-warm-up draws only: tuning draws carry the transient from the initial point
            if self.monitor is None:
                self.monitor = RunMonitor(self.run_checks())
            self.monitor.record(theta, stats)
        return q0.__class__(theta, q0.point_map_info), [stats]

    def _iteration(self, theta):
        """One ISS-MCMC iteration from θ (subset update, then θ update): new θ and its stats."""
        evals = 0
        refreshed, prob_u = False, 0.0
        if self.swap_size > 0:
            refreshed, prob_u, signal, evals = self._subset_update()
            self.n_phase_iter += 1
            self.n_refresh += int(refreshed)
            if self.tune and self.epsilon is None:
                self.log_epsilon = K.adapt_log_epsilon(
                    self.log_epsilon, signal, self.target_refresh, self.n_tune_iter)
        stale = refreshed or self.theta_cache is None or not np.array_equal(theta, self.theta_cache)
        diverging = False
        if self.inner == "mh":
            if stale:
                self.logp_cache = self._logp(theta)
                evals += self.n
            step = math.exp(self.log_scale)
            theta, self.logp_cache, acc, _ = K.rw_mh_step(
                self.rng, theta, self.logp_cache, self._logp, self.chol, step)
            evals += self.n
            if self.tune:
                # same Robbins–Monro rule as for log ε, on the acceptance probability
                self.log_scale = K.adapt_log_epsilon(
                    self.log_scale, acc, self.target_accept, self.n_tune_iter)
        else:
            if stale:
                self.logp_cache, self.grad_cache = self._logp_grad(theta)
                evals += self.n
            # after tuning: the dual-averaged step (the last one if there was no tuning)
            tuned = not self.tune and self.da["t"] > 0
            step = math.exp(self.da["log_bar"] if tuned else self.da["log_step"])
            theta, self.logp_cache, self.grad_cache, acc, diverging, n_grad = K.hmc_step(
                self.rng, theta, self.logp_cache, self.grad_cache, self._logp_grad, step,
                self.n_leapfrog, self.chol)
            evals += self.n * n_grad
            if self.tune:
                self.da = K.dual_average_update(self.da, acc, self.target_accept)
        self.theta_cache = theta.copy()
        if self.tune:
            self.n_tune_iter += 1
        rate = self.n_refresh / self.n_phase_iter if self.n_phase_iter else 0.0
        self._maybe_warn(rate)
        stats = {
            "subset_accept": prob_u, "refresh_rate": rate, "delta_norm": math.sqrt(self.delta_sq),
            "epsilon": math.exp(self.log_epsilon) if np.isfinite(self.log_epsilon) else 0.0,
            "n_loglik_evals": int(evals), "acceptance_rate": float(acc), "step_size": float(step),
            "diverging": bool(diverging), "tune": bool(self.tune),
        }
        return theta, stats

    def run_checks(self) -> list[RunCheck]:
        """The post-warm-up checks of this step.

        The ESS check every step method runs, and the Laplace checks when P is usable.
        """
        checks = [ess_check("ISS", "The θ chain follows the slow subset chain: run more draws (ISS "
                                   "iterations are cheap), compare several chains, and keep swap_size=1.")]
        if self.laplace_ok:
            checks += laplace_checks(self.target.center, self.laplace_sd, summary_kind=self.summary.kind,
                                     swap_size=self.swap_size)
        return checks

    # ------------------------------------------------------------- diagnostics
    def _maybe_warn(self, rate):
        if (not self.tune and not self.warned and self.swap_size > 0
                and self.n_phase_iter % _WARN_AFTER == 0 and rate < MIN_REFRESH_RATE):
            self.warned = True
            warn_poor(_refresh_message(rate, self.n_phase_iter))

    def reset_tuning(self):
        """Forget the chain's subset, ε and step sizes (called at each chain's start)."""
        self._init_state_fields()

    def setup_chain(self, rng, tune, draws):
        """``pm.sample`` hands each chain its generator here, in the main process and in
        worker processes alike, so this is where a chain's own state starts afresh.
        """
        super().setup_chain(rng, tune, draws)
        self._init_state_fields()

    def stop_tuning(self):
        if self.subset is not None:
            # with a fixed ε a stuck subset chain is visible already in tuning (auto ε is
            # still moving then, so it is judged after tuning only)
            if self.epsilon is not None and self.swap_size > 0 and self.n_phase_iter >= _WARN_AFTER:
                rate = self.n_refresh / self.n_phase_iter
                if rate < MIN_REFRESH_RATE:
                    self.warned = True
                    warn_poor(_refresh_message(rate, self.n_phase_iter, "during tuning"))
            # exact re-sum of the running subset sums (removes floating-point drift)
            self._set_summary_from_batch()
            self.n_refresh = self.n_phase_iter = 0
        self.tune = False

    @staticmethod
    def competence(var, has_grad):
        """Never chosen automatically: ISS changes the target, so it is opt-in."""
        return Competence.INCOMPATIBLE


def _laplace_chol(precision):
    """Cholesky factor of the Laplace covariance P⁻¹ at θ*: the θ proposal's (or inverse
    mass matrix's) shape. Every scaled sub-posterior π̄_n(θ|Y_U) has the scale of π(θ|Y)
    (its power N/n), so P⁻¹ is its shape too, up to O(1/√n).
    """
    try:
        return np.linalg.cholesky(np.linalg.inv(precision))
    except np.linalg.LinAlgError:
        diag = np.abs(np.diag(precision))  # singular: a diagonal guess
        return np.diag(1.0 / np.sqrt(np.where(diag > 0, diag, 1.0)))


def laplace_discrepancy(thetas, center, laplace_sd):
    """How far a chain is from the Laplace approximation N(θ*, P⁻¹), per coordinate.

    Parameters
    ----------
    thetas : array, shape (draws, d)
        The chain's unconstrained draws.
    center : array, shape (d,)
        θ*, the full-data centre.
    laplace_sd : array, shape (d,)
        √diag(P⁻¹), the Laplace standard deviations at θ*.

    Returns
    -------
    spread : float
        max_j sd_j(chain) / laplace_sd_j.
    spread_lower : float
        max_j of the same ratio times exp(−SPREAD_MARGIN_SE/√(2 ESS_j)): the ratio less half
        a standard error on the log scale, since the log of a sample sd has standard error
        ≈ 1/√(2 ESS) (ESS: ArviZ's bulk ESS of coordinate j). ISS chains are sticky (ESS
        5–20 in the first 100–200 draws), so the plain ratio of a run that widens by 1.2–1.3
        reaches 1.5 by chance.
    shift : float
        max_j |mean_j(chain) − θ*_j| / laplace_sd_j.

    All three are NaN when there are fewer than 2 draws or nothing is finite; a NaN never
    fails a check (a diagnostic must not break the run).
    """
    nan = float("nan")
    with np.errstate(all="ignore"):
        thetas = np.asarray(thetas, dtype=float)
        if thetas.ndim != 2 or thetas.shape[0] < 2:
            return nan, nan, nan
        sd = np.asarray(laplace_sd, dtype=float)
        ratio = thetas.std(axis=0, ddof=1) / sd
        shift = np.abs(thetas.mean(axis=0) - np.asarray(center, dtype=float)) / sd
        ess = np.array([_ess(thetas[:, j]) for j in range(thetas.shape[1])])
        lower = ratio * np.exp(-SPREAD_MARGIN_SE / np.sqrt(2.0 * ess))

    def largest(x):
        x = x[np.isfinite(x)]
        return float(x.max()) if x.size else nan

    return largest(ratio), largest(lower), largest(shift)


def _ess(x) -> float:
    """Bulk ESS of one coordinate, at least 1 (ArviZ gives NaN or n for a constant chain)."""
    try:
        value = float(arviz_stats.ess(np.asarray(x, dtype=float)[None, :]))
    except (ValueError, FloatingPointError):
        value = float("nan")
    return max(1.0, value) if np.isfinite(value) else 1.0


def _remedy(summary_kind=None, swap_size=None):
    """What to change, for the message of the Laplace checks (no advice to use what is used)."""
    better = "" if summary_kind == "map" else ", the sub-posterior mode as summary (summary='map')"
    swap = ", swap_size=1" if swap_size is not None and swap_size > 1 else ""
    return (
        "ISS samples a mixture of scaled sub-posteriors over the subsets it keeps (seed 002, "
        "Theorem 2: the error is controlled by ε and n only asymptotically). Use a larger "
        f"subset_size{better}{swap}, or a smaller target_refresh (a larger ε); or an estimator-based "
        "subsampler, pms.HMCECS or pms.SubsampleMH, whose accuracy does not rest on finding "
        "representative subsets. (The reference N(θ*, P⁻¹) assumes the unconstrained posterior "
        "is close to Gaussian, as it is for tall data.)"
    )


def laplace_checks(center, laplace_sd, spread_limit=SPREAD_LIMIT, shift_limit=SHIFT_LIMIT,
                   summary_kind=None, swap_size=None):
    """Post-warm-up checks of an ISS chain against the Laplace approximation at θ*.

    Two :class:`~pymc_subsample.diagnostics.run_checks.RunCheck` s, run by a
    ``RunMonitor`` at 100, 200, 400, … draws after warm-up on all draws so far, each
    warning at most once per chain (the thresholds are explained at ``SPREAD_LIMIT``):

    * ``laplace_spread``: some coordinate's sd exceeds ``spread_limit`` × its Laplace sd
      by more than half a Monte Carlo standard error (``spread_lower`` of
      :func:`laplace_discrepancy`);
    * ``laplace_shift``: some coordinate's mean is more than ``shift_limit`` Laplace sds
      from θ*.

    Parameters
    ----------
    center, laplace_sd : array, shape (d,)
        θ* and √diag(P⁻¹) (see :func:`laplace_discrepancy`).
    spread_limit, shift_limit : float
    summary_kind : str, optional
        The ISS summary in use ("map", "moments", "callable"): the message does not
        suggest the one already used.
    swap_size : int, optional
        The ISS swap size in use: above 1 the message suggests 1.

    Returns
    -------
    list of RunCheck
    """
    center = np.asarray(center, dtype=float).copy()
    laplace_sd = np.asarray(laplace_sd, dtype=float).copy()

    def spread(thetas, stats):
        return laplace_discrepancy(thetas, center, laplace_sd)[1]  # less half a standard error

    def shift(thetas, stats):
        return laplace_discrepancy(thetas, center, laplace_sd)[2]

    return [
        RunCheck(
            "laplace_spread", spread, lambda v: bool(np.isfinite(v) and v > spread_limit),
            f"ISS: after {{draws}} draws the chain's standard deviation is at least {{value:.2f}} "
            f"times the Laplace standard deviation at the full-data centre θ* in some coordinate "
            f"(allowing for Monte Carlo error; warning above {spread_limit:g}): the "
            f"marginals are much wider than the data support. " + _remedy(summary_kind, swap_size),
        ),
        RunCheck(
            "laplace_shift", shift, lambda v: bool(np.isfinite(v) and v > shift_limit),
            f"ISS: after {{draws}} draws the chain's mean is {{value:.2f}} Laplace standard "
            f"deviations from the full-data centre θ* in some coordinate (warning above "
            f"{shift_limit:g}): the subsets it keeps are centred away from the full-data "
            f"posterior, or the chain has hardly moved. " + _remedy(summary_kind, swap_size),
        ),
    ]


def _refresh_message(rate, iters, when="after tuning"):
    return (
        f"ISS subset refresh rate {rate:.2%} over {iters} iterations {when} is below "
        f"{MIN_REFRESH_RATE:.0%}: the chain is stuck on few subsets and the approximation can be "
        "poor (seed 002, 'Implementing ISS-MCMC'). Lower epsilon, use epsilon='auto', or a smaller "
        "swap_size."
    )


def check_refresh_rate(idata, threshold=MIN_REFRESH_RATE):
    """Warn when any chain's final ``refresh_rate`` in ``idata`` is below ``threshold``.

    Returns
    -------
    ndarray
        The final refresh rate of each chain.
    """
    rates = np.asarray(idata.sample_stats["refresh_rate"])[:, -1]
    bad = np.flatnonzero(rates < threshold)
    if bad.size:
        warn_poor(
            f"ISS refresh rate below {threshold:.0%} in chains {bad.tolist()} "
            f"(rates {np.round(rates[bad], 4).tolist()}); lower epsilon or use epsilon='auto'."
        )
    return rates
