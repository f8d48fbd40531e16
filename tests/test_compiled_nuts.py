"""The compiled multinomial NUTS transition: stationarity on Gaussians, PyMC's NUTS step for step,
divergences, U-turns, and the HMC-ECS subsample update in front of it."""

import arviz as az
import numpy as np
import pytest
from nuts_targets import TARGETS, ball, gaussian, gaussian_args

from pymc_subsample.kernels.compiled_nuts import (
    MAX_ENERGY_ERROR,
    _kernels,
    _turning,
    _uniform,
    ecs_nuts_iteration,
    nuts_transition,
)


def run_chain(mu, cov, inverse_mass, step_size, n, seed, max_treedepth=10):
    """``n`` chained transitions from a draw of the target."""
    args = gaussian_args(mu, cov)
    d = len(mu)
    mass_chol = np.linalg.cholesky(np.linalg.inv(inverse_mass))
    rng = np.random.default_rng(seed)
    theta = args[0] + np.linalg.cholesky(cov) @ rng.normal(size=d)
    state = gaussian(theta, *args)
    draws, depth, steps, accept = np.empty((n, d)), np.empty(n, int), np.empty(n, int), np.empty(n)
    for i in range(n):
        p = mass_chol @ rng.normal(size=d)
        r = nuts_transition(gaussian, args, theta, state, p, step_size, inverse_mass,
                            rng.integers(2**64, dtype=np.uint64), max_treedepth)
        assert not r.diverging
        assert r.extras[0] == pytest.approx(r.value - args[2], abs=1e-9)  # extras belong to the draw
        theta, state = r.theta, (r.value, r.grad, r.extras)
        draws[i], depth[i], steps[i], accept[i] = theta, r.tree_depth, r.n_steps, r.mean_tree_accept
    return draws, depth, steps, accept


def moment_z(draws, mu, var):
    """z-scores of the mean and of the variance about the known mean, by their MCSEs; the ESSs."""
    x = draws[None]  # (chain, draw, coordinate)
    sq = (draws - mu)[None] ** 2
    ess_mean = np.asarray(az.ess(x, method="mean"))
    ess_sq = np.asarray(az.ess(sq, method="mean"))
    z_mean = (draws.mean(0) - mu) / (draws.std(0) / np.sqrt(ess_mean))
    z_var = (sq[0].mean(0) - var) / (sq[0].std(0) / np.sqrt(ess_sq))
    return z_mean, z_var, ess_mean, ess_sq


@pytest.mark.parametrize("name", list(TARGETS))
def test_gaussian_moments(name):
    mu, cov, exact, step_size = TARGETS[name]
    mu = np.asarray(mu, float)
    inverse_mass = cov if exact else np.eye(len(mu))
    draws, depth, steps, accept = run_chain(mu, cov, inverse_mass, step_size, 2000, seed=11)
    z_mean, z_var, ess_mean, ess_sq = moment_z(draws, mu, np.diag(cov))
    assert ess_mean.min() > 300 and ess_sq.min() > 150, (ess_mean, ess_sq)
    assert np.abs(z_mean).max() < 4.5, z_mean
    assert np.abs(z_var).max() < 4.5, z_var
    assert np.all(steps < 2 ** depth) and np.all(steps >= 2 ** (depth - 1))
    assert 0.25 < accept.mean() <= 1.0


def test_seeded():
    args = gaussian_args(np.zeros(3), np.eye(3))
    theta, p = np.full(3, 0.3), np.array([1.0, -0.5, 0.2])
    start = gaussian(theta, *args)
    a, b, c = (nuts_transition(gaussian, args, theta, start, p, 0.3, np.eye(3), s) for s in (7, 7, 8))
    assert np.array_equal(a.theta, b.theta) and a.n_steps == b.n_steps
    assert not (np.array_equal(a.theta, c.theta) and a.tree_depth == c.tree_depth)
    # one kernel a potential, compiled once for chained calls (a draw fed back has the input's types)
    nuts_transition(gaussian, args, a.theta, (a.value, a.grad, a.extras), p, 0.3, np.eye(3), 9)
    assert len(_kernels(gaussian)[0].signatures) == 1


def splitmix64(seed, n):
    mask, out = 2**64 - 1, []
    for _ in range(n):
        seed = (seed + 0x9E3779B97F4A7C15) & mask
        z = seed
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append((z ^ (z >> 31)) >> 11)
    return [x / 2**53 for x in out]


def test_uniforms_are_splitmix64():
    for seed in (0, 1234567, 2**64 - 1):
        state = np.array([seed], dtype=np.uint64)
        assert [_uniform(state) for _ in range(5)] == splitmix64(seed, 5)


class SplitMixGenerator:
    """``random()`` from the same splitmix64 stream as the kernel, for PyMC's tree."""

    def __init__(self, seed):
        self.state = np.array([seed], dtype=np.uint64)

    def random(self):
        return _uniform(self.state)


