"""The compiled Zig-Zag loop (``kernels.zigzag_compiled``) without PyMC: its scores, rates and bounds
against the NumPy kernel's, its resumption across buffers, and its law on a Gaussian and a
logistic posterior known exactly; then the step method's choice between the two paths.

The compiled loop consumes its random numbers in another order than the NumPy kernel, so the two
paths give different draws for one seed: the law is checked, within Monte Carlo standard error.
"""

import dataclasses

import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model
from test_zigzag import assert_moments, gaussian_process, gaussian_regression, quadrature_posterior

import pymc_subsample as pms
from pymc_subsample.control_variates.zigzag_bounds import lipschitz_row_weights, row_lipschitz_maxima
from pymc_subsample.families import GLM_FAMILIES
from pymc_subsample.kernels import zigzag, zigzag_compiled
from pymc_subsample.kernels.zigzag_compiled import (
    COMPILED_FAMILIES,
    bernoulli_logit_score,
    compiled_score,
    normal_identity_score,
)


def with_compiled_score(process, family, *constants):
    return dataclasses.replace(process, compiled_score=compiled_score(family, *constants))


def run_compiled(process, draw, start, prec, rng, draws, tune=300, switches_per_draw=12.0, row_batch=1024):
    """Warm-up (horizon tuned to ``switches_per_draw``), then ``draws`` positions at fixed times."""
    state = zigzag.init(start, rng, row_batch=row_batch)
    horizon, time, switches = zigzag.initial_horizon(prec), 0.0, 0
    maximum = 100 * zigzag.initial_horizon(prec)
    for _ in range(tune):
        state, info = zigzag_compiled.step(rng, state, horizon, process, draw)
        time, switches = time + info.time, switches + info.switches
        horizon = zigzag.tuned_horizon(switches_per_draw, time, switches, horizon, maximum)
    out, total = np.empty((draws, start.size)), zigzag.ZigZagCounts()
    for i in range(draws):
        state, info = zigzag_compiled.step(rng, state, horizon, process, draw)
        assert info.time == pytest.approx(horizon) and info.rows == info.proposed >= info.switches
        total.add(info)
        out[i] = state.theta
    return out, total


def test_numba_scores_equal_the_family_table():
    rng = np.random.default_rng(0)
    eta = np.concatenate([rng.normal(scale=5.0, size=200), [-800.0, -40.0, 0.0, 40.0, 800.0]])
    y01 = (rng.random(eta.size) < 0.5).astype(float)
    logistic = GLM_FAMILIES["bernoulli_logit"].score_function()(y01, eta)
    np.testing.assert_allclose([bernoulli_logit_score(a, b) for a, b in zip(y01, eta)], logistic,
                               rtol=1e-14, atol=1e-300)
    y = rng.normal(size=eta.size)
    sigma = 0.7
    normal = GLM_FAMILIES["normal_identity"].score_function(sigma)(y, eta)
    parameter = compiled_score("normal_identity", sigma).parameter
    np.testing.assert_array_equal([normal_identity_score(a, b, parameter) for a, b in zip(y, eta)], normal)
    assert compiled_score("poisson_log") is None  # no compiled score: the NumPy kernel runs
    assert set(COMPILED_FAMILIES) == {"bernoulli_logit", "normal_identity"}


