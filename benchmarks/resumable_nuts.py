"""The resumable NUTS machine (`pymc_subsample.kernels.resumable_nuts`): first-call compile time with a
cold and a warm Numba cache, and the cost per transition and per leapfrog step around a Python potential.

All times are CPU time of this process (``time.process_time``), which the other users of a shared
core do not inflate as they do wall time. Pin the process: ``taskset -c 0``.

``compile``: the seconds of the first calls in this process (import, the first ``nuts_transition``
around a NumPy potential, the first ``ecs_nuts_iteration`` after it) and Numba's cache hits and misses
of the machine's functions. Run it twice with the same empty directory, the first run cold and the
second warm::

    export NUMBA_CACHE_DIR=$(mktemp -d)
    taskset -c 0 python benchmarks/resumable_nuts.py compile   # cold
    taskset -c 0 python benchmarks/resumable_nuts.py compile   # warm

``overhead``: N(0, I) at d = 4 (ε = 0.3) and d = 31 (ε = 0.2) with a dense identity M⁻¹, as in
``benchmarks/compiled_nuts.py``; over 3000 chained transitions on one machine: µs a transition and a
leapfrog step, the potential's own call from Python, a transition of no step (``max_treedepth=0``:
start, finish and the result), and the machine's cost a step beyond the potential's call
((transition − no-step transition) / steps − potential call). Potentials: a NumPy Gaussian, and a
PyTensor function of (value, grad, extras) on the NUMBA backend called with ``trust_input=True``; for
scale the compiled kernel (``compiled_nuts``) around a Numba Gaussian, and with ``--pymc`` PyMC's
``pm.NUTS`` (CPU time of its ``step`` a leapfrog step, less one call of its logp-and-gradient function).

Usage: taskset -c 0 python benchmarks/resumable_nuts.py {compile,overhead} [--pymc]
"""

import os
import sys
import time

t_start = time.process_time()
import numba  # noqa: E402
import numpy as np  # noqa: E402

from pymc_subsample.kernels import resumable_nuts as R  # noqa: E402

t_import = time.process_time() - t_start

N_TRANSITIONS = 3000


def numpy_potential(d):
    extras = np.zeros(1)

    def potential(theta):
        return -0.5 * (theta @ theta), -theta, extras

    return potential


def pytensor_potential(d):
    import pytensor
    import pytensor.tensor as pt

    theta = pt.dvector("theta")
    value = -0.5 * pt.sum(theta**2)
    return pytensor.function([theta], [value, pytensor.grad(value, theta), pt.stack([value])], mode="NUMBA",
                             trust_input=True)


@numba.njit
def numba_potential(theta):
    grad = np.empty(theta.shape[0])
    value = 0.0
    for i in range(theta.shape[0]):
        grad[i] = -theta[i]
        value -= 0.5 * theta[i] * theta[i]
    return np.asarray(value), grad, np.zeros(1)


def first_calls():
    print(f"NUMBA_CACHE_DIR={os.environ.get('NUMBA_CACHE_DIR')}, numba {numba.__version__}")
    from pymc_subsample.kernels.compiled_nuts import _dot

    d, rng = 4, np.random.default_rng(0)
    potential = numpy_potential(d)
    theta = np.full(d, 0.1)
    # Numba's own start-up (its compiler and LLVM), paid once by a process that calls any Numba function
    t = time.process_time()
    _dot(theta, theta)
    t_numba = time.process_time() - t
    t = time.process_time()
    R.nuts_transition(potential, theta, potential(theta), rng.normal(size=d), 0.3, np.eye(d), 1)
    t_nuts = time.process_time() - t
    t = time.process_time()
    R.ecs_nuts_iteration(lambda q, s: potential(s * q), theta, potential(theta), (1.0,), (1.1,), -1.0,
                         rng.normal(size=d), 0.3, np.eye(d), 2)
    t_ecs = time.process_time() - t
    functions = (R._layout, R.start, R.resume, R.finish)
    hits = sum(sum(f.stats.cache_hits.values()) for f in functions)
    misses = sum(sum(f.stats.cache_misses.values()) for f in functions)
    print(f"import {t_import:.2f} s; Numba's start-up with the first call of compiled_nuts._dot "
          f"{t_numba:.3f} s; "
          f"first nuts_transition {t_nuts:.3f} s; first ecs_nuts_iteration after it "
          f"{t_ecs:.3f} s; Numba cache of _layout, start, resume, finish: {hits} hits, {misses} misses")


