"""Estimators: analytic cases and unbiasedness by Monte Carlo over subsamples."""

import numpy as np
import pymc as pm
import pytest
from conftest import gaussian_linear_model, logistic_data, logistic_model, normal_population
from oracles import block_poisson, combine_gradient, control_variate_gradient, plain_gradient
from scipy.stats import norm

from pymc_subsample import TallModel, TaylorProxy
from pymc_subsample.control_variates.center import find_map_theta
from pymc_subsample.estimators import difference_estimator, perturbed_loglik
from pymc_subsample.estimators.subsampled import perturbed_value
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.kernels.potential import SubsampledPotential
from pymc_subsample.kernels.subsample_update import draw_signed
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


def test_difference_variance_in_one_pass_keeps_its_digits_when_the_mean_dwarfs_the_spread():
    """σ̂² is taken as Σd² − (Σd)²/m (one pass, one fused kernel): with differences whose mean is 10⁴
    times their spread, far from a good centre, it still equals the two-pass formula to 1e-6."""
    d = 1e4 + np.random.default_rng(0).normal(size=1000)
    _, s2 = difference_estimator(d, n=10**6)
    assert s2 == pytest.approx(1e12 / 1e6 * np.sum((d - d.mean()) ** 2), rel=1e-6)


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
    """E[L̂ / exp(Σq)] = exp(ℓ − Σq), checked on a small model by Monte Carlo (seed 004 eq. 5.1).

    At θ ≈ 5 posterior sd from θ*, D = ℓ − Σq ≈ 1.8 and sd(d̂) ≈ 1 with m = 40, so d̂ is far
    from 0 (a d̂ off by a factor changes E L̂), and with a = D − 1 and λ = 3 a third of the
    estimates are negative.
    """
    tall, center = logistic_setup
    target = SubsampledTarget(tall, center, order=2)
    theta = center + 0.2
    full = tall.loglik_rows(theta, tall.row_slice(0, tall.n_rows)).sum()
    sum_q, _ = target.proxy.sum_value_and_grad(theta)
    big_d = full - sum_q
    assert big_d > 1.5
    rng = np.random.default_rng(7)
    m, lam, a = 40, 3, big_d - 1.0
    draws, signs = [], []
    for _ in range(4000):
        nb = rng.poisson(1.0, size=lam).sum()
        idx = uniform_with_replacement(rng, tall.n_rows, nb * m)
        sub = Subsample.gather(tall, idx)
        d = target.differences(theta, sub.batch)
        log_abs, sign, _ = block_poisson(d.reshape(nb, m), tall.n_rows, a, lam)
        draws.append(sign * np.exp(log_abs - big_d))
        signs.append(sign)
    assert np.mean(np.asarray(signs) < 0) > 0.15
    draws = np.asarray(draws)
    se = draws.std(ddof=1) / np.sqrt(draws.size)
    assert se < 0.1, se  # before the MCSE-scaled tolerance
    assert abs(draws.mean() - 1.0) <= 4 * se, (draws.mean(), se)


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
    # the signed function's products are BLAS, the differences' fused sums: equal to the rounding of
    # O(1) terms
    np.testing.assert_allclose(d, target.differences(theta, sub.batch), rtol=1e-12, atol=1e-13)
    eps = 1e-6
    for j in range(3):
        e = np.zeros(3)
        e[j] = eps
        fd = (value(theta + e)[0] - value(theta - e)[0]) / (2 * eps)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-5)


# ------------------------------------------- estimators where their correction terms matter
# The tests below put each estimator in the regime its correction term exists for (σ̂² ≈ 1
# for the perturbed estimator; λ > 1, d̂ far from 0 and negative signs for block-Poisson) and
# compare with an exact expectation, so that breaking the term fails them: with σ̂² ≈ 1,
# E exp(ℓ̂) = L·e^{σ²/2} ≈ 1.65 L, and halving −σ̂²/2 leaves a bias of e^{1/4} ≈ 1.28. The
# standard error of each Monte Carlo mean is bounded before it scales a tolerance: a broken
# estimator with a huge variance must not pass on a huge tolerance.


def _ratio_mean(log_ratios):
    """Mean of exp(log_ratios) and its standard error."""
    w = np.exp(log_ratios)
    return w.mean(), w.std(ddof=1) / np.sqrt(w.size)


