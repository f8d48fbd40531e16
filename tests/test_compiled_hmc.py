"""The compiled HMC and HMC-ECS transitions: exactness without PyMC, and HMCECS(inner="hmc") on them."""

import arviz as az
import numba
import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model

import pymc_subsample as pms
from pymc_subsample.kernels.compiled_hmc import ecs_iteration, hmc_transition


@numba.njit
def gaussian(theta, mean, precision, shift):
    """log N(θ; mean + shift, precision⁻¹) up to a constant, its gradient, and one extra (the shift)."""
    diff = theta - mean - shift
    grad = -(precision @ diff)
    return np.array(0.5 * (diff @ grad)), grad, np.array([shift])


@numba.njit
def inside_unit_ball(theta, scale):
    """A flat density on |θ| < 1 (−∞ outside): any long step leaves it."""
    value = 0.0 if np.sum(theta * theta) < 1.0 else -np.inf
    return np.array(value), np.zeros_like(theta), np.zeros(1)


def gaussian_target(d, seed=0):
    rng = np.random.default_rng(seed)
    root = rng.normal(size=(d, d)) * np.linspace(0.2, 3.0, d)
    cov = root @ root.T + 0.1 * np.eye(d)
    return rng.normal(size=d), cov


def hmc_chain(mean, cov, inverse_mass, draws, seed, step_size=0.25, path_length=1.5):
    rng = np.random.default_rng(seed)
    precision = np.linalg.inv(cov)
    chol_mass = np.linalg.cholesky(np.linalg.inv(inverse_mass))
    args = (mean, precision, 0.0)
    theta = mean.copy()
    start = tuple(gaussian(theta, *args))
    out, accepted = np.empty((draws, len(mean))), 0
    for i in range(draws):
        eps = step_size * rng.uniform(0.85, 1.15)
        result = hmc_transition(gaussian, args, theta, start, chol_mass @ rng.standard_normal(len(mean)), eps,
                                max(1, int(path_length / eps)), inverse_mass, np.log(rng.uniform()))
        theta, start = result.theta, (np.array(result.value), result.grad, result.extras)
        out[i], accepted = theta, accepted + result.accepted
    return out, accepted / draws


@pytest.mark.parametrize("metric", ["identity", "covariance"])
def test_hmc_transition_leaves_a_gaussian_invariant(metric):
    mean, cov = gaussian_target(4)
    inverse_mass = np.eye(4) if metric == "identity" else cov
    # with the identity the path must cross the widest direction (sd ≈ 6) in steps fit for the narrowest
    step_size, path_length = (0.15, 6.0) if metric == "identity" else (0.6, 1.5)
    draws, accept_rate = hmc_chain(mean, cov, inverse_mass, 4000, seed=1, step_size=step_size,
                                   path_length=path_length)
    assert 0.5 < accept_rate < 1.0
    ess = az.ess(draws[None], chain_axis=0, draw_axis=1)  # one chain
    # the variance's own ESS, that of the squared deviations (HMC's draws can be antithetic in the mean)
    squares = (draws - mean) ** 2
    ess_var = az.ess(squares[None], chain_axis=0, draw_axis=1)
    assert min(np.min(ess), np.min(ess_var)) >= 300, (ess, ess_var)
    for j in range(4):
        sd = np.sqrt(cov[j, j])
        assert abs(draws[:, j].mean() - mean[j]) <= 4.5 * sd / np.sqrt(ess[j]), j
        se_var = np.std(squares[:, j]) / np.sqrt(ess_var[j])
        assert abs(squares[:, j].mean() - cov[j, j]) <= 4.5 * se_var, j


def test_a_divergent_path_is_stopped_and_rejected():
    theta = np.array([0.1, -0.2])
    start = tuple(inside_unit_ball(theta, 1.0))
    result = hmc_transition(inside_unit_ball, (1.0,), theta, start, np.array([3.0, 0.0]), 1.0, 10, np.eye(2),
                            -1e-9)
    assert result.diverging and not result.accepted and result.accept_prob == 0.0
    assert result.n_steps == 1  # stopped at the first step outside
    np.testing.assert_array_equal(result.theta, theta)
    assert result.energy_error == np.inf == result.max_energy_error


def test_energy_error_falls_with_the_square_of_the_step_size():
    """Leapfrog's energy error is O(ε²) over a fixed path length: half the step, a quarter of the error."""
    mean, cov = gaussian_target(3, seed=2)
    args = (mean, np.linalg.inv(cov), 0.0)
    theta, momentum = mean + 0.3, np.array([0.5, -1.0, 0.2])
    start = tuple(gaussian(theta, *args))
    coarse = hmc_transition(gaussian, args, theta, start, momentum, 0.05, 20, cov, -np.inf)
    fine = hmc_transition(gaussian, args, theta, start, momentum, 0.025, 40, cov, -np.inf)
    assert coarse.accepted and fine.accepted and coarse.n_steps == 20
    assert 0.15 < abs(fine.energy_error / coarse.energy_error) < 0.35
    np.testing.assert_allclose(fine.theta, coarse.theta, atol=2e-2)


