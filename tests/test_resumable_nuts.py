"""The resumable NUTS machine: the same transitions as the compiled kernel for the same seed, momentum
and potential (chains on Gaussians, low acceptance, divergences, the depth limit, HMC-ECS), Gaussian
moments, a PyTensor potential, and no compilation in a process with a warm Numba cache."""

import os
import subprocess
import sys

import arviz as az
import numpy as np
import pytest
from nuts_targets import TARGETS, ball, gaussian, gaussian_args

from pymc_subsample.kernels import compiled_nuts, resumable_nuts
from pymc_subsample.kernels.resumable_nuts import NUTSMachine, ecs_nuts_iteration, nuts_transition


def assert_same(r, c):
    """Every field of two NUTSResults equal, bit for bit."""
    for key in r._fields:
        a, b = getattr(r, key), getattr(c, key)
        assert type(a) is type(b), key
        np.testing.assert_array_equal(a, b, err_msg=key)


def compare_chain(potential, args, theta, inverse_mass, step_size, n, seed, max_treedepth=10):
    """``n`` chained transitions of both implementations, fed the compiled chain's draws; their stats."""
    d = theta.shape[0]
    mass_chol = np.linalg.cholesky(np.linalg.inv(inverse_mass))
    rng = np.random.default_rng(seed)
    state = potential(theta, *args)
    machine = NUTSMachine(d, 1, max_treedepth)
    out = []
    for i in range(n):
        p = mass_chol @ rng.normal(size=d)
        s = rng.integers(2**64, dtype=np.uint64)
        c = compiled_nuts.nuts_transition(potential, args, theta, state, p, step_size, inverse_mass, s,
                                          max_treedepth)
        # one machine for the chain, and every third transition on a machine of its own
        r = nuts_transition(lambda q: potential(q, *args), theta, state, p, step_size, inverse_mass, s,
                            max_treedepth, machine=None if i % 3 == 0 else machine)
        assert_same(r, c)
        theta, state = c.theta, (c.value, c.grad, c.extras)
        out.append(c)
    return out


@pytest.mark.parametrize("name", list(TARGETS))
def test_same_chain_as_compiled(name):
    mu, cov, exact, step_size = TARGETS[name]
    args = gaussian_args(mu, cov)
    d = len(mu)
    inverse_mass = cov if exact else np.eye(d)
    theta = args[0] + np.linalg.cholesky(cov) @ np.random.default_rng(1).normal(size=d)
    out = compare_chain(gaussian, args, theta, inverse_mass, step_size, 300, seed=2)
    depths = [r.tree_depth for r in out]
    assert len(set(depths)) > 1
    if name.endswith("large-step"):
        assert np.mean([r.mean_tree_accept for r in out]) < 0.5


def test_same_chain_at_the_depth_limit():
    """max_treedepth = 3 on a small step: most transitions stop at the limit, not on turning back."""
    args = gaussian_args(np.zeros(4), np.eye(4))
    out = compare_chain(gaussian, args, np.full(4, 0.5), np.eye(4), 0.05, 200, seed=3, max_treedepth=3)
    assert np.mean([r.tree_depth == 3 for r in out]) > 0.5
    for depth in (0, 1):
        out = compare_chain(gaussian, args, np.full(4, 0.5), np.eye(4), 0.3, 20, seed=4, max_treedepth=depth)