def test_perturbed_loglik_is_nearly_unbiased_at_unit_variance():
    """E exp(ℓ̂ − σ̂²/2) = L (1 + O(σ⁴/m)) where σ² ≈ 1 (seed 004 eqs. 4.5-4.6)."""
    n, m, reps = 2000, 200, 20_000
    d = normal_population(n, 1e-3, np.sqrt(m) / n)  # σ² = n² Var(d)/m = 1, ℓ = Σd = 2
    loglik = d.sum()
    rng = np.random.default_rng(41)
    values, plain, variances = np.empty(reps), np.empty(reps), np.empty(reps)
    for r in range(reps):
        sample = d[rng.integers(0, n, size=m)]
        values[r], _, variances[r] = perturbed_loglik(sample, n, 0.5)
        plain[r] = difference_estimator(sample, n, 0.5)[0]
    assert 0.9 < variances.mean() < 1.1  # E σ̂² = (m − 1)/m · σ²: the regime where the term matters
    ratio, se = _ratio_mean(values - 0.5 - loglik)
    assert se < 0.03, se  # before the MCSE-scaled tolerance: e^{value} has a light enough tail
    # the remaining bias is about σ²/(2m) + σ⁴/(4m) ≈ 0.4% here, well inside the tolerance
    assert abs(ratio - 1.0) <= 4 * se, (ratio, se)
    biased, se_plain = _ratio_mean(plain - 0.5 - loglik)
    assert biased - 1.0 > 20 * se_plain  # without −σ̂²/2 the likelihood is overestimated by ~e^{1/2}


@pytest.fixture(scope="module")
def gaussian_mean_tall():
    """y ~ N(0.7, 1), N = 2000, μ ~ N(0, 10²): every d_k of an order-0 proxy is linear in y_k."""
    rng = np.random.default_rng(12)
    y = rng.normal(0.7, 1.0, size=2000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=y)
    return TallModel(model), model.compile_logp(), y


def test_perturbed_potential_is_nearly_unbiased_at_unit_variance(gaussian_mean_tall):
    """The HMC-ECS potential (target.perturbed through SubsampledPotential): E e^{value} = p(θ)L(θ).

    Order-0 proxy around θ*: d_k = (θ − θ*)(y_k − (θ + θ*)/2), so σ² = N² (θ − θ*)² Var(y)/m;
    θ − θ* is set so that σ² ≈ 1 with m = 500 of the N = 2000 rows.
    """
    tall, logp, y = gaussian_mean_tall
    n, m = y.size, 500
    center = np.array([y.mean() + 0.03])  # off the mode: Σ_k d_k(θ) is far from 0 as well
    theta = center - np.sqrt(m) / (n * y.std())
    target = SubsampledTarget(tall, center, order=0)
    potential = SubsampledPotential(target, "perturbed")
    exact = float(logp({"mu": theta[0]}))
    rng = np.random.default_rng(5)
    values, variances = np.empty(6000), np.empty(6000)
    for r in range(values.size):
        est = potential.estimate(theta, Subsample.gather(tall, rng.integers(0, n, size=m)))
        values[r], variances[r] = est.value, est.loglik_var
    assert 0.85 < variances.mean() < 1.1
    ratio, se = _ratio_mean(values - exact)
    assert se < 0.05, se  # before the MCSE-scaled tolerance
    assert abs(ratio - 1.0) <= 4 * se, (ratio, se)


def test_block_poisson_unbiased_with_negative_signs():
    """E[sign · |L̂|] = exp(Σ_k d_k) exactly (seed 004 eq. 5.1), with λ = 3 and d̂ − a ~ N(1, 1).

    Each factor (d̂ − a)/λ is negative with probability Φ(−1) ≈ 0.16, so about a third of the
    estimates are negative, and d̂ ≈ Σd = 2 is far from 0: a d̂ off by any factor changes E L̂.
    """
    n, m, lam = 1000, 10, 3
    d = normal_population(n, 2e-3, np.sqrt(m) / n)  # D = Σd = 2, sd(d̂) = √(n² Var(d)/m) = 1
    big_d = d.sum()
    a = big_d - 1.0

    rng = np.random.default_rng(8)
    signs, logs = np.empty(20_000), np.empty(20_000)
    for r in range(signs.size):  # λ groups of X_l ~ Pois(1) mini-batches of m rows
        idx = rng.integers(0, n, size=(rng.poisson(1.0, size=lam).sum(), m))
        log_abs, signs[r], _ = block_poisson(d[idx], n, a, lam, sum_q=0.25)
        logs[r] = log_abs - 0.25
    # E sign = Π_l E[Π_h s_h] = exp(λ (E s − 1)) with E s = 1 − 2Φ(−1) (d̂ normal: sums of normals)
    expected_sign = np.exp(-2 * lam * norm.cdf(-1.0))
    assert abs(signs.mean() - expected_sign) <= 4 * signs.std() / np.sqrt(signs.size) + 0.01
    assert np.mean(signs < 0) > 0.2  # negative signs are really there
    w = signs * np.exp(logs - big_d)
    se = w.std(ddof=1) / np.sqrt(w.size)
    assert se < 0.05, se  # ≈ 0.015 (Var L̂/L² ≈ 4.3): a wrong d̂ or a + λ blows it up
    assert abs(w.mean() - 1.0) <= 4 * se, (w.mean(), se)