@pytest.mark.parametrize("rows", ["uniform", "lipschitz"])
@pytest.mark.parametrize("family", ["logistic", "gaussian"])
def test_segment_bounds_arrival_times_and_estimates_equal_the_numpy_kernel(family, rows):
    # the compiled α, β, exact part, first candidate times and one-row estimates against
    # ZigZagCV.segment, first_arrival_times and ZigZagCV.estimates, at points far off θ*
    rng = np.random.default_rng(4)
    n, d = 300, 3
    X = np.column_stack([np.ones(n), rng.normal(1.0, 2.0, size=(n, d - 1))])
    if family == "logistic":
        y = (rng.random(n) < 0.3).astype(float)
        name, constants, kappa = "bernoulli_logit", (), 0.25
    else:
        y = X @ np.array([0.5, -1.0, 2.0]) + rng.normal(size=n)
        name, constants, kappa = "normal_identity", (0.7,), 1 / 0.49
    score = GLM_FAMILIES[name].score_function(*constants)
    prec = kappa * X.T @ X + np.eye(d)
    center = rng.normal(size=d)
    metric_r = np.linalg.cholesky(prec).T
    weights = lipschitz_row_weights(X, np.linalg.inv(metric_r)) if rows == "lipschitz" else np.ones(n)
    a, b = row_lipschitz_maxima(X, np.linalg.inv(metric_r), weights)
    hess = -np.array([[1.0, 0.2, 0.0], [0.2, 2.0, 0.0], [0.0, 0.0, 0.5]])
    process = zigzag.ZigZagCV(center=center, prior_grad_center=hess @ center, prior_hessian=hess,
                              loglik_grad_center=X.T @ score(y, X @ center), weight_total=weights.sum(),
                              score=score, curvature=kappa, lipschitz_a=a, lipschitz_b=b, metric_r=metric_r,
                              compiled_score=compiled_score(name, *constants))
    code, parameter = process.compiled_score.family, process.compiled_score.parameter
    sd = np.sqrt(np.diag(np.linalg.inv(prec)))
    for _ in range(20):
        theta, v = center + 5 * sd * rng.normal(size=d), zigzag.random_velocity(rng, d)
        uniforms = rng.random(d)
        seg = np.empty((7, d))
        zigzag_compiled._start_segment(theta, v, seg, uniforms, 0, process.center, process.prior_grad_center,
                                       process.prior_hessian, process.loglik_grad_center, process._na,
                                       process._nb, process.metric_r)
        exact, slope, alpha, beta = process.segment(theta, v)
        np.testing.assert_allclose(seg[:4], [alpha, beta, exact, slope], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(seg[5], zigzag.first_arrival_times(alpha, beta, -np.log1p(-uniforms)),
                                   rtol=1e-12)
        np.testing.assert_allclose(seg[6], theta - center, rtol=1e-15)
        times, coords = rng.exponential(size=n), rng.integers(0, d, size=n)
        expected = process.estimates(theta, v, times, coords, X, y, X @ center, 1.0 / weights)
        got = [zigzag_compiled._estimate(j, t, X[k], y[k], X[k] @ center, 1.0 / weights[k], seg[6], v,
                                         seg[2], seg[3], process.weight_total, code, parameter)
               for k, (j, t) in enumerate(zip(coords, times))]
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
        assert np.all(np.asarray(got) <= alpha[coords] + beta[coords] * times + 1e-9 * n)  # the bound
    # any R with RᵀR = P, not only the triangular factor: a rotation of it gives the same bound
    q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    rotated = dataclasses.replace(process, metric_r=q @ metric_r)
    seg = np.empty((7, d))
    zigzag_compiled._start_segment(theta, v, seg, uniforms, 0, rotated.center, rotated.prior_grad_center,
                                   rotated.prior_hessian, rotated.loglik_grad_center, rotated._na,
                                   rotated._nb, rotated.metric_r)
    np.testing.assert_allclose(seg[:2], rotated.segment(theta, v)[2:], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(seg[:2], process.segment(theta, v)[2:], rtol=1e-12, atol=1e-9)


def test_a_loop_resumed_on_fresh_buffers_follows_one_uninterrupted_path():
    # the loop returns to Python when its rows or uniforms run out and keeps its state in the arrays
    # it is passed: resumed on the rest of the same numbers, it takes the path of a single call
    X, y, mean, cov, prec = gaussian_regression(n=500)
    process, _ = gaussian_process(X, y, mean, prec)
    process = with_compiled_score(process, "normal_identity", 1.0)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, len(y), size=20_000)
    jac, obs, eta_c, inv_w = X[idx], y[idx], X[idx] @ mean, np.ones(idx.size)
    uniforms = rng.random(80_000)
    constants = (process.center, process.prior_grad_center, process.prior_hessian,
                 process.loglik_grad_center, process._na, process._nb, process.metric_r,
                 float(process.weight_total), process.compiled_score.family, process.compiled_score.parameter)
    start, v0 = mean + 0.01, np.array([1.0, -1.0, 1.0])

    def run(row_cut, uniform_cut):
        theta, v, clock = start.copy(), v0.copy(), np.array([1.0, 0.0])
        counters, seg = np.zeros(6, dtype=np.int64), np.empty((7, 3))
        row_start = uniform_start = calls = 0
        while True:
            calls += 1
            rows = slice(row_start, row_start + row_cut)
            counters[0], counters[1] = 0, 0
            status = zigzag_compiled._run(theta, v, clock, counters, seg, *constants, jac[rows], obs[rows],
                                          eta_c[rows], inv_w[rows],
                                          uniforms[uniform_start:uniform_start + uniform_cut])
            row_start, uniform_start = row_start + counters[0], uniform_start + counters[1]
            if status == zigzag_compiled.DONE:
                return theta, v, counters[3:].copy(), calls

    whole = run(20_000, 80_000)
    assert whole[3] == 1 and whole[2][0] > 20  # one call, many switches
    for cuts in [(37, 80_000), (20_000, 53), (11, 29)]:
        part = run(*cuts)
        assert part[3] > 10  # resumed many times
        np.testing.assert_array_equal(part[0], whole[0])
        np.testing.assert_array_equal(part[1], whole[1])
        np.testing.assert_array_equal(part[2], whole[2])


@pytest.mark.parametrize(("rows", "row_batch"), [("uniform", 1024), ("lipschitz", 64)])
def test_compiled_step_samples_a_known_gaussian_posterior(rows, row_batch):
    # as tests/test_zigzag.py's kernel test: θ* one posterior sd off the mode, so the control
    # variates are far from zero and a wrong estimate, bound or thinning moves the law by many sd;
    # 64 rows a batch: the loop returns for rows and resumes thousands of times
    X, y, mean, cov, prec = gaussian_regression()
    center = mean + np.sqrt(np.diag(cov))
    process, draw = gaussian_process(X, y, center, prec, rows=rows)
    process = with_compiled_score(process, "normal_identity", 1.0)
    draws, counts = run_compiled(process, draw, center, prec, np.random.default_rng(1), 3000,
                                 row_batch=row_batch)
    assert counts.bound_exceeded == 0
    assert counts.switches > 0 and counts.proposed >= counts.switches
    assert_moments(draws, mean, cov)


def test_compiled_step_samples_a_logistic_posterior_known_by_quadrature():
    rng = np.random.default_rng(5)
    n = 4000
    X = np.column_stack([np.ones(n), rng.normal(1.0, 1.0, n)])
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ np.array([-1.0, 0.8]))))).astype(float)
    mean, cov, chol = quadrature_posterior(X, y)  # prior N(0, 1)
    center = mean + chol @ np.array([1.0, -1.0])  # one Laplace sd off the mode
    prec = np.linalg.inv(cov)
    metric_r = np.linalg.cholesky(prec).T
    inv_r = np.linalg.inv(metric_r)
    weights = lipschitz_row_weights(X, inv_r)
    a, b = row_lipschitz_maxima(X, inv_r, weights)
    score = GLM_FAMILIES["bernoulli_logit"].score_function()
    process = zigzag.ZigZagCV(center=center, prior_grad_center=-center, prior_hessian=-np.eye(2),
                              loglik_grad_center=X.T @ score(y, X @ center), weight_total=weights.sum(),
                              score=score, curvature=0.25, lipschitz_a=a, lipschitz_b=b, metric_r=metric_r,
                              compiled_score=compiled_score("bernoulli_logit"))

    def draw(rng, size):
        idx = rng.choice(n, size=size, p=weights / weights.sum())
        return X[idx], y[idx], X[idx] @ center, 1.0 / weights[idx]

    draws, counts = run_compiled(process, draw, center, prec, np.random.default_rng(2), 3000,
                                 switches_per_draw=8.0)
    assert counts.bound_exceeded == 0
    assert_moments(draws, mean, cov)


