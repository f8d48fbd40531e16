"""``pms.SubsampleMH``: Metropolis-Hastings whose accept test reads a subsample of the rows.

A thin PyMC step over the plain accept tests of :mod:`pymc_subsample.kernels.mh_tests`
and the proposals of :mod:`pymc_subsample.kernels.proposals`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import mean_check, min_ess_fraction
from pymc_subsample.estimators.subsampled import perturbed_value
from pymc_subsample.kernels import mh_tests
from pymc_subsample.kernels.proposals import (
    adapt_log_scale,
    adapted_cholesky,
    laplace_cholesky,
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
from pymc_subsample.subsample import block_slices, block_update, uniform_with_replacement
from pymc_subsample.subsample.batch import Subsample

__all__ = ["SubsampleMH", "SubsampleMHState", "adapted_thin"]

TESTS = ("pseudo-marginal", "austerity", "confidence", "barker", "two-sample", "exact")
PROPOSALS = ("laplace", "random-walk")
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
#: the default ``thin`` grows at the end of warm-up where the chain's last half of warm-up draws
#: has an integrated autocorrelation time τ̂ (draws per effective draw, worst coordinate) above
#: THIN_TAU_LIMIT: to thin·τ̂/THIN_TAU_TARGET moves, at most THIN_GROWTH_LIMIT × the default
THIN_TAU_LIMIT = 4.0
THIN_TAU_TARGET = 2.0
THIN_GROWTH_LIMIT = 10
THIN_MIN_DRAWS = 100  # warm-up draws in that last half, at least, to estimate τ̂


@dataclass_state
class SubsampleMHState(SubsampleStepState):
    log_scale: float
    n_steps: int
    n_accepted: int
    n_tune_steps: int
    subsample: Any
    current_theta: Any
    current_value: float
    current_sigma2: float
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
        The accept test (see Notes for what each targets).
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
        Austerity, two-sample (ε) and confidence (δ): the probability that a decision
        differs from exact MH's. The sequential tests spend it over their looks, level
        ε/(2k²) at look k (the ISS slides' (Alquier) δ_k; for the t-tests this replaces the level ε at every
        look of El hanchi 2019 Algorithm 1, under which the decision error on hard decisions is
        several times ε, see ``benchmarks/README.md``); the t-tests' guarantee holds
        under the CLT, the confidence sampler's given a valid ``range_bound``.
        Barker (δ of Seita et al. 2017, "Algorithm", step 2): the minibatch grows until σ²(Δ*) < 1
        and the bound (6.4 E|Z|³ + 2 E|Z|)/√b + (correction CDF error ≈ 1.7e-5) on
        sup |P(accept) − exact Barker| is below δ. That bound is ≥ 8.4/√b, so δ = 0.01 needs
        b > 705,600 rows: below that N every step reads all rows (the exact Barker test, a
        warning says so); about (12/δ)² rows are read for Gaussian-like terms, and far more
        for heavy-tailed ones (MNIST 0/1 with an order-2 proxy: E|Z|³ ≈ 20-45, so every δ < 1
        read all N = 14,780 rows). ``error=None`` (Barker only): stop as soon as σ²(Δ*) < 1,
        Seita et al.'s (2017) first rule, with no control of the error.
    num_blocks : int
        G, blocks of the correlated pseudo-marginal subsample update (ρ ≈ 1 − 1/G).
    model, center, proxy_order, chunk_size, rng, initial_point
        See :class:`SubsampleStep`.
    use_proxy : bool, default True
        Sequential tests work on t_k = ℓ_k(θ') − ℓ_k(θ) − (q_k(θ') − q_k(θ)) with the
        Taylor sums added exactly (False: t_k = ℓ_k(θ') − ℓ_k(θ)).
    range_bound : callable or "empirical", required for test="confidence"
        ``range_bound(theta, theta_prop) -> C`` with C ≥ max_k |t_k| (e.g.
        :func:`~pymc_subsample.kernels.mh_tests.logistic_range_bound` for logistic
        regression, a rigorous bound), or "empirical": C = 2 · max over the N rows and
        8 Laplace draws of |ℓ_k − q_k| / ||θ − θ*||_Σ^{r+1}, times
        (||θ − θ*||_Σ^{r+1} + ||θ' − θ*||_Σ^{r+1}) — a heuristic that assumes the
        remainder scales like a Taylor remainder; it voids the δ guarantee. A callable with
        a ``proxy_order`` attribute (as ``logistic_range_bound`` returns) must have been
        built for the terms read — the same ``proxy_order``, or None/0 when
        ``use_proxy=False`` — else a ValueError says what to change. At run time, a term
        read with |t_k| > C warns once (UserWarning): the bound is wrong and δ is void.
    target_accept : float, default 0.234
        Tuning target (optimal for random walks in high dimension; about 0.44 is optimal
        for d = 1). Barker's test accepts less than MH by construction.
    adapt_scale : bool, default True
    thin : int, optional
        Metropolis-Hastings moves per draw (``pm.sample`` iteration). Default
        min(50, 2d): a random walk with its scale tuned near the optimum mixes at about
        0.33/d of an independent draw per move on a d-dimensional near-Gaussian target
        (Roberts, Gelman & Gilks 1997, the efficiency limit at acceptance 0.234), so 2d
        moves give an effective sample size near 2/3 of the draws; with one move per draw a
        chain's ESS is a small fraction of its draws (``benchmarks/README.md``). Each move
        reads its own subsample (m rows),
        so a draw costs ``thin`` moves; ``thin=1`` is the plain chain of the seeds. The default
        grows, for each chain at the end of its warm-up, where the last half of the warm-up
        draws mixes slower than the near-Gaussian rate: with τ̂ = draws / min ESS over the
        coordinates above 4, ``thin`` becomes thin·τ̂/2 moves (at most 10× the default), so the
        draws after warm-up have an ESS near half their number again. On a curved posterior (a
        Bambi ``(1|group)`` logistic model) a random walk needs that many more moves; the cost
        per draw grows by the same factor. A ``thin`` you pass is kept.
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
      range bound; the stationary law is within O(δ) in TV of the posterior.
    * barker (Seita et al. 2017): sup_y |P(accept) − S(Δ − y)| ≤ δ, S the logistic CDF, up to the
      plug-in estimate of the moments in the bound (Seita et al. 2017, "Bounding acceptance
      probability error"); the stationary law is within δ/(1 − η) in TV of the posterior
      for a chain contracting at rate η (Seita et al. 2017, "Bounds stationary distribution").
    * exact: full-data MH, the reference (``is_exact`` True, N evaluations per step).

    Stats (per draw, over its ``thin`` moves): ``accept`` is the mean of min(1, e^Δ̂) for
    pseudo-marginal and exact MH and of the 0/1 decisions for sequential tests;
    ``accepted`` whether θ moved during the draw; ``accepted_fraction`` the fraction of
    its moves accepted; ``batch_size`` the mean rows read per decision; ``moves`` the MH
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
        "n_loglik_evals": (np.int64, []),
        "loglik_var": (np.float64, []),
        "scale": (np.float64, []),
        "moves": (np.int64, []),
    }

    def __init__(self, vars=None, *, test="pseudo-marginal", subsample_size=None, proposal="laplace",
                 scale=None, error=0.01, num_blocks=100, model=None, center=None, proxy_order=2,
                 use_proxy=True, range_bound=None, target_accept=0.234, adapt_scale=True,
                 importance_probs=None, init_at_center=True, thin=None, chunk_size=DEFAULT_CHUNK_SIZE,
                 **kwargs):
        if test not in TESTS:
            raise ValueError(f"Unknown test {test!r}; choose one of {', '.join(map(repr, TESTS))}.")
        if proposal not in PROPOSALS:
            raise ValueError(f"Unknown proposal {proposal!r}; choose 'laplace' or 'random-walk'.")
        if error is None and test != "barker":
            raise ValueError(f"error=None (no error control) is allowed only for test='barker'; got "
                             f"test={test!r}: pass a probability strictly between 0 and 1 (e.g. 0.01).")
        if error is not None and (isinstance(error, bool) or not isinstance(error, (int, float))
                                  or not 0 < error < 1):
            raise ValueError(
                f"error must be a probability strictly between 0 and 1 (e.g. 0.01); got {error!r}.")
        if not 0 < target_accept < 1:
            raise ValueError(f"target_accept must be in (0, 1); got {target_accept!r}.")
        if test == "confidence" and range_bound is None:
            raise ValueError(
                "test='confidence' needs a bound C(θ, θ') on max_k |t_k| for its concentration "
                "inequality, and none can be derived for a general model. Pass "
                "range_bound=callable(theta, theta_prop) (e.g. "
                "pymc_subsample.kernels.mh_tests.logistic_range_bound(X, center) for logistic "
                "regression) or range_bound='empirical' (heuristic), or use another test."
            )
        if thin is not None:
            thin = check_positive(thin, "thin", integer=True)
        if scale is not None and not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be a positive number; got {scale!r}.")
        if test == "confidence" and callable(range_bound):
            _check_bound_order(range_bound, proxy_order, use_proxy)
        self.test, self._requested = test, (subsample_size, num_blocks)
        super().__init__(vars, model=model, center=center, proxy_order=proxy_order,
                         chunk_size=chunk_size, **kwargs)
        n, d = self.tall.n_rows, self.tall.ndim
        self.test, self.error, self.use_proxy = test, None if error is None else float(error), bool(use_proxy)
        self.is_exact = test == "exact"
        if subsample_size is None:
            # m = 1000 keeps σ̂² near 1 with order-2 proxies on most GLMs (Dang et al. 2019 §6);
            # sequential tests grow by ⌈√N⌉ rows per look (El hanchi 2019 §3.2)
            subsample_size = (min(1000, n) if test == "pseudo-marginal"
                              else min(n, max(2, math.ceil(math.sqrt(n)))))
        self.subsample_size = int(subsample_size)
        if test == "pseudo-marginal":
            self._blocks = block_slices(self.subsample_size, int(num_blocks))
        # per chain (SubsampleMHState): adapted from the warm-up draws (_adapt_proposal)
        self.proposal_chol = self._proposal_cholesky(proposal)
        self.warmup_draws, self.proposal_changed_at = [], 0
        if scale is None:
            scale = 2.38 / math.sqrt(d)
            if proposal == "random-walk":
                scale *= math.sqrt(self._laplace_var_mean) if self._laplace_var_mean else 0.1
        self.target_accept, self.adapt_scale = float(target_accept), bool(adapt_scale)
        self.init_at_center = bool(init_at_center)
        # the warm-up draws estimate the proposal's covariance only when each is this many moves
        # from the last: with thin=1 (the papers' chain) 100 draws of a random walk are 100 small
        # correlated steps, and their covariance replaced a fitting Laplace one on Skin Segmentation
        # measured with one move per draw: the zoo GLMs (d = 3-5, N = 100,000, 1000 draws) had ESS
        # 13-80 and did not agree with NUTS
        self._default_thin = min(MAX_THIN, 2 * d)
        self._adapt_thin = thin is None
        self.thin = thin if thin is not None else self._default_thin
        self._chunk_size = int(chunk_size)
        self.importance_probs = None if importance_probs is None else _check_probs(importance_probs, n)
        self._range_bound = (self._empirical_range_bound(chunk_size) if range_bound == "empirical"
                             else range_bound)
        if self._range_bound is not None and not callable(self._range_bound):
            raise ValueError("range_bound must be a callable (theta, theta_prop) -> C or 'empirical'.")
        self._range_warned = False  # the run-time range check warns once per sampler
        if test == "barker" and self.error is not None:
            # Seita et al.'s (2017) bound is ≥ 8.4/√b for any terms (mh_tests.BARKER_MIN_CONSTANT)
            floor = mh_tests.BARKER_MIN_CONSTANT / math.sqrt(max(n - 1, 1)) + mh_tests.correction_error()
            if self.error <= floor:
                warnings.warn(
                    f"SubsampleMH(test='barker', error={self.error:g}): seed 001's bound on the "
                    "acceptance-probability error, (6.4 E|Z|³ + 2 E|Z|)/√b at b rows, is at least "
                    f"8.4/√b and stays above error until b = N = {n}, so every step reads all N rows "
                    f"(the exact Barker test). To subsample, raise error above {floor:.3g} (about "
                    "(12/error)² rows are read for Gaussian-like terms, more for heavy-tailed ones), or "
                    "pass error=None to stop as soon as σ²(Δ*) < 1, without control of the error.",
                    UserWarning, stacklevel=2)
        # per-chain state (reset by pm.sample between chains through SubsampleMHState)
        self.log_scale = math.log(scale)
        self.n_steps = self.n_accepted = self.n_tune_steps = 0
        self.subsample, self.current_theta = None, None
        self.current_value, self.current_sigma2 = math.nan, math.nan

    def check_arguments(self, n_rows):
        subsample_size, num_blocks = self._requested
        if subsample_size is None:
            return
        m = check_size(subsample_size, "subsample_size", n_rows)
        if self.test == "pseudo-marginal" and (
                isinstance(num_blocks, bool) or not isinstance(num_blocks, (int, np.integer))
                or not 1 <= num_blocks <= m):
            raise ValueError(f"num_blocks must be an integer between 1 and subsample_size = {m}; "
                             f"got {num_blocks!r}.")

    # ------------------------------------------------------------------ set-up
    def _proposal_cholesky(self, proposal):
        precision = self.target.laplace_precision()
        self._laplace_var_mean = None
        if proposal == "laplace":
            chol = laplace_cholesky(precision)
            self._laplace_chol = chol
            return chol
        try:
            chol = laplace_cholesky(precision)
            self._laplace_chol = chol
            self._laplace_var_mean = float(np.sum(chol**2) / self.tall.ndim)
        except ValueError:
            self._laplace_chol = None
        return None

    def _empirical_range_bound(self, chunk_size):
        """Heuristic C(θ, θ') from the full data at 8 Laplace draws (see class docstring)."""
        chol = self._laplace_chol if self._laplace_chol is not None else np.eye(self.tall.ndim)
        inv = np.linalg.inv(chol)
        center, power = self.proxy.center, (self.proxy.order + 1 if self.use_proxy else 1)
        rng = np.random.default_rng(0)
        worst = 0.0
        for _ in range(8):
            z = rng.standard_normal(self.tall.ndim)
            theta = center + 2.0 * chol @ z
            for start in range(0, self.tall.n_rows, chunk_size):
                batch = self.tall.row_slice(start, min(start + chunk_size, self.tall.n_rows))
                if self.use_proxy:
                    rem = self.target.differences(theta, batch)
                else:  # Lipschitz-type constant of ℓ_k along the draw
                    rem = self.tall.loglik_rows(theta, batch) - self.tall.loglik_rows(center, batch)
                worst = max(worst, float(np.max(np.abs(rem))) / float(np.linalg.norm(2.0 * z)) ** power)

        def bound(theta, theta_prop):
            a = np.linalg.norm(inv @ (theta - center)) ** power
            b = np.linalg.norm(inv @ (theta_prop - center)) ** power
            if not self.use_proxy:
                return 2.0 * worst * float(np.linalg.norm(inv @ (theta_prop - theta)))
            return 2.0 * worst * float(a + b)

        # built for the terms this sampler reads (see _check_bound_order)
        bound.proxy_order = self.proxy.order if self.use_proxy and self.proxy.order > 0 else None
        return bound

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
        log_u = math.log(u)
        log_prior_ratio = self._log_prior(theta_p) - self._log_prior(theta)
        if self.test == "pseudo-marginal":
            accept, stats = self._pseudo_marginal(theta, theta_p, log_u)
        elif self.test == "exact":
            accept, stats = self._exact(theta, theta_p, log_u, log_prior_ratio)
        else:
            accept, stats = self._sequential(theta, theta_p, u, log_u, log_prior_ratio)
        self.n_steps += 1
        self.n_accepted += int(accept)
        if self.tune and self.adapt_scale:
            self.log_scale = adapt_log_scale(self.log_scale, accept, self.n_tune_steps, self.target_accept)
            self.n_tune_steps += 1
        stats.update(accepted=bool(accept), acceptance_rate=self.n_accepted / self.n_steps,
                     scale=math.exp(self.log_scale))
        return (theta_p if accept else theta), stats

    def _pseudo_marginal(self, theta, theta_p, log_u):
        tall, proxy, n = self.tall, self.proxy, self.tall.n_rows
        evals = 0
        if self.subsample is None:
            idx = uniform_with_replacement(self.rng, n, self.subsample_size)
            self.subsample = Subsample.gather(tall, idx)
            evals += self.subsample_size
        if self.current_theta is None or not np.array_equal(self.current_theta, theta):
            # first step, or θ moved under another step: estimate at the current (θ, u)
            value, self.current_sigma2 = perturbed_value(self.target, self.subsample, theta)
            self.current_value = value + self._log_prior(theta)
            self.current_theta = theta.copy()
            evals += self.subsample_size
        new_idx, block = block_update(self.rng, self.subsample.idx, n, self._blocks)
        sub_p = self.subsample.with_block(tall, new_idx, block)
        d = self.target.differences(theta_p, sub_p.batch)
        offset = self._log_prior(theta_p) + proxy.sum_value_and_grad(theta_p)[0]
        accept, m, info = mh_tests.pseudo_marginal_test(self.current_value, d, n, offset, log_u)
        if accept:
            self.subsample, self.current_theta = sub_p, theta_p.copy()
            self.current_value, self.current_sigma2 = info["value"], info["loglik_var"]
        # evaluations: ℓ_k at θ' on m rows + ℓ_k(θ*) for the rows of the refreshed block
        evals += m + (block.stop - block.start)
        return accept, {"accept": float(min(1.0, math.exp(min(info["delta_hat"], 0.0)))),
                        "batch_size": m, "n_loglik_evals": evals, "loglik_var": self.current_sigma2}

    def _exact(self, theta, theta_p, log_u, log_prior_ratio):
        """Full-data MH (the reference): Σ_k ℓ_k(θ) is cached, so N evaluations per step."""
        evals = 0
        if self.current_theta is None or not np.array_equal(self.current_theta, theta):
            self.current_value, self.current_theta = self._full_loglik(theta), theta.copy()
            evals += self.tall.n_rows
        proposed = self._full_loglik(theta_p)
        delta = proposed - self.current_value + log_prior_ratio
        accept = mh_tests.exact_mh_test(delta, log_u)
        if accept:
            self.current_value, self.current_theta = proposed, theta_p.copy()
        return accept, {"accept": float(min(1.0, math.exp(min(delta, 0.0)))), "batch_size": self.tall.n_rows,
                        "n_loglik_evals": evals + self.tall.n_rows, "loglik_var": 0.0}

    def _full_loglik(self, theta) -> float:
        n, size = self.tall.n_rows, self._chunk_size
        return float(sum(np.sum(self.tall.loglik_rows(theta, self.tall.row_slice(a, min(a + size, n))))
                         for a in range(0, n, size)))

    def _sequential(self, theta, theta_p, u, log_u, log_prior_ratio):
        tall, proxy, n = self.tall, self.proxy, self.tall.n_rows
        proxied = self.use_proxy and proxy.order > 0
        offset = log_prior_ratio
        if proxied:
            offset += proxy.sum_value_and_grad(theta_p)[0] - proxy.sum_value_and_grad(theta)[0]
        per_row = 3 if proxied else 2  # ℓ_k at θ and θ' (+ ℓ_k(θ*) for the proxy terms)

        def remainder(at, batch):
            return self.target.differences(at, batch) if proxied else tall.loglik_rows(at, batch)

        def row_terms(idx):
            batch = tall.gather(idx)
            return remainder(theta_p, batch) - remainder(theta, batch)

        def one_point(at):
            return lambda idx: remainder(at, tall.gather(idx))

        size, rng = self.subsample_size, self.rng
        if self.test == "austerity":
            accept, rows, info = mh_tests.austerity_test(row_terms, n, offset, log_u, rng, batch_size=size,
                                                         error=self.error)
        elif self.test == "confidence":
            c = float(self._range_bound(theta, theta_p))
            accept, rows, info = mh_tests.confidence_test(row_terms, n, offset, log_u, rng, batch_size=size,
                                                          error=self.error, range_bound=c)
            self._check_range(info["max_abs_term"], c)
        elif self.test == "barker":
            accept, rows, info = mh_tests.barker_test(row_terms, n, offset, u, rng, batch_size=size,
                                                      error=self.error)
        else:
            accept, rows, info = mh_tests.two_sample_test(
                one_point(theta), one_point(theta_p), n, offset, log_u, rng, batch_size=size,
                error=self.error, probs=self.importance_probs)
            per_row = 2 if proxied else 1
        return accept, {"accept": float(accept), "batch_size": rows, "n_loglik_evals": per_row * rows,
                        "loglik_var": info["loglik_var"]}

    def _check_range(self, observed, bound):
        """Warn once when a term read exceeds C(θ, θ'): the confidence sampler's δ is then void."""
        # 1e-9 relative slack: a valid bound may be matched to the last bits by a term
        if self._range_warned or not observed > bound * (1.0 + 1e-9):
            return
        self._range_warned = True
        order = self.proxy.order if self.use_proxy and self.proxy.order > 0 else None
        terms = (f"remainders of the order-{order} proxy (proxy_order={order}, use_proxy=True)"
                 if order is not None else "differences ℓ_k(θ') − ℓ_k(θ) (no proxy)")
        ratio = observed / bound if bound > 0 else math.inf
        warn_poor(
            f"SubsampleMH(test='confidence'): a term |t_k| = {observed:.3g} read at step {self.n_steps + 1} "
            f"exceeds the range bound C(θ, θ') = {bound:.3g} ({ratio:.3g}x), "
            f"so the error level δ = {self.error:g} is not guaranteed. The terms are {terms}: pass a "
            "range_bound that bounds them (logistic_range_bound(X, center, proxy_order="
            f"{order}) with the sampler's center for logistic regression), or a larger one. "
            "Warned once per sampler.")

    # ----------------------------------------------------------- progress bar
    def progress_columns(self):
        """Acceptance rate so far, rows read per test, proposal scale (and σ̂², pseudo-marginal)."""
        columns = [
            StatColumn("acceptance_rate", "acc", "{:.2f}"),
            StatColumn("batch_size", "m", "{:.0f}"),
        ]
        if self.test == "pseudo-marginal":
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
        """ESS, acceptance after warm-up and, for the pseudo-marginal test, the mean σ̂²."""
        checks = super().run_checks() + [mean_check(
            "accept", "accepted_fraction", lambda v: v < 0.05,
            f"SubsampleMH ({self.test}): {{value:.1%}} of proposals were accepted after warm-up; the "
            "chain barely moves. Lengthen tuning, lower `scale`, or (pseudo-marginal) raise "
            "subsample_size.")]
        if self.test == "pseudo-marginal":
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
        if self.test == "pseudo-marginal" and self.current_sigma2 > 3.0:
            warn_poor(f"SubsampleMH pseudo-marginal: σ̂² = {self.current_sigma2:.2f} at the end of tuning, "
                      "far above the target ≈ 1; raise subsample_size or proxy_order.")


def adapted_thin(warmup_draws, thin, default_thin, since=0) -> int:
    """Moves per draw after warm-up from the warm-up draws ``warmup_draws`` (each ``thin`` moves
    apart) of the kernel that samples on: those from draw ``since`` on (the proposal's last change)
    where they are fewer than the last half yet at least :data:`THIN_MIN_DRAWS`, else the last half.
    ``thin`` where their τ̂ = draws / min ESS is at most :data:`THIN_TAU_LIMIT` or where there
    are fewer than THIN_MIN_DRAWS of them, else ⌈thin·τ̂ / THIN_TAU_TARGET⌉, at most
    THIN_GROWTH_LIMIT × ``default_thin``.
    """
    k = len(warmup_draws)
    start = max(k // 2, since) if k - since >= THIN_MIN_DRAWS else k // 2
    draws = np.asarray(warmup_draws[start:], dtype=float)
    if len(draws) < THIN_MIN_DRAWS:
        return thin
    tau = 1.0 / max(min_ess_fraction(draws), 1.0 / len(draws))  # nan (constant draws): kept
    if not tau > THIN_TAU_LIMIT:
        return thin
    return int(min(math.ceil(thin * tau / THIN_TAU_TARGET), THIN_GROWTH_LIMIT * default_thin))


def _check_bound_order(bound, proxy_order, use_proxy):
    """A range bound that declares the proxy order it was built for must match the terms read.

    The confidence sampler's terms are remainders t_k of the order-r proxy, or plain
    differences of ℓ_k without a proxy (use_proxy=False or order 0, whose constant proxy
    cancels). A bound for another order does not bound them (Alquier's ISS slides). Bounds without
    a ``proxy_order`` attribute cannot be checked here; the run-time check still applies.
    """
    # measured: a bound for order 2 with an order-1 proxy was exceeded 4-40x
    if not hasattr(bound, "proxy_order") or proxy_order not in (0, 1, 2):
        return
    declared = bound.proxy_order
    terms = proxy_order if use_proxy and proxy_order > 0 else None
    if declared == terms or (terms is None and declared in (None, 0)):
        return
    what = (f"remainders of an order-{terms} proxy (proxy_order={terms}, use_proxy=True)"
            if terms is not None else "plain differences ℓ_k(θ') − ℓ_k(θ) (use_proxy=False or proxy_order=0)")
    fix = (f"set proxy_order={declared}" + ("" if use_proxy else " and use_proxy=True")
           if declared not in (None, 0) else "set use_proxy=False")
    raise ValueError(
        f"range_bound was built for proxy order {declared} (its proxy_order attribute), but the "
        f"confidence sampler reads {what}: the bound does not bound these terms, so δ would mean "
        f"nothing. Build it for the terms read (e.g. logistic_range_bound(X, center, "
        f"proxy_order={terms})), or {fix}.")


def _check_probs(probs, n):
    probs = np.asarray(probs, dtype=float)
    if probs.shape != (n,) or not np.all(np.isfinite(probs)) or np.any(probs <= 0):
        raise ValueError(f"importance_probs must be {n} positive finite numbers (one per row).")
    return probs / probs.sum()