def test_signed_potential_unbiased_with_negative_signs(gaussian_mean_tall):
    """The signed HMC-ECS potential (draw_signed → target.signed → SubsampledPotential):
    E[sign · e^{value}] = p(θ) L(θ), with λ = 3, negative signs and D = Σ_k d_k(θ) ≈ 3.6.

    Order-0 proxy (the estimator itself allows any order) around a θ* far from the mode:
    d̂ ~ N(D, n²(θ − θ*)² Var(y)/m) with θ − θ* chosen so that its sd is 1, and a = D − 1.
    """
    tall, logp, y = gaussian_mean_tall
    n, m, lam = y.size, 100, 3
    center = np.array([y.mean() - 0.36])
    theta = center + np.sqrt(m) / (n * y.std())  # sd(d̂) = 1
    target = SubsampledTarget(tall, center, order=0)
    big_d = float(tall.loglik_rows(theta, tall.row_slice(0, n)).sum()
                  - tall.loglik_rows(center, tall.row_slice(0, n)).sum())
    assert 3.0 < big_d < 4.0  # d̂ is far from 0, where a wrong scale of d̂ shows
    potential = SubsampledPotential(target, "signed", a=big_d - 1.0, lam=lam)
    exact = float(logp({"mu": theta[0]}))
    rng = np.random.default_rng(9)
    reps = 3000
    signs, values, empty = np.empty(reps), np.empty(reps), 0
    for r in range(reps):
        sub = draw_signed(rng, tall, lam, m)
        empty += sub.rows.size == 0  # no mini-batch at all: L̂ = exp(Σq + a + λ)
        est = potential.estimate(theta, sub)
        signs[r], values[r] = est.sign, est.value
    assert empty > 50 and np.mean(signs < 0) > 0.2
    w = signs * np.exp(values - exact)
    se = w.std(ddof=1) / np.sqrt(reps)
    assert se < 0.1, se  # ≈ 0.04 (Var L̂/L² ≈ 4.3): a wrong d̂ makes it explode
    assert abs(w.mean() - 1.0) <= 4 * se, (w.mean(), se)


@pytest.mark.parametrize("glm", ["auto", False])
def test_a_second_target_of_the_model_takes_the_first_ones_function(logistic_setup, glm):
    """A SubsampledTarget on a second TallModel of the same model graph, at another centre, takes
    the first one's compiled estimator (kept with the tall model's functions; for the GLM, the
    prior's function of :class:`EtaPerturbedFunction`) and computes its own value: the
    NumPy formula with its own proxy, to 1e-12."""
    tall, center = logistic_setup
    first = SubsampledTarget(tall, center, order=2, glm=glm)
    rng = np.random.default_rng(5)
    sub = Subsample.gather(tall, uniform_with_replacement(rng, tall.n_rows, 40))
    first.perturbed(center, sub.batch)
    again = TallModel(tall.model)
    second = SubsampledTarget(again, center + 0.3, order=2, glm=glm)
    theta = center + rng.normal(scale=0.2, size=3)
    again_sub = Subsample.gather(again, sub.idx)
    value, _, sigma2 = second.perturbed(theta, again_sub.batch)
    if glm:  # the logistic's rows in the package's kernel: the prior's function is the one compiled
        assert first._eta_perturbed.prior_function is not None
        assert second._eta_perturbed.prior_function is first._eta_perturbed.prior_function
    else:
        assert second.functions.current["perturbed"] is first.functions.current["perturbed"]
    value_np, sigma2_np = perturbed_value(second, again_sub, theta)
    assert value == pytest.approx(value_np + again.prior_value_and_grad(theta)[0], rel=1e-12)
    assert sigma2 == pytest.approx(sigma2_np, rel=1e-10)
