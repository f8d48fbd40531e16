"""ISS-MCMC (seed 002): kernels, Bernoulli toy against the Beta posterior, AR(2) against
an exact reference, ε → 0, the "map" summary as a function of the subset, the Laplace
checks, the defaults on zoo GLMs against full-data NUTS, diagnostics and bad input."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model
from scipy.special import logsumexp
from zoo import agreement, agrees, build

import pymc_subsample as pms
from pymc_subsample.diagnostics.iss_checks import (
    SHIFT_LIMIT,
    SPREAD_LIMIT,
    SPREAD_MARGIN_SE,
    check_refresh_rate,
    laplace_checks,
    laplace_discrepancy,
)
from pymc_subsample.diagnostics.run_checks import RunMonitor
from pymc_subsample.kernels import iss_subset
from pymc_subsample.model.tall import TallModel
from pymc_subsample.step_methods.iss import ISS

SAMPLE = dict(cores=1, progressbar=False, compute_convergence_checks=False)


def _sample(step, draws=2000, tune=1000, chains=2, seed=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pm.sample(step=step, draws=draws, tune=tune, chains=chains, random_seed=seed,
                         model=step.tall.model, **SAMPLE)


# ----------------------------------------------------------------- models
def bernoulli(N=10_000, p=0.3, seed=1):
    y = (np.random.default_rng(seed).random(N) < p).astype(float)
    with pm.Model() as model:
        pm.Bernoulli("y", p=pm.Beta("p", 1, 1), observed=y)
    return model, y


def simulate_ar2(N, phi=(0.6, -0.3), sigma=1.0, seed=3):
    rng = np.random.default_rng(seed)
    e = rng.normal(0, sigma, N + 102)
    y = np.zeros(N + 102)
    for t in range(2, N + 102):
        y[t] = phi[0] * y[t - 1] + phi[1] * y[t - 2] + e[t]
    y = y[100:]
    return np.column_stack([y[1:-1], y[:-2]]), y[2:]


def ar2_model(X, y, tau=10.0, sigma_sd=5.0):
    """Rows = time points; the two lags are the columns of a pm.Data matrix."""
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        y_ = pm.Data("y_obs", y)
        theta = pm.Normal("theta", 0, tau, shape=2)
        sigma = pm.HalfNormal("sigma", sigma_sd)
        pm.Normal("y", mu=X_ @ theta, sigma=sigma, observed=y_)
    return model


def yule_walker(rows):
    """Yule–Walker (φ1, φ2) and noise variance from the (y_t, y_{t-1}, y_{t-2}) rows."""
    X, y = rows["X"], rows["y_obs"]
    g0, g1, g2 = np.mean(y * y), np.mean(y * X[:, 0]), np.mean(y * X[:, 1])
    phi = np.linalg.solve([[g0, g1], [g1, g0]], [g1, g2])
    return np.array([phi[0], phi[1], g0 - phi @ [g1, g2]])


def ar2_sigma_reference(X, y, tau=10.0, sigma_sd=5.0):
    """Exact marginal posterior of σ on a grid (β integrated out analytically)."""
    N = len(y)
    XX, Xy, yy = X.T @ X, X.T @ y, y @ y
    s_hat = np.sqrt((yy - Xy @ np.linalg.solve(XX, Xy)) / N)
    grid = s_hat + np.linspace(-12, 12, 2001) * s_hat / np.sqrt(2 * N)
    logp = np.empty_like(grid)
    for i, s in enumerate(grid):
        A = XX / s**2 + np.eye(2) / tau**2
        b = Xy / s**2
        logp[i] = (-0.5 * s**2 / sigma_sd**2 - N * np.log(s) - yy / (2 * s**2)
                   + 0.5 * b @ np.linalg.solve(A, b) - 0.5 * np.linalg.slogdet(A)[1])
    w = np.exp(logp - logsumexp(logp))
    mean = w @ grid
    return mean, np.sqrt(w @ (grid - mean) ** 2)


def gaussian_w2(draws, mean, sd):
    """W2 distance of N(mean(draws), sd(draws)) to N(mean, sd), in units of sd, with an MCSE."""
    m, s = float(draws.mean()), float(draws.std())
    ess_mean = float(np.asarray(az.ess(draws, method="bulk")).item())
    ess_sd = float(np.asarray(az.ess(draws, method="sd")).item())
    err = np.hypot(m - mean, s - sd) / sd
    mcse = np.hypot(s / np.sqrt(ess_mean), s / np.sqrt(2 * ess_sd)) / sd
    return err, mcse, m, s


# ---------------------------------------------------------------- kernels
def test_subset_size_and_swap_size_rules():
    assert iss_subset.resolve_subset_size("sqrt", 10_000) == 100
    assert iss_subset.resolve_subset_size("sqrt", 1_000_000) == 1000
    assert iss_subset.resolve_swap_size(None, 100, 10_000) == 1
    assert iss_subset.resolve_swap_size(None, 1000, 10**6) == 1  # one row: the largest ε per refresh rate
    assert iss_subset.resolve_swap_size(None, 50, 50) == 0  # n = N: nothing to swap
    assert iss_subset.resolve_swap_size(None, 299, 300) == 1
    assert iss_subset.resolve_swap_size(10, 1000, 10**6) == 10


def test_propose_swap_stays_outside_and_distinct():
    rng = np.random.default_rng(0)
    N, n = 50, 40
    subset = rng.choice(N, n, replace=False)
    member = np.zeros(N, bool)
    member[subset] = True
    for _ in range(200):
        pos, rows = iss_subset.propose_swap(rng, member, n, 5)
        assert len(set(pos)) == 5 and len(set(rows)) == 5
        assert not member[rows].any() and pos.min() >= 0 and pos.max() < n


def test_stationary_refresh_signal_is_unbiased_on_a_toy_chain():
    # Metropolis on a 1-d lattice with weights exp(-eps x²): mean signal = refresh rate
    rng = np.random.default_rng(1)
    eps, x, acc, sig = 0.3, 0, [], []
    for _ in range(100_000):
        y = x + rng.choice([-1, 1])
        la = iss_subset.subset_log_accept(eps, x * x, y * y)
        prob = min(1.0, np.exp(la))
        sig.append(iss_subset.stationary_refresh_signal(prob, x * x, y * y))
        a = rng.random() < prob
        acc.append(a)
        x = y if a else x
    assert abs(np.mean(sig) - np.mean(acc)) < 0.01


def test_incremental_sums_match_recomputed():
    X, y = logistic_data(n=3000, d=2)
    with logistic_model(X, y):
        step = ISS(thin=1, subset_size=200, epsilon="auto", swap_size=3, summary="moments")
    _sample(step, draws=300, tune=300, chains=1)
    S, U = step.summary, step.chain.subsets
    assert np.allclose(U.subset_sum, S.row_stats(U.batch).sum(axis=0), atol=1e-8)
    for a, b in zip(U.batch, step.tall.gather(U.subset), strict=True):
        assert np.array_equal(a, b)
    assert U.member.sum() == 200 and U.member[U.subset].all()
    d = S.delta(U.subset_sum, 200)
    assert np.isclose(np.sqrt(d @ d), np.sqrt(U.delta_sq))


# --------------------------------------------------------------- Bernoulli
@pytest.mark.slow
@pytest.mark.parametrize("n", [100, pytest.param(1000, marks=pytest.mark.heavy)])
def test_bernoulli_error_shrinks_as_epsilon_grows(n):
    model, y = bernoulli()
    N = len(y)
    a, b = 1 + y.sum(), 1 + N - y.sum()
    mean, sd = a / (a + b), np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    tall = TallModel(model)
    # one row swapped 0 <-> 1 changes ‖Δ‖² by unit² · k² around the k-th best subset
    unit2 = 2 * (N / (n * y.std())) ** 2
    errs = []
    for c in [0.0, 0.1, 1.0, 10.0]:
        step = ISS(thin=1, model=tall, subset_size=n, epsilon=c / unit2, summary="moments")
        idata = _sample(step, draws=4000, tune=1000)
        err, mcse, m, s = gaussian_w2(idata.posterior["p"], mean, sd)
        errs.append((err, mcse))
        print(f"n={n} eps={c / unit2:.3g} (c={c}): mean {m:.5f} sd {s:.5f} vs Beta {mean:.5f} {sd:.5f}; "
              f"W2/sd = {err:.3f} ± {mcse:.3f}")
    for (e0, m0), (e1, m1) in zip(errs, errs[1:], strict=False):
        assert e1 <= e0 + 3 * (m0 + m1)
    assert errs[-1][0] < 0.5 * errs[0][0]
    assert errs[-1][0] < 0.3 + 3 * errs[-1][1]


def test_bernoulli_auto_epsilon_and_hmc_match_beta():
    model, y = bernoulli()
    N = len(y)
    a, b = 1 + y.sum(), 1 + N - y.sum()
    mean, sd = a / (a + b), np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    tall = TallModel(model)
    for inner in ["mh", "nuts"]:
        step = ISS(thin=1, model=tall, subset_size=1000, inner=inner, summary="moments")
        idata = _sample(step, draws=2000, tune=1000)
        err, mcse, m, s = gaussian_w2(idata.posterior["p"], mean, sd)
        rate = idata.sample_stats["refresh_rate"].values[:, -1]
        print(f"auto eps, inner={inner}: W2/sd {err:.3f} ± {mcse:.3f}, refresh {rate}")
        assert err < 0.3 + 3 * mcse
        assert np.all(rate >= 0.01)
        assert idata.sample_stats["n_loglik_evals"].values.min() >= 1000


# ------------------------------------------------------------------- AR(2)
def _ar2_run(N, n, epsilon, summary=yule_walker, draws=2000):
    X, y = simulate_ar2(N)
    ref_mean, ref_sd = ar2_sigma_reference(X, y)
    step = ISS(thin=1, model=ar2_model(X, y), subset_size=n, epsilon=epsilon, summary=summary)
    idata = _sample(step, draws=draws, tune=1000)
    err, mcse, m, s = gaussian_w2(idata.posterior["sigma"], ref_mean, ref_sd)
    print(f"AR(2) N={N} n={n} eps={epsilon}: sigma {m:.5f} sd {s:.5f} vs exact {ref_mean:.5f} "
          f"{ref_sd:.5f}; W2/sd {err:.2f} ± {mcse:.2f}; refresh "
          f"{idata.sample_stats['refresh_rate'].values[:, -1]}")
    return err, mcse, s / ref_sd


def test_ar2_yule_walker_summary_beats_uniform_subsets():
    """N = 10^5 rows; reference: exact σ-marginal (β integrated analytically on a grid)."""
    err0, _, ratio0 = _ar2_run(100_000, 1000, 0.0)
    err, mcse, ratio = _ar2_run(100_000, 1000, "auto")
    assert ratio < 0.5 * ratio0 and err < 0.5 * err0
    assert ratio < 4.0


def test_ar2_hmc_from_a_far_initial_point_rejects_out_of_support_proposals():
    # σ starts ~4x too large: early leapfrog paths overshoot to σ = 0, which must be
    # rejected as a divergence, not raise PyMC's ParameterValueError
    X, y = simulate_ar2(20_000)
    step = ISS(thin=1, model=ar2_model(X, y), subset_size=200, summary=yule_walker, inner="hmc",
               init_at_center=False)
    idata = _sample(step, draws=300, tune=300, chains=1)
    sigma = idata.posterior["sigma"].values
    assert np.all(np.isfinite(sigma)) and abs(np.median(sigma) - 1) < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("n", [100, 1000])
def test_ar2_million_rows(n):
    err0, _, ratio0 = _ar2_run(1_000_000, n, 0.0)
    err, mcse, ratio = _ar2_run(1_000_000, n, "auto")
    assert ratio < 0.5 * ratio0 and err < 0.5 * err0


# --------------------------------------------------------------- ε → 0
def test_epsilon_zero_gives_uniform_subsets():
    model, y = bernoulli()
    N, n = len(y), 100
    step = ISS(thin=1, model=model, subset_size=n, epsilon=0.0, summary="moments")
    idata = _sample(step, draws=3000, tune=0, chains=1)
    ss = idata.sample_stats
    assert np.all(ss["subset_accept"].values == 1.0)
    assert ss["refresh_rate"].values[0, -1] == 1.0
    # uniform subsets: E‖Δ‖² = 2 (N/n)² n (N - n)/(N - 1) for the two standardised moments
    expected = 2 * (N / n) ** 2 * n * (N - n) / (N - 1)
    assert abs(np.mean(ss["delta_norm"].values ** 2) / expected - 1) < 0.35


# ------------------------------------------------------- state and seeds
def test_chains_reset_and_seed_reproducible():
    model, _ = bernoulli(N=2000)
    tall = TallModel(model)
    a = _sample(ISS(thin=1, model=tall, subset_size=50), draws=200, tune=200, chains=2, seed=5)
    b = _sample(ISS(thin=1, model=tall, subset_size=50), draws=200, tune=200, chains=2, seed=5)
    assert np.array_equal(a.posterior["p"].values, b.posterior["p"].values)
    eps = a.sample_stats["epsilon"].values
    assert eps[0, 0] != eps[1, 0]  # each chain tunes its own ε from its own U₀


def test_map_summary_runs_and_counts_newton_evaluations():
    X, y = logistic_data(n=2000, d=2)
    with logistic_model(X, y):
        step = ISS(thin=1, subset_size=100, summary="map", swap_size=2)
    idata = _sample(step, draws=300, tune=300, chains=1)
    assert np.all(np.isfinite(idata.posterior["beta"].values))
    assert idata.sample_stats["n_loglik_evals"].values.min() >= 3 * 100


# ------------------------------------------------------- "map" summary
def _swap_into(step, monkeypatch, start, position, row):
    """Put the chain on subset ``start``, then make the next proposal swap ``row`` in at
    ``position`` (ε = 0: accepted) and return the subset chain's state after it."""
    tall, update = step.tall, step.kernel.subsets
    subset = np.array(start)
    member = np.zeros(tall.n_rows, dtype=bool)
    member[subset] = True
    state = update.summarised(subset, member, tall.gather(subset))
    monkeypatch.setattr(iss_subset, "propose_swap",
                        lambda rng, member, n, r: (np.array([position]), np.array([row])))
    state, info = update.step(step.rng, state, 0.0)
    assert info.accepted and info.n_loglik_evals >= 2 * step.n  # S(Y_U) costs ≥ 2 passes over the n rows
    return state