def chain(run, potential, d, step_size, max_treedepth=10, seed=0):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=d)
    state = potential(theta)
    momenta = rng.normal(size=(N_TRANSITIONS, d))
    seeds = rng.integers(2**64, size=N_TRANSITIONS, dtype=np.uint64)
    run(potential, theta, state, momenta[0], step_size, seeds[0], max_treedepth)
    steps = 0
    t = time.process_time()
    for i in range(N_TRANSITIONS):
        r = run(potential, theta, state, momenta[i], step_size, seeds[i], max_treedepth)
        theta, state = r.theta, (r.value, r.grad, r.extras)
        steps += r.n_steps
    return (time.process_time() - t) / N_TRANSITIONS * 1e6, steps / N_TRANSITIONS


def per_call(potential, d, n=100_000):
    theta = np.random.default_rng(1).normal(size=d)
    potential(theta)
    t = time.process_time()
    for _ in range(n):
        potential(theta)
    return (time.process_time() - t) / n * 1e6


def report(label, run, potential, d, step_size, call_us):
    transition_us, steps = chain(run, potential, d, step_size)
    empty_us, _ = chain(run, potential, d, step_size, max_treedepth=0)
    machine_us = (transition_us - empty_us) / steps - call_us
    print(f"  {label}: {transition_us:.1f} µs a transition ({steps:.1f} steps), "
          f"{transition_us / steps:.2f} µs a step; potential call {call_us:.2f} µs; no-step transition "
          f"{empty_us:.1f} µs; beyond the potential {machine_us:.2f} µs a step")


def overheads(with_pymc):
    from pymc_subsample.kernels import compiled_nuts as C

    print(f"N(0, I), dense identity M⁻¹, {N_TRANSITIONS} chained transitions, numba {numba.__version__}")
    for d, step_size in ((4, 0.3), (31, 0.2)):
        machine = R.NUTSMachine(d, 1, 10)
        eye = np.eye(d)

        def resumable(potential, theta, state, p, eps, seed, depth, eye=eye, machine=machine):
            return R.nuts_transition(potential, theta, state, p, eps, eye, seed, depth, machine)

        def compiled(potential, theta, state, p, eps, seed, depth, eye=eye):
            return C.nuts_transition(numba_potential, (), theta, state, p, eps, eye, seed, depth)

        print(f"d = {d}, ε = {step_size}:")
        for name, potential in (("NumPy", numpy_potential(d)), ("PyTensor NUMBA", pytensor_potential(d))):
            report(f"resumable, {name} potential", resumable, potential, d, step_size, per_call(potential, d))
        report("compiled kernel, Numba potential (its call from Python)", compiled, numba_potential, d,
               step_size, 0.0)
        if with_pymc:
            pymc_per_step(d, step_size)


def pymc_per_step(d, step_size, n=2000):
    import pymc as pm
    from pymc.blocking import DictToArrayBijection

    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=d)
        step = pm.NUTS(scaling=np.ones(d), is_cov=True, step_scale=step_size * d**0.25,
                       adapt_step_size=False, early_max_treedepth=10)
    point = model.initial_point()
    point, _ = step.step(point)
    steps = 0
    t = time.process_time()
    for _ in range(n):
        point, stats = step.step(point)
        steps += stats[0]["tree_size"]
    elapsed = time.process_time() - t
    q = DictToArrayBijection.map({"x": np.full(d, 0.1)})
    func = step.integrator._logp_dlogp_func
    call_us = per_call(lambda theta: func(theta, q.point_map_info), d, 20_000)
    print(f"  PyMC pm.NUTS: {elapsed / steps * 1e6:.1f} µs a leapfrog step ({n} calls of step.step, "
          f"{steps / n:.1f} steps a draw); its logp-and-gradient call {call_us:.1f} µs; beyond it "
          f"{elapsed / steps * 1e6 - call_us:.1f} µs a step")


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        first_calls()
    else:
        overheads("--pymc" in sys.argv)
