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
when its spread or location is far from what the data support
(:func:`~pymc_subsample.diagnostics.iss_checks.laplace_checks`).
"""

from __future__ import annotations

import numpy as np
from pymc.logprob.utils import ParameterValueError
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.iss_checks import (
    MIN_REFRESH_RATE,
    check_refresh_rate,
    laplace_checks,
    refresh_message,
)
from pymc_subsample.diagnostics.progress import StatColumn
from pymc_subsample.kernels import iss as K
from pymc_subsample.kernels.iss_subset import SubsetUpdate, resolve_subset_size, resolve_swap_size
from pymc_subsample.kernels.iss_theta import ThetaUpdate, check_inner, check_theta_settings, laplace_chol
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import SubsampleStep, SubsampleStepState, check_positive, warn_poor
from pymc_subsample.subsample.summaries import make_summary

__all__ = ["ISS", "ISSState", "check_refresh_rate"]

_WARN_AFTER = 500  # the refresh rate is judged every 500 post-tuning iterations (warns once)
MAX_THIN = 50  # cap of the default iterations per draw


@dataclass_state
class ISSState(SubsampleStepState):
    """Per-chain state: reset by ``pm.sample`` between chains sampled in sequence."""

    chain: K.ChainState | None = None  # the kernel's, from the chain's first step
    warned: bool = False  # the refresh-rate warning, once per chain


@step_state(ISSState)
class ISS(SubsampleStep):
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
        Rows exchanged per subset proposal; default 1 (see ``kernels.iss_subset.resolve_swap_size``:
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
        A ``TallModel`` is used as it is, so several ISS steps share compiled functions.
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
    **kwargs
        ``rng``, ``client``, ``progressbar``, ``compile_kwargs`` of
        :class:`~pymc_subsample.step_methods.base.SubsampleStep` (``pm.sample`` reseeds ``rng``
        per chain).

    Notes
    -----
    Diagnostics (warnings; they never stop the run):

    * ESS: once per chain when the bulk ESS after warm-up is below 1% of the draws, at
      100, 200, 400, … draws (the check every step method runs);
    * refresh rate: once per chain when the subset refresh rate after tuning is below 1%
      at a multiple of 500 draws, or, for a fixed ε, at the end of ≥ 500 tuning
      iterations (see also :func:`check_refresh_rate` on the result);
    * Laplace checks (:func:`~pymc_subsample.diagnostics.iss_checks.laplace_checks`): at
      100, 200, 400, … draws after warm-up, once per chain and check, when a coordinate's sd
      exceeds 1.5× its Laplace sd at θ* by more than its Monte Carlo error, or its mean is
      more than 2 Laplace sds from θ*. ISS widens the marginals (Alquier's ISS slides,
      Theorem 2 bounds its error only through δ_{n,ε}); these say when by much. They assume
      the unconstrained posterior is close to Gaussian, as it is for tall data.

    Stats (per draw, over its ``thin`` iterations): ``subset_accept`` (mean acceptance
    probability of the subset proposals), ``refresh_rate`` (fraction of accepted subset
    swaps so far in the current phase; reset when tuning stops), ``delta_norm``
    (‖Δ_n(U)‖ at the end of the draw), ``epsilon``, ``n_loglik_evals`` (per-row
    likelihood evaluations, summed), ``acceptance_rate`` (mean θ acceptance
    probability), ``step_size`` and ``diverging`` (any iteration diverged).
    """

    name = "iss"
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
    ess_remedy = ("The θ chain follows the slow subset chain: run more draws (ISS iterations are "
                  "cheap), compare several chains, and keep swap_size=1.")

    # measured on zoo GLMs (linear and Poisson, N = 50,000, 1 chain of 300 + 300 or 3000 + 1000):
    # summary="moments" with swap n // 100 left means 2.3–8.2 posterior sds from full-data NUTS and
    # largest sd ratios of 2.4–6.5, with bulk ESS 1–10; "map" with swap 1 kept means within 0.30 sd
    # and sds within 0.86–1.29×, with ESS 141–190 in 3000 draws, for 2–3.5× the time per iteration
    def __init__(self, vars=None, *, subset_size="sqrt", epsilon="auto", summary="map",
                 swap_size=None, inner="mh", model=None, center=None, init_at_center=True,
                 target_refresh=0.05, target_accept=None, n_leapfrog=8, thin=None,
                 chunk_size=DEFAULT_CHUNK_SIZE, **kwargs):
        self._requested = (subset_size, swap_size, summary)
        self.epsilon, self.target_refresh = K.check_epsilon(epsilon, target_refresh)
        inner = check_inner(inner)
        n_leapfrog = check_theta_settings(target_accept, n_leapfrog)
        thin = None if thin is None else check_positive(thin, "thin", integer=True)
        self.init_at_center = bool(init_at_center)
        # θ* and the Laplace precision P at θ* of the one target every step method builds
        super().__init__(vars, model=model, center=center, proxy_order=2, chunk_size=chunk_size, **kwargs)
        d = self.tall.ndim
        if target_accept is None:
            target_accept = 0.8 if inner == "hmc" else (0.44 if d == 1 else 0.3)
        # 2d iterations per draw for the random-walk θ update (see the docstring); HMC moves far
        # enough in one. measured with one iteration per draw: the zoo GLMs (d = 3-5, N = 100,000,
        # 1000 draws) had ESS 43-61
        self.thin = thin or (min(MAX_THIN, 2 * d) if inner == "mh" else 1)
        self.scale = self.tall.n_rows / self.n  # the N/n power of the scaled sub-posterior
        precision = self.target.laplace_precision()
        self.laplace_ok = not self.target.laplace_fallback  # the identity: no Laplace checks
        self.laplace_sd = np.sqrt(np.clip(np.diag(np.linalg.pinv(precision)), 1e-300, None))
        self.summary = make_summary(summary, self.tall, chunk_size=chunk_size,
                                    full_map=self.target.center, full_hessian=-precision)
        self.kernel = K.ISSKernel(
            SubsetUpdate(self.summary, self.tall.gather, self.swap_size),
            ThetaUpdate(inner, laplace_chol(precision), n_leapfrog, float(target_accept)),
            self.epsilon, self.target_refresh)
        self.reset_tuning()

    def check_arguments(self, n_rows):
        subset_size, swap_size, _ = self._requested
        self.n = resolve_subset_size(subset_size, n_rows)
        self.swap_size = resolve_swap_size(swap_size, self.n, n_rows)

    def check_model(self, tall):
        summary = self._requested[2]
        if not (callable(summary) or (isinstance(summary, str) and summary in ("moments", "map"))):
            make_summary(summary, tall)  # its ValueError, before the set-up passes

    # ----------------------------------------------------------------- targets
    # A proposal outside the support (e.g. a scale that underflows to 0) raises PyMC's
    # ParameterValueError; it is a point of zero density, so it becomes -inf (rejected).
    def _logp(self, theta, rows):
        """The scaled sub-posterior log π̄_n(θ|Y_U) = log π(θ) + (N/n) Σ_{k∈U} ℓ_k(θ) on U's ``rows``."""
        try:
            lp, _ = self.tall.prior_value_and_grad(theta)
            return float(lp) + self.scale * float(np.sum(self.tall.loglik_rows(theta, rows)))
        except ParameterValueError:
            return -np.inf

    def _logp_grad(self, theta, rows):
        try:
            lp, dlp = self.tall.prior_value_and_grad(theta)
            ll, dll = self.tall.loglik_sum_value_and_grad(theta, rows)
        except ParameterValueError:
            return -np.inf, np.zeros_like(theta)
        return float(lp) + self.scale * float(ll), dlp + self.scale * dll

    # -------------------------------------------------------------------- step
    def astep(self, q0):
        theta = np.asarray(q0.data, dtype=float)
        if self.chain is None:
            self.chain = self.kernel.init(self.rng, self.tall.n_rows, self.n, self.tall.ndim)
            if self.init_at_center:
                # measured from PyMC's initial point instead: most of a 300-iteration warm-up spent
                # travelling, and a post-warm-up ESS of 0.8% of the draws on a 4,000-row linear model
                theta = self.target.center.copy()
        target = self._logp if self.kernel.theta.inner == "mh" else self._logp_grad
        iterations = []
        for _ in range(self.thin):
            self.chain, theta, info = self.kernel.step(self.rng, self.chain, theta, target, self.tune)
            self._maybe_warn(info.refresh_rate)
            iterations.append(info)
        stats = iterations[-1]._asdict() | {
            "subset_accept": float(np.mean([i.subset_accept for i in iterations])),
            "n_loglik_evals": int(sum(i.n_loglik_evals for i in iterations)),
            "acceptance_rate": float(np.mean([i.acceptance_rate for i in iterations])),
            "diverging": any(i.diverging for i in iterations),
            "tune": bool(self.tune),
        }
        return q0.__class__(theta, q0.point_map_info), [stats]

    # ------------------------------------------------------------- diagnostics
    def run_checks(self):
        """The ESS check every step method runs, and the Laplace checks when P is usable."""
        if not self.laplace_ok:
            return super().run_checks()
        return super().run_checks() + laplace_checks(
            self.target.center, self.laplace_sd, summary_kind=self.summary.kind, swap_size=self.swap_size)

    def _maybe_warn(self, rate):
        n_iter = self.chain.n_phase_iter
        if (not self.tune and not self.warned and self.swap_size > 0
                and n_iter % _WARN_AFTER == 0 and rate < MIN_REFRESH_RATE):
            self.warned = True
            warn_poor(refresh_message(rate, n_iter))

    def reset_tuning(self):
        """Forget the chain's subset, ε and step sizes (called at each chain's start)."""
        self.chain, self.warned = None, False

    def setup_chain(self, rng, tune, draws):
        """``pm.sample`` hands each chain its generator here, in the main process and in
        worker processes alike, so this is where a chain's own state starts afresh.
        """
        super().setup_chain(rng, tune, draws)
        self.reset_tuning()

    def stop_tuning(self):
        if self.chain is not None:
            # with a fixed ε a stuck subset chain is visible already in tuning (auto ε is
            # still moving then, so it is judged after tuning only)
            n_iter, rate = self.chain.n_phase_iter, self.chain.refresh_rate
            if (self.epsilon is not None and self.swap_size > 0 and n_iter >= _WARN_AFTER
                    and rate < MIN_REFRESH_RATE):
                self.warned = True
                warn_poor(refresh_message(rate, n_iter, "during tuning"))
            self.chain = self.kernel.end_tuning(self.chain)
        super().stop_tuning()