def test_map_summary_is_a_function_of_the_subset_alone(monkeypatch):
    # Δ_n(U') must not depend on the subset the chain came from (seed 002, ISS-MCMC step 1.2
    # is a Metropolis step on ν_{n,ε} only then). n = 30 of 3000 logistic rows: sub-posterior
    # modes are ~10 sds apart, so a start at the current subset's mode changes the result.
    X, y = logistic_data(n=3000, d=3, seed=4)
    with logistic_model(X, y):
        step = ISS(thin=1, subset_size=30, summary="map", epsilon=0.0, rng=0)
    rng = np.random.default_rng(3)
    target = rng.choice(3000, size=30, replace=False)  # U', in no particular order
    outside = np.setdiff1d(np.arange(3000), target)
    a, b = rng.choice(outside, size=2, replace=False)
    # two different current subsets, U1 = U' with row a at position 4 and U2 = U' with row b
    # at position 17 (their rows in other orders too); one swap takes each to U'
    u1, u2 = target.copy(), target[::-1].copy()
    u1[4], u2[17] = a, b
    one = _swap_into(step, monkeypatch, u1, 4, target[4])
    two = _swap_into(step, monkeypatch, u2, 17, target[::-1][17])
    assert set(one.subset) == set(target) == set(two.subset)
    s1 = one.summary_value
    assert np.array_equal(s1, two.summary_value) and one.delta_sq == two.delta_sq  # to the last bit
    # and equal to the summary of U' computed from scratch
    direct, _ = step.summary.value(step.tall.gather(np.sort(target)))
    assert np.array_equal(s1, direct)
    # the value is the mode of the scaled sub-posterior: its gradient vanishes there
    batch = step.tall.gather(np.sort(target))
    _, g = step.tall.loglik_sum_value_and_grad(s1, batch)
    _, gp = step.tall.prior_value_and_grad(s1)
    assert np.max(np.abs(gp + (3000 / 30) * g)) < 1e-6 * np.max(np.abs((3000 / 30) * g) + 1)