@pytest.mark.slow
@pytest.mark.parametrize("exact", [False, True])
def test_same_transitions_as_pymc_nuts(exact):
    """On PyMC's own tree (its ``_Tree``, driven as ``NUTS._hamiltonian_step`` drives it) with the
    same momentum and the same uniforms, every transition of a chain gives the same draw and stats."""
    import pymc as pm
    from pymc.blocking import DictToArrayBijection
    from pymc.step_methods.hmc.nuts import _Tree

    mu, cov, _, _ = TARGETS["d4-correlated-identity"]
    mu, d = np.asarray(mu), len(mu)
    inverse_mass, step_size = (cov, 0.9) if exact else (np.eye(d), 0.3)
    with pm.Model():
        pm.MvNormal("x", mu=mu, cov=cov)
        step = pm.NUTS(scaling=inverse_mass, is_cov=True, step_scale=step_size * d**0.25)
    assert np.allclose(step.potential.velocity(np.arange(1.0, d + 1)), inverse_mass @ np.arange(1.0, d + 1))
    args = gaussian_args(mu, cov)
    rng = np.random.default_rng(3)
    theta = mu + rng.normal(size=d)
    state = gaussian(theta, *args)
    depths = []
    for _ in range(150):
        p = np.linalg.cholesky(np.linalg.inv(inverse_mass)) @ rng.normal(size=d)
        seed = rng.integers(2**64, dtype=np.uint64)
        r = nuts_transition(gaussian, args, theta, state, p, step_size, inverse_mass, seed)
        uniforms = SplitMixGenerator(seed)
        start = step.integrator.compute_state(DictToArrayBijection.map({"x": theta}), p)
        tree = _Tree(d, step.integrator, start, step_size, MAX_ENERGY_ERROR, rng=uniforms)
        for _ in range(10):
            if any(tree.extend((uniforms.random() < 0.5) * 2 - 1)):
                break
        stats = tree.stats()
        np.testing.assert_allclose(r.theta, tree.proposal.q.data, rtol=0, atol=1e-9)
        assert (r.tree_depth, r.n_steps) == (stats["depth"], stats["tree_size"])
        for key in ("mean_tree_accept", "energy_error", "max_energy_error", "energy"):
            assert getattr(r, key) == pytest.approx(stats[key], abs=1e-9), key
        assert r.value == pytest.approx(stats["model_logp"], abs=1e-9)
        theta, state = r.theta, (r.value, r.grad, r.extras)
        depths.append(r.tree_depth)
    assert len(set(depths)) > 1


@pytest.mark.slow
def test_stationary_against_pm_sample():
    """pm.sample with PyMC's NUTS at the same fixed step size and metric: the same moments within
    their MCSEs, mean tree depths within 0.3 (3.58 and 3.54 measured at these seeds)."""
    import pymc as pm

    mu, cov, _, _ = TARGETS["d4-correlated-identity"]
    mu, d, step_size, n = np.asarray(mu), len(mu), 0.25, 1500
    with pm.Model():
        pm.MvNormal("x", mu=mu, cov=cov)
        step = pm.NUTS(scaling=np.eye(d), is_cov=True, step_scale=step_size * d**0.25, adapt_step_size=False,
                       early_max_treedepth=10)
        idata = pm.sample(draws=n, tune=0, chains=1, step=step, random_seed=5, progressbar=False,
                          compute_convergence_checks=False, initvals={"x": mu})
    pymc_draws = np.asarray(idata.posterior["x"])[0]
    pymc_depth = np.asarray(idata.sample_stats["tree_depth"])[0]
    draws, depth, _, _ = run_chain(mu, cov, np.eye(d), step_size, n, seed=5)
    for a in (draws, pymc_draws):
        z_mean, z_var, ess_mean, ess_sq = moment_z(a, mu, np.diag(cov))
        assert ess_mean.min() > 200 and ess_sq.min() > 100, (ess_mean, ess_sq)
    # difference of the two chains' means, by their combined MCSE
    mcse = [a.std(0) / np.sqrt(np.asarray(az.ess(a[None], method="mean"))) for a in (draws, pymc_draws)]
    z = (draws.mean(0) - pymc_draws.mean(0)) / np.hypot(*mcse)
    assert np.abs(z).max() < 4.5, z
    assert abs(depth.mean() - pymc_depth.mean()) < 0.3, (depth.mean(), pymc_depth.mean())
    # tree-depth frequencies: total variation distance below 0.08 (0.03 measured at these seeds)
    counts = [np.bincount(a, minlength=11) / n for a in (depth, pymc_depth)]
    assert 0.5 * np.abs(counts[0] - counts[1]).sum() < 0.08, counts


