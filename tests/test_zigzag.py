"""ZigZag: the kernel on a Gaussian posterior, the thinning bound, the step method on logistic
regression against a quadrature posterior and on Skin Segmentation against full-data NUTS."""

import dataclasses

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model, needs_data, skin_segmentation

import pymc_subsample as pms
from pymc_subsample.control_variates.zigzag_bounds import (
    eta_at_points,
    glm_row_constants,
    glm_row_sampler,
    guide_table,
    lipschitz_row_weights,
    row_lipschitz_maxima,
    weighted_rows,
)
from pymc_subsample.families import GLM_FAMILIES
from pymc_subsample.kernels import zigzag_compiled
from pymc_subsample.kernels.zigzag import (
    RowStream,
    ZigZagCounts,
    ZigZagCV,
    ZigZagState,
    first_arrival_times,
    initial_horizon,
    random_velocity,
    tuned_horizon,
)
from pymc_subsample.kernels.zigzag_compiled import compiled_score
from pymc_subsample.model.glm import linear_predictor_model
from pymc_subsample.model.tall import TallModel

#: ∂ℓ/∂η (y, η) of a Bernoulli logit row and of a Normal(η, σ²) row with σ known, from the family table
logistic_score = GLM_FAMILIES["bernoulli_logit"].score_function()


def gaussian_score(sigma):
    return GLM_FAMILIES["normal_identity"].score_function(float(sigma))


def assert_moments(draws, mean, cov, min_ess=400):
    """Per coordinate: minimum ESS first, then mean and variance within 4 MCSE (ESS-based)."""
    ess = np.array([float(az.ess(draws[None, :, j])) for j in range(draws.shape[1])])
    assert ess.min() >= min_ess, ess  # a stuck chain would make the tolerance below meaningless
    var = np.diag(cov)
    z_mean = (draws.mean(0) - mean) / np.sqrt(var / ess)
    z_var = (draws.var(0) - var) / (var * np.sqrt(2.0 / ess))
    assert np.all(np.abs(z_mean) <= 4), (z_mean, ess)
    assert np.all(np.abs(z_var) <= 4), (z_var, ess)
    return ess, z_mean, z_var