# ------------------------------------------------------------ Laplace checks
def _monitor_warnings(thetas, center, sd):
    monitor = RunMonitor(laplace_checks(center, sd))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for theta in thetas:
            monitor.record(theta, {})
    return [str(r.message) for r in record]


def _ar1_chain(n, sd, rho, rng):
    z = np.zeros((n, len(sd)))
    z[0] = rng.standard_normal(len(sd))
    for t in range(1, n):
        z[t] = rho * z[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(len(sd))
    return z * sd


def test_laplace_check_fires_on_wide_or_shifted_chains_and_not_on_good_ones():
    rng = np.random.default_rng(0)
    center, sd = np.array([1.0, -2.0, 0.5]), np.array([0.01, 0.2, 3.0])  # unequal scales
    # good: N(θ*, sd²) by independent draws and by a sticky AR(1) chain (ESS ≈ 5% of the
    # draws); and an ISS-like chain 1.25× too wide with ESS ≈ 2.5% (within ISS's tolerance)
    for rho, widen in [(0.0, 1.0), (0.9, 1.0), (0.95, 1.25)]:
        good = center + _ar1_chain(800, widen * sd, rho, rng)
        spread, lower, shift = laplace_discrepancy(good, center, sd)
        assert 0.8 * widen < spread < 1.25 * widen and lower < spread and shift < 1.0
        assert _monitor_warnings(good, center, sd) == []
    # too wide: one coordinate 2× its Laplace sd (what ISS's mixture of sub-posteriors does)
    wide = center + _ar1_chain(800, sd * [1.0, 2.0, 1.0], 0.5, rng)
    spread, lower, _ = laplace_discrepancy(wide, center, sd)
    ratio = wide.std(axis=0, ddof=1) / sd
    ess = np.array([float(az.ess(wide[None, :, j])) for j in range(3)])
    assert abs(spread - 2.0) < 0.3 and 1.5 < lower < spread
    assert lower == pytest.approx(np.max(ratio * np.exp(-0.5 / np.sqrt(2 * ess))), rel=1e-12)
    messages = _monitor_warnings(wide, center, sd)
    assert len(messages) == 1  # at the first checkpoint, once
    assert "after 100 draws the chain's standard deviation is at least" in messages[0]
    assert "subset_size" in messages[0] and "pms.HMCECS" in messages[0] and "summary='map'" in messages[0]
    monitor = RunMonitor(laplace_checks(center, sd, summary_kind="map"))  # no advice to use what is used
    with pytest.warns(UserWarning) as record:
        for theta in wide[:100]:
            monitor.record(theta, {})
    assert "subset_size" in str(record[0].message) and "summary='map'" not in str(record[0].message)
    # shifted: right width, mean 3 Laplace sds off in the third coordinate
    shifted = center + [0.0, 0.0, 3 * sd[2]] + _ar1_chain(800, sd, 0.5, rng)
    messages = _monitor_warnings(shifted, center, sd)
    assert len(messages) == 1 and "Laplace standard deviations from the full-data centre" in messages[0]
    # the limits the docstrings state
    assert (SPREAD_LIMIT, SPREAD_MARGIN_SE, SHIFT_LIMIT) == (1.5, 0.5, 2.0)
    assert np.isnan(laplace_discrepancy(center[None], center, sd)[0])  # 1 draw: no verdict


def test_laplace_check_in_pm_sample_fires_on_uniform_subsets_only():
    # ε = 0 on a Gaussian linear model: uniform subsets of n = 100 of 4000 rows, whose scaled
    # sub-posteriors are spread ~√(N/n) ≈ 6 posterior sds around θ*: the check must fire.
    # n = N: ISS is full-data MH, so the chain samples the posterior and it must stay silent.
    model = build("linear", 4000)
    tall = TallModel(model)
    with pytest.warns(UserWarning) as record:
        pm.sample(step=ISS(thin=1, model=tall, subset_size=100, epsilon=0.0, summary="moments"), draws=200,
                  tune=200, chains=1,
                  random_seed=1, model=model, **SAMPLE)
    assert any("the chain's standard deviation is at least" in str(r.message) for r in record)
    step = ISS(thin=1, model=tall, subset_size=4000)
    assert step.swap_size == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pm.sample(step=step, draws=400, tune=300, chains=1, random_seed=1, model=model, **SAMPLE)
    assert len(step.monitor.thetas) == 400  # warm-up draws are not checked


# ---------------------------------------------- defaults against full-data NUTS
ZOO_N = 20_000
_NUTS = {}


def _nuts_reference(name):
    if name not in _NUTS:
        with build(name, ZOO_N), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _NUTS[name] = pm.sample(draws=1000, tune=700, chains=1, random_seed=11, **SAMPLE)
    return _NUTS[name]


def _iss_against_nuts(name, draws=5000, tune=500, **kwargs):
    """ISS(**kwargs) on a zoo GLM (X and y as pm.Data): agreement with NUTS and the Laplace warnings."""
    model = build(name, ZOO_N)
    with model:
        step = pms.ISS(**kwargs)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        idata = pm.sample(step=step, draws=draws, tune=tune, chains=1, random_seed=3, model=model, **SAMPLE)
    laplace = [str(r.message) for r in record if "Laplace standard deviation" in str(r.message)]
    result = agreement(idata, _nuts_reference(name), [rv.name for rv in model.free_RVs])
    print(name, kwargs, {k: (round(r["ess"]), round(r["z"], 2), round(r["shift"], 2),
                             np.round(r["sd_ratio"], 2).tolist()) for k, r in result.items()}, laplace)
    return result, laplace


def _far_off(result):
    """Beyond the tolerance ISS states for itself: a mean more than SHIFT_LIMIT reference sds
    off and significantly so (MCSE-scaled z > 4.5), or an sd more than SPREAD_LIMIT× too wide."""
    return any((r["shift"] > SHIFT_LIMIT and r["z"] > 4.5) or np.any(r["sd_ratio"] > SPREAD_LIMIT)
               for r in result.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param("linear", marks=pytest.mark.heavy), "poisson_offset"])
