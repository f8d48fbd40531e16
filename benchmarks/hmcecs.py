"""HMC-ECS benchmark: ESS per second against full-data PyMC NUTS and NumPyro's HMCECS,
and time per iteration as N grows with m fixed. Everything is measured in one run.

ESS/s = min over coefficients of bulk ESS / (set-up + sampling seconds). Set-up for HMC-ECS is
the construction of the step (graphs, compilation, centre, proxy sums, pilot); NumPyro's
HMCECS is given our centre (its MAP cost is not counted) and its time includes JAX compilation.

Usage: python benchmarks/hmcecs.py [--rows 1000000] [--features 30] [--nuts-draws 200]
       [--skip-scaling] [--skip-numpyro] [--only-scaling] [--only-iteration]
"""

import argparse
import platform
import time
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from _synthetic import logistic_data, logistic_model
from pymc.blocking import DictToArrayBijection

import pymc_subsample as pms
from pymc_subsample.pymc_protocol import PotentialForPyMC

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def run_hmcecs(model, m, draws, tune, seed=1, **kwargs):
    with model:
        t = time.perf_counter()
        step = pms.HMCECS(subsample_size=m, num_blocks=100, **kwargs)
        setup = time.perf_counter() - t
        t = time.perf_counter()
        idata = pm.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        sampling = time.perf_counter() - t
    return idata, setup, sampling, step


def run_nuts(model, draws, tune, seed=1):
    with model:
        t = time.perf_counter()
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    return idata, time.perf_counter() - t


def run_numpyro(X, y, m, center, draws, tune, seed=1):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import HMCECS, MCMC, NUTS

    n, d = X.shape
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def model(X, y):
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(d), 1.0).to_event(1))
        with numpyro.plate("N", n, subsample_size=m) as idx:
            numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ beta), obs=y[idx])

    t = time.perf_counter()
    proxy = HMCECS.taylor_proxy({"beta": jnp.asarray(center)})
    kernel = HMCECS(NUTS(model), num_blocks=100, proxy=proxy)
    mcmc = MCMC(kernel, num_warmup=tune, num_samples=draws, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), Xj, yj)
    beta = np.asarray(mcmc.get_samples()["beta"])
    seconds = time.perf_counter() - t
    idata = az.from_dict({"posterior": {"beta": beta[None]}})
    return idata, seconds


def min_ess(idata):
    return float(az.ess(idata, var_names=["beta"])["beta"].min())


def compare_on(name, X, y, args):
    print(f"\n## {name}: N = {X.shape[0]}, d = {X.shape[1]}")
    model = logistic_model(X, y)
    idata, setup, sampling, step = run_hmcecs(model, args.m, args.draws, args.tune, seed=args.seed,
                                              compiled=False if args.python_nuts else None)
    ess = min_ess(idata)
    label = "pymc_subsample HMCECS" + (" (compiled=False)" if args.python_nuts else "")
    rows = [(label, setup, sampling, ess, idata)]
    ref = None
    if not args.skip_nuts:
        ref, seconds = run_nuts(model, args.nuts_draws, args.nuts_tune, seed=args.seed)
        rows.append(("PyMC NUTS, full data", 0.0, seconds, min_ess(ref), ref))
    if not args.skip_numpyro:
        try:
            np_idata, np_seconds = run_numpyro(X, y, args.m, step.proxy.center, args.draws, args.tune,
                                               seed=args.seed)
            rows.append(("NumPyro HMCECS (same m, G)", 0.0, np_seconds, min_ess(np_idata), np_idata))
        except ImportError as err:
            print(f"(NumPyro not installed: {err})")
    print("\n| sampler | draws | set-up s | sampling s | min ESS | ESS/s |\n|---|---|---|---|---|---|")
    ours = None
    for label, su, sa, e, idata_ in rows:
        n_draws = idata_.posterior.sizes["draw"]
        rate = e / (su + sa)
        ours = rate if ours is None else ours
        print(f"| {label} | {n_draws} | {su:.1f} | {sa:.1f} | {e:.0f} | {rate:.3g} |")
    for label, su, sa, e, _ in rows[1:]:
        print(f"HMCECS ESS/s ÷ {label}: {ours / (e / (su + sa)):.1f}x")
    if ref is not None:
        print("agreement with full-data NUTS:", pms.compare(idata, ref, n_rows=X.shape[0]).summary())
    print(
        f"HMCECS: m = {step.subsample_size}, mean σ̂² = {float(idata.sample_stats['loglik_var'].mean()):.3g}, "
        f"mean subsample acceptance = {float(idata.sample_stats['subsample_accept'].mean()):.3f}"
    )