# ------------------------------------------------------------------ kernel (plain NumPy)
def gaussian_regression(n=5000, d=3, sigma=1.0, prior_sd=10.0, seed=0):
    """y = Xβ + N(0, σ²), σ known, β ~ N(0, prior_sd² I): a Gaussian posterior, known exactly."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) @ np.array([[1.0, 0.6, 0.0], [0.0, 0.8, 0.3], [0.0, 0.0, 1.0]])[:d, :d]
    y = X @ rng.normal(size=d) + sigma * rng.normal(size=n)
    prec = X.T @ X / sigma**2 + np.eye(d) / prior_sd**2
    cov = np.linalg.inv(prec)
    return X, y, cov @ (X.T @ y) / sigma**2, cov, prec


def gaussian_process(X, y, center, prec, sigma=1.0, prior_sd=10.0, rows="uniform"):
    """The kernel on the Gaussian regression, with uniform or Lipschitz-weighted rows."""
    d = X.shape[1]
    metric_r = np.linalg.cholesky(prec).T
    inv_r = np.linalg.inv(metric_r)
    weights = lipschitz_row_weights(X, inv_r) if rows == "lipschitz" else np.ones(len(y))
    a, b = row_lipschitz_maxima(X, inv_r, weights)
    process = ZigZagCV(
        center=center, prior_grad_center=-center / prior_sd**2, prior_hessian=-np.eye(d) / prior_sd**2,
        loglik_grad_center=X.T @ (y - X @ center) / sigma**2, weight_total=weights.sum(),
        score=gaussian_score(sigma), curvature=1.0 / sigma**2, lipschitz_a=a, lipschitz_b=b,
        metric_r=metric_r, compiled_score=compiled_score("normal_identity", sigma),
    )

    def draw(rng, size):
        idx = rng.choice(len(y), size=size, p=weights / weights.sum())
        return X[idx], y[idx], X[idx] @ center, 1.0 / weights[idx]

    return process, draw


def run_kernel(process, draw, start, prec, rng, draws, tune=300, switches_per_draw=6.0, compiled=False):
    """Warm-up, then ``draws`` positions: the NumPy kernel (``ZigZagCV.advance``) or the compiled loop."""
    state = ZigZagState(start.copy(), random_velocity(rng, start.size), RowStream(batch=1024))
    horizon, time, switches = initial_horizon(prec), 0.0, 0
    maximum = 100 * initial_horizon(prec)

    def advance(state, counts=None):
        if compiled:
            state, info = zigzag_compiled.step(rng, state, horizon, process, draw)
            counts = ZigZagCounts() if counts is None else counts
            counts.add(info)
            return state, counts
        theta, v, counts = process.advance(*state[:2], horizon, rng, state.rows, draw, counts, first_chunk=32)
        return ZigZagState(theta, v, state.rows), counts

    for _ in range(tune):
        state, c = advance(state)
        time, switches = time + c.time, switches + c.switches
        horizon = tuned_horizon(switches_per_draw, time, switches, horizon, maximum)
    out, total = np.empty((draws, start.size)), ZigZagCounts()
    for i in range(draws):
        state, total = advance(state, total)
        out[i] = state.theta
    return out, total


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("rows", ["uniform", "lipschitz"])
def test_kernel_samples_a_known_gaussian_posterior(rows, compiled):
    # θ* one posterior sd off the mode in every coordinate: the control-variate terms (A and
    # (W/w_I)(∂ℓ_I(θ) − ∂ℓ_I(θ*))) are then far from zero and the one-row estimates noisy, so the
    # formula of Ê matters (dropping A, the factor W or the row's 1/w_I moves the stationary law
    # by many sd). Correlated coordinates (-0.6) mix slowly under axis-aligned velocities: 12
    # switches a draw.
    X, y, mean, cov, prec = gaussian_regression()
    center = mean + np.sqrt(np.diag(cov))
    process, draw = gaussian_process(X, y, center, prec, rows=rows)
    draws, counts = run_kernel(process, draw, center, prec, np.random.default_rng(1), draws=3000,
                               switches_per_draw=12.0, compiled=compiled)
    assert counts.bound_exceeded == 0
    assert counts.switches > 0 and counts.proposed >= counts.switches
    assert_moments(draws, mean, cov)


def test_first_arrival_times_invert_the_integrated_rate():
    rng = np.random.default_rng(0)
    alpha = np.array([2.0, -1.0, 0.5, 3.0, -2.0, 0.0, 1.0])
    beta = np.array([1.0, 2.0, 0.0, -1.0, -1.0, 3.0, -4.0])
    level = rng.exponential(size=alpha.size)
    tau = first_arrival_times(alpha, beta, level)
    for a, b, e, t in zip(alpha, beta, level, tau):
        mass = a * a / (2 * -b) if b < 0 and a > 0 else np.inf
        if (a <= 0 and b <= 0) or e > mass:
            assert np.isinf(t)
            continue
        grid = np.linspace(0.0, t, 200_001)
        integral = np.trapezoid(np.maximum(0.0, a + b * grid), grid)
        assert integral == pytest.approx(e, rel=1e-6)


def test_row_lipschitz_maxima_and_row_stream():
    rng = np.random.default_rng(2)
    J = rng.normal(size=(300, 3))
    inv_r = np.linalg.inv(np.linalg.cholesky(np.array([[2.0, 0.3, 0], [0.3, 1.0, 0], [0, 0, 4.0]])).T)
    a, b = row_lipschitz_maxima(J, inv_r)
    brute_a = [max(abs(J[k, j]) * np.linalg.norm(J[k] @ inv_r) for k in range(300)) for j in range(3)]
    brute_b = [max(abs(J[k, j]) * np.abs(J[k]).sum() for k in range(300)) for j in range(3)]
    np.testing.assert_allclose(a, brute_a)
    np.testing.assert_allclose(b, brute_b)
    w = lipschitz_row_weights(J, inv_r)
    np.testing.assert_allclose(w, [np.abs(J[k]).max() * np.linalg.norm(J[k] @ inv_r) for k in range(300)])
    a_w, b_w = row_lipschitz_maxima(J, inv_r, w)
    metric = np.linalg.norm(J @ inv_r, axis=1)
    np.testing.assert_allclose(a_w, [max(abs(J[k, j]) * metric[k] / w[k] for k in range(300))
                                     for j in range(3)])
    np.testing.assert_allclose(b_w, [max(abs(J[k, j]) * np.abs(J[k]).sum() / w[k] for k in range(300))
                                     for j in range(3)])
    assert np.all(a_w <= 1 + 1e-12)  # so W a_j ≤ Σ_k w_k: a mean over rows, not a maximum
    with pytest.raises(ValueError, match="has sampling weight 0: it would never be drawn"):
        row_lipschitz_maxima(J, inv_r, np.where(np.arange(300) == 7, 0.0, w))
    calls = []

    def draw(rng, size):
        calls.append(size)
        idx = np.arange(size) + 10 * len(calls)
        return J[idx], idx.astype(float), idx * 0.0, np.ones(size)

    stream = RowStream(batch=5)
    parts = [stream.take(n, draw, rng)[1] for n in (3, 4, 9)]
    assert calls == [5, 5, 6]  # refilled when exhausted, with at least the rows still asked for
    np.testing.assert_array_equal(np.concatenate(parts), [*range(10, 15), *range(20, 25), *range(30, 36)])


@pytest.mark.parametrize("rows", ["uniform", "lipschitz"])
@pytest.mark.parametrize("family", ["logistic", "gaussian"])
def test_thinning_bound_holds_for_every_row_along_segments(family, rows):
    # v_j Ê_j^k(θ + vs) ≤ α_j + β_j s for ALL rows k (not just sampled ones), coordinates j,
    # times s, at points θ well beyond the posterior bulk: the bound the thinning relies on.
    rng = np.random.default_rng(4)
    n, d = 400, 3
    X = np.column_stack([np.ones(n), rng.normal(1.0, 2.0, size=(n, d - 1))])
    if family == "logistic":
        y = (rng.random(n) < 0.3).astype(float)
        score, kappa = logistic_score, 0.25
    else:
        y = X @ np.array([0.5, -1.0, 2.0]) + rng.normal(size=n)
        score, kappa = gaussian_score(0.7), 1 / 0.49
    prec = kappa * X.T @ X + np.eye(d)
    center = rng.normal(size=d)
    metric_r = np.linalg.cholesky(prec).T
    inv_r = np.linalg.inv(metric_r)
    weights = lipschitz_row_weights(X, inv_r) if rows == "lipschitz" else np.ones(n)
    a, b = row_lipschitz_maxima(X, inv_r, weights)
    A = X.T @ score(y, X @ center)
    process = ZigZagCV(center=center, prior_grad_center=-center, prior_hessian=-np.eye(d),
                       loglik_grad_center=A, weight_total=weights.sum(), score=score, curvature=kappa,
                       lipschitz_a=a, lipschitz_b=b, metric_r=metric_r)
    sd = np.sqrt(np.diag(np.linalg.inv(prec)))
    worst = -np.inf
    for _ in range(30):
        theta, v = center + 5 * sd * rng.normal(size=d), random_velocity(rng, d)
        _, _, alpha, beta = process.segment(theta, v)
        for s in (0.0, 0.3, 1.0, 5.0):
            for j in range(d):
                rate = process.estimates(theta, v, np.full(n, s), np.full(n, j), X, y, X @ center,
                                         1.0 / weights)
                worst = max(worst, float(np.max(rate - (alpha[j] + beta[j] * s))))
    assert worst <= 1e-9 * n, worst


def test_weighted_rows_with_equal_weights_reduce_to_uniform_rows():
    # w ≡ c: W = Nc, a and b divided by c, each estimate multiplied by W/c = N: the paper's ZZ-CV.
    X, y, mean, cov, prec = gaussian_regression(n=500)
    rng = np.random.default_rng(3)
    uniform, _ = gaussian_process(X, y, mean, prec)
    c = 0.37
    metric_r = np.linalg.cholesky(prec).T
    a, b = row_lipschitz_maxima(X, np.linalg.inv(metric_r), np.full(len(y), c))
    weighted = dataclasses.replace(uniform, weight_total=c * len(y), lipschitz_a=a, lipschitz_b=b)
    theta, v = mean + rng.normal(size=3) * 0.01, random_velocity(rng, 3)
    np.testing.assert_allclose(weighted.rate_bounds(theta, v), uniform.rate_bounds(theta, v), rtol=1e-12)
    times, coords = rng.random(len(y)), rng.integers(0, 3, len(y))
    args = (theta, v, times, coords, X, y, X @ mean)
    np.testing.assert_allclose(weighted.estimates(*args, np.full(len(y), 1 / c)),
                               uniform.estimates(*args, 1.0), rtol=1e-12)


def test_lipschitz_rows_keep_the_bound_off_the_extreme_rows():
    # One row with covariates 50 times the others sets the uniform bound N max_k(...) for every
    # coordinate; with rows drawn ∝ w_k its weight is large but the bound is a sum over rows.
    rng = np.random.default_rng(8)
    n, d = 20_000, 3
    X = rng.normal(size=(n, d))
    X[123] *= 50.0
    inv_r = np.linalg.inv(np.linalg.cholesky(X.T @ X / 4 + np.eye(d)).T)
    a_uniform, b_uniform = row_lipschitz_maxima(X, inv_r)
    w = lipschitz_row_weights(X, inv_r)
    a_lip, b_lip = row_lipschitz_maxima(X, inv_r, w)
    assert np.all(w.sum() * a_lip < 0.2 * n * a_uniform)
    assert np.all(w.sum() * b_lip < 0.2 * n * b_uniform)


def test_glm_row_constants_and_sampler_draw_rows_in_proportion_to_their_weights():
    X, y = logistic_data(n=2000, d=3, seed=6)
    X[5] *= 20.0  # one heavy row: drawn far more often than the rest
    with logistic_model(X, y):
        glm = linear_predictor_model(TallModel())
    inv_r = np.linalg.inv(np.linalg.cholesky(X.T @ X / 4 + np.eye(3)).T)
    constants = glm_row_constants(glm, inv_r, chunk_size=300)  # several chunks
    w = lipschitz_row_weights(X, inv_r)
    np.testing.assert_allclose(constants.weight_total, w.sum(), rtol=1e-12)
    np.testing.assert_allclose([constants.a, constants.b], row_lipschitz_maxima(X, inv_r, w), rtol=1e-12)
    jac, obs, eta_center, inv_weight = glm_row_sampler(glm, np.zeros(3), constants, inv_r)(
        np.random.default_rng(0), 200_000)
    rows = np.nonzero((jac[:, None, :] == X[None, :, :]).all(-1))[1]  # which row each draw is
    assert len(rows) == 200_000
    np.testing.assert_allclose(inv_weight, 1.0 / w[rows], rtol=1e-12)
    np.testing.assert_array_equal(obs, y[rows])
    counts = np.bincount(rows, minlength=len(y))
    expected = 200_000 * w / w.sum()
    z = (counts - expected) / np.sqrt(expected)
    assert np.abs(z).max() < 5.0, z[np.argmax(np.abs(z))]  # 2000 cells: |z| > 5 has chance ~1e-3
    assert counts[5] > 5 * np.median(counts)
    uniform = glm_row_constants(glm, inv_r, rows="uniform")
    assert uniform.weight_total == 2000 and uniform.cumulative_weights is None
    with pytest.raises(ValueError, match="rows must be one of"):
        glm_row_constants(glm, inv_r, rows="importance")


@pytest.mark.parametrize("rows_per_entry", [1, 8, 1000])
def test_weighted_rows_find_the_rows_searchsorted_finds(rows_per_entry):
    # the guide table's searches give NumPy's rows for every u, with runs of zero weights (rows with
    # J_k = 0), one row holding most of the weight, and u at 0, at the sums and just below W
    rng = np.random.default_rng(11)
    weights = rng.gamma(0.5, size=5000)
    weights[100:400] = 0.0
    weights[4000] = 3 * weights.sum()
    cumulative = np.cumsum(weights)
    guide = guide_table(cumulative, rows_per_entry)
    u = np.concatenate([rng.random(200_000) * cumulative[-1], [0.0, np.nextafter(cumulative[-1], 0.0)],
                        cumulative[:-1], cumulative[95:405]])
    expected = np.minimum(np.searchsorted(cumulative, u, side="right"), len(weights) - 1)
    np.testing.assert_array_equal(weighted_rows(cumulative, guide, u), expected)


def test_eta_at_points_equals_the_glm_views_eta_or_is_none():
    # one call of the η graph vectorised over θ (PyTensor's Python linker), where it vectorises
    # without a loop: the row sampler's J and η(θ*) from it equal those of the view's own η
    rng = np.random.default_rng(9)
    X, y = logistic_data(n=500, d=3, seed=2)
    group = rng.integers(0, 4, size=500)
    with pm.Model() as linear:
        beta = pm.Normal("beta", 0, 1, shape=3)
        a = pm.Normal("a", 0, 1)
        pm.Normal("y", mu=pm.Data("X", X) @ beta + a, sigma=0.5, observed=y)
    with pm.Model() as grouped:
        beta = pm.Normal("beta", 0, 1, shape=3)
        a = pm.Normal("a", 0, 1, shape=4)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ beta + a[pm.Data("g", group)], observed=y)
    for model, vectorises in [(logistic_model(X, y), True), (linear, True), (grouped, False)]:
        with model:
            glm = linear_predictor_model(TallModel())
        d = glm.tall.ndim
        points = np.vstack([np.zeros(d), np.eye(d), rng.normal(size=d)])
        eta_at = eta_at_points(glm, points)
        assert (eta_at is not None) == vectorises
        batch = glm.tall.gather(rng.integers(0, 500, size=64))
        if eta_at is not None:
            eta = eta_at(batch)
            np.testing.assert_allclose(eta, [glm.eta(p, batch) for p in points], rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal((eta[1:-1] - eta[0]).T, glm.eta_jacobian(batch))
        jac, obs, eta_center, _ = glm_row_sampler(glm, points[-1])(np.random.default_rng(0), 64)
        np.testing.assert_allclose(eta_center - jac @ points[-1], glm.eta_offset(glm.tall.gather(
            np.random.default_rng(0).integers(0, 500, size=64))), atol=1e-12)


# ------------------------------------------------------------- step method (PyMC)
def quadrature_posterior(X, y, prior_sd=1.0, half_width=7.0, points=141):
    """Mean and covariance of a 2-d logistic posterior by a grid over ±7 Laplace sd (exact to ~1e-8)."""
    theta = np.zeros(2)
    for _ in range(30):  # Newton for the mode
        p = 1 / (1 + np.exp(-X @ theta))
        grad = X.T @ (y - p) - theta / prior_sd**2
        hess = -(X.T * (p * (1 - p))) @ X - np.eye(2) / prior_sd**2
        theta = theta - np.linalg.solve(hess, grad)
    chol = np.linalg.cholesky(np.linalg.inv(-hess))
    z = np.linspace(-half_width, half_width, points)
    grid = np.stack(np.meshgrid(z, z), -1).reshape(-1, 2) @ chol.T + theta
    eta = X @ grid.T  # (n, points²)
    logp = (y @ eta - np.logaddexp(0, eta).sum(0)) - 0.5 * (grid**2).sum(1) / prior_sd**2
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ grid
    return mean, (grid - mean).T @ ((grid - mean) * w[:, None]), chol


def test_step_on_logistic_regression_matches_the_quadrature_posterior():
    # Intercept + one covariate with mean 1: the coefficients are correlated (-0.7), so the bound's
    # metric matters. θ* is one Laplace sd off the mode, so A = Σ∇ℓ_k(θ*) is far from zero.
    rng = np.random.default_rng(5)
    n = 5000
    X = np.column_stack([np.ones(n), rng.normal(1.0, 1.0, n)])
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ np.array([-1.0, 0.8]))))).astype(float)
    mean, cov, chol = quadrature_posterior(X, y)
    with logistic_model(X, y):
        step = pms.ZigZag(center=mean + chol @ np.array([1.0, -1.0]), rng=1)
        idata = pm.sample(step=step, draws=1500, tune=300, chains=1, random_seed=7, progressbar=False,
                          compute_convergence_checks=False)
    stats = idata.sample_stats
    assert int(stats["n_bound_exceeded"].sum()) == 0  # the thinning bound held at every candidate
    switches, proposed = int(stats["n_switches"].sum()), int(stats["n_proposed_switches"].sum())
    assert 0 < switches <= proposed <= int(stats["n_loglik_evals"].sum())
    assert step.is_exact
    assert_moments(idata.posterior["beta"].values[0], mean, cov)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("rows", ["uniform", "lipschitz"])
def test_step_on_a_gaussian_model_matches_its_known_posterior(rows, compiled):
    # Linear regression with σ known through PyMC (the normal_identity GLM view): the posterior
    # is Gaussian and known exactly. θ* one posterior sd off the mode, as in the kernel test.
    X, y, mean, cov, _ = gaussian_regression(n=4000, sigma=0.8)
    with pm.Model():
        beta = pm.Normal("beta", 0, 10.0, shape=3)
        pm.Normal("y", mu=pm.Data("X", X) @ beta, sigma=0.8, observed=y)
        step = pms.ZigZag(center=mean + np.sqrt(np.diag(cov)), switches_per_draw=12.0, rows=rows, rng=2,
                          compiled=compiled)
        assert step.compiled == compiled
        idata = pm.sample(step=step, draws=2500, tune=300, chains=1, random_seed=4, progressbar=False,
                          compute_convergence_checks=False)
    assert int(idata.sample_stats["n_bound_exceeded"].sum()) == 0
    assert_moments(idata.posterior["beta"].values[0], mean, cov)


def test_same_seed_same_draws_and_chains():
    X, y = logistic_data(n=3000, d=2, seed=3)
    with logistic_model(X, y):
        step = pms.ZigZag(rng=0)
        kwargs = dict(step=step, draws=30, tune=20, chains=2, cores=1, progressbar=False,
                      compute_convergence_checks=False)
        first = pm.sample(random_seed=11, **kwargs)
        second = pm.sample(random_seed=11, **kwargs)
    a, b = first.posterior["beta"].values, second.posterior["beta"].values
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], a[1])  # chains differ
    horizon = first.sample_stats["horizon"].values
    assert np.all(horizon[:, -1] == horizon[:, -2])  # fixed after warm-up


def test_a_tall_model_as_model_gives_the_same_draws():
    X, y = logistic_data(n=3000, d=2, seed=3)
    kwargs = dict(draws=20, tune=10, chains=1, progressbar=False, compute_convergence_checks=False,
                  random_seed=5)
    with logistic_model(X, y) as model:
        given = pm.sample(step=pms.ZigZag(rng=0), **kwargs)
        tall = pm.sample(step=pms.ZigZag(rng=0, model=pms.TallModel(model)), **kwargs)
    np.testing.assert_array_equal(given.posterior["beta"].values, tall.posterior["beta"].values)


def test_bad_input_is_refused_with_what_to_change():
    X, y = logistic_data(n=500, d=2)
    with logistic_model(X, y):
        with pytest.raises(ValueError, match="switches_per_draw must be a positive finite number"):
            pms.ZigZag(switches_per_draw=0)
        with pytest.raises(ValueError, match="horizon must be a positive finite number"):
            pms.ZigZag(horizon=-1.0)
        with pytest.raises(ValueError, match="row_batch must be a positive integer"):
            pms.ZigZag(row_batch=2.5)
        with pytest.raises(ValueError, match=r"rows must be one of \('lipschitz', 'uniform'\)"):
            pms.ZigZag(rows="importance")
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Poisson("count", mu=pm.math.exp(X @ beta), observed=(y * 3).astype(int))
        with pytest.raises(ValueError, match="Poisson regression .* is not supported yet.*unbounded"):
            pms.ZigZag()
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.StudentT("y", nu=4, mu=X @ beta, sigma=1.0, observed=y)
        with pytest.raises(ValueError, match="ZigZag supports one observed pm.Bernoulli.*StudentTRV"):
            pms.ZigZag()
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", X @ beta, pm.HalfNormal("sigma"), observed=y)
        with pytest.raises(ValueError, match="sigma that is not one known positive number"):
            pms.ZigZag()
    with pm.Model():
        beta = pm.StudentT("beta", nu=3, shape=2)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
        with pytest.raises(ValueError, match="needs a Gaussian prior .* on every free variable"):
            pms.ZigZag()


@pytest.mark.slow
@needs_data
def test_skin_segmentation_against_full_data_nuts():
    X, y, ref = skin_segmentation()
    with logistic_model(X, y):
        idata = pm.sample(step=pms.ZigZag(), draws=2500, tune=300, chains=2, cores=1, random_seed=2026,
                          progressbar=False, compute_convergence_checks=False)
    stats = idata.sample_stats
    assert int(stats["n_bound_exceeded"].sum()) == 0
    result = pms.compare(idata, ref)
    print(repr(result))
    assert result.table["ess_bulk"].min() >= 400
    assert result.table["abs_mean_diff_over_sd"].max() <= 0.1
    assert result.table["sd_ratio"].between(0.9, 1.1).all()
