"""ISS-MCMC (seed 002): kernels, Bernoulli toy against the Beta posterior, AR(2) against
an exact reference, ε → 0, diagnostics and bad input."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model
from scipy.special import logsumexp

from pymc_subsample.kernels import iss as K
from pymc_subsample.model.tall import TallModel
from pymc_subsample.step_methods.iss import ISS, check_refresh_rate

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
    ess_mean = float(az.ess(draws, method="bulk").to_array().item())
    ess_sd = float(az.ess(draws, method="sd").to_array().item())
    err = np.hypot(m - mean, s - sd) / sd
    mcse = np.hypot(s / np.sqrt(ess_mean), s / np.sqrt(2 * ess_sd)) / sd
    return err, mcse, m, s


# ---------------------------------------------------------------- kernels
def test_subset_size_and_swap_size_rules():
    assert K.resolve_subset_size("sqrt", 10_000) == 100
    assert K.resolve_subset_size("sqrt", 1_000_000) == 1000
    assert K.resolve_swap_size(None, 100, 10_000) == 1
    assert K.resolve_swap_size(None, 1000, 10**6) == 10
    assert K.resolve_swap_size(None, 50, 50) == 0  # n = N: nothing to swap
    assert K.resolve_swap_size(None, 299, 300) == 1  # never more than the N - n outsiders


def test_propose_swap_stays_outside_and_distinct():
    rng = np.random.default_rng(0)
    N, n = 50, 40
    subset = rng.choice(N, n, replace=False)
    member = np.zeros(N, bool)
    member[subset] = True
    for _ in range(200):
        pos, rows = K.propose_swap(rng, member, n, 5)
        assert len(set(pos)) == 5 and len(set(rows)) == 5
        assert not member[rows].any() and pos.min() >= 0 and pos.max() < n


def test_stationary_refresh_signal_is_unbiased_on_a_toy_chain():
    # Metropolis on a 1-d lattice with weights exp(-eps x²): mean signal = refresh rate
    rng = np.random.default_rng(1)
    eps, x, acc, sig = 0.3, 0, [], []
    for _ in range(100_000):
        y = x + rng.choice([-1, 1])
        la = K.subset_log_accept(eps, x * x, y * y)
        prob = min(1.0, np.exp(la))
        sig.append(K.stationary_refresh_signal(prob, x * x, y * y))
        a = rng.random() < prob
        acc.append(a)
        x = y if a else x
    assert abs(np.mean(sig) - np.mean(acc)) < 0.01


def test_incremental_sums_match_recomputed():
    X, y = logistic_data(n=3000, d=2)
    with logistic_model(X, y):
        step = ISS(subset_size=200, epsilon="auto", swap_size=3)
    _sample(step, draws=300, tune=300, chains=1)
    S = step.summary
    assert np.allclose(step.subset_sum, S.row_stats(step.batch).sum(axis=0), atol=1e-8)
    for a, b in zip(step.batch, step.tall.gather(step.subset), strict=True):
        assert np.array_equal(a, b)
    assert step.member.sum() == 200 and step.member[step.subset].all()
    d = S.delta(step.subset_sum, 200)
    assert np.isclose(np.sqrt(d @ d), np.sqrt(step.delta_sq))


# --------------------------------------------------------------- Bernoulli
@pytest.mark.parametrize("n", [100, 1000])
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
        step = ISS(model=tall, subset_size=n, epsilon=c / unit2)
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
        step = ISS(model=tall, subset_size=1000, inner=inner)
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
    step = ISS(model=ar2_model(X, y), subset_size=n, epsilon=epsilon, summary=summary)
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
    step = ISS(model=ar2_model(X, y), subset_size=200, summary=yule_walker, inner="hmc")
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
    step = ISS(model=model, subset_size=n, epsilon=0.0)
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
    a = _sample(ISS(model=tall, subset_size=50), draws=200, tune=200, chains=2, seed=5)
    b = _sample(ISS(model=tall, subset_size=50), draws=200, tune=200, chains=2, seed=5)
    assert np.array_equal(a.posterior["p"].values, b.posterior["p"].values)
    eps = a.sample_stats["epsilon"].values
    assert eps[0, 0] != eps[1, 0]  # each chain tunes its own ε from its own U₀


def test_map_summary_runs_and_counts_newton_evaluations():
    X, y = logistic_data(n=2000, d=2)
    with logistic_model(X, y):
        step = ISS(subset_size=100, summary="map", swap_size=2)
    idata = _sample(step, draws=300, tune=300, chains=1)
    assert np.all(np.isfinite(idata.posterior["beta"].values))
    assert idata.sample_stats["n_loglik_evals"].values.min() >= 3 * 100


# ------------------------------------------------------------ diagnostics
def test_warns_when_refresh_rate_is_below_one_percent():
    # n = N - 1 and a huge ε: the chain finds the best of the N subsets and stays there
    X, y = logistic_data(n=300, d=2)
    model = logistic_model(X, y)
    with model:
        step = ISS(subset_size=299, epsilon=1e6)
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
            step = ISS(subset_size=20, summary=summary)
            pm.sample(step=step, draws=5, tune=0, chains=1, model=model, **SAMPLE)


def test_parallel_chains_match_sequential():
    model, _ = bernoulli(N=2000)
    with model:
        step = ISS(subset_size=50, inner="hmc")
    a = _sample(step, draws=100, tune=100, chains=2, seed=11)
    with model:
        step = ISS(subset_size=50, inner="hmc")  # PyMC's workers keep a reused step's `tune`
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        b = pm.sample(step=step, draws=100, tune=100, chains=2, random_seed=11, model=model,
                      cores=2, progressbar=False, compute_convergence_checks=False)
    assert np.allclose(a.posterior["p"].values, b.posterior["p"].values)