def time_iterations(step, tune=200, iterations=500, seed=1):
    """Seconds per HMC-ECS iteration and per potential evaluation, timing the step itself.

    pm.sample adds a one-off O(N) cost when it builds its result (it copies the N-row constant
    and observed data into it), so the step is driven directly here.
    """
    step.setup_chain(np.random.default_rng(seed), tune, iterations)  # what pm.sample calls before a chain
    q = DictToArrayBijection.map({v.name: val for v, val in zip(step.vars, [step.proxy.center])})
    for _ in range(tune):
        q, _ = step.astep(q)
    step.stop_tuning()
    evaluations = 0
    start = time.perf_counter()
    for _ in range(iterations):
        q, (stats,) = step.astep(q)
        evaluations += stats["n_loglik_evals"] / step.subsample_size
    seconds = time.perf_counter() - start
    return seconds / iterations, seconds / evaluations, evaluations / iterations


def scaling(args):
    print(f"\n## time per HMC-ECS iteration with m = {args.m} fixed, d = 10 "
          "(after set-up and 200 tuning steps)")
    print("| N | set-up s | ms per iteration | potential evaluations per iteration | µs per evaluation |")
    print("|---|---|---|---|---|")
    per_iter, per_eval = {}, {}
    for n in (10**5, 10**6, 10**7):
        X, y = logistic_data(n, 10, seed=3)
        with logistic_model(X, y):
            start = time.perf_counter()
            step = pms.HMCECS(subsample_size=args.m, num_blocks=100)
            setup = time.perf_counter() - start
        per_iter[n], per_eval[n], evals = time_iterations(step)
        print(f"| {n:.0e} | {setup:.1f} | {1e3 * per_iter[n]:.2f} | {evals:.1f} | {1e6 * per_eval[n]:.0f} |")
        del X, y, step
    print(f"ratio 1e7 / 1e5 per iteration (goal ≤ 1.25): {per_iter[10**7] / per_iter[10**5]:.2f}; "
          f"per evaluation: {per_eval[10**7] / per_eval[10**5]:.2f}")


#: HMCECS's inner samplers timed per iteration: NUTS in Numba (the default: on this closed-form
#: logistic regression the whole iteration in one call, kernels/eta_nuts.py), PyMC's NUTS, PyMC's
#: HamiltonianMC, and HMC's whole trajectory in one Numba call
INNER_SAMPLERS = {
    "NUTS, in Numba (default)": dict(),
    "NUTS, PyMC's (compiled=False)": dict(compiled=False),
    "HMC, PyMC's HamiltonianMC": dict(inner="hmc"),
    "HMC, compiled=True": dict(inner="hmc", compiled=True),
}


def iteration_in_pm_sample(args, n_rows=200_000, draws=1000):
    """Seconds per HMC-ECS iteration inside ``pm.sample`` (the goals: ≤ 0.3 ms at d = 31, ≤ 0.1 ms at
    d = 4, m = 1000), X and y as pm.Data, for each of :data:`INNER_SAMPLERS`
    (:func:`seconds_per_draw`: after a short run that pays the one-off compilations, the
    draws of three runs timed one by one, everything PyMC does per draw included). ESS per 1000 draws
    is the smallest bulk ESS of the last run, scaled: with the time per iteration it gives ESS per
    second of sampling.
    """
    print(f"\n## one HMC-ECS iteration inside pm.sample, N = {n_rows}, m = {args.m}, 100 blocks")
    print("| d | inner sampler | ms per iteration | potential evaluations per iteration | µs per evaluation "
          "| min ESS per 1000 draws | ESS per s of sampling |")
    print("|---|---|---|---|---|---|---|")
    for d in (31, 4):
        X, y = logistic_data(n_rows, d, seed=3)
        with logistic_model(X, y):
            for label, kwargs in INNER_SAMPLERS.items():
                step = pms.HMCECS(subsample_size=args.m, num_blocks=100, **kwargs)
                # the first run pays the one-off compilations: PyMC's, and Numba's of ArviZ's ESS,
                # which the run checks call first at 100 draws after warm-up (0.25 s; when a 10-draw
                # first run left it to the `draws` run, the difference came out 0.12 ms too low at d = 4)
                per_iter, idata = seconds_per_draw(step, draws, first=210)
                evals = float(idata.sample_stats["n_loglik_evals"].mean()) / args.m
                ess = 1000 * min_ess(idata) / idata.posterior.sizes["draw"]
                print(f"| {d} | {label} | {1e3 * per_iter:.3f} | {evals:.1f} | "
                      f"{1e6 * per_iter / evals:.0f} | "
                      f"{ess:.0f} | {ess / 1000 / per_iter:.3g} |")
            floor, leapfrogs = nuts_bookkeeping(step, draws)
            print(f"| {d} | PyMC's NUTS alone on a free Gaussian potential | {1e3 * floor:.3f} | "
                  f"({leapfrogs:.1f} leapfrog steps) | | | |")


