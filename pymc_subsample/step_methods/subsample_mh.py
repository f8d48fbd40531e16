"""``pms.SubsampleMH``: Metropolis-Hastings whose accept test reads a subsample of the rows.

A thin PyMC step over the accept tests registered in
:data:`pymc_subsample.kernels.mh_tests.ACCEPT_TESTS`, looked up by ``test=``, and the proposals of
:mod:`pymc_subsample.kernels.proposals`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.state import dataclass_state

from pymc_subsample.control_variates.taylor import check_proxy_order
from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import mean_check
from pymc_subsample.kernels.mh_tests import (
    ACCEPT_TESTS,
    AcceptOptions,
    Move,
    SequentialTest,
    accept_test_class,
    make_accept_test,
)
from pymc_subsample.kernels.proposals import (
    adapt_log_scale,
    adapted_cholesky,
    initial_proposal,
    random_walk_proposal,
)
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    SubsampleStep,
    SubsampleStepState,
    check_positive,
    check_size,
    warn_poor,
)
from pymc_subsample.step_methods.mh_setup import (
    THIN_GROWTH_LIMIT,
    adapted_thin,
    check_step_arguments,
    default_range_bound,
    glm_range_bound,
)

__all__ = ["THIN_GROWTH_LIMIT", "SubsampleMH", "SubsampleMHState", "adapted_thin"]

MAX_THIN = 50  # cap of the default moves per draw (d > 25 then mixes at ~ 0.33·50/d per draw)
# measured on Bambi's y ~ age + work + (1|group), 50 groups (d = 55, its Laplace covariance 48x the
# posterior variance for the intercept): comparisons at 100, 200 and 400 draws only (one
# replacement, from draws that had not crossed the ridge) gave a min ESS of 5 of 1000 draws; every
# 100 draws, 129
#: every this many warm-up draws, the proposal's covariance is compared with that of the second
#: half of the warm-up draws so far, and replaced where they disagree (``adapted_cholesky``), to
#: the end of warm-up: each replacement lets the chain reach further along a ridge the last one
#: underestimated, so the next estimate is better (adaptive Metropolis, Haario et al. 2001). Once
#: they agree the proposal stays.
COVARIANCE_EVERY = 100


@dataclass_state
class SubsampleMHState(SubsampleStepState):
    log_scale: float
    n_steps: int
    n_accepted: int
    n_tune_steps: int
    current: Any  # the estimate the accept test keeps from move to move (None before the first)
    warmup_draws: Any = None
    proposal_chol: Any = None
    proposal_changed_at: int = 0
    thin: int = 1


@step_state(SubsampleMHState)
class SubsampleMH(SubsampleStep):
    r"""Subsampled Metropolis-Hastings: pseudo-marginal and sequential accept tests.

    Parameters
    ----------
    vars : list, optional
        All free variables (or None).
    test : {"pseudo-marginal", "austerity", "confidence", "barker", "two-sample", "exact"}
        The accept test (see Notes for what each targets), an object of
        :data:`~pymc_subsample.kernels.mh_tests.ACCEPT_TESTS` looked up by this name.
    subsample_size : int, optional
        Pseudo-marginal: the subsample size m (default min(1000, N)). Sequential tests:
        the mini-batch added at each look (default ⌈√N⌉, at least 2).
    proposal : {"laplace", "random-walk"}
        Gaussian random walk with covariance scale² Σ, Σ the Laplace covariance
        (−(∇²log p(θ*) + Σ_k H_k(θ*)))⁻¹ at the centre, or the identity. With "laplace" and
        the default ``thin``, Σ is replaced during warm-up by the covariance of the warm-up draws
        where the two differ by more than the draws' noise (``_adapt_proposal``).
    scale : float, optional
        Initial scale; default 2.38/√d for "laplace" and 2.38/√d · √(tr Σ / d) for
        "random-walk". Adapted during tuning unless ``adapt_scale=False``.
    error : float in (0, 1), or None for test="barker"
        Austerity, two-sample (ε) and confidence (δ): the probability that a decision differs
        from exact MH's, spent over the looks, level ε/(2k²) at look k (the ISS slides' (Alquier)
        δ_k; El hanchi 2019 Algorithm 1 spends ε at every look, and its decision error on hard
        decisions is then several times ε, see ``benchmarks/README.md``); under the CLT for the
        t-tests, given a valid ``range_bound`` for the confidence sampler. Barker: δ of Seita et
        al. 2017 ("Algorithm", step 2), the bound on sup |P(accept) − exact Barker| below which
        the minibatch stops growing (once σ²(Δ*) < 1): the smaller of their Berry-Esseen bound,
        ≥ 8.4/√b (δ = 0.01 alone would need b > 705,600 rows), and a smoothing bound of order
        σ³(Δ*), which the proxy-corrected differences meet after a few hundred rows
        (:func:`~pymc_subsample.kernels.mh_tests.barker_smoothed_error`); both plug in the
        moments of the rows read. ``error=None`` (Barker only): stop as soon as σ²(Δ*) < 1,
        Seita et al.'s (2017) first rule, with no control of the error.
    num_blocks : int
        G, blocks of the correlated pseudo-marginal subsample update (ρ ≈ 1 − 1/G).
    model, center, proxy_order, chunk_size, rng
        See :class:`SubsampleStep`.
    control_variates : bool, default True
        Sequential tests work on t_k = ℓ_k(θ') − ℓ_k(θ) − (q_k(θ') − q_k(θ)), q_k the Taylor
        proxy at θ*, with Σ_k q_k(θ') − q_k(θ) added exactly (Bardenet, Doucet & Holmes 2017,
        §7); False: t_k = ℓ_k(θ') − ℓ_k(θ), the seeds' plain tests.
    range_bound : None, "glm", "empirical" or callable (test="confidence")
        C(θ, θ') ≥ max_k |t_k|. None (default): "glm" where the observed family tabulates
        derivative bounds (Bernoulli-logit, Normal with known σ), else a ValueError before any
        set-up. "glm": the Taylor-remainder bound of
        :func:`~pymc_subsample.kernels.mh_tests.glm_taylor_range_bound`, rigorous, from one pass
        over the rows. "empirical": a heuristic that voids the δ guarantee
        (:func:`~pymc_subsample.kernels.mh_tests.confidence.empirical_range_bound`). A callable
        ``(theta, theta_prop) -> C`` with a ``proxy_order`` attribute (as
        :func:`~pymc_subsample.kernels.mh_tests.logistic_range_bound` returns) must be built
        for the terms read, else a ValueError; a term read above C warns once (δ is void).
    target_accept : float, default 0.234
        Tuning target (optimal for random walks in high dimension; about 0.44 is optimal
        for d = 1). Barker's test accepts less than MH by construction.
    adapt_scale : bool, default True
    thin : int, optional
        Metropolis-Hastings moves per draw (``pm.sample`` iteration), each reading its own
        subsample; ``thin=1`` is the plain chain of the seeds. Default min(50, 2d): a random walk
        tuned near the optimum mixes at about 0.33/d of an independent draw per move on a
        near-Gaussian target (Roberts, Gelman & Gilks 1997, the efficiency limit at acceptance
        0.234), so 2d moves give an ESS near 2/3 of the draws (with one move per draw, a small
        fraction of them, ``benchmarks/README.md``). The default grows, for each chain at the end
        of its warm-up, where the last half of its warm-up draws mixes slower: with τ̂ = draws /
        min ESS over the coordinates above 4, to thin·τ̂/2 moves (at most 10× the default), so the
        draws after warm-up have an ESS near half their number again, as a random walk on a
        curved posterior (a Bambi ``(1|group)`` logistic model) needs; the cost per draw grows by
        the same factor. A ``thin`` you pass is kept.
    importance_probs : array (N,), optional
        Two-sample test: importance probabilities p_k (El hanchi 2019 §5.1); default uniform.
    init_at_center : bool, default True
        Start each chain at the centre θ* instead of PyMC's initial point: far from θ*
        the control variates are poor and sequential tests read most of the N rows, so
        burn-in from the model's initial point is many times slower. The starting point does
        not change the target; all chains then start at the same point (R-hat is less
        informative). Set False to use ``pm.sample``'s ``initvals``/jitter.

    Notes
    -----
    Exactness (``is_exact`` is False except for test="exact"):

    * pseudo-marginal: targets the perturbed posterior of Dang et al. 2019 eq. 4.6, error
      O(1/(N m²)) in total variation; exact when the proxy is exact (σ̂² = 0).
    * austerity (El hanchi 2019 Alg. 1) and two-sample (§5.2.1): each decision differs from
      MH's with probability ≤ ε under the CLT (union bound over the looks, levels
      ε/(2k²); the measured rates are in ``benchmarks/README.md``);
      the bias grows with ε and is not bounded when the CLT fails (heavy-tailed t_k).
    * confidence (Alquier's ISS slides): each decision is wrong with probability ≤ δ given a valid
      range bound (the default "glm" bound is one: Taylor's remainder with the family's
      derivative bounds); the stationary law is within O(δ) in TV of the posterior.
    * barker (Seita et al. 2017): sup_y |P(accept) − S(Δ − y)| ≤ δ, S the logistic CDF, up to the
      plug-in estimate of the moments in the bounds (Seita et al. 2017, "Bounding acceptance
      probability error", and the smoothing bound of
      :func:`~pymc_subsample.kernels.mh_tests.barker_smoothed_error`); the stationary law is
      within δ/(1 − η) in TV of the posterior for a chain contracting at rate η (Seita et al.
      2017, "Bounds stationary distribution").
    * exact: full-data MH, the reference (``is_exact`` True, N evaluations per step).

    Stats (per draw, over its ``thin`` moves): ``accept`` is the mean of min(1, e^Δ̂) for
    pseudo-marginal and exact MH and of the 0/1 decisions for sequential tests;
    ``accepted`` whether θ moved during the draw; ``accepted_fraction`` the fraction of
    its moves accepted; ``batch_size`` the mean rows read per decision; ``looks`` the mean
    mini-batches read per decision (1 for pseudo-marginal and exact MH); ``moves`` the MH
    moves of the draw (``thin``); ``n_loglik_evals`` counts per-row evaluations of ℓ_k at θ,
    θ' and, for the proxy terms of rows entering a subsample, at θ*, summed over the moves;
    ``acceptance_rate`` and ``scale`` are running values after the last move; ``loglik_var``
    is σ̂² of the current estimate (pseudo-marginal) or the variance estimate of Δ̂ at
    decision (austerity, barker, two-sample; nan for confidence, 0 when all N rows were read).
    """

    stats_dtypes_shapes = {
        "accept": (np.float64, []),
        "accepted": (bool, []),
        "accepted_fraction": (np.float64, []),
        "acceptance_rate": (np.float64, []),
        "batch_size": (np.int64, []),
        "looks": (np.float64, []),
        "n_loglik_evals": (np.int64, []),
        "loglik_var": (np.float64, []),
        "scale": (np.float64, []),
        "moves": (np.int64, []),
    }

    def __init__(self, vars=None, *, test="pseudo-marginal", subsample_size=None, proposal="laplace",
                 scale=None, error=0.01, num_blocks=100, model=None, center=None, proxy_order=2,
                 control_variates=True, range_bound=None, target_accept=0.234, adapt_scale=True,
                 importance_probs=None, init_at_center=True, thin=None, chunk_size=DEFAULT_CHUNK_SIZE,
                 **kwargs):
        self.test = accept_test_class(test).name  # an unknown name: a ValueError before all else
        if "use_proxy" in kwargs:
            raise TypeError("SubsampleMH's use_proxy is named control_variates (the same meaning: "
                            "True tests the proxy-corrected differences with the proxy sums added exactly).")
        check_step_arguments(proposal, scale, target_accept)
        thin = None if thin is None else check_positive(thin, "thin", integer=True)
        if self.test == "confidence" and (range_bound is None or isinstance(range_bound, str)
                                          and range_bound == "glm"):
            range_bound = default_range_bound(model, check_proxy_order(proxy_order), bool(control_variates))
        self._options = AcceptOptions(
            subsample_size=subsample_size, error=error, num_blocks=num_blocks,
            control_variates=bool(control_variates), proxy_order=proxy_order, range_bound=range_bound,
            importance_probs=importance_probs, chunk_size=int(chunk_size))
        super().__init__(vars, model=model, center=center, proxy_order=proxy_order,
                         chunk_size=chunk_size, **kwargs)
        laplace_chol, self.proposal_chol, scale = initial_proposal(self.target.laplace_precision(), proposal,
                                                                   scale)
        if self.test == "confidence" and range_bound == "glm":
            bound = glm_range_bound(self.tall, self.proxy, laplace_chol, self._options.control_variates,
                                    self._options.chunk_size)
            self.accept_test = replace(self.accept_test, range_bound=bound)
        # the test with what needs the set-up: the confidence sampler's empirical bound
        self.accept_test = self.accept_test.prepare(self.target, laplace_chol)
        self.error, self.control_variates = None if error is None else float(error), bool(control_variates)
        self.is_exact, self.subsample_size = self.accept_test.is_exact, self.accept_test.subsample_size
        self.target_accept, self.adapt_scale = float(target_accept), bool(adapt_scale)
        self.init_at_center = bool(init_at_center)
        # the warm-up draws estimate the proposal's covariance only when each is this many moves
        # from the last: with thin=1 (the papers' chain) 100 draws of a random walk are 100 small
        # correlated steps, and their covariance replaced a fitting Laplace one on Skin Segmentation
        # measured with one move per draw: the zoo GLMs (d = 3-5, N = 100,000, 1000 draws) had ESS
        # 13-80 and did not agree with NUTS
        self._default_thin = min(MAX_THIN, 2 * self.tall.ndim)
        self._adapt_thin = thin is None
        self.thin = thin if thin is not None else self._default_thin
        # per-chain state (reset by pm.sample between chains through SubsampleMHState); the proposal's
        # covariance is adapted from the warm-up draws (_adapt_proposal)
        self.warmup_draws, self.proposal_changed_at = [], 0
        self.log_scale = math.log(scale)
        self.n_steps = self.n_accepted = self.n_tune_steps = 0
        self.current = None

    def check_arguments(self, n_rows):
        """The accept test configured for N rows (:func:`make_accept_test`), before any set-up."""
        size = self._options.subsample_size
        if size is not None:
            size = check_size(size, "subsample_size", n_rows)
        self.accept_test = make_accept_test(self.test, n_rows, replace(self._options, subsample_size=size))

    # ------------------------------------------------------------------- step
    def _log_prior(self, theta) -> float:
        return float(self.tall.prior_value_and_grad(theta)[0])

    def astep(self, q0: RaveledVars):
        theta = np.asarray(q0.data, dtype=float)
        if self.init_at_center and self.n_steps == 0:
            # measured: burn-in from the model's initial point was 10-20x slower
            theta = self.proxy.center.copy()
        start, moves = theta, []
        for _ in range(self.thin):
            theta, stats = self._move(theta)
            moves.append(stats)
        if self.tune:
            self._record_warmup_draw(theta)
        stats = moves[-1] | {
            "accept": float(np.mean([s["accept"] for s in moves])),
            "accepted": bool(not np.array_equal(theta, start)),
            "accepted_fraction": float(np.mean([s["accepted"] for s in moves])),
            "batch_size": int(round(np.mean([s["batch_size"] for s in moves]))),
            "looks": float(np.mean([s["looks"] for s in moves])),
            "n_loglik_evals": int(sum(s["n_loglik_evals"] for s in moves)),
            "moves": len(moves),
        }
        return RaveledVars(theta, q0.point_map_info), [stats]

    def _record_warmup_draw(self, theta):
        """Keep a warm-up draw for what adapts from them: the default ``thin``
        (:func:`adapted_thin` at the end of warm-up) and the proposal's covariance
        (:meth:`_adapt_proposal`, every COVARIANCE_EVERY draws).
        """
        covariance = self.proposal_chol is not None and self.thin >= self._default_thin
        if self._adapt_thin or covariance:
            self.warmup_draws.append(np.array(theta, dtype=float))
            if covariance and len(self.warmup_draws) % COVARIANCE_EVERY == 0:
                self._adapt_proposal()

    def _adapt_proposal(self):
        """Warm-up only (the kernel is fixed after it), with ``proposal="laplace"`` and each draw at
        least the default ``thin`` moves: every COVARIANCE_EVERY draws, the covariance of the second half
        of the warm-up draws so far replaces the proposal's where the two disagree by more than the
        noise of those draws (:func:`~pymc_subsample.kernels.proposals.adapted_cholesky`), where
        the Laplace covariance is far from the posterior's (a non-centred hierarchical model).
        """
        # measured on the non-centred hierarchical model: with the Laplace covariance an ESS of 2 of
        # 1500 draws; with the posterior's, 296-674; with the adapted one, 217-787
        k = len(self.warmup_draws)
        chol = adapted_cholesky(self.warmup_draws[k // 2:], self.proposal_chol)
        if chol is not None:
            self.proposal_chol = chol
            self.proposal_changed_at = k
            if self.adapt_scale:  # a scale the user fixed (adapt_scale=False) stays theirs
                self.log_scale = math.log(2.38 / math.sqrt(self.tall.ndim))  # optimal for a Gaussian
                self.n_tune_steps = 0  # the scale's adaptation starts again, with its large first steps

    def _move(self, theta):
        """One Metropolis-Hastings move from θ: the new θ and the move's stats."""
        rng = self.rng
        theta_p = random_walk_proposal(rng, theta, math.exp(self.log_scale), self.proposal_chol)
        u = rng.random()
        move = Move(self.target, theta, theta_p, self._log_prior(theta), self._log_prior(theta_p),
                    number=self.n_steps + 1)
        accept, stats, self.current = self.accept_test.decide(rng, u, move, self.current)
        self.n_steps += 1
        self.n_accepted += int(accept)
        if self.tune and self.adapt_scale:
            self.log_scale = adapt_log_scale(self.log_scale, accept, self.n_tune_steps, self.target_accept)
            self.n_tune_steps += 1
        stats.update(accepted=bool(accept), acceptance_rate=self.n_accepted / self.n_steps,
                     scale=math.exp(self.log_scale))
        return (theta_p if accept else theta), stats

    # ----------------------------------------------------------- progress bar
    def progress_columns(self):
        """Acceptance rate so far, rows read per test, proposal scale (and σ̂², pseudo-marginal)."""
        columns = [
            StatColumn("acceptance_rate", "acc", "{:.2f}"),
            StatColumn("batch_size", "m", "{:.0f}"),
        ]
        if ACCEPT_TESTS[self.test].reports_sigma2:
            columns.append(StatColumn("loglik_var", "σ̂²", compact))
        columns.append(StatColumn("scale", "scale", "{:.3g}"))
        return columns

    # ----------------------------------------------------------------- checks
    # measured on the non-centred hierarchical zoo model at m = 1000: σ̂² ≈ 10⁻⁵ with the proxy in η,
    # against 487 with the proxy in θ, where the pseudo-marginal chain stuck (1.5% accepted)
    #: the Taylor proxy in η where rows are affine in a row-free φ(θ) (non-centred hierarchical
    #: models), whose σ̂² is far smaller there than the proxy's in θ. Unlike SGLD there is an
    #: accept step, so the better proxy cannot make the chain diverge.
    row_free_proxy = True
    ess_remedy = ("Lengthen tuning so the proposal scale adapts, run more draws, or use pms.HMCECS, "
                  "whose gradient-based moves mix faster.")

    def run_checks(self):
        """ESS, acceptance and, for the sequential tests, the mean batch (above N/4: as costly as
        full-data MH) after warm-up; for the pseudo-marginal test, the mean σ̂².
        """
        checks = super().run_checks() + [mean_check(
            "accept", "accepted_fraction", lambda v: v < 0.05,
            f"SubsampleMH ({self.test}): {{value:.1%}} of proposals were accepted after warm-up; the "
            "chain barely moves. Lengthen tuning, lower `scale`, or (pseudo-marginal) raise "
            "subsample_size.")]
        n_rows = self.tall.n_rows
        if isinstance(self.accept_test, SequentialTest) and not self.is_exact:
            # the rows read per decision of a test that stops early (pseudo-marginal: a fixed m)
            checks.append(mean_check(
                "batch", "batch_size", lambda v: v > n_rows / 4,
                f"SubsampleMH ({self.test}): the mean batch after warm-up is {{value:.0f}} rows, above "
                f"N/4 = {n_rows / 4:.0f}: this test is as costly as full-data MH here. Keep "
                "control_variates=True, pass a center nearer the posterior mode or raise proxy_order; "
                "with test='barker', error=None or a larger error stops earlier."))
        if ACCEPT_TESTS[self.test].reports_sigma2:
            checks.append(mean_check(
                "variance", "loglik_var", lambda v: v > 3.0,
                "SubsampleMH pseudo-marginal: σ̂² averages {value:.3g} after warm-up, far above the "
                "target ≈ 1, so the chain sticks. Raise subsample_size or proxy_order, or pass a "
                "center nearer the posterior mode."))
        return checks

    # ----------------------------------------------------------------- tuning
    def stop_tuning(self):
        super().stop_tuning()
        if self._adapt_thin:
            self.thin = adapted_thin(self.warmup_draws, self.thin, self._default_thin,
                                     since=self.proposal_changed_at)
        self.warmup_draws = []
        if self.n_steps >= 50 and self.n_accepted / self.n_steps < 0.02:
            warn_poor(f"SubsampleMH ({self.test}) accepted {self.n_accepted / self.n_steps:.1%} of "
                      "proposals during tuning: the chain barely moves. Lengthen tuning, lower `scale`, "
                      "or (pseudo-marginal) raise subsample_size.")
        sigma2 = math.nan if self.current is None else self.current.sigma2
        if ACCEPT_TESTS[self.test].reports_sigma2 and sigma2 > 3.0:
            warn_poor(f"SubsampleMH pseudo-marginal: σ̂² = {sigma2:.2f} at the end of tuning, "
                      "far above the target ≈ 1; raise subsample_size or proxy_order.")