def test_compiled_step_replays_and_leaves_its_input_state_alone():
    X, y, mean, cov, prec = gaussian_regression(n=300)
    process, draw = gaussian_process(X, y, mean, prec)
    process = with_compiled_score(process, "normal_identity", 1.0)
    runs = [zigzag_compiled.step(np.random.default_rng(1), zigzag.init(mean, np.random.default_rng(0)), 0.5,
                                 process, draw) for _ in range(2)]
    np.testing.assert_array_equal(runs[0][0].theta, runs[1][0].theta)
    assert runs[0][1] == runs[1][1] and runs[0][1].switches > 0
    first = zigzag.init(mean, np.random.default_rng(0))
    theta, velocity = first.theta.copy(), first.velocity.copy()
    zigzag_compiled.step(np.random.default_rng(1), first, 0.5, process, draw)
    np.testing.assert_array_equal(first.theta, theta)
    np.testing.assert_array_equal(first.velocity, velocity)
    _, info = zigzag_compiled.step(np.random.default_rng(1), first, np.nan, process, draw)
    assert info.time == 0 and info.proposed == 0  # a NaN horizon ends the loop (no candidate compares)
    numpy_only = dataclasses.replace(process, compiled_score=None)
    with pytest.raises(ValueError, match="has no compiled score"):
        zigzag_compiled.step(np.random.default_rng(1), first, 0.5, numpy_only, draw)