class _GaussianPotential(PotentialForPyMC):
    """The Laplace approximation's log density in NumPy, in the protocol PyMC's integrator calls
    (as HMCECS's potential): what is left of an iteration when the potential costs ~1 µs."""

    dtype = "float64"

    def __init__(self, mean, precision):
        self.mean, self.precision = mean, precision

    def logp_dlogp(self, q):
        grad = -self.precision @ (q - self.mean)
        return np.asarray(0.5 * (q - self.mean) @ grad), grad


def nuts_bookkeeping(step, draws):
    """Marginal seconds per iteration, and leapfrog steps, of PyMC's NUTS with HMCECS's dense
    Laplace metric on a free Gaussian potential of the same covariance: the part of an HMC-ECS
    iteration that is PyMC's, whatever the potential costs."""
    precision = step.target.laplace_precision()
    cov = np.linalg.inv(precision)
    nuts = pm.NUTS(logp_dlogp_func=_GaussianPotential(step.proxy.center, precision), scaling=cov,
                   is_cov=True)
    per_iter, idata = seconds_per_draw(nuts, draws, first=10)
    return per_iter, float(idata.sample_stats["n_steps"].mean())


def seconds_per_draw(step, draws, first, runs=3):
    """(seconds per draw, the last run): a run of ``first`` draws that pays the one-off costs, then
    ``runs`` runs of ``draws`` draws after the same 500 warm-up, each timed draw by draw with
    ``pm.sample``'s callback: the mean over a run's draws after warm-up of the wall time between two
    callbacks is the cost of a draw, everything PyMC does per draw and the run checks included, its
    start-up and the building of its result not. The median over the runs (the machine's speed
    drifts: a difference of the totals of two runs moved by up to 0.1 ms a draw)."""
    tune = 500

    def per_draw():
        stamps = []
        idata = pm.sample(step=step, draws=draws, tune=tune, chains=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False,
                          callback=lambda **_: stamps.append(time.perf_counter()))
        return float(np.mean(np.diff(stamps[tune:]))), idata

    pm.sample(step=step, draws=first, tune=tune, chains=1, random_seed=1, progressbar=False,
              compute_convergence_checks=False)
    measured = [per_draw() for _ in range(runs)]
    return float(np.median([m[0] for m in measured])), measured[-1][1]


def main(args):
    if args.only_scaling:
        return scaling(args)
    if args.only_iteration:
        return iteration_in_pm_sample(args)
    print(
        f"machine: {platform.machine()}, {platform.python_version()}; m = {args.m}, G = 100, "
        f"HMCECS {args.tune}+{args.draws}, NUTS {args.nuts_tune}+{args.nuts_draws}, 1 chain each"
    )
    X, y = logistic_data(args.rows, args.features)
    compare_on("synthetic logistic regression", X, y, args)
    del X, y
    if (DATA / "cod-rna").exists():
        data = pms.datasets.load_cod_rna(DATA / "cod-rna", part="all", standardize=True)
        X = np.column_stack([np.ones(data.X.shape[0]), data.X])
        compare_on("cod-rna (train + test), intercept + 8 standardised features", X, data.y, args)
    else:
        print("cod-rna skipped: ../shared/data/cod-rna is absent")
    if not args.skip_scaling:
        scaling(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=30)
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--nuts-draws", type=int, default=200)
    parser.add_argument("--nuts-tune", type=int, default=200)
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--skip-numpyro", action="store_true")
    parser.add_argument("--only-scaling", action="store_true")
    parser.add_argument("--only-iteration", action="store_true",
                        help="per iteration inside pm.sample, d = 31 and 4")
    parser.add_argument("--skip-nuts", action="store_true")
    parser.add_argument("--python-nuts", action="store_true",
                        help="HMCECS(compiled=False): PyMC's NUTS instead of the tree in Numba")
    parser.add_argument("--seed", type=int, default=1, help="sampling seed of every sampler (data fixed)")
    main(parser.parse_args())
