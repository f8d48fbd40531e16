"""SubsampleMH: accept-test kernels against exact MH, posteriors against known ones, bad input."""

import math
import time

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conftest import (
    ar1_draws,
    gaussian_linear_model,
    logistic_data,
    logistic_model,
    needs_data,
    normal_population,
    skin_segmentation,
)
from scipy.special import expit, ndtr
from scipy.stats import t as student_t

from pymc_subsample.kernels import mh_tests
from pymc_subsample.step_methods.subsample_mh import SubsampleMH

# ----------------------------------------------------------------------------- kernels


def test_correction_distribution_convolves_to_logistic():
    grid, probs = mh_tests.correction_distribution()
    assert np.all(probs >= 0) and math.isclose(probs.sum(), 1.0)
    x = np.linspace(-20, 20, 4001)
    cdf = ndtr(x[:, None] - grid[None, :]) @ probs
    err = np.max(np.abs(cdf - expit(x)))
    assert err <= 1e-3, err


def test_row_stream_draws_each_row_once():
    stream = mh_tests.RowStream(np.random.default_rng(0), 1000)
    parts = [stream.take(k) for k in (10, 300, 400, 500)]
    rows = np.concatenate(parts)
    assert rows.size == 1000 and np.unique(rows).size == 1000 and stream.remaining == 0