# ------------------------------------------------------------- step method (PyMC)
def test_step_method_runs_the_compiled_loop_by_default_and_the_numpy_kernel_on_request(monkeypatch):
    X, y = logistic_data(n=2000, d=2, seed=3)
    kwargs = dict(draws=30, tune=20, chains=1, progressbar=False, compute_convergence_checks=False,
                  random_seed=5)
    with logistic_model(X, y):
        compiled, numpy = pms.ZigZag(rng=0), pms.ZigZag(rng=0, compiled=False)
        assert compiled.compiled and not numpy.compiled
        a = pm.sample(step=compiled, **kwargs)
        b = pm.sample(step=numpy, **kwargs)
        # a family without a compiled score runs the NumPy kernel, with no error
        monkeypatch.delitem(COMPILED_FAMILIES, "bernoulli_logit")
        fallback = pms.ZigZag(rng=0)
        assert not fallback.compiled and fallback.process.compiled_score is None
        c = pm.sample(step=fallback, **kwargs)
    np.testing.assert_array_equal(b.posterior["beta"].values, c.posterior["beta"].values)
    assert not np.array_equal(a.posterior["beta"].values, b.posterior["beta"].values)  # other streams
    stats = a.sample_stats
    np.testing.assert_array_equal(stats["n_loglik_evals"].values, stats["n_proposed_switches"].values)
    assert int(stats["n_bound_exceeded"].sum()) == 0 and int(stats["n_switches"].sum()) > 0


def test_same_seed_same_draws_with_chains_in_processes():
    # each chain's process loads the loop from Numba's cache (or compiles it alike): no fastmath,
    # so the draws are bitwise those of the chains run in this process
    X, y = logistic_data(n=3000, d=2, seed=3)
    kwargs = dict(draws=30, tune=20, chains=2, random_seed=11, progressbar=False,
                  compute_convergence_checks=False)
    with logistic_model(X, y):
        parallel = [pm.sample(step=pms.ZigZag(rng=0), cores=2, mp_ctx="spawn", **kwargs) for _ in range(2)]
        serial = pm.sample(step=pms.ZigZag(rng=0), cores=1, **kwargs)
    draws = serial.posterior["beta"].values
    assert not np.array_equal(draws[0], draws[1])  # chains differ
    for run in parallel:
        np.testing.assert_array_equal(run.posterior["beta"].values, draws)
