"""The Zig-Zag kernel alone (``kernels.zigzag``: ``init``, ``step``; and the compiled loop,
``kernels.zigzag_compiled.step``), on a Gaussian posterior known exactly, with nothing of PyMC:
NumPy rows and a NumPy row sampler."""

import arviz as az
import numpy as np
import pytest

from pymc_subsample.kernels import zigzag, zigzag_compiled

SIGMA, PRIOR_SD = 1.0, 10.0


def gaussian_toy(n=2000, seed=0):
    """y = Xβ + N(0, σ²) with σ known and β ~ N(0, 10² I): posterior N(mean, cov), both exact."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.5], [0.0, 0.8]])
    y = X @ np.array([0.7, -1.2]) + SIGMA * rng.normal(size=n)
    precision = X.T @ X / SIGMA**2 + np.eye(2) / PRIOR_SD**2
    cov = np.linalg.inv(precision)
    return X, y, cov @ X.T @ y / SIGMA**2, cov, precision


def uniform_rows_process(X, y, center, precision):
    """ZZ-CV's constants for uniform rows (w ≡ 1, W = N) and its row sampler."""
    metric_r = np.linalg.cholesky(precision).T
    metric = np.linalg.norm(X @ np.linalg.inv(metric_r), axis=1)  # ‖R⁻ᵀJ_k‖₂
    process = zigzag.ZigZagCV(
        center=center, prior_grad_center=-center / PRIOR_SD**2, prior_hessian=-np.eye(2) / PRIOR_SD**2,
        loglik_grad_center=X.T @ (y - X @ center) / SIGMA**2, weight_total=float(len(y)),
        score=lambda obs, eta: (obs - eta) / SIGMA**2, curvature=1.0 / SIGMA**2,
        lipschitz_a=(np.abs(X) * metric[:, None]).max(0),
        lipschitz_b=(np.abs(X) * np.abs(X).sum(1)[:, None]).max(0), metric_r=metric_r,
        compiled_score=zigzag_compiled.compiled_score("normal_identity", SIGMA),
    )

    def draw(rng, size):
        idx = rng.integers(0, len(y), size=size)
        return X[idx], y[idx], X[idx] @ center, np.ones(size)

    return process, draw


def kernel_step(compiled):
    """``step(rng, state, horizon, process, draw, first_chunk)`` of the compiled loop or the NumPy kernel."""
    if compiled:
        return lambda rng, state, horizon, process, draw, first_chunk=None: zigzag_compiled.step(
            rng, state, horizon, process, draw)
    return zigzag.step


@pytest.mark.parametrize("compiled", [True, False])
def test_step_samples_the_known_gaussian_posterior(compiled):
    # θ* one posterior sd off the mode, so that the control-variate terms are far from zero and
    # the one-row estimates noisy: a wrong estimate, bound or thinning moves the law by many sd
    X, y, mean, cov, precision = gaussian_toy()
    center = mean + np.sqrt(np.diag(cov))
    process, draw = uniform_rows_process(X, y, center, precision)
    step = kernel_step(compiled)
    rng = np.random.default_rng(3)
    state = zigzag.init(center, rng, row_batch=512)
    horizon = zigzag.initial_horizon(precision)
    totals = zigzag.ZigZagCounts()
    for _ in range(200):  # warm-up: the horizon set to about 8 switches per draw
        chunk = zigzag.first_chunk_size(totals.proposed, totals.switches)
        state, info = step(rng, state, horizon, process, draw, chunk)
        totals.add(info)
        horizon = zigzag.tuned_horizon(8.0, totals.time, totals.switches, horizon)
    draws = np.empty((2000, 2))
    for i in range(2000):
        chunk = zigzag.first_chunk_size(totals.proposed, totals.switches)
        state, info = step(rng, state, horizon, process, draw, chunk)
        totals.add(info)
        assert info.time == pytest.approx(horizon) and info.rows >= info.proposed >= info.switches
        draws[i] = state.theta
    assert totals.bound_exceeded == 0  # the thinning bound held at every candidate on the path
    ess = np.array([float(az.ess(draws[None, :, j])) for j in range(2)])
    assert ess.min() >= 400, ess  # first: a stuck chain would make the tolerances below meaningless
    var = np.diag(cov)
    z_mean = (draws.mean(0) - mean) / np.sqrt(var / ess)
    z_var = (draws.var(0) - var) / (var * np.sqrt(2.0 / ess))
    assert np.all(np.abs(z_mean) <= 4), (z_mean, ess)
    assert np.all(np.abs(z_var) <= 4), (z_var, ess)


@pytest.mark.parametrize("compiled", [True, False])
def test_init_and_step_consume_the_generator_as_one_path(compiled):
    # init draws one uniform per coordinate for v; step leaves its input state as it was, and two
    # steps of T from one state and generator equal one step of 2T only in law, so compare a
    # replay: the same generator state gives the same path
    X, y, mean, cov, precision = gaussian_toy(n=300)
    process, draw = uniform_rows_process(X, y, mean, precision)
    step = kernel_step(compiled)
    first = zigzag.init(mean, np.random.default_rng(0))
    assert set(np.unique(first.velocity)) <= {-1.0, 1.0} and first.rows.jac is None
    np.testing.assert_array_equal(first.velocity, zigzag.random_velocity(np.random.default_rng(0), 2))
    theta, velocity = first.theta.copy(), first.velocity.copy()
    runs = [step(np.random.default_rng(1), zigzag.init(mean, np.random.default_rng(0)), 0.5, process, draw)
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0][0].theta, runs[1][0].theta)
    assert runs[0][1] == runs[1][1]
    step(np.random.default_rng(1), first, 0.5, process, draw)
    np.testing.assert_array_equal(first.theta, theta)
    np.testing.assert_array_equal(first.velocity, velocity)
