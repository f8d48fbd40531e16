"""Default SG step sizes: the stationary-variance formulas they solve, against simulation."""

import numpy as np
import pytest

from pymc_subsample.kernels import sg_dynamics as dyn
from pymc_subsample.kernels import sg_tuning as tun


@pytest.mark.parametrize("eps, noise", [(0.3, 0.0), (0.2, 4.0)])
def test_langevin_whitened_variance_matches_simulation(eps, noise):
    rng = np.random.default_rng(0)
    chains = 20_000  # independent coordinates of one vector
    theta = rng.standard_normal(chains)
    for _ in range(300):
        grad = -theta + np.sqrt(noise) * rng.standard_normal(chains)
        theta = dyn.langevin_step(rng, theta, grad, eps)
    v = tun.langevin_whitened_variance(eps, noise)
    se = v * np.sqrt(2 / chains)
    assert abs(theta.var() - v) < 4 * se
    assert abs(v - 1) > 10 * se  # the inflation is resolved, so a wrong formula fails


@pytest.mark.parametrize("eps, noise", [(0.5, 0.0), (0.3, 3.0)])
def test_sghmc_whitened_variance_matches_simulation(eps, noise):
    rng = np.random.default_rng(1)
    chains = 20_000

    def grad_fn(theta):
        return -theta + np.sqrt(noise) * rng.standard_normal(chains), None

    theta, _ = dyn.sghmc_step(rng, rng.standard_normal(chains), grad_fn, eps, 400, 1.0)
    v = tun.sghmc_whitened_variance(eps, 1.0, noise)
    se = v * np.sqrt(2 / chains)
    assert abs(theta.var() - v) < 4 * se
    assert abs(v - 1) > 5 * se


def test_step_size_rules_hit_the_stated_inflation():
    target = (1 + tun.SD_INFLATION) ** 2
    for noise in (0.0, 0.5, 5.0, 300.0):
        eps = tun.langevin_step_size(noise)
        assert tun.langevin_whitened_variance(eps, noise) == pytest.approx(target)
        h = tun.sghmc_step_size(noise)
        assert tun.sghmc_whitened_variance(h, 1.0, noise) <= target * (1 + 1e-9)
        assert h == 0.5 or tun.sghmc_whitened_variance(h, 1.0, noise) == pytest.approx(target, rel=1e-6)
    assert tun.langevin_step_size(300.0) < tun.langevin_step_size(5.0) < tun.langevin_step_size(0.0)


def test_whitening_round_trip_and_noise_in_whitened_units():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 3))
    precision = a @ a.T + 3 * np.eye(3)
    w = tun.Whitening(np.ones(3), precision)
    theta = rng.normal(size=3)
    np.testing.assert_allclose(w.to_theta(w.to_z(theta)), theta)
    # gradient of log N(θ*, P⁻¹) in z is −z; its covariance P maps to the identity
    np.testing.assert_allclose(w.gradient(-precision @ (theta - 1)), -w.to_z(theta))
    np.testing.assert_allclose(w.covariance(precision), np.eye(3), atol=1e-12)
    # noise measured from terms whose covariance is m·P: Cov(ĝ) = P, whitened to I, λ_max = 1
    terms = rng.multivariate_normal(np.zeros(3), 200 * precision, size=200)
    s = tun.whitened_gradient_noise(lambda th: terms, w, rng, num_points=1)
    assert 0.7 < s < 1.5
