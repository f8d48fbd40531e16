"""Estimators: analytic cases and unbiasedness by Monte Carlo over subsamples."""

import numpy as np
import pytest
from conftest import gaussian_linear_model, logistic_data, logistic_model

from pymc_subsample import TallModel, TaylorProxy
from pymc_subsample.control_variates.center import find_map_theta
from pymc_subsample.estimators import (
    block_poisson,
    combine_gradient,
    control_variate_gradient,
    difference_estimator,
    perturbed_loglik,
    plain_gradient,
)
from pymc_subsample.estimators.subsampled import perturbed_value
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.subsample import block_slices, block_update, uniform_with_replacement
from pymc_subsample.subsample.batch import Subsample


def test_difference_estimator_formulas():
    d = np.array([1.0, 2.0, 4.0])
    lhat, s2 = difference_estimator(d, n=10, sum_q=5.0)
    assert lhat == pytest.approx(5.0 + 10 * 7 / 3)
    assert s2 == pytest.approx(100 / 9 * np.sum((d - 7 / 3) ** 2))
    value, weights, s2b = perturbed_loglik(d, 10, 5.0)
    assert value == pytest.approx(lhat - s2 / 2) and s2b == s2
    eps = 1e-6
    for i in range(3):
        e = np.zeros(3)
        e[i] = eps
        fd = (perturbed_loglik(d + e, 10, 5.0)[0] - perturbed_loglik(d - e, 10, 5.0)[0]) / (2 * eps)
        assert weights[i] == pytest.approx(fd, rel=1e-6)


def test_block_poisson_formula_and_weights():
    rng = np.random.default_rng(0)
    d = rng.normal(size=(3, 4))
    n, a, lam = 50, -20.0, 5
    log_abs, sign, w = block_poisson(d, n, a, lam, sum_q=1.5)
    dhat = n / 4 * d.sum(axis=1)
    expected = 1.5 + lam * (a + lam) / lam + np.sum(np.log(np.abs((dhat - a) / lam)))
    assert log_abs == pytest.approx(expected)
    assert sign == int(np.prod(np.sign(dhat - a)))
    eps = 1e-6
    e = np.zeros_like(d)
    e[1, 2] = eps
    fd = (block_poisson(d + e, n, a, lam)[0] - block_poisson(d - e, n, a, lam)[0]) / (2 * eps)
    assert w[1, 2] == pytest.approx(fd, rel=1e-6)
    assert block_poisson(np.zeros((0, 4)), n, a, lam)[:2] == (pytest.approx(a + lam), 1)


@pytest.fixture(scope="module")
def logistic_setup():
    X, y = logistic_data(3000, 3, seed=4)
    tall = TallModel(logistic_model(X, y))
    center, _ = find_map_theta(tall)
    return tall, center


@pytest.mark.parametrize("order", [0, 1, 2])
def test_difference_estimator_unbiased(logistic_setup, order):
    tall, center = logistic_setup
    target = SubsampledTarget(tall, center, order=order)
    theta = center + 0.05
    full = tall.loglik_rows(theta, tall.row_slice(0, tall.n_rows)).sum()
    rng = np.random.default_rng(order)
    sum_q, _ = target.proxy.sum_value_and_grad(theta)
    draws = []
    for _ in range(1000):
        sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 30))
        d = target.differences(theta, sub.batch)
        draws.append(difference_estimator(d, tall.n_rows, sum_q)[0])
    draws = np.asarray(draws)
    se = draws.std(ddof=1) / np.sqrt(draws.size)
    assert abs(draws.mean() - full) <= 4 * se + 1e-9