def test_divergence_on_first_step_returns_start():
    theta, radius = np.array([0.1, -0.2]), 1.0
    start = ball(theta, radius)
    for seed in range(20):  # both directions leave the ball in one step
        r = nuts_transition(ball, (radius,), theta, start, np.array([10.0, 0.0]), 0.5, np.eye(2), seed)
        assert r.diverging and (r.tree_depth, r.n_steps) == (1, 1)
        assert np.array_equal(r.theta, theta) and r.value == 0.0
        assert r.max_energy_error == np.inf and r.mean_tree_accept == 0.0 and r.energy_error == 0.0


def test_divergence_later_keeps_a_draw_from_before():
    theta, radius = np.zeros(1), 1.0
    start = ball(theta, radius)
    seen_moves = 0
    for seed in range(50):  # 0.1 per step: the wall is met within 10 steps, in a doubling of depth ≤ 4
        r = nuts_transition(ball, (radius,), theta, start, np.array([1.0]), 0.1, np.eye(1), seed)
        assert r.diverging and 1 <= r.tree_depth <= 5
        assert abs(r.theta[0]) < radius and r.value == 0.0
        seen_moves += r.theta[0] != 0.0
    assert seen_moves > 25


def test_huge_step_size_diverges():
    args = gaussian_args(np.zeros(4), np.eye(4))
    theta = np.full(4, 0.5)
    start = gaussian(theta, *args)
    r = nuts_transition(gaussian, args, theta, start, np.ones(4), 1e3, np.eye(4), 1)
    assert r.diverging and r.n_steps == 1 and np.array_equal(r.theta, theta)
    assert abs(r.max_energy_error) > MAX_ENERGY_ERROR


def test_uturn_criterion():
    one = np.ones(1)
    # A = momenta (1, 1), B = (−1.5, 3): the merged tree's ends go the same way as ρ = 3.5 ...
    args = (2 * one, one, one, one, 1.5 * one, -1.5 * one, -1.5 * one, 3 * one)
    assert not _turning(*args, False)
    # ... but A with B's first point (ρ = 0.5) turns against that point: only the extra check sees it
    assert _turning(*args, True)
    # the merged tree turns: ρ = −1 against A's first point
    assert _turning(2 * one, one, one, one, -3 * one, -one, -one, -2 * one, False)


def test_uturn_stops_the_orbit():
    """On N(0, 1) with ε = 0.01 an orbit takes 2π/ε ≈ 628 steps: NUTS stops within one of them,
    and far below the 1023 steps of depth 10."""
    args = gaussian_args(np.zeros(1), np.eye(1))
    theta = np.array([0.0])
    start = gaussian(theta, *args)
    for seed in range(10):
        r = nuts_transition(gaussian, args, theta, start, np.array([1.0]), 0.01, np.eye(1), seed)
        assert 2**7 <= r.n_steps < 2**10 and r.tree_depth <= 9 and not r.diverging


def test_ecs_acceptance_frequency_and_kept_subsample():
    args_u = gaussian_args([0.0, 0.0], np.eye(2))
    args_v = gaussian_args([0.6, 0.3], np.eye(2))
    theta = np.array([-0.5, 0.2])
    start = gaussian(theta, *args_u)
    log_ratio = float(gaussian(theta, *args_v)[0] - start[0])
    rng = np.random.default_rng(0)
    n, taken = 4000, 0
    for i in range(n):
        p, seed = rng.normal(size=2), rng.integers(2**64, dtype=np.uint64)
        log_u = np.log(rng.random())
        r = ecs_nuts_iteration(gaussian, theta, start, args_u, args_v, log_u, p, 0.4, np.eye(2), seed)
        assert r.subsample_log_ratio == pytest.approx(log_ratio)
        taken += r.subsample_accepted
        kept = args_v if r.subsample_accepted else args_u
        if i < 200:  # the transition is the one on the kept arguments, from their start at θ₀
            kept_start = gaussian(theta, *kept)
            assert r.start[0] == pytest.approx(float(kept_start[0]))
            np.testing.assert_array_equal(r.start[1], kept_start[1])
            alone = nuts_transition(gaussian, kept, theta, kept_start, p, 0.4, np.eye(2), seed)
            np.testing.assert_array_equal(r.nuts.theta, alone.theta)
            assert r.nuts.n_steps == alone.n_steps and r.nuts.value == alone.value
    prob = min(1.0, np.exp(log_ratio))
    assert 0.2 < prob < 0.8
    assert abs(taken / n - prob) < 4.5 * np.sqrt(prob * (1 - prob) / n)
    # a ratio that is NaN never takes the proposed subsample
    nan_args = (np.full(2, np.nan),) + args_v[1:]
    r = ecs_nuts_iteration(gaussian, theta, start, args_u, nan_args, -10.0, np.ones(2), 0.4, np.eye(2), 1)
    assert not r.subsample_accepted and not r.nuts.diverging