def test_default_iss_agrees_with_full_data_nuts_or_warns(name):
    # pms.ISS() with no arguments on ordinary GLMs must not be 3–9 sds off silently.
    # Now it must either agree with full-data NUTS (min ESS, MCSE-scaled z, sd within ISS's
    # stated 1.5×) and stay silent, or, when far off, say so.
    result, laplace = _iss_against_nuts(name, draws=1000, tune=100)  # thin = 2d iterations a draw
    if _far_off(result):
        assert laplace, result
    else:
        assert min(r["ess"] for r in result.values()) >= 100, result
        assert agrees(result, min_ess=100, z_max=4.5, sd_tol=SPREAD_LIMIT - 1), result
        assert not laplace, laplace  # no false alarm on a run that agrees


@pytest.mark.slow
def test_moment_summary_is_far_off_on_a_glm_and_warns():
    # the old default: standardised moments of (X, log exposure, y) are not sufficient for a
    # Poisson GLM and the subset chain mixes slowly, so the ISS marginals are far off; the
    # Laplace check must say so, by message
    result, laplace = _iss_against_nuts("poisson_offset", summary="moments", thin=1)
    assert _far_off(result), result  # the regime where the warning matters
    assert laplace, result
    assert any("subset_size" in m and "summary='map'" in m and "pms.SubsampleMH" in m for m in laplace)


