"""``pms.ISS``: informed sub-sampling MCMC (Maire, Friel & Alquier; seed 002).

A thin PyMC step method over :mod:`pymc_subsample.kernels.iss`. Each iteration
updates the subset U (a Metropolis step on ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²)) and then θ
(one MH or HMC step on the scaled sub-posterior (N/n) Σ_{k∈U} ℓ_k(θ) + log π(θ)),
as in the slides' "ISS-MCMC" algorithm. The result is *approximate*: the θ-marginal
targets a mixture of scaled sub-posteriors whose distance to π(θ|Y) is controlled by
ε and n ("Theoretical analysis of ISS-MCMC", Theorem 2), so ``is_exact = False``.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
from pymc.logprob.utils import ParameterValueError
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.step_methods.state import dataclass_state
from scipy import optimize

from pymc_subsample.control_variates.center import find_map_theta
from pymc_subsample.kernels import iss as K
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, chunked_sum
from pymc_subsample.model.tall import TallModel
from pymc_subsample.step_methods.base import SubsampleStepState, warn_poor
from pymc_subsample.subsample.summaries import make_summary

__all__ = ["ISS", "ISSState", "check_refresh_rate"]

MIN_REFRESH_RATE = 0.01  # the slides' advice: refresh subsets at least 1% of the time
_WARN_AFTER = 500  # the refresh rate is judged every 500 post-tuning draws (warns once)


@dataclass_state
class ISSState(SubsampleStepState):
    """Per-chain state: reset by ``pm.sample`` between chains sampled in sequence."""

    subset: np.ndarray | None = None
    member: np.ndarray | None = None
    batch: tuple | None = None
    subset_sum: np.ndarray | None = None
    summary_value: np.ndarray | None = None
    summary_warm: np.ndarray | None = None
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


class ISS(ArrayStepShared):
    """Informed sub-sampling MCMC (seed 002, "ISS-MCMC").

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
    summary : "moments", "map" or callable
        The summary statistics S, see :mod:`pymc_subsample.subsample.summaries`:
        "moments" uses the sum form Δ = S(Y) − (N/n) S(Y_U) of standardised column
        moments (updated in O(swap_size) per proposal); "map" and a callable use the
        mean form Δ = S(Y) − S(Y_U) (recomputed on the n rows of each proposed subset).
    swap_size : int, optional
        Rows exchanged per subset proposal; default max(1, n // 100).
    inner : {"mh", "hmc", "nuts"}
        θ update. "mh": random-walk MH whose proposal covariance is the Laplace
        covariance of a scaled sub-posterior (scale tuned to ``target_accept``).
        "hmc" (alias "nuts"): HMC with ``n_leapfrog`` jittered leapfrog steps, the same
        Laplace covariance as inverse mass matrix and a dual-averaged step size; it is
        *not* PyMC's NUTS tree (documented simplification).
    model : pm.Model or TallModel, optional
        A ``TallModel`` is used as is, so several ISS steps share compiled functions.
    target_refresh : float in (0, 1]
        Subset refresh rate aimed at by ``epsilon="auto"`` (default 0.05; the slides ask
        for at least 0.01).
    target_accept : float, optional
        θ acceptance target: 0.8 for HMC, 0.44 (d = 1) or 0.3 for MH.
    n_leapfrog : int
        Maximum leapfrog steps per HMC transition.
    chunk_size : int
        Rows per chunk of the full-data passes at set-up.
    rng, initial_point
        As in PyMC's step methods (``pm.sample`` reseeds ``rng`` per chain).

    Notes
    -----
    Stats: ``subset_accept`` (acceptance probability of the subset proposal),
    ``refresh_rate`` (fraction of accepted subset swaps so far in the current phase;
    reset when tuning stops), ``delta_norm`` (‖Δ_n(U)‖), ``epsilon``,
    ``n_loglik_evals`` (per-row likelihood evaluations this draw), ``acceptance_rate``,
    ``step_size`` and ``diverging``. A warning is raised (once per chain) when the refresh
    rate after tuning is below 1% at a multiple of 500 draws, or, for a fixed ε, at the
    end of ≥ 500 tuning iterations (see also :func:`check_refresh_rate` on the result).
    """

    name = "iss"
    is_exact = False
    _state_class = ISSState
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

    def __init__(self, vars=None, *, subset_size="sqrt", epsilon="auto", summary="moments",
                 swap_size=None, inner="mh", model=None, target_refresh=0.05, target_accept=None,
                 n_leapfrog=8, chunk_size=DEFAULT_CHUNK_SIZE, rng=None, initial_point=None):
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
        self.scale = tall.n_rows / self.n  # the N/n power of the scaled sub-posterior
        full_map = full_hess = None
        if isinstance(summary, str) and summary == "map":
            full_map, _ = find_map_theta(tall, chunk_size=chunk_size)
            _, _, h = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, full_map, chunk_size=chunk_size)
            full_hess = h + tall.prior_hessian(full_map)
        self.summary = make_summary(summary, tall, chunk_size=chunk_size,
                                    full_map=full_map, full_hessian=full_hess)
        self.chol = self._laplace_chol()
        self.tune = True
        self._init_state_fields()
        super().__init__(tall.value_vars, shared={}, rng=rng)

    # ------------------------------------------------------------------ set-up
    def _init_state_fields(self):
        for name, value in ISSState.__dataclass_fields__.items():
            if name not in ("tune", "var_names", "rng"):
                setattr(self, name, value.default)

    def _laplace_chol(self):
        """Cholesky factor of the Laplace covariance of the scaled sub-posterior of a
        fixed-seed subset (the proposal / inverse-mass shape; same scale as π(θ|Y)).

        L-BFGS on the n rows, then a central-difference Hessian of the gradient: 2d
        gradient calls, and no compilation of the per-row Hessian graph (seconds).
        """
        tall = self.tall
        idx = np.sort(np.random.default_rng(0).choice(tall.n_rows, size=self.n, replace=False))
        batch = tall.gather(idx)

        def neg(theta):
            lp, g = self._logp_grad(theta, batch)
            return (-lp, -g) if np.isfinite(lp) else (np.inf, np.zeros_like(theta))

        theta = optimize.minimize(neg, tall.initial_theta, jac=True, method="L-BFGS-B",
                                  options={"maxiter": 500}).x
        d = tall.ndim
        hess = np.empty((d, d))
        for i in range(d):
            h = 1e-5 * max(1.0, abs(theta[i]))
            e = np.zeros(d)
            e[i] = h
            hess[i] = (neg(theta + e)[1] - neg(theta - e)[1]) / (2 * h)
        hess = 0.5 * (hess + hess.T)  # = −∇² log π̄_n, symmetrised
        try:
            return np.linalg.cholesky(np.linalg.inv(hess))
        except np.linalg.LinAlgError:
            # not locally concave (or singular): fall back to a diagonal guess
            diag = np.abs(np.diag(hess))
            return np.diag(1.0 / np.sqrt(np.where(diag > 0, diag, 1.0)))

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
            self.summary_value, self.summary_warm = S.value(self.batch, self.summary_warm)
            delta = S.delta(self.summary_value)
        self.delta_sq = float(delta @ delta)

    # ----------------------------------------------------------------- targets
    # A proposal outside the support (e.g. a scale that underflows to 0) raises PyMC's
    # ParameterValueError; it is a point of zero density, so it becomes -inf (rejected).
    def _logp(self, theta):
        try:
            lp, _ = self.tall.prior_value_and_grad(theta)
            return float(lp) + self.scale * float(np.sum(self.tall.loglik_rows(theta, self.batch)))
        except ParameterValueError:
            return -np.inf

    def _logp_grad(self, theta, batch=None):
        try:
            lp, dlp = self.tall.prior_value_and_grad(theta)
            ll, dll = self.tall.loglik_sum_value_and_grad(theta, self.batch if batch is None else batch)
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
            value, warm = S.value(cand, self.summary_warm)
            new_delta = S.delta(value)
            evals = n * getattr(S, "newton_steps", 0)
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
                self.batch, self.summary_value, self.summary_warm = cand, value, warm
            self.delta_sq = new_dsq
        return accepted, prob, K.stationary_refresh_signal(prob, old_dsq, new_dsq), evals

    def astep(self, q0):
        if self.subset is None:
            self._init_chain()
        theta = np.asarray(q0.data, dtype=float)
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
        return q0.__class__(theta, q0.point_map_info), [stats]

    # ------------------------------------------------------------- diagnostics
    def _maybe_warn(self, rate):
        if (not self.tune and not self.warned and self.swap_size > 0
                and self.n_phase_iter % _WARN_AFTER == 0 and rate < MIN_REFRESH_RATE):
            self.warned = True
            warn_poor(_refresh_message(rate, self.n_phase_iter))

    def reset_tuning(self):
        """Forget the chain's subset, ε and step sizes (called at each chain's start)."""
        self._init_state_fields()

    def set_rng(self, rng):
        """``pm.sample`` hands each chain its generator here, in the main process and in
        worker processes alike (workers neither restore ``sampling_state`` nor call
        ``reset_tuning``), so this is where a chain's own state starts afresh.
        """
        super().set_rng(rng)
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
