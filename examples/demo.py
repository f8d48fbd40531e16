"""Demo: HMC-ECS against full-data NUTS on a synthetic logistic regression.

Runs on any machine (no data files needed) and prints the comparison that ``pms.compare``
makes against two full-data references: PyMC's own NUTS (``nuts_sampler="pymc"``) and, when
``import nutpie`` works, nutpie (``nuts_sampler="nutpie"``). Each report leads with cost
(seconds with set-up, ESS per second and the ratio against the reference, whose compilation
counts too), then agreement of means and sds. Set N with ``--rows``.

Timing: wall time is measured around each ``pm.sample`` call. Where the sampler recorded its
own sampling time (the ``sampling_time`` attribute), wall time minus that is the run's set-up
(compilation, initialisation, conversion of the trace); otherwise each side is reported as wall
time including set-up, and the output says so.
"""

import argparse
import time

import numpy as np
import pymc as pm
from _common import compare_timed, sample_timed

import pymc_subsample as pms


def nutpie_missing():
    """None when nutpie imports, else why it does not."""
    try:
        import nutpie  # noqa: F401
    except ImportError as err:
        return str(err)
    return None


def main(n_rows=50_000, n_features=4, draws=500, tune=500, chains=2, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features))
    beta_true = rng.normal(size=n_features)
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(X @ beta_true)))).astype(float)
    sample_kwargs = dict(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                         progressbar=False, compute_convergence_checks=False)
    references = {"PyMC NUTS": "pymc", "nutpie": "nutpie"}
    skipped = nutpie_missing()
    if skipped is not None:
        del references["nutpie"]
    with pm.Model(coords={"feature": [f"x{j}" for j in range(n_features)]}):
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y)

        start = time.perf_counter()
        step = pms.HMCECS(subsample_size=1000, num_blocks=100)
        build = time.perf_counter() - start
        idata, wall = sample_timed(step=step, **sample_kwargs)
        runs = {name: sample_timed(nuts_sampler=sampler, **sample_kwargs)
                for name, sampler in references.items()}

    header = (f"HMC-ECS (m = {step.subsample_size}, G = {step.num_blocks}, step set-up {build:.1f} s) "
              f"against full-data NUTS, N = {n_rows}, d = {n_features}, {chains} x {draws} draws")
    ratios = {}
    for name, (reference, reference_wall) in runs.items():
        result, how = compare_timed(idata, build, wall, reference, reference_wall, label="HMC-ECS",
                                    n_rows=n_rows)
        print(f"\n{header}\nreference: {name}; {how}")
        print(repr(result))
        ratios[name] = result.table["ess_per_second"].min() / result.table["ref_ess_per_second"].min()
    print("\nmin ESS/s of HMC-ECS over min ESS/s of the reference (set-up included):")
    for name, ratio in ratios.items():
        print(f"  {name}: {ratio:.3g}")
    if skipped is not None:
        print(f"  nutpie: skipped (import nutpie failed: {skipped})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--draws", type=int, default=500)
    args = parser.parse_args()
    main(n_rows=args.rows, draws=args.draws, tune=args.draws)