def test_chains_start_at_the_centre_unless_asked_not_to():
    model = build("linear", 4000)
    tall = TallModel(model)
    first = {}
    for init in [True, False]:
        step = ISS(thin=1, model=tall, summary="moments", init_at_center=init)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            idata = pm.sample(step=step, draws=5, tune=5, chains=1, random_seed=2, model=model,
                              discard_tuned_samples=False, **SAMPLE)
        z = (idata.warmup_posterior["alpha"].values[0, 0] - step.target.center[0]) / step.laplace_sd[0]
        first[init] = abs(float(z))
    # one random-walk step from θ* (≲ 3 sds) against PyMC's initial point α = 0, ~80 sds away
    assert first[True] < 5 and first[False] > 50


# ------------------------------------------------------------ diagnostics
def test_warns_when_refresh_rate_is_below_one_percent():
    # n = N - 1 and a huge ε: the chain finds the best of the N subsets and stays there
    X, y = logistic_data(n=300, d=2)
    model = logistic_model(X, y)
    with model:
        step = ISS(thin=1, subset_size=299, epsilon=1e6, summary="moments")
    with pytest.warns(UserWarning, match="refresh rate"):
        idata = pm.sample(step=step, draws=1500, tune=0, chains=1, random_seed=2, model=model, **SAMPLE)
    with pytest.warns(UserWarning, match="refresh rate below"):
        rates = check_refresh_rate(idata)
    assert rates[0] < 0.01


