"""Post-warm-up checks: every step method warns, with the remedy, when its own run cannot be trusted."""

import warnings

import numpy as np
import pymc as pm
import pytest
from conftest import ar1_draws, gaussian_linear_model, logistic_data, logistic_model

import pymc_subsample as pms
from pymc_subsample.diagnostics.run_checks import (
    RunMonitor,
    drift_check,
    ess_check,
    mean_check,
    min_ess_fraction,
)


def test_ess_fraction_matches_ar1_theory():
    # AR(1) with ρ: ESS/n → (1 − ρ)/(1 + ρ) = 0.0526 at ρ = 0.9
    frac = min_ess_fraction(ar1_draws(0.9, 20_000, d=1))
    assert abs(frac - (1 - 0.9) / 1.9) < 0.012


def test_a_monitor_keeps_only_the_stats_its_checks_read():
    """Checks that say what they read: the monitor keeps those stats alone; one that does not say
    (``reads`` None) makes it keep every scalar stat."""
    from pymc_subsample.diagnostics.run_checks import RunCheck

    named = RunMonitor([ess_check("Step", "x"), mean_check("acc", "accept", lambda v: v < 0.05, "low")])
    named.record(np.zeros(2), {"accept": 0.5, "energy": 1.0, "tree_depth": 3})
    assert set(named.stats) == {"accept"}
    custom = RunCheck("custom", lambda thetas, stats: len(stats), lambda v: False, "never")
    every = RunMonitor([ess_check("Step", "x"), custom])
    every.record(np.zeros(2), {"accept": 0.5, "energy": 1.0})
    assert set(every.stats) == {"accept", "energy"}


def test_monitor_checks_at_doubling_checkpoints_and_warns_once():
    monitor = RunMonitor([ess_check("Step", "Run more draws.")])
    sticky = ar1_draws(0.999, 800)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for t, theta in enumerate(sticky):
            monitor.record(theta, {})
            if t == 98:
                assert not record  # no verdict before the first checkpoint
    assert len(record) == 1  # checkpoints 100, 200, 400, 800: one warning per chain
    assert "effective sample size" in str(record[0].message) and "Run more draws." in str(record[0].message)
    assert monitor.next_check == 1600


def test_monitor_silent_on_a_mixing_chain():
    monitor = RunMonitor([ess_check("Step", "x"), mean_check("acc", "accept", lambda v: v < 0.05, "low")])
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for theta in rng.standard_normal((400, 3)):
            monitor.record(theta, {"accept": 0.3})


