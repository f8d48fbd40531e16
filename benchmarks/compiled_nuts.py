"""The compiled NUTS transition (`pymc_subsample.kernels.compiled_nuts`): first-call compile time and
the time per leapfrog step around a trivial potential.

All times are CPU time of this process (``time.process_time``), which the other users of a shared
core do not inflate as they do wall time.

``compile``: the seconds of the first calls in this process (import, the potential, the first
``nuts_transition``, the first ``ecs_nuts_iteration`` after it), then of a second potential of the
same types. Run it in a fresh process with an empty Numba cache for the cold numbers:
``NUMBA_CACHE_DIR=$(mktemp -d) taskset -c 0 python benchmarks/compiled_nuts.py compile``; run it twice
with the same directory for the numbers with the kernel's helpers cached (the transition closes
over the potential, and Numba's cache never serves such a function).

``overhead``: N(0, I) at d = 4 and 31 with a dense identity M⁻¹; µs per leapfrog step over chained
transitions, the potential's own call (from a Numba loop), a transition of no step (the call from
Python), and PyMC's NUTS on the same target with the same fixed step size for scale.

Usage: taskset -c 0 python benchmarks/compiled_nuts.py {compile,overhead} [--pymc]
"""

import sys
import time

t_start = time.process_time()
import numba  # noqa: E402
import numpy as np  # noqa: E402

from pymc_subsample.kernels.compiled_nuts import ecs_nuts_iteration, nuts_transition  # noqa: E402

t_import = time.process_time() - t_start


@numba.njit
def standard_normal(theta, scale):
    grad = np.empty(theta.shape[0])
    value = 0.0
    for i in range(theta.shape[0]):
        grad[i] = -theta[i] * scale
        value -= 0.5 * theta[i] * theta[i] * scale
    return np.asarray(value), grad, np.zeros(1)


@numba.njit
def standard_normal_2(theta, scale):
    grad = -theta * scale
    return np.asarray(-0.5 * scale * np.sum(theta * theta)), grad, np.zeros(1)


@numba.njit
def call_many(potential, theta, args, n):
    s = 0.0
    for _ in range(n):
        out = potential(theta, *args)
        s += out[0][()] + out[1][0]
    return s


def first_calls():
    d = 4
    theta, args, rng = np.full(d, 0.1), (1.0,), np.random.default_rng(0)
    print(f"import {t_import:.2f} s")
    for potential in (standard_normal, standard_normal_2):
        t = time.process_time()
        start = potential(theta, *args)
        t_pot = time.process_time() - t
        t = time.process_time()
        nuts_transition(potential, args, theta, start, rng.normal(size=d), 0.3, np.eye(d), 1)
        t_nuts = time.process_time() - t
        t = time.process_time()
        ecs_nuts_iteration(potential, theta, start, args, (1.1,), -1.0, rng.normal(size=d), 0.3, np.eye(d), 2)
        t_ecs = time.process_time() - t
        print(f"{potential.__name__}: potential {t_pot:.2f} s, first nuts_transition {t_nuts:.2f} s, "
              f"first ecs_nuts_iteration after it {t_ecs:.2f} s")


def per_step(d, step_size, n=3000, seed=0):
    args, inverse_mass = (1.0,), np.eye(d)
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=d)
    state = standard_normal(theta, *args)
    momenta = rng.normal(size=(n, d))
    seeds = rng.integers(2**64, size=n, dtype=np.uint64)
    nuts_transition(standard_normal, args, theta, state, momenta[0], step_size, inverse_mass, seeds[0])
    steps, depth = 0, 0
    t = time.process_time()
    for i in range(n):
        r = nuts_transition(standard_normal, args, theta, state, momenta[i], step_size, inverse_mass,
                            seeds[i])
        theta, state = r.theta, (r.value, r.grad, r.extras)
        steps += r.n_steps
        depth += r.tree_depth
    elapsed = time.process_time() - t
    call_many(standard_normal, theta, args, 10)
    t = time.process_time()
    call_many(standard_normal, theta, args, 10**6)
    potential_us = (time.process_time() - t)
    t = time.process_time()
    for i in range(n):
        nuts_transition(standard_normal, args, theta, state, momenta[i], step_size, inverse_mass, seeds[i], 0)
    empty_us = (time.process_time() - t) / n * 1e6
    marginal = (elapsed / n * 1e6 - empty_us) / (steps / n)
    print(f"d = {d}, ε = {step_size}: {elapsed / steps * 1e6:.3f} µs a leapfrog step, {marginal:.3f} µs "
          f"beyond the transition's fixed cost "
          f"({steps / n:.1f} steps, depth {depth / n:.2f} a transition, "
          f"{elapsed / n * 1e6:.1f} µs a transition); "
          f"the potential alone {potential_us:.3f} µs a call; a transition of no step from Python "
          f"{empty_us:.1f} µs")


def pymc_per_step(d, step_size, n=1000):
    import pymc as pm

    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=d)
        step = pm.NUTS(scaling=np.ones(d), is_cov=True, step_scale=step_size * d**0.25,
                       adapt_step_size=False, early_max_treedepth=10)
        t = time.process_time()
        idata = pm.sample(draws=n, tune=0, chains=1, step=step, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
        elapsed = time.process_time() - t
    steps = float(np.asarray(idata.sample_stats["n_steps"]).sum())
    print(f"PyMC NUTS, d = {d}: {elapsed / steps * 1e6:.1f} µs a leapfrog step (pm.sample's CPU time, "
          f"{steps / n:.1f} steps a draw)")


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        first_calls()
    else:
        for d, eps in ((4, 0.3), (31, 0.2)):
            per_step(d, eps)
            if "--pymc" in sys.argv:
                pymc_per_step(d, eps)
