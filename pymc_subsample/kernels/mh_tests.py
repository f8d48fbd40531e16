"""Accept/reject tests of subsampled Metropolis-Hastings, as plain functions (no PyMC).

Every test decides whether to move from θ to a proposal θ' when the exact MH
log-ratio is

    Δ = offset + Σ_{k=1}^N t_k,

where ``offset`` holds everything computed exactly (log prior ratio, log proposal
ratio, and Σ_k q_k(θ') − q_k(θ) when Taylor control variates are used) and
t_k = ℓ_k(θ') − ℓ_k(θ) [− (q_k(θ') − q_k(θ))] are per-row terms that a test only
evaluates on the rows it draws, through a callable ``row_terms(idx) -> (len(idx),)``.
Exact MH accepts iff log u < Δ, i.e. iff the mean of the t_k exceeds
μ₀ = (log u − offset)/N (El hanchi 2019, §3.1; Alquier's ISS slides, "Austerity in MCMC-Land").

Each test returns ``(accept, rows_used, stats)`` with ``stats`` a dict holding at
least ``delta_hat`` (the estimate of Δ at decision) and ``loglik_var`` (its variance
estimate, nan where undefined). Randomness comes only from the ``rng`` and the
uniform passed in, so a test with error level → 0 or batch = N reproduces the exact
decision on the same uniform.

The sequential t-tests (austerity, two-sample) and the confidence sampler look at the data
several times; a level ε at every look (El hanchi 2019 Algorithm 1, line 6) lets the
wrong-decision probabilities of the looks add up, to several times ε on hard decisions
(``benchmarks/mh_error_rates.py``). By default all three therefore spend ε over the looks,
level ε_k = (p − 1) ε / (p k^p) at look k with p = 2, as Bardenet et al.'s confidence
sampler does (Alquier's ISS slides), so that Σ_k ε_k ≤ ε bounds the probability that the whole
decision differs from the exact one (under the CLT for the t-tests).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.optimize import nnls
from scipy.special import expit, ndtr, stdtr

from pymc_subsample.estimators.loglik import perturbed_loglik

__all__ = [
    "austerity_test",
    "barker_clt_error",
    "barker_test",
    "confidence_test",
    "correction_distribution",
    "correction_error",
    "exact_barker_test",
    "exact_mh_test",
    "logistic_range_bound",
    "look_level",
    "pseudo_marginal_test",
    "sample_correction",
    "two_sample_test",
]


# --------------------------------------------------------------------- exact tests
def exact_mh_test(delta, log_u) -> bool:
    """Exact MH: accept iff log u < Δ (El hanchi 2019 §3.1)."""
    return bool(log_u < delta)


def exact_barker_test(delta, u) -> bool:
    """Exact Barker test: accept iff Δ + X_log > 0 with X_log = logit(u) ~ Logistic(0, 1) (Seita et al. 2017).

    Accepts with probability g(Δ) = 1/(1 + e^{−Δ}), which satisfies detailed balance
    (Barker lemma, Seita et al. 2017).
    """
    return bool(delta + (math.log(u) - math.log1p(-u)) > 0)


# ------------------------------------------------------------------- row streams
class RowStream:
    """Rows 0..N−1 drawn uniformly without replacement, in order.

    New rows come from iid uniform draws with repeats and used rows discarded (the first
    distinct values of an iid sequence are a uniform ordered sample without
    replacement), checked against a boolean mask allocated on the second draw (calloc:
    cheap even for large N); past half the rows, a permutation of the complement is
    drawn once, so the cost never exceeds O(N).
    """

    def __init__(self, rng, n):
        self.rng, self.n = rng, int(n)
        self.count = 0
        self._mask = None
        self._first = None
        self._rest = None

    @property
    def remaining(self) -> int:
        return self.n - self.count

    def take(self, k) -> np.ndarray:
        k = min(int(k), self.remaining)
        if self._first is not None and self._mask is None:
            self._mask = np.zeros(self.n, dtype=bool)
            self._mask[self._first] = True
        if self._rest is None and 2 * (self.count + k) > self.n:
            mask = self._mask if self._mask is not None else np.zeros(self.n, dtype=bool)
            self._rest = self.rng.permutation(np.flatnonzero(~mask))
        if self._rest is not None:
            out, self._rest = self._rest[:k], self._rest[k:]
        else:
            parts, need = [], k
            while need > 0:
                cand = self.rng.integers(0, self.n, size=2 * need + 8)
                _, first = np.unique(cand, return_index=True)
                cand = cand[np.sort(first)]
                if self._mask is not None:
                    cand = cand[~self._mask[cand]]
                for p in parts:
                    cand = cand[~np.isin(cand, p)]
                parts.append(cand[:need])
                need -= parts[-1].size
            out = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.empty(0, np.int64)
            if self._mask is not None:
                self._mask[out] = True
        if self._first is None:
            self._first = out
        self.count += out.size
        return out


def _mean_var(values):
    """Mean and unbiased sample variance (0 for a single value)."""
    n = values.size
    mean = float(values.mean())
    var = float(values.var(ddof=1)) if n > 1 else 0.0
    return mean, var


def look_level(error, look, p=2.0) -> float:
    """Level ε_k = (p − 1) ε / (p k^p) of the k-th look (k ≥ 1), so that Σ_k ε_k ≤ ε.

    Σ_{k≥1} k^{−p} ≤ p/(p − 1) for p > 1, hence the union bound over looks: the probability
    that any look stops on the wrong side is at most ε (Alquier's ISS slides, the confidence sampler's
    δ_k; applied here to the t-tests of El hanchi 2019 too, see the module docstring).
    """
    # measured with the austerity test at a level ε at every look: 5.4 % wrong decisions at
    # ε = 0.01 and 23 % at ε = 0.05 on very hard decisions (benchmarks/mh_error_rates.py)
    return (p - 1.0) * error / (p * look**p)


# ----------------------------------------------------------------- pseudo-marginal
def pseudo_marginal_test(current_value, d, n_rows, offset, log_u):
    """Correlated pseudo-marginal MH with the perturbed difference estimator (Dang et al. 2019 §3-4).

    Parameters
    ----------
    current_value : float
        log p(θ) + ℓ̂(θ; u) − σ̂²(θ; u)/2 for the current state (θ, u), kept from the
        step that accepted it (never re-estimated: that would break the pseudo-marginal
        argument).
    d : array, shape (m,)
        ℓ_{u'_i}(θ') − q_{u'_i}(θ') on the proposed subsample u'.
    n_rows : int
    offset : float
        log p(θ') + Σ_k q_k(θ') (+ log proposal ratio for asymmetric proposals).
    log_u : float

    Returns
    -------
    accept, rows_used, stats
        ``stats["value"]`` is the proposed estimated log-posterior (eq. 4.5) and
        ``stats["loglik_var"]`` its σ̂² (eq. 4.3).
    """
    value, _, sigma2 = perturbed_loglik(d, n_rows, 0.0)
    proposed = offset + value
    delta = proposed - current_value
    return bool(log_u < delta), int(np.size(d)), {
        "value": proposed, "loglik_var": sigma2, "delta_hat": delta,
    }


# ------------------------------------------------------------------------ austerity
def austerity_test(row_terms, n_rows, offset, log_u, rng, *, batch_size, error, per_look=False):
    """Sequential t-test of Korattikara et al. (El hanchi 2019 §3.1, Algorithm 1).

    Mini-batches of ``batch_size`` rows are drawn without replacement; after each, the
    t statistic t = (t̄ − μ₀)/ŝ with ŝ² = s²/n · (1 − n/N) (finite-population
    correction, El hanchi 2019 §3.1) is tested: the test stops at look k when
    α = 1 − φ_{n−1}(|t|) < ε_k, or when all N rows are used, in which case the decision is
    exact. Accept iff t̄ > μ₀.

    Parameters
    ----------
    row_terms : callable
        ``row_terms(idx) -> (len(idx),)`` array of t_k.
    n_rows : int
        N.
    offset : float
        The exactly computed part of Δ.
    log_u : float
        log of the MH uniform.
    rng : numpy.random.Generator
        Draws the rows.
    batch_size : int
        Rows added at each look.
    error : float
        ε, the probability (under the CLT) that the decision differs from exact MH's.
    per_look : bool, default False
        False: level ε_k = ε / (2k²) at look k (:func:`look_level`), so the whole
        sequential decision is wrong with probability ≤ ε. True: level ε at every look,
        Algorithm 1 of El hanchi 2019 as printed; ε then bounds the error of each look only, and
        on hard decisions the decision error is several times ε (``benchmarks/mh_error_rates.py``).

    Returns
    -------
    accept, rows_used, stats
    """
    # measured with per_look=True: a decision error of 1.3-7 ε on hard decisions
    mu0 = (log_u - offset) / n_rows
    stream = RowStream(rng, n_rows)
    values = np.empty(0)
    look = 0
    while True:
        values = np.concatenate([values, np.asarray(row_terms(stream.take(batch_size)), float)])
        n = values.size
        mean, var = _mean_var(values)
        se2 = var / n * (1.0 - n / n_rows)
        if n >= n_rows:
            break
        if n >= 2:
            look += 1
            se = math.sqrt(se2)
            t = abs(mean - mu0) / se if se > 0 else (math.inf if mean != mu0 else 0.0)
            if stdtr(n - 1, -t) < (error if per_look else look_level(error, look)):
                break
    return bool(mean > mu0), n, {
        "delta_hat": offset + n_rows * mean, "loglik_var": n_rows**2 * se2,
    }


# ----------------------------------------------------------------------- confidence
def confidence_test(row_terms, n_rows, offset, log_u, rng, *, batch_size, error,
                    range_bound, gamma=2.0, p=2.0):
    """Confidence sampler of Bardenet, Doucet & Holmes (2014) with an empirical-Bernstein bound.

    Rows are drawn without replacement; the batch grows geometrically (t ← ⌈γ t⌉). At
    the k-th look, with δ_k = (p − 1) δ / (p k^p) so that Σ_k δ_k ≤ δ = ``error``
    (:func:`look_level`),

        c_k = σ̂ √(2 log(3/δ_k)/t) + 6 C log(3/δ_k)/t

    (σ̂ the sample sd of the t_k, C = ``range_bound`` ≥ max_k |t_k|, so 2C bounds their
    range). Stop when |t̄ − μ₀| ≥ c_k, or at t = N (exact). Accept iff t̄ > μ₀. With
    probability ≥ 1 − δ the decision equals the exact MH decision — only if C really bounds
    every |t_k|: ``stats["max_abs_term"]``, the largest |t_k| read, lets the caller check
    it (:class:`~pymc_subsample.SubsampleMH` warns when it exceeds C).

    Returns
    -------
    accept, rows_used, stats
        ``stats`` also holds ``max_abs_term``.
    """
    if not (np.isfinite(range_bound) and range_bound >= 0):
        raise ValueError(f"range_bound must be a finite non-negative number; got {range_bound!r}.")
    mu0 = (log_u - offset) / n_rows
    stream = RowStream(rng, n_rows)
    values = np.empty(0)
    target, look = min(int(batch_size), n_rows), 0
    while True:
        values = np.concatenate([values, np.asarray(row_terms(stream.take(target - values.size)), float)])
        t = values.size
        look += 1
        mean = float(values.mean())
        if t >= n_rows:
            break
        log_term = math.log(3.0 / look_level(error, look, p))
        c = float(values.std()) * math.sqrt(2.0 * log_term / t) + 6.0 * range_bound * log_term / t
        if abs(mean - mu0) >= c:
            break
        target = min(n_rows, max(t + 1, math.ceil(gamma * t)))
    return bool(mean > mu0), t, {"delta_hat": offset + n_rows * mean, "loglik_var": math.nan,
                                 "max_abs_term": float(np.max(np.abs(values)))}


def logistic_range_bound(X, center, proxy_order=2):
    """Range bound C(θ, θ') ≥ max_k |t_k| for Bernoulli-logit rows ℓ_k = log σ(±x_kᵀθ).

    Uses |d^j/dz^j log σ(z)| ≤ M_j with M_1 = 1, M_2 = 1/4, M_3 = 1/(6√3) and Taylor's
    remainder |ℓ_k(θ) − q_k(θ)| ≤ M_{r+1}/(r+1)! |x_kᵀ(θ − θ*)|^{r+1} for a proxy of order
    r (Bardenet et al.'s bound for GLMs, Alquier's ISS slides), so with R = max_k ||x_k||:

    * no proxy (``proxy_order=None``): C = M_1 R ||θ' − θ||;
    * order r: C = M_{r+1}/(r+1)! R^{r+1} (||θ − θ*||^{r+1} + ||θ' − θ*||^{r+1}).

    Valid only when θ is exactly the coefficient vector of the linear predictor x_kᵀθ, and
    only for the terms of the proxy order it was built for: a bound for order 2 falls like
    ||θ − θ*||³ while the remainders of an order-1 proxy fall like ||θ − θ*||², so near θ*
    it is far too small.

    Returns
    -------
    callable
        ``bound(theta, theta_prop) -> C``, with attribute ``proxy_order`` (the order it was
        built for, None for no proxy) that :class:`~pymc_subsample.SubsampleMH` checks
        against its own ``proxy_order`` / ``use_proxy``.
    """
    radius = float(np.max(np.linalg.norm(np.asarray(X, float), axis=1)))
    center = np.asarray(center, float)
    if proxy_order is None:
        def bound(theta, theta_prop):
            return radius * float(np.linalg.norm(np.asarray(theta_prop) - np.asarray(theta)))

        bound.proxy_order = None
        return bound
    if proxy_order not in (0, 1, 2):
        raise ValueError(f"proxy_order must be None, 0, 1 or 2; got {proxy_order!r}.")
    m_next = (1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0)))[proxy_order]
    r = proxy_order + 1
    factor = m_next / math.factorial(r) * radius**r

    def bound(theta, theta_prop):
        a = np.linalg.norm(np.asarray(theta) - center)
        b = np.linalg.norm(np.asarray(theta_prop) - center)
        return float(factor * (a**r + b**r))

    bound.proxy_order = proxy_order
    return bound


# --------------------------------------------------------------------------- Barker
@lru_cache(maxsize=4)
def correction_distribution(n_grid=401, half_width=20.0, ridge=1e-4):
    """Grid and probabilities of X_corr with N(0, 1) + X_corr ≈ Logistic(0, 1) (Seita et al. 2017).

    Solves the regularised least-squares problem of Seita et al. 2017,
    min_u ||M u − v||² + λ||u||² with M_ij = Φ(X_i − Y_j), v_i = S(X_i) (S the logistic
    CDF) on a uniform grid Y over [−20, 20] and twice as many evaluation points X, with
    the added constraint u ≥ 0 (non-negative least squares) so that u is a probability
    vector: clipping the unconstrained solution instead raised the CDF error from 1e-5
    to 3e-3. Computed once per process; sup error ≈ 2e-5 on [−20, 20].
    """
    # measured: about 0.1 s, hence the cache
    y = np.linspace(-half_width, half_width, n_grid)
    x = np.linspace(-half_width, half_width, 2 * n_grid - 1)
    matrix = np.vstack([ndtr(x[:, None] - y[None, :]), math.sqrt(ridge) * np.eye(n_grid)])
    target = np.concatenate([expit(x), np.zeros(n_grid)])
    u, _ = nnls(matrix, target, maxiter=50 * n_grid)
    u = u / u.sum()
    u.setflags(write=False)
    y.setflags(write=False)
    return y, u


@lru_cache(maxsize=1)
def correction_error() -> float:
    """sup_x |P(N(0, 1) + X_corr ≤ x) − S(x)| of :func:`correction_distribution` (S logistic CDF).

    The error the correction distribution itself adds to every minibatch Barker decision
    (Seita et al. 2017, "PDF of the correction distribution"); evaluated on 8001 points of [−25, 25]
    (beyond the grid's [−20, 20], where both CDFs are within 2e−9 of 0 or 1). About 1.7e−5.
    """
    grid, probs = correction_distribution()
    x = np.linspace(-25.0, 25.0, 8001)
    return float(np.max(np.abs(ndtr(x[:, None] - grid[None, :]) @ probs - expit(x))))


def sample_correction(u):
    """X_corr by inverting the CDF of :func:`correction_distribution` at the uniform ``u``."""
    grid, probs = correction_distribution()
    return float(grid[min(int(np.searchsorted(np.cumsum(probs), u)), grid.size - 1)])


# 6.4 E|Z|³ + 2 E|Z| over distributions with E Z² = 1 is smallest, 8.4, for |Z| = 1: E|Z|³ ≥ 1
# by Lyapunov's inequality, and a smaller E|Z| forces a larger E|Z|³ (6.4/√q + 2√q ≥ 8.4 for
# Z = ±1/√q with probability q). Hence the Seita et al. 2017 bound is ≥ 8.4/√b for any terms.
BARKER_MIN_CONSTANT = 8.4


def barker_clt_error(values) -> float:
    """Seita et al.'s (2017) bound (6.4 E|Z|³ + 2 E|Z|)/√b on the acceptance-probability error.

    Seita et al. 2017, "Bounding acceptance probability error":
    sup_y |P{Δ* + X_nc + X_corr < y} − S(y − Δ)| ≤ (6.4 E|X|³ + 2 E|X|)/√b, a
    Berry-Esseen bound for the self-normalised mean, so X is the per-row deviation
    N t_k − Σ t standardised to unit variance: Z = (t_k − t̄)/s. The moments are
    estimated from the b rows read (a plug-in: rare extreme rows that the minibatch has
    not met are invisible to it); with s = 0 the smallest possible value 8.4/√b is used.
    """
    values = np.asarray(values, float)
    b = values.size
    mean, var = _mean_var(values)
    if var <= 0.0:
        return BARKER_MIN_CONSTANT / math.sqrt(b)
    z = np.abs(values - mean) / math.sqrt(var)
    return float(6.4 * np.mean(z**3) + 2.0 * np.mean(z)) / math.sqrt(b)


def barker_test(row_terms, n_rows, offset, u, rng, *, batch_size, error=None):
    """Minibatch Barker test of Seita et al. (Seita et al. 2017, "Algorithm").

    Grow a without-replacement minibatch by ``batch_size`` rows until (Seita et al. 2017,
    "Algorithm", step 2)

    * the variance of Δ* = offset + N t̄, estimated as σ² = N² s²/b (1 − b/N), is below 1,
      and
    * the bound on the acceptance-probability error, ε_b = (6.4 E|Z|³ + 2 E|Z|)/√b
      (:func:`barker_clt_error`, Seita et al. 2017 "Bounding acceptance probability error") plus the
      correction distribution's own CDF error (:func:`correction_error`), is below δ =
      ``error``;

    then accept iff Δ* + X_nc + X_corr > 0 with X_nc ~ N(0, 1 − σ²) and X_corr from the
    precomputed σ = 1 correction distribution (drawn by inverting its CDF at ``u``). While a
    criterion fails, the batch grows to the size at which the current estimates of s² and
    of the moments would meet it (never by less than ``batch_size``), so that reaching
    b ≈ (12/δ)² rows does not take thousands of looks of O(b) work each. When the batch
    reaches N, Δ* = Δ exactly and the exact Barker test Δ + logit(u) > 0 is used, which
    accepts with probability 1/(1 + e^{−Δ}) (not the MH probability min(1, e^Δ): the Barker
    chain has the same target and a lower acceptance rate).

    Parameters
    ----------
    row_terms, n_rows, offset : see :func:`austerity_test`
    u : float
        The uniform; X_corr is its quantile (the exact test uses logit(u)).
    rng : numpy.random.Generator
        Draws the rows and X_nc.
    batch_size : int
    error : float or None
        δ, the allowed error of the acceptance probability: Seita et al. 2017 bounds
        sup_y |P{Δ* + X_nc + X_corr < y} − S(y − Δ)| (S the logistic CDF) by ε_b. Since
        ε_b ≥ 8.4/√b for any terms, the test can stop before N only at b > (8.4/δ)² rows
        (Gaussian terms: about (11.8/δ)²), e.g. δ = 0.01 needs b > 705,600. None: the
        variance criterion only, with no control of the error (the paper's first version,
        "Precomputing correction distribution").

    Returns
    -------
    accept, rows_used, stats
        ``stats["error_bound"]`` is ε_b + the correction error at decision (0 at b = N).
    """
    stream = RowStream(rng, n_rows)
    values = np.empty(0)
    target, eps_corr = min(int(batch_size), n_rows), correction_error()
    while True:
        values = np.concatenate([values, np.asarray(row_terms(stream.take(target - values.size)), float)])
        b = values.size
        mean, var = _mean_var(values)
        delta = offset + n_rows * mean
        if b >= n_rows:
            return exact_barker_test(delta, u), b, {"delta_hat": delta, "loglik_var": 0.0,
                                                    "error_bound": 0.0}
        sigma2 = n_rows**2 * var / b * (1.0 - b / n_rows)
        needed = b + int(batch_size)
        if b < 2:
            pass
        elif sigma2 >= 1.0:
            # σ² = N² s² (1/b − 1/N) < 1 iff b > N² s² / (N s² + 1) at the current s²
            needed = max(needed, math.floor(n_rows**2 * var / (n_rows * var + 1.0)) + 1)
        elif error is None:
            bound = math.nan
            break
        else:
            bound = barker_clt_error(values) + eps_corr
            if bound < error:
                break
            # ε_b ∝ 1/√b at fixed moments: the size at which the bound would reach δ; a δ
            # below the correction's own error is met only by the exact test (b = N)
            needed = (max(needed, math.ceil(b * ((bound - eps_corr) / (error - eps_corr)) ** 2))
                      if error > eps_corr else n_rows)
        target = min(needed, n_rows)
    x_nc = rng.normal(0.0, math.sqrt(1.0 - sigma2))
    accept = delta + x_nc + sample_correction(u) > 0
    return bool(accept), b, {"delta_hat": delta, "loglik_var": sigma2, "error_bound": bound}


# ----------------------------------------------------------------------- two-sample
def two_sample_test(current_terms, proposed_terms, n_rows, offset, log_u, rng, *,
                    batch_size, error, probs=None, per_look=False):
    """Modified stochastic MH with a two-sample t-test (El hanchi 2019 §5.2.1).

    Neither log-posterior estimate is taken as exact: Σ_k a_k (a_k = ``current_terms``,
    e.g. ℓ_k(θ) − q_k(θ)) and Σ_k b_k (``proposed_terms`` at θ') are estimated from
    two independent samples, and both are refreshed with ``batch_size`` more rows while
    Welch's t-test of Δ̂ = offset + Σ̂b − Σ̂a against log u is inconclusive at the level
    of the look, ε_k = ε/(2k²) (:func:`look_level`; ``per_look=True``: ε at every look,
    as in :func:`austerity_test`). Uniform samples are without replacement
    (finite-population correction); with importance probabilities ``probs`` (El hanchi 2019
    §5.1) they are with replacement and weighted by 1/(N p_k). Once each sample has N
    rows, the exact sums are used. Accept iff Δ̂ > log u.

    Returns
    -------
    accept, rows_used, stats
        ``rows_used`` counts the rows of both samples.
    """
    if probs is not None:
        probs = np.asarray(probs, float)
        cdf = np.cumsum(probs / probs.sum())
    streams = [RowStream(rng, n_rows), RowStream(rng, n_rows)]
    values = [np.empty(0), np.empty(0)]
    fns = (current_terms, proposed_terms)
    look = 0
    while True:
        moments = []
        for j in (0, 1):
            if probs is None:
                idx = streams[j].take(batch_size)
                new = np.asarray(fns[j](idx), float)
            else:
                idx = np.minimum(np.searchsorted(cdf, rng.random(batch_size)), n_rows - 1)
                new = np.asarray(fns[j](idx), float) / (n_rows * probs[idx] / probs.sum())
            values[j] = np.concatenate([values[j], new])
            n = values[j].size
            mean, var = _mean_var(values[j])
            fpc = (1.0 - min(n, n_rows) / n_rows) if probs is None else 1.0
            moments.append((n, n_rows * mean, n_rows**2 * var / n * fpc))
        (na, sa, va), (nb, sb, vb) = moments
        delta = offset + sb - sa
        if min(na, nb) >= n_rows:
            if probs is not None:  # the weighted samples are not the population: sum exactly
                all_rows = np.arange(n_rows)
                delta = offset + float(np.sum(fns[1](all_rows)) - np.sum(fns[0](all_rows)))
                na, nb = na + n_rows, nb + n_rows
            return bool(log_u < delta), na + nb, {"delta_hat": delta, "loglik_var": 0.0}
        se2 = va + vb
        if min(na, nb) >= 2:
            look += 1
            if se2 > 0:
                # Welch-Satterthwaite degrees of freedom
                df = se2**2 / (va**2 / max(na - 1, 1) + vb**2 / max(nb - 1, 1)) if va + vb > 0 else 1.0
                alpha = stdtr(df, -abs(delta - log_u) / math.sqrt(se2))
            else:
                alpha = 0.0 if delta != log_u else 1.0
            if alpha < (error if per_look else look_level(error, look)):
                break
    return bool(log_u < delta), na + nb, {"delta_hat": delta, "loglik_var": se2}