def test_drift_check_silent_when_stationary_and_warns_when_the_chain_slides_away():
    """Against the last warm-up draws: a stationary AR(1) chain in 100 coordinates (ρ = 0.9) stays
    near the largest of 100 normal deviates; the same chain with one coordinate sliding 2 of the
    window's sds every 10 draws warns once it is past 20, with the value and the remedy."""
    draws = ar1_draws(0.9, 1050, d=100, seed=3)
    warmup, after = draws[:250], draws[250:]
    check = drift_check("Step", warmup[-max(50, 250 // 4):], "Do this.")
    assert check.statistic(after) < 6
    monitor = RunMonitor([check])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for theta in after:
            monitor.record(theta, {})
    sliding = after.copy()
    sliding[:, 7] += 0.2 * np.arange(len(after)) * warmup[-62:, 7].std()
    monitor = RunMonitor([check])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for theta in sliding:
            monitor.record(theta, {})
    assert len(record) == 1 and "from where the chain ended its warm-up" in str(record[0].message)
    assert "Do this." in str(record[0].message)
    assert drift_check("Step", warmup[:49], "x") is None  # too few reference draws


def test_mean_check_uses_post_warmup_stat_mean():
    monitor = RunMonitor([mean_check("accept", "accept", lambda v: v < 0.05, "accepted {value:.1%}")],
                         first_check=10)
    rng = np.random.default_rng(2)
    with pytest.warns(UserWarning, match="accepted 4.0%"):
        for i in range(10):
            monitor.record(rng.standard_normal(2), {"accept": 0.4 if i < 1 else 0.0})


@pytest.fixture(scope="module")
def small_logistic():
    X, y = logistic_data(20_000, 3, seed=5)
    return logistic_model(X, y)


def test_hmcecs_checks_warn_with_remedy(small_logistic):
    with small_logistic:
        step = pms.HMCECS(subsample_size=20, proxy_order=0, rng=0)
    monitor = RunMonitor(step.run_checks(), first_check=10)
    rng = np.random.default_rng(0)
    stats = {"loglik_var": 1000.0, "subsample_accept": 0.01, "sign": 1}
    with pytest.warns(UserWarning) as record:
        for _ in range(10):
            monitor.record(rng.standard_normal(3), stats)
    messages = " ".join(str(r.message) for r in record)
    assert "σ̂² averages 1e+03" in messages and "Increase subsample_size" in messages
    assert "num_blocks" in messages  # low subsample acceptance
    assert "mean sign" not in messages  # perturbed: no sign check


def test_pm_sample_runs_the_checks_after_warmup_only(small_logistic):
    # m = 5 rows with a constant proxy: σ̂² is huge, so the checks must fire after warm-up
    with small_logistic:
        step = pms.HMCECS(subsample_size=5, proxy_order=0, num_blocks=1, rng=0)
        with pytest.warns(UserWarning, match="σ̂² averages"):
            pm.sample(step=step, draws=100, tune=30, chains=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False)
    assert len(step.monitor.thetas) == 100  # warm-up draws are not recorded


def test_sgfs_never_converged_and_sg_divergence_checks():
    model, mean, _ = gaussian_linear_model(n=1000, d=3, sigma=0.5, seed=1)
    with model:
        step = pms.SGFS(batch_size=100, center=mean)
    names = [c.name for c in step.run_checks()]
    assert names == ["ess", "diverging", "converged"]
    monitor = RunMonitor(step.run_checks(), first_check=10)
    rng = np.random.default_rng(0)
    with pytest.warns(UserWarning) as record:
        for _ in range(10):
            monitor.record(rng.standard_normal(3), {"converged": False, "diverging": True})
    messages = " ".join(str(r.message) for r in record)
    assert "convergence criterion (17)" in messages and "diverged" in messages


def test_subsample_mh_checks_acceptance_and_variance():
    model, mean, _ = gaussian_linear_model(n=1000, d=3, sigma=0.5, seed=1)
    with model:
        step = pms.SubsampleMH(center=mean)
    monitor = RunMonitor(step.run_checks(), first_check=10)
    rng = np.random.default_rng(0)
    with pytest.warns(UserWarning) as record:
        for _ in range(10):
            monitor.record(rng.standard_normal(3), {"accepted_fraction": 0.0, "loglik_var": 9.0})
    messages = " ".join(str(r.message) for r in record)
    assert "0.0% of proposals were accepted" in messages and "σ̂² averages 9" in messages


@pytest.mark.parametrize("n", [4, 5, 101, 800, 1601])
def test_the_checks_bulk_ess_is_arviz_s(n):
    """ArviZ's bulk ESS of each coordinate, to rounding: chains that mix slowly and fast, a constant
    coordinate, one with a NaN draw, one with ties."""
    import arviz_stats as azs

    from pymc_subsample.diagnostics.bulk_ess import bulk_ess

    rng = np.random.default_rng(n)
    draws = np.column_stack([ar1_draws(rho, n, d=1, seed=n)[:, 0] for rho in (0.0, 0.5, 0.95)]
                            + [np.full(n, 2.0), rng.normal(size=n), np.round(rng.normal(size=n))])
    draws[n // 2, 4] = np.nan
    expected = [float(azs.ess(draws[None, :, [c]], chain_axis=0, draw_axis=1, method="bulk")[0])
                for c in range(draws.shape[1])]
    np.testing.assert_allclose(bulk_ess(draws), expected, rtol=1e-12)