def _problems(n_rows=300, count=150, seed=3):
    """Per-row terms and uniforms whose exact log-ratio Δ lands near log u (hard decisions)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        terms = rng.normal(0.0, 1.0, size=n_rows) * rng.uniform(0.05, 2.0)
        u = rng.random()
        offset = math.log(u) - terms.sum() + rng.normal(0.0, 3.0)
        yield terms, offset, u


def _decisions(kernel):
    ours, exact, rows = [], [], []
    for i, (terms, offset, u) in enumerate(_problems()):
        delta = offset + terms.sum()
        accept, used, _ = kernel(terms, offset, u, np.random.default_rng(i))
        ours.append(accept)
        rows.append(used)
        exact.append(mh_tests.exact_mh_test(delta, math.log(u)))
    return np.array(ours), np.array(exact), np.array(rows)


@pytest.mark.parametrize("batch", ["tiny-error", "full"])
def test_austerity_reduces_to_exact_mh(batch):
    def kernel(t, offset, u, rng):
        return mh_tests.austerity_test(lambda idx: t[idx], t.size, offset, math.log(u), rng,
                                       batch_size=t.size if batch == "full" else 30,
                                       error=1e-12 if batch == "tiny-error" else 0.5)
    ours, exact, _ = _decisions(kernel)
    np.testing.assert_array_equal(ours, exact)


def test_austerity_saves_rows_at_usual_error():
    def kernel(t, offset, u, rng):
        return mh_tests.austerity_test(lambda idx: t[idx], t.size, offset, math.log(u), rng,
                                       batch_size=30, error=0.01)
    ours, exact, rows = _decisions(kernel)
    # these decisions are built to be hard (Δ − log u ~ N(0, 3²) against a sum of 300
    # noisy terms), and repeated looks inflate the per-decision error above ε (seed 000 §3.2)
    assert rows.mean() < 300 and np.mean(ours == exact) > 0.95


@pytest.mark.parametrize("batch", ["tiny-error", "full"])
def test_confidence_reduces_to_exact_mh(batch):
    def kernel(t, offset, u, rng):
        c = float(np.max(np.abs(t)))
        return mh_tests.confidence_test(lambda idx: t[idx], t.size, offset, math.log(u), rng,
                                        batch_size=t.size if batch == "full" else 10,
                                        error=1e-12 if batch == "tiny-error" else 0.5, range_bound=c)
    ours, exact, _ = _decisions(kernel)
    np.testing.assert_array_equal(ours, exact)


@pytest.mark.parametrize("batch", ["tiny-error", "full"])
def test_two_sample_reduces_to_exact_mh(batch):
    def kernel(t, offset, u, rng):
        # split t_k = b_k − a_k with a_k independent noise the test must see through
        a = np.random.default_rng(99).normal(size=t.size)
        return mh_tests.two_sample_test(lambda idx: a[idx], lambda idx: (a + t)[idx], t.size, offset,
                                        math.log(u), rng, batch_size=t.size if batch == "full" else 30,
                                        error=1e-12 if batch == "tiny-error" else 0.5)
    ours, exact, _ = _decisions(kernel)
    np.testing.assert_array_equal(ours, exact)


def test_barker_full_batch_is_exact_barker():
    ours, exact = [], []
    for i, (t, offset, u) in enumerate(_problems()):
        accept, used, _ = mh_tests.barker_test(t.__getitem__, t.size, offset, u,
                                               np.random.default_rng(i), batch_size=t.size)
        assert used == t.size
        ours.append(accept)
        exact.append(mh_tests.exact_barker_test(offset + t.sum(), u))
    assert ours == exact


@pytest.mark.parametrize("delta", [-2.0, 0.0, 1.5])
def test_barker_minibatch_accepts_with_barker_probability(delta):
    rng = np.random.default_rng(7)
    n = 5_000
    t = rng.normal(0.0, 0.008, size=n)  # small per-row spread: σ²(Δ*) < 1 after one batch
    offset = delta - t.sum()
    hits = [mh_tests.barker_test(lambda idx: t[idx], n, offset, rng.random(), rng, batch_size=200)[0]
            for _ in range(2000)]
    p = expit(delta)
    assert abs(np.mean(hits) - p) < 4 * math.sqrt(p * (1 - p) / 2000) + 0.01


def test_pseudo_marginal_with_exact_proxy_is_exact_mh():
    for _terms, offset, u in _problems(count=50):
        current = 0.3
        accept, m, info = mh_tests.pseudo_marginal_test(current, np.zeros(50), 300, offset, math.log(u))
        assert info["loglik_var"] == 0.0 and m == 50
        assert accept == mh_tests.exact_mh_test(offset - current, math.log(u))


def test_logistic_range_bound_bounds_remainders():
    X, y = logistic_data(n=500, d=3, seed=2)
    rng = np.random.default_rng(0)
    center = rng.normal(size=3)

    def rows(beta):
        z = X @ beta
        return y * z - np.logaddexp(0, z)

    def proxy(beta):
        z0, v = X @ center, X @ (beta - center)
        s = expit(z0)
        return rows(center) + (y - s) * v - 0.5 * s * (1 - s) * v**2

    bound = mh_tests.logistic_range_bound(X, center, proxy_order=2)
    for _ in range(20):
        a, b = center + rng.normal(0, 0.5, 3), center + rng.normal(0, 0.5, 3)
        t = (rows(b) - proxy(b)) - (rows(a) - proxy(a))
        assert np.max(np.abs(t)) <= bound(a, b)


# ------------------------------------- kernels where their correction terms matter
# Each test below puts one formula in the regime where it changes the answer, and compares
# with an exact (or CLT-exact) probability over many repeated decisions, with a binomial- or
# MCSE-scaled tolerance: σ̂² ≈ 1 for the pseudo-marginal −σ̂²/2; a first look at half of
# the rows for the finite-population correction; 3 degrees of freedom for Student's t; a
# minibatch variance far below 1 for the Barker test's X_nc.


def test_pseudo_marginal_value_is_nearly_unbiased_at_unit_variance():
    """exp(stats["value"] − offset) estimates L with bias O(σ⁴/m) at σ̂² ≈ 1 (seed 004 eq. 4.5).

    Without −σ̂²/2 the estimate would be ≈ e^{1/2} L: the pseudo-marginal chain would then
    target p(θ) L(θ) e^{σ²(θ)/2}.
    """
    n, m, reps = 2000, 200, 20_000
    d = normal_population(n, 1e-3, math.sqrt(m) / n)  # σ² = n² Var(d)/m = 1
    rng = np.random.default_rng(3)
    ratios, variances = np.empty(reps), np.empty(reps)
    for r in range(reps):
        log_u, current = math.log(rng.random()), rng.normal()
        accept, used, info = mh_tests.pseudo_marginal_test(current, d[rng.integers(0, n, size=m)], n,
                                                           -1.5, log_u)
        assert used == m and accept == (log_u < info["value"] - current)
        ratios[r], variances[r] = np.exp(info["value"] + 1.5 - d.sum()), info["loglik_var"]
    assert 0.9 < variances.mean() < 1.1
    se = ratios.std(ddof=1) / math.sqrt(reps)
    assert se < 0.03, se  # ≈ 0.009: before the MCSE-scaled tolerance
    assert abs(ratios.mean() - 1.0) <= 4 * se, (ratios.mean(), se)


class _SecondLook(Exception):
    pass


def _first_look(test, rng):
    """Run ``test(row_terms)`` but interrupt it when it asks for rows a second time.

    Returns (stopped at the first look, accept, rows used); only the first look's decision
    is observed, so its probability can be computed exactly.
    """
    calls = []

    def once(terms):
        def row_terms(idx):
            if calls:
                raise _SecondLook
            calls.append(idx.size)
            return terms[idx]
        return row_terms

    try:
        accept, rows, _ = test(once)
    except _SecondLook:
        return False, None, calls[0]
    return True, accept, rows


def _level(error, per_look):
    """The level of the first look: ε itself (seed 000 Alg. 1 as printed) or its spent share."""
    return error if per_look else mh_tests.look_level(error, 1)


@pytest.mark.parametrize("per_look", [True, False])
def test_austerity_first_look_uses_student_t(per_look):
    """4 rows of N = 20,000 and μ₀ the population mean: t is Student's t with 3 df, so the test
    stops at the first look with probability exactly 2 ε₁ (a normal quantile: ≈ 2-3 times more)."""
    n, batch, error, reps = 20_000, 4, 0.1, 6000
    terms = normal_population(n, 0.3, 1.0)
    rng = np.random.default_rng(11)
    stops = []
    for _ in range(reps):
        stopped, _, rows = _first_look(
            lambda once: mh_tests.austerity_test(once(terms), n, -n * 0.3, 0.0, rng, batch_size=batch,
                                                 error=error, per_look=per_look), rng)
        assert rows == batch
        stops.append(stopped)
    p = 2 * _level(error, per_look)
    freq = np.mean(stops)
    assert abs(freq - p) <= 4 * math.sqrt(p * (1 - p) / reps), (freq, p)


@pytest.mark.parametrize("per_look", [True, False])
def test_austerity_first_look_uses_finite_population_correction(per_look):
    """A first look at half of N = 1000 rows, with the true mean q standard errors (with the
    finite-population correction, var t̄ = S²/n (1 − n/N)) above μ₀, q the stopping quantile:
    the test stops with probability ≈ 1/2 (≈ 0.15 without the correction)."""
    n, batch, error, reps = 1000, 500, 0.05, 4000
    q = student_t.isf(_level(error, per_look), batch - 1)
    sd = 1.0
    se = sd * math.sqrt(n / (n - 1)) * math.sqrt((1 - batch / n) / batch)  # S uses ddof=1
    terms = normal_population(n, q * se, sd)  # μ₀ = 0
    rng = np.random.default_rng(12)
    stops = []
    for _ in range(reps):
        stopped, _, rows = _first_look(
            lambda once: mh_tests.austerity_test(once(terms), n, 0.0, 0.0, rng, batch_size=batch,
                                                 error=error, per_look=per_look), rng)
        assert rows == batch
        stops.append(stopped)
    freq = np.mean(stops)
    # P(|T| > q) with T ≈ N(q, 1): 1/2 up to the skew of t̄/s, well inside the allowance 0.02
    assert abs(freq - 0.5) <= 4 * math.sqrt(0.25 / reps) + 0.02, freq


def _first_look_two(test):
    """:func:`_first_look` for a two-sample test: one look reads each of its two samples once.

    ``test(current_terms, proposed_terms)`` runs the test; returns whether it stopped at look 1.
    """
    calls = [0, 0]

    def reader(j, terms):
        def row_terms(idx):
            if calls[j]:
                raise _SecondLook
            calls[j] += 1
            return terms[idx]
        return row_terms

    try:
        test(reader)
    except _SecondLook:
        return False
    return True


@pytest.mark.parametrize("per_look", [True, False])
def test_two_sample_first_look_fpc_and_student_t(per_look):
    """Welch's test of seed 000 §5.2.1 at its first look, as for the austerity test: (a) 4 rows
    per sample (Welch's t with 3-6 df), (b) half of the N rows per sample (finite-population
    correction)."""
    error, rng = 0.1, np.random.default_rng(13)

    def run(n, batch, offset):
        a = b = normal_population(n, 0.0, 1.0)  # two independent samples of the same rows

        def test(reader):
            return mh_tests.two_sample_test(reader(0, a), reader(1, b), n, offset, 0.0, rng,
                                            batch_size=batch, error=error, per_look=per_look)
        return test

    # (a) N = 20,000 and Δ = log u: the probability that Welch's test stops is computed from
    # 400,000 simulated pairs of normal samples (Welch's statistic is not exactly t);
    # a normal quantile instead of t would stop ≈ 1.5 times as often
    reps, test = 6000, run(20_000, 4, 0.0)
    stops = [_first_look_two(test) for _ in range(reps)]
    sim = np.random.default_rng(0).standard_normal((400_000, 2, 4))
    var = sim.var(axis=2, ddof=1) / 4
    se2 = var.sum(axis=1)
    df = se2**2 / ((var**2).sum(axis=1) / 3)
    t_abs = np.abs(sim[:, 1].mean(axis=1) - sim[:, 0].mean(axis=1)) / np.sqrt(se2 * (1 - 4 / 20_000))
    p = np.mean(student_t.sf(t_abs, df) < _level(error, per_look))
    assert abs(np.mean(stops) - p) <= 4 * math.sqrt(p * (1 - p) / reps) + 0.003, (np.mean(stops), p)
    # (b) N = 1000, 500 rows per sample, Δ − log u at q standard errors (var N t̄ = N² S²/n
    # (1 − n/N) per sample), q the stopping quantile: stops with probability ≈ 1/2
    n, batch, reps = 1000, 500, 3000
    q = student_t.isf(_level(error, per_look), 2 * (batch - 1))
    sd_sum = n * math.sqrt(n / (n - 1)) * math.sqrt((1 - batch / n) / batch)
    test = run(n, batch, q * math.sqrt(2) * sd_sum)
    stops = [_first_look_two(test) for _ in range(reps)]
    assert abs(np.mean(stops) - 0.5) <= 4 * math.sqrt(0.25 / reps) + 0.02, np.mean(stops)


def test_barker_noise_completes_the_logistic():
    """Minibatch variance σ² ≈ 0.05 at the first look: X_nc ~ N(0, 1 − σ²) carries nearly all of
    the normal part of the logistic noise, so P(accept) = S(Δ) (seed 001) needs it; without it
    P(accept) at Δ = 1 is ≈ 0.77 instead of 0.73."""
    n, batch, delta, reps = 10_000, 100, 1.0, 20_000
    sigma2 = 0.05  # the variance of Δ* = offset + N t̄ from 100 rows without replacement
    terms = normal_population(n, 0.0, math.sqrt(sigma2 * batch / (1 - batch / n)) / n)
    _barker_accepts_with_logistic_probability(terms, batch, delta, reps, np.random.default_rng(14))


def test_barker_variance_uses_finite_population_correction():
    """First look at 3/4 of the rows, true var Δ* = 0.2: the correction (1 − b/N) = 1/4 makes σ̂²
    ≈ 0.2 and X_nc ~ N(0, 0.8); without it σ̂² ≈ 0.8, X_nc ~ N(0, 0.2) and the total noise is
    short of the logistic by a variance of 0.6 (P(accept) at Δ = 1: ≈ 0.76 instead of 0.73)."""
    n, batch, delta, reps = 1000, 750, 1.0, 20_000
    terms = normal_population(n, 0.0, math.sqrt(0.2 * batch / (1 - batch / n) * (n - 1) / n) / n)
    _barker_accepts_with_logistic_probability(terms, batch, delta, reps, np.random.default_rng(15))


def _barker_accepts_with_logistic_probability(terms, batch, delta, reps, rng):
    n = terms.size
    offset = delta - terms.sum()
    hits = 0
    for _ in range(reps):
        accept, rows, info = mh_tests.barker_test(terms.__getitem__, n, offset, rng.random(), rng,
                                                  batch_size=batch)
        assert rows == batch and info["loglik_var"] < 1  # decided at the first look, by minibatch
        hits += accept
    p = expit(delta)
    # Δ* is normal (a mean of hundreds of rows) and σ̂² is within a few % of its true value,
    # so the remaining error is far below 0.003; the correction distribution's own ≈ 2e-5
    assert abs(hits / reps - p) <= 4 * math.sqrt(p * (1 - p) / reps) + 0.003, (hits / reps, p)


# ------------------------------------------------------------------------ step method


def _gaussian_run(test, seed=1, **kwargs):
    model, mean, cov = gaussian_linear_model(n=2000, d=2, sigma=1.0)
    with model:
        step = SubsampleMH(test=test, center={"beta": mean}, thin=1, **kwargs)
        idata = pm.sample(step=step, draws=3000, tune=1000, chains=2, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    draws = idata.posterior["beta"]
    ess = az.ess(idata, var_names=["beta"])["beta"].values
    sd = np.sqrt(np.diag(cov))
    z_mean = (draws.mean(("chain", "draw")).values - mean) / (sd / np.sqrt(ess))
    var_ratio = draws.var(("chain", "draw")).values / sd**2
    return z_mean, var_ratio, ess, idata


def test_pseudo_marginal_recovers_gaussian_posterior():
    """Pseudo-marginal MH where σ̂² ≈ 1 (seed 004 §3.1): y_k ~ N(μ, 1), N = m = 2000 and an
    order-0 proxy at the mode, so d_k = (θ − θ*)(y_k − (θ + θ*)/2) and σ̂²(θ) ≈ N²(θ − θ*)²/m
    averages ≈ 1 over the posterior. Without −σ̂²/2 the chain would target p(θ)L(θ)e^{σ²(θ)/2},
    whose precision N − N²/m is 0; with −σ̂²/4 the posterior variance would double."""
    rng = np.random.default_rng(0)
    n = 2000
    y = rng.normal(0.7, 1.0, size=n)
    var = 1 / (n + 1 / 100)
    mean = var * y.sum()
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=y)
        step = SubsampleMH(test="pseudo-marginal", subsample_size=n, num_blocks=1, proxy_order=0,
                           center={"mu": mean}, thin=1)
        idata = pm.sample(step=step, draws=3000, tune=1000, chains=2, cores=1, random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
    stats = idata.sample_stats
    assert np.all(stats.batch_size == n)
    loglik_var = float(stats.loglik_var.mean())
    assert 0.5 < loglik_var < 2.0, loglik_var  # the regime where −σ̂²/2 matters
    draws = idata.posterior["mu"].values.ravel()
    ess = float(az.ess(idata, var_names=["mu"])["mu"])
    print("pseudo-marginal ess", ess, "σ̂²", loglik_var)
    assert ess > 200, ess  # before the ESS-scaled tolerances below
    assert abs(draws.mean() - mean) <= 4 * math.sqrt(var / ess), (draws.mean(), mean, ess)
    assert abs(draws.var() / var - 1) <= 4 * math.sqrt(2 / ess), (draws.var() / var, ess)


@pytest.mark.slow
@pytest.mark.parametrize("test", ["austerity", "barker", "two-sample", "confidence", "exact"])
def test_sequential_tests_gaussian_posterior_within_documented_bias(test):
    kwargs = {"proxy_order": 1, "subsample_size": 50}
    if test == "barker":
        kwargs["error"] = None  # seed 001's δ bound needs > 7·10⁵ rows at δ = 0.01: test the minibatch rule
    if test == "confidence":
        kwargs["range_bound"] = "empirical"
    z, var_ratio, ess, idata = _gaussian_run(test, **kwargs)
    rows = float(idata.sample_stats.batch_size.mean())
    print(test, "z", z, "var ratio", var_ratio, "ess", ess, "mean rows", rows)
    assert np.all(idata.sample_stats.looks >= 1)  # the mini-batches read per decision
    assert np.all(ess > 200), ess  # measured 500-790: before the ESS-scaled tolerances below
    # approximate tests: allow a bias of 0.1 posterior sd and 15% in variance on top of MCSE
    assert np.all(np.abs(z) < 4 + 0.1 * np.sqrt(ess))
    assert np.all(np.abs(var_ratio - 1) < 4 * np.sqrt(2 / ess) + 0.15)
    assert rows <= 2000


def test_same_seed_same_draws_and_chains_reset():
    X, y = logistic_data(n=500, d=2)
    runs = []
    for _ in range(2):
        with logistic_model(X, y):
            step = SubsampleMH(test="austerity", subsample_size=50, thin=1)
            scale0 = float(np.exp(step.log_scale))
            idata = pm.sample(step=step, draws=50, tune=50, chains=2, cores=1, random_seed=5,
                              progressbar=False, compute_convergence_checks=False,
                              discard_tuned_samples=False)
        runs.append(idata.posterior["beta"].values)
    np.testing.assert_array_equal(runs[0], runs[1])
    # every chain starts tuning from the initial scale, not from the previous chain's end
    first = idata.warmup_sample_stats.scale.values[:, 0]
    allowed = scale0 * np.exp(np.array([1 - 0.234, -0.234]) / 10**0.6)
    assert all(np.isclose(f, allowed).any() for f in first)


@pytest.mark.slow
def test_cores_2_gives_the_same_draws_as_cores_1():
    X, y = logistic_data(n=1000, d=2)
    draws = []
    for cores in (1, 2):
        with logistic_model(X, y):
            # the empirical range bound is a closure: the step must survive cloudpickle
            step = SubsampleMH(test="confidence", range_bound="empirical", subsample_size=50, thin=1)
            idata = pm.sample(step=step, draws=100, tune=100, chains=2, cores=cores, random_seed=3,
                              progressbar=False, compute_convergence_checks=False)
        draws.append(idata.posterior["beta"].values)
    np.testing.assert_array_equal(draws[0], draws[1])


# ------------------------------------------------------------------------- real data


@needs_data
@pytest.mark.heavy  # a minute of full-data NUTS on 245,057 rows
def test_skin_logistic_regression_against_nuts():
    X, y, ref = skin_segmentation()
    model = logistic_model(X, y)
    results = {}
    center = None
    for test in ["pseudo-marginal", "austerity", "confidence", "barker", "two-sample"]:
        kwargs = {}  # each test with its defaults (confidence: the GLM bound; barker: δ = 0.01)
        if center is not None:
            kwargs["center"] = center
        draws = 6000 if test == "pseudo-marginal" else 1500
        start = time.perf_counter()
        with model:
            step = SubsampleMH(test=test, thin=1, **kwargs)
            center = step.proxy.center
            idata = pm.sample(step=step, draws=draws, tune=1000, chains=2, cores=1, random_seed=2,
                              progressbar=False, compute_convergence_checks=False)
        post = idata.posterior["beta"]
        dm = np.abs(post.mean(("chain", "draw")).values - ref["mean"]) / ref["sd"]
        sr = post.std(("chain", "draw")).values / ref["sd"]
        rows = float(idata.sample_stats.batch_size.mean())
        results[test] = (dm, sr)
        print(f"skin {test}: max|Δmean|/sd={dm.max():.3f} sd ratio={np.round(sr, 3)} "
              f"rows/iter={rows:.0f} ({rows / len(y):.2%}) time={time.perf_counter() - start:.1f}s")
    dm, sr = results["pseudo-marginal"]
    assert dm.max() <= 0.1
    assert np.all((sr >= 0.9) & (sr <= 1.1))


# ------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def small_model():
    X, y = logistic_data(n=300, d=2)
    return logistic_model(X, y)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"error": 0.0}, "strictly between 0 and 1"),
        ({"error": 1.5}, "strictly between 0 and 1"),
        ({"subsample_size": 0}, "between 1 and the number of rows"),
        ({"subsample_size": 301}, "between 1 and the number of rows"),
        ({"test": "t-test"}, "Unknown test 't-test'"),
        ({"proposal": "hmc"}, "Unknown proposal"),
        ({"test": "confidence", "range_bound": 3.0}, "range_bound must be a callable"),
        ({"num_blocks": 2000, "subsample_size": 100}, "num_blocks must be"),
        ({"scale": -1.0}, "scale must be a positive"),
        ({"thin": 0}, "thin must be a positive integer"),
        ({"thin": 2.5}, "thin must be a positive integer"),
        ({"test": "two-sample", "importance_probs": np.ones(5)}, "importance_probs must be"),
    ],
)
def test_bad_input(small_model, kwargs, match):
    with small_model:
        with pytest.raises(ValueError, match=match):
            SubsampleMH(center=np.zeros(2), **kwargs)


def test_thin_makes_each_draw_several_moves(small_model):
    """A draw of thin=k is k moves of the thin=1 chain: the same seed gives every k-th state."""
    runs = {}
    for thin in (1, 3):
        with small_model:
            step = SubsampleMH(center=np.zeros(2), subsample_size=50, num_blocks=10, thin=thin,
                               adapt_scale=False)
            idata = pm.sample(step=step, draws=60 // thin, tune=0, chains=1, random_seed=4,
                              progressbar=False, compute_convergence_checks=False)
        runs[thin] = idata
    every_third = runs[1].posterior["beta"].values[0, 2::3]
    np.testing.assert_array_equal(runs[3].posterior["beta"].values[0], every_third)
    stats = runs[3].sample_stats
    assert np.all(stats.n_loglik_evals.values >= 3 * 50)  # three moves' rows per draw
    assert set(np.unique(stats.accepted_fraction.values)) <= {0, 1 / 3, 2 / 3, 1}
    # the default: about 2d moves per draw (Roberts, Gelman & Gilks' 0.33/d per move)
    with small_model:
        assert SubsampleMH(center=np.zeros(2)).thin == 4


def test_adapted_proposal_keeps_a_laplace_covariance_that_fits_and_replaces_one_that_does_not():
    from pymc_subsample.kernels.proposals import adapted_cholesky

    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.6, 0.0], [0.6, 2.0, 0.3], [0.0, 0.3, 0.5]])
    chol = np.linalg.cholesky(cov)
    draws = rng.standard_normal((400, 3)) @ chol.T
    assert adapted_cholesky(draws, chol) is None  # within 2× in every direction: kept
    # the proposal's variance 10× too large along one axis (the non-centred model's μ): replaced
    wide = np.linalg.cholesky(cov + np.diag([9.0, 0.0, 0.0]))
    new = adapted_cholesky(draws, wide)
    np.testing.assert_allclose(new @ new.T, np.cov(draws, rowvar=False), rtol=0.05, atol=0.05)
    # and 10× too small along another
    narrow = np.linalg.cholesky(cov * np.array([1.0, 1.0, 0.05])[:, None] * np.array([1.0, 1.0, 0.05]))
    assert adapted_cholesky(draws, narrow) is not None
    # the noise of 100 draws in 31 dimensions (sample eigenvalues ~0.2-2.4 of the true ones) alone
    # does not replace a fitting covariance; fewer than 2d draws never do
    wide31 = np.linalg.cholesky(np.eye(31) + 0.5)
    for seed in range(10):
        few = np.random.default_rng(seed).standard_normal((100, 31)) @ wide31.T
        assert adapted_cholesky(few, wide31) is None
        assert adapted_cholesky(few, 0.2 * wide31) is not None
    assert adapted_cholesky(few[:50], 0.1 * wide31) is None


def test_adapted_thin_follows_the_autocorrelation_time_of_the_warm_up_draws():
    from pymc_subsample.step_methods.subsample_mh import THIN_GROWTH_LIMIT, adapted_thin

    # independent draws (τ = 1) and mildly correlated ones (AR(1), φ = 0.5: τ = 3) keep thin
    assert adapted_thin(list(np.random.default_rng(0).standard_normal((1000, 3))), 6, 6) == 6
    assert adapted_thin(list(ar1_draws(0.5, 1000, 3, 1)), 6, 6) == 6
    # AR(1) with φ = 0.9 in one coordinate: τ = (1 + φ)/(1 − φ) = 19, so thin·19/2 moves; the last
    # half of 2000 draws (the first half is warm-up's own burn-in) estimates τ within ~30%
    trace = np.column_stack([ar1_draws(0.9, 2000, 1, seed=2), ar1_draws(0.0, 2000, 2, seed=3)])
    assert 6 * 19 / 2 * 0.7 <= adapted_thin(list(trace), 6, 6) <= 6 * 19 / 2 * 1.3
    # at most THIN_GROWTH_LIMIT × the default; too few draws to estimate τ̂: unchanged
    assert adapted_thin(list(ar1_draws(0.99, 2000, 2, 4)), 6, 6) == THIN_GROWTH_LIMIT * 6
    assert adapted_thin(list(ar1_draws(0.99, 150, 2, 5)), 6, 6) == 6


def test_adapted_thin_reads_the_draws_of_the_last_proposal():
    from pymc_subsample.step_methods.subsample_mh import adapted_thin

    # 700 draws of a slow proposal (AR(1), φ = 0.99), then 300 independent ones after the
    # proposal's last change at draw 700: the kernel that samples on mixes, thin stays; the last
    # half (draws 500-999, 200 of them slow) would have grown it
    trace = np.concatenate([ar1_draws(0.99, 700, 2, 6), np.random.default_rng(7).standard_normal((300, 2))])
    assert adapted_thin(list(trace), 6, 6, since=700) == 6
    assert adapted_thin(list(trace), 6, 6) > 6
    # fewer than THIN_MIN_DRAWS since the change: the last half, as without a change
    assert adapted_thin(list(trace), 6, 6, since=950) == adapted_thin(list(trace), 6, 6)


def test_proposal_covariance_is_compared_every_hundred_warm_up_draws(small_model, monkeypatch):
    """To the end of warm-up, not only at 100, 200 and 400 draws: on a ridge the first
    replacement comes from draws that have not crossed it (Bambi's (1|group), 50 groups: ESS 5
    of 1000 draws with three comparisons, ≥ 129 with one every 100, tests/test_zoo_agreement.py)."""
    import pymc_subsample.step_methods.subsample_mh as subsample_mh

    seen = []

    def record(draws, chol, **kwargs):
        seen.append(len(draws))
        return None

    monkeypatch.setattr(subsample_mh, "adapted_cholesky", record)
    with small_model:
        step = SubsampleMH(center=np.zeros(2), subsample_size=50, num_blocks=10)
        pm.sample(step=step, draws=5, tune=700, chains=1, random_seed=3, progressbar=False,
                  compute_convergence_checks=False)
    assert seen == [k // 2 for k in range(100, 701, 100)]  # the last half of the draws so far


def test_default_thin_grows_for_a_slowly_mixing_chain_and_a_given_thin_is_kept(small_model):
    """A random walk with a fixed scale 20× too small mixes slowly; the default thin grows at the
    end of warm-up (visible in the ``moves`` stat), each chain from the default again, and a thin
    the user passes is kept."""
    kwargs = dict(center=np.zeros(2), subsample_size=50, num_blocks=10, adapt_scale=False, scale=0.1)
    sample = dict(draws=20, tune=300, chains=2, cores=1, random_seed=3, progressbar=False,
                  compute_convergence_checks=False)
    with small_model:
        step = SubsampleMH(**kwargs)
        idata = pm.sample(step=step, **sample)
        moves = idata.sample_stats["moves"].values
        assert np.all(moves > step._default_thin) and np.all(moves == moves[:, :1])
        warmup = pm.sample(step=SubsampleMH(**kwargs), **sample, discard_tuned_samples=False)
        assert np.all(warmup.warmup_sample_stats["moves"].values == 4)  # both chains' warm-up
        fixed = pm.sample(step=SubsampleMH(thin=4, **kwargs), **sample)
        assert np.all(fixed.sample_stats["moves"].values == 4)