# -------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, match", [
    ({"subset_size": 0}, "subset_size must be 'sqrt' or an integer between 1"),
    ({"subset_size": 301}, "N = 300"),
    ({"subset_size": "half"}, "subset_size must be"),
    ({"epsilon": -1.0}, "epsilon must be 'auto' or a finite number >= 0"),
    ({"epsilon": float("nan")}, "epsilon must be"),
    ({"epsilon": "big"}, "epsilon must be"),
    ({"swap_size": 1000}, "swap_size must be an integer between 1"),
    ({"inner": "gibbs"}, "inner must be 'mh', 'hmc' or 'nuts'"),
    ({"summary": "median"}, "summary must be 'moments', 'map' or a callable"),
    ({"thin": 0}, "thin must be a positive integer"),
    ({"target_refresh": 0.0}, "target_refresh must be a number in"),
    ({"summary": lambda rows: np.ones((2, 2))}, "must return a non-empty 1-d array"),
    ({"summary": lambda rows: np.array([np.nan])}, "non-finite"),
])
def test_bad_input_messages(kwargs, match):
    model, _ = bernoulli(N=300)
    with model, pytest.raises(ValueError, match=match):
        ISS(**kwargs)


def test_summary_with_wrong_shape_on_subsets():
    model, _ = bernoulli(N=300)

    def summary(rows):  # length depends on the number of rows: wrong
        return np.ones(1 if len(rows["y"]) == 300 else 2)

    with model:
        with pytest.raises(ValueError, match=r"must return shape \(1,\) on a subset"):
            step = ISS(thin=1, subset_size=20, summary=summary)
            pm.sample(step=step, draws=5, tune=0, chains=1, model=model, **SAMPLE)


def test_parallel_chains_match_sequential():
    model, _ = bernoulli(N=2000)
    with model:
        step = ISS(thin=1, subset_size=50, inner="hmc")
    a = _sample(step, draws=100, tune=100, chains=2, seed=11)
    with model:
        step = ISS(thin=1, subset_size=50, inner="hmc")  # PyMC's workers keep a reused step's `tune`
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        b = pm.sample(step=step, draws=100, tune=100, chains=2, random_seed=11, model=model,
                      cores=2, progressbar=False, compute_convergence_checks=False)
    assert np.allclose(a.posterior["p"].values, b.posterior["p"].values)
