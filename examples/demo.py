"""Demo: HMC-ECS against full-data NUTS on a synthetic logistic regression.

Runs on any machine (no data files needed) and prints the comparison that
``pms.compare`` makes: cost first (seconds with set-up, ESS per second and the ratio against
NUTS, whose compilation counts too), then agreement of means and sds. Set N with ``--rows``.
"""

import argparse
import time

import numpy as np
import pymc as pm

import pymc_subsample as pms


def main(n_rows=50_000, n_features=4, draws=500, tune=500, chains=2, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features))
    beta_true = rng.normal(size=n_features)
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(X @ beta_true)))).astype(float)
    with pm.Model(coords={"feature": [f"x{j}" for j in range(n_features)]}):
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y)

        start = time.perf_counter()
        step = pms.HMCECS(subsample_size=1000, num_blocks=100)
        setup = time.perf_counter() - start
        idata = pm.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        start = time.perf_counter()
        reference = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        # NUTS's own set-up (compiling the full-data gradient, initialising) counts too
        reference_setup = time.perf_counter() - start - reference.sample_stats.attrs["sampling_time"]
    result = pms.compare(idata, reference, n_rows=n_rows, setup_seconds=setup,
                         reference_setup_seconds=reference_setup)
    print(
        f"\nHMC-ECS (m = {step.subsample_size}, G = {step.num_blocks}, set-up {setup:.1f} s) "
        f"against full-data NUTS, N = {n_rows}, d = {n_features}:"
    )
    print(repr(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--draws", type=int, default=500)
    args = parser.parse_args()
    main(n_rows=args.rows, draws=args.draws, tune=args.draws)