def test_same_divergences_as_compiled():
    args = gaussian_args(np.zeros(4), np.eye(4))
    theta = np.full(4, 0.5)
    start = gaussian(theta, *args)
    r = nuts_transition(lambda q: gaussian(q, *args), theta, start, np.ones(4), 1e3, np.eye(4), 1)
    assert r.diverging and r.n_steps == 1 and np.array_equal(r.theta, theta)
    assert_same(r, compiled_nuts.nuts_transition(gaussian, args, theta, start, np.ones(4), 1e3, np.eye(4), 1))
    # a flat ball with a wall of −∞: divergences on the first step and after some steps
    radius, machine, steps, moved = (1.0,), NUTSMachine(2), set(), 0
    for seed in range(100):
        theta = np.array([0.1, -0.2]) * (seed % 5)
        start = ball(theta, *radius)
        p = np.array([1.0 + seed % 7, 0.3])
        step_size = 0.05 * (1 + seed % 4)
        r = nuts_transition(lambda q: ball(q, *radius), theta, start, p, step_size, np.eye(2), seed, 10,
                            machine)
        c = compiled_nuts.nuts_transition(ball, radius, theta, start, p, step_size, np.eye(2), seed)
        assert_same(r, c)
        assert r.diverging  # nothing turns on a flat density: every trajectory reaches the wall
        steps.add(r.n_steps)
        moved += not np.array_equal(r.theta, theta)
    assert 1 in steps and len(steps) > 5 and moved > 30


def test_same_ecs_iterations_as_compiled():
    args_u = gaussian_args([0.0, 0.0], np.eye(2))
    args_v = gaussian_args([0.6, 0.3], np.eye(2))
    rng = np.random.default_rng(0)
    theta = np.array([-0.5, 0.2])
    start = gaussian(theta, *args_u)
    machine, taken = NUTSMachine(2), 0
    for _ in range(300):  # a chain that swaps the two subsamples' roles whenever u′ is taken
        p, seed, log_u = rng.normal(size=2), rng.integers(2**64, dtype=np.uint64), np.log(rng.random())
        c = compiled_nuts.ecs_nuts_iteration(gaussian, theta, start, args_u, args_v, log_u, p, 0.4, np.eye(2),
                                             seed)
        r = ecs_nuts_iteration(gaussian, theta, start, args_u, args_v, log_u, p, 0.4, np.eye(2), seed,
                               machine=machine)
        assert (r.subsample_accepted, r.subsample_log_ratio) == (c.subsample_accepted, c.subsample_log_ratio)
        assert r.start[0] == c.start[0]
        np.testing.assert_array_equal(r.start[1], c.start[1])
        np.testing.assert_array_equal(r.start[2], c.start[2])
        assert_same(r.nuts, c.nuts)
        taken += c.subsample_accepted
        theta, start = c.nuts.theta, (c.nuts.value, c.nuts.grad, c.nuts.extras)
        if c.subsample_accepted:
            args_u, args_v = args_v, args_u
    assert 30 < taken < 270
    # a ratio that is NaN never takes the proposed subsample
    nan_args = (np.full(2, np.nan),) + args_v[1:]
    r = ecs_nuts_iteration(gaussian, theta, start, args_u, nan_args, -10.0, np.ones(2), 0.4, np.eye(2), 1)
    assert not r.subsample_accepted and not r.nuts.diverging


def test_gaussian_moments():
    """2000 chained transitions on the correlated d = 4 target with a NumPy potential: mean and
    variance within 4.5 MCSEs, once the effective sample sizes are large enough to judge them."""
    mu, cov, _, step_size = TARGETS["d4-correlated-identity"]
    mu, d, n = np.asarray(mu), 4, 2000
    prec = np.linalg.inv(cov)

    def potential(q):
        g = prec @ (mu - q)
        return 0.5 * (q - mu) @ g, g, np.zeros(1)

    rng = np.random.default_rng(11)
    theta = mu + np.linalg.cholesky(cov) @ rng.normal(size=d)
    state, machine, draws = potential(theta), NUTSMachine(d), np.empty((n, d))
    for i in range(n):
        r = nuts_transition(potential, theta, state, rng.normal(size=d), step_size, np.eye(d),
                            rng.integers(2**64, dtype=np.uint64), machine=machine)
        theta, state = r.theta, (r.value, r.grad, r.extras)
        draws[i] = theta
    sq = (draws - mu) ** 2
    ess_mean, ess_sq = (np.asarray(az.ess(a[None], method="mean")) for a in (draws, sq))
    assert ess_mean.min() > 300 and ess_sq.min() > 150, (ess_mean, ess_sq)
    z_mean = (draws.mean(0) - mu) / (draws.std(0) / np.sqrt(ess_mean))
    z_var = (sq.mean(0) - np.diag(cov)) / (sq.std(0) / np.sqrt(ess_sq))
    assert np.abs(z_mean).max() < 4.5, z_mean
    assert np.abs(z_var).max() < 4.5, z_var