def test_block_poisson_unbiased_for_likelihood_ratio(logistic_setup):
    """E[L̂ / exp(Σq)] = exp(ℓ − Σq), checked on a small model by Monte Carlo (seed 004 eq. 5.1)."""
    tall, center = logistic_setup
    target = SubsampledTarget(tall, center, order=2)
    theta = center + 0.02
    full = tall.loglik_rows(theta, tall.row_slice(0, tall.n_rows)).sum()
    sum_q, _ = target.proxy.sum_value_and_grad(theta)
    expected = np.exp(full - sum_q)
    rng = np.random.default_rng(7)
    m, lam, a = 10, 3, -2.0
    draws = []
    for _ in range(4000):
        nb = rng.poisson(1.0, size=lam).sum()
        idx = uniform_with_replacement(rng, tall.n_rows, nb * m)
        sub = Subsample.gather(tall, idx)
        d = target.differences(theta, sub.batch)
        log_abs, sign, _ = block_poisson(d.reshape(nb, m), tall.n_rows, a, lam)
        draws.append(sign * np.exp(log_abs))
    draws = np.asarray(draws)
    se = draws.std(ddof=1) / np.sqrt(draws.size)
    assert abs(draws.mean() - expected) <= 4 * se


def test_second_order_proxy_exact_on_gaussian_linear_model():
    model, _, _ = gaussian_linear_model(n=400, d=3)
    tall = TallModel(model)
    center, _ = find_map_theta(tall)
    target = SubsampledTarget(tall, center, order=2)
    rng = np.random.default_rng(2)
    theta = center + rng.normal(scale=0.5, size=3)
    sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 25))
    value, grad, sigma2 = target.perturbed(theta, sub.batch)
    full, full_grad = tall.loglik_sum_value_and_grad(theta, tall.row_slice(0, tall.n_rows))
    prior, prior_grad = tall.prior_value_and_grad(theta)
    full, full_grad = full + prior, full_grad + prior_grad
    assert sigma2 == pytest.approx(0.0, abs=1e-15 * abs(full) ** 2 + 1e-18)
    assert value == pytest.approx(full, rel=1e-12)
    np.testing.assert_allclose(grad, full_grad, rtol=1e-9, atol=1e-8)


def test_perturbed_gradient_matches_finite_differences(logistic_setup):
    tall, center = logistic_setup
    target = SubsampledTarget(tall, center, order=2)
    rng = np.random.default_rng(3)
    sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 40))
    theta = center + rng.normal(scale=0.2, size=3)
    value, grad, sigma2 = target.perturbed(theta, sub.batch)
    prior = lambda t: tall.prior_value_and_grad(t)[0]  # noqa: E731
    value_np, sigma2_np = perturbed_value(target, sub, theta)
    assert value == pytest.approx(value_np + prior(theta), rel=1e-12)
    assert sigma2 == pytest.approx(sigma2_np, rel=1e-10)
    eps = 1e-6
    for j in range(3):
        e = np.zeros(3)
        e[j] = eps
        fd = (
            perturbed_value(target, sub, theta + e)[0] + prior(theta + e)
            - perturbed_value(target, sub, theta - e)[0] - prior(theta - e)
        ) / (2 * eps)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-5)
    # the compiled reverse pass equals the analytic weights formula ∇Σq + Σ w (∇ℓ − ∇q)
    _, weights, _ = perturbed_loglik(target.differences(theta, sub.batch), tall.n_rows)
    _, loglik_grads = tall.loglik_rows_and_grads(theta, sub.batch)
    _, q_grads = target.proxy.rows_value_and_grad(theta, sub.batch)
    analytic = combine_gradient(target.proxy.sum_value_and_grad(theta)[1], weights, loglik_grads, q_grads)
    np.testing.assert_allclose(grad - tall.prior_value_and_grad(theta)[1], analytic, rtol=1e-8, atol=1e-8)