def test_ecs_iteration_keeps_the_proposed_subsample_with_the_pseudo_marginal_probability():
    """Two "subsamples" shift the Gaussian by 0.5 and 0: at θ₀ the log ratio of their estimates is known,
    u′ is kept with probability min(1, e^ratio) (eq. 3.5), and the path runs on the one kept."""
    mean, precision = np.zeros(1), np.eye(1)
    theta = np.array([0.8])
    current, proposed = (mean, precision, 0.5), (mean, precision, 0.0)
    start = tuple(gaussian(theta, *current))
    log_ratio = float(gaussian(theta, *proposed)[0] - start[0])
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(4000):
        result = ecs_iteration(gaussian, theta, start, current, proposed, np.log(rng.uniform()),
                               rng.standard_normal(1), 0.3, 3, np.eye(1), np.log(rng.uniform()))
        assert result.subsample_log_ratio == pytest.approx(log_ratio)
        kept.append(result.subsample_accepted)
        # the estimate at θ₀ and the path's extras are those of the subsample kept
        assert result.start[2][0] == (0.0 if result.subsample_accepted else 0.5)
        assert result.hmc.extras[0] == result.start[2][0]
    prob = min(1.0, np.exp(log_ratio))
    assert 0.05 < prob < 0.95
    assert abs(np.mean(kept) - prob) <= 4 * np.sqrt(prob * (1 - prob) / len(kept))


@pytest.fixture(scope="module")
def small_logistic():
    X, y = logistic_data(20_000, 3, seed=5)
    return logistic_model(X, y)


@pytest.mark.parametrize("estimator", ["perturbed", "signed"])
def test_compiled_and_python_paths_give_the_same_draws(small_logistic, estimator):
    """The compiled iteration draws its random numbers as PyMC's HamiltonianMC and the subsample update
    do, from the same generators: the same draws to rounding."""
    kw = dict(subsample_size=200) if estimator == "perturbed" else dict(estimator="signed")
    runs = {}
    with small_logistic:
        for compiled in (True, False):
            step = pms.HMCECS(inner="hmc", compiled=compiled, rng=4, **kw)
            assert step.compiled is compiled
            runs[compiled] = pm.sample(step=step, draws=150, tune=150, chains=1, random_seed=3,
                                       progressbar=False, compute_convergence_checks=False)
    a, b = runs[True], runs[False]
    np.testing.assert_allclose(a.posterior["beta"].values, b.posterior["beta"].values, rtol=1e-7, atol=1e-9)
    for stat in ("n_steps", "n_loglik_evals", "n_grad_evals", "sign", "diverging"):
        np.testing.assert_array_equal(a.sample_stats[stat].values, b.sample_stats[stat].values, err_msg=stat)
    for stat in ("step_size", "loglik_var", "subsample_accept", "acceptance_rate", "energy_error", "energy"):
        np.testing.assert_allclose(a.sample_stats[stat].values, b.sample_stats[stat].values, rtol=1e-6,
                                   atol=1e-6, err_msg=stat)
    # the compiled path knows the largest energy error along each path; PyMC's HMC does not report one
    largest, last = a.sample_stats["max_energy_error"].values, a.sample_stats["energy_error"].values
    assert np.all(np.abs(largest) >= np.abs(last))
    assert np.all(np.isnan(b.sample_stats["max_energy_error"].values))


def test_compiled_chains_in_parallel_are_reproducible(small_logistic):
    kwargs = dict(draws=30, tune=30, chains=2, random_seed=7, progressbar=False,
                  compute_convergence_checks=False)
    with small_logistic:
        parallel = pm.sample(step=pms.HMCECS(subsample_size=200, compiled=True), cores=2, mp_ctx="spawn",
                             **kwargs)
        sequential = pm.sample(step=pms.HMCECS(subsample_size=200, compiled=True), cores=1, **kwargs)
    np.testing.assert_allclose(parallel.posterior["beta"].values, sequential.posterior["beta"].values,
                               rtol=1e-8, atol=1e-9)


def test_where_the_compiled_path_runs(small_logistic):
    with small_logistic:
        assert pms.HMCECS(subsample_size=200).compiled  # NUTS's tree in the cached Numba machine
        assert not pms.HMCECS(subsample_size=200, compiled=False).compiled
        # a keyword only PyMC's NUTS takes
        assert not pms.HMCECS(subsample_size=200, adapt_step_size=False).compiled
        assert not pms.HMCECS(inner="hmc", subsample_size=200).compiled  # PyMC's HamiltonianMC
        assert pms.HMCECS(inner="hmc", subsample_size=200, compiled=True).compiled
        # the NUTS machine calls the estimate's function in whatever mode it was compiled
        assert pms.HMCECS(subsample_size=200, compile_kwargs={"mode": "FAST_COMPILE"}).compiled


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(compiled="yes", inner="hmc"), ValueError, "True or False"),
    (dict(compiled=True, inner="hmc", adapt_step_size=False), TypeError, "compiled=False"),
    (dict(compiled=True, max_steps=10), TypeError, "max_treedepth"),
    (dict(compiled=True, inner="hmc", compile_kwargs={"mode": "FAST_COMPILE"}), ValueError, "Numba"),
])
def test_compiled_bad_input(small_logistic, kwargs, error, match, monkeypatch):
    from pymc_subsample.step_methods import base

    def no_setup(*args, **kwargs):
        raise AssertionError("set up before the arguments were checked")

    monkeypatch.setattr(base.SubsampleStep, "__init__", no_setup)
    with small_logistic, pytest.raises(error, match=match):
        pms.HMCECS(subsample_size=200, **kwargs)