def test_pytensor_potential():
    """A PyTensor function called with trust_input: the compiled kernel's transitions to rounding."""
    import pytensor
    import pytensor.tensor as pt

    mu, cov, _, step_size = TARGETS["d4-correlated-exact"]
    args = gaussian_args(mu, cov)
    q = pt.dvector("q")
    quad = -0.5 * (q - args[0]) @ pt.as_tensor(args[1]) @ (q - args[0])
    f = pytensor.function([q], [quad + args[2], pytensor.grad(quad, q), pt.stack([quad])], trust_input=True)
    rng = np.random.default_rng(5)
    theta = np.asarray(mu) + 0.5
    state = gaussian(theta, *args)
    for _ in range(20):
        p, s = rng.normal(size=4), rng.integers(2**64, dtype=np.uint64)
        r = nuts_transition(f, theta, state, p, step_size, cov, s)
        c = compiled_nuts.nuts_transition(gaussian, args, theta, state, p, step_size, cov, s)
        assert (r.tree_depth, r.n_steps) == (c.tree_depth, c.n_steps)
        np.testing.assert_allclose(r.theta, c.theta, rtol=0, atol=1e-9)
        assert r.energy == pytest.approx(c.energy, abs=1e-9)
        theta, state = c.theta, (c.value, c.grad, c.extras)


def test_machine_sizes():
    machine = NUTSMachine(3, 2, max_treedepth=5)
    assert machine.fits(3, 2, 5) and machine.fits(3, 2, 0)
    assert not (machine.fits(3, 2, 6) or machine.fits(4, 2, 5) or machine.fits(3, 1, 5))
    assert machine.point.base is machine.work or machine.point.base is machine.work.base
    # arrays of other lengths are refused before anything is read or written
    theta, start = np.zeros(3), (0.0, np.zeros(3), np.zeros(2))
    for bad in (lambda q: (0.0, np.zeros(2), np.zeros(2)), lambda q: (0.0, np.zeros(3), np.zeros(1))):
        with pytest.raises(ValueError, match="do not fit"):
            nuts_transition(bad, theta, start, np.ones(3), 0.1, np.eye(3), 1, 5, machine)
    with pytest.raises(ValueError, match="do not fit"):
        nuts_transition(None, theta, start, np.ones(2), 0.1, np.eye(3), 1, 5, machine)
    assert resumable_nuts.start(machine.work, machine.ints, machine.rng, theta, 0.0, np.zeros(3), np.zeros(2),
                                np.ones(3), 0.1, np.eye(3), np.uint64(1), 6) == resumable_nuts.WRONG_SIZE


WARM_CHECK = """
import numpy as np
from pymc_subsample.kernels import resumable_nuts as R
def potential(q):
    return -0.5 * q @ q, -q, np.zeros(1)
theta = np.full(3, 0.2)
R.nuts_transition(potential, theta, potential(theta), np.ones(3), 0.3, np.eye(3), 1)
R.ecs_nuts_iteration(lambda q, a: potential(a * q), theta, potential(theta), (1.0,), (1.1,), -1.0,
                     np.ones(3), 0.3, np.eye(3), 2)
print(sum(sum(f.stats.cache_misses.values()) for f in (R.start, R.resume, R.finish, R._layout)),
      sum(sum(f.stats.cache_hits.values()) for f in (R.start, R.resume, R.finish, R._layout)))
"""


@pytest.mark.slow
def test_warm_cache_compiles_nothing(tmp_path):
    """A second process with the same Numba cache loads start, resume and finish from disk."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", WARM_CHECK], env=env, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert int(runs[0][0]) == 4  # cold: each compiled once
    assert runs[1] == ["0", "4"], runs[1]
    assert resumable_nuts.resume._cache.__class__.__name__ == "FunctionCache"