def test_chunked_sums_equal_unchunked(logistic_setup):
    tall, center = logistic_setup
    one = TaylorProxy(tall, center, order=2, chunk_size=tall.n_rows)
    many = TaylorProxy(tall, center, order=2, chunk_size=77)
    assert many.loglik_sum == pytest.approx(one.loglik_sum, rel=1e-12)
    np.testing.assert_allclose(many.grad_sum, one.grad_sum, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(many.hess_sum, one.hess_sum, rtol=1e-10)
    direct = tall.rows_hessians(center, tall.row_slice(0, tall.n_rows)).sum(axis=0)
    np.testing.assert_allclose(one.hess_sum, direct, rtol=1e-10)


def test_stochastic_gradient_estimators_unbiased(logistic_setup):
    tall, center = logistic_setup
    proxy = TaylorProxy(tall, center, order=1)
    target = SubsampledTarget(tall, center, order=1)
    theta = center + 0.1
    _, full_grad = tall.loglik_sum_value_and_grad(theta, tall.row_slice(0, tall.n_rows))
    rng = np.random.default_rng(5)
    plain, cv = [], []
    for _ in range(800):
        sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 20))
        _, g = tall.loglik_rows_and_grads(theta, sub.batch)
        _, qg = proxy.rows_value_and_grad(theta, sub.batch)
        plain.append(plain_gradient(g, tall.n_rows))
        cv.append(control_variate_gradient(proxy.sum_value_and_grad(theta)[1], g, qg, tall.n_rows))
        # the target's compiled gradient of ℓ̂ is the same estimator (prior added)
        prior_grad = tall.prior_value_and_grad(theta)[1]
        np.testing.assert_allclose(target.difference_gradient(theta, sub.batch) - prior_grad, cv[-1],
                                   rtol=1e-8, atol=1e-6)
        np.testing.assert_allclose(target.difference_jacobian(theta, sub.batch), g - qg, atol=1e-8)
    for draws in (np.asarray(plain), np.asarray(cv)):
        se = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
        assert np.all(np.abs(draws.mean(axis=0) - full_grad) <= 4 * se)
    assert np.all(np.asarray(cv).std(axis=0) < np.asarray(plain).std(axis=0))


def test_combine_gradient_is_weighted_difference():
    w = np.array([1.0, 2.0])
    g = np.array([[1.0, 0.0], [0.0, 1.0]])
    q = np.zeros((2, 2))
    np.testing.assert_allclose(combine_gradient(np.array([3.0, 4.0]), w, g, q), [4.0, 6.0])


def test_block_update_changes_one_block():
    rng = np.random.default_rng(0)
    blocks = block_slices(100, 10)
    assert sum(b.stop - b.start for b in blocks) == 100
    idx = uniform_with_replacement(rng, 10**6, 100)
    new, block = block_update(rng, idx, 10**6, blocks)
    changed = np.flatnonzero(new != idx)
    assert changed.min() >= block.start and changed.max() < block.stop and changed.size >= 9
    with pytest.raises(ValueError, match="num_blocks"):
        block_slices(10, 11)


def test_subsample_block_regather_matches_full_gather(logistic_setup):
    tall, center = logistic_setup
    rng = np.random.default_rng(1)
    blocks = block_slices(30, 5)
    sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 30))
    for _ in range(20):
        new_idx, block = block_update(rng, sub.idx, tall.n_rows, blocks)
        sub = sub.with_block(tall, new_idx, block)
    fresh = Subsample.gather(tall, sub.idx)
    for a, b in zip(sub.batch, fresh.batch):
        np.testing.assert_array_equal(a, b)


def test_signed_target_matches_numpy_block_poisson_and_finite_differences(logistic_setup):
    tall, center = logistic_setup
    target = SubsampledTarget(tall, center, order=2)
    rng = np.random.default_rng(11)
    m, lam, a = 8, 4, -3.0
    sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 3 * m))
    theta = center + rng.normal(scale=0.3, size=3)

    def value(t):
        d = target.differences(t, sub.batch).reshape(3, m)
        log_abs, sign, _ = block_poisson(d, tall.n_rows, a, lam, target.proxy.sum_value_and_grad(t)[0])
        return log_abs + tall.prior_value_and_grad(t)[0], sign

    got, grad, d = target.signed(theta, sub.batch, m, a, lam)
    assert got == pytest.approx(value(theta)[0], rel=1e-12)
    np.testing.assert_allclose(d, target.differences(theta, sub.batch), rtol=1e-12)
    eps = 1e-6
    for j in range(3):
        e = np.zeros(3)
        e[j] = eps
        fd = (value(theta + e)[0] - value(theta - e)[0]) / (2 * eps)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-5)
