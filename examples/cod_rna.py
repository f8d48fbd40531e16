"""Logistic regression on cod-rna with HMC-ECS and full-data NUTS, and their comparison.

Uses ../shared/data/cod-rna (LIBSVM format) when present, else a synthetic data set of the
same shape. The reference is PyMC's own NUTS (``nuts_sampler="pymc"``). Prints pms.compare: cost
(seconds with set-up, ESS/s, relative CT) and agreement (|Δmean|/sd, sd ratio); each run's set-up
is wall time around ``pm.sample`` minus the sampling time it recorded, plus, for HMC-ECS,
building the step.
"""

import time
from pathlib import Path

import numpy as np
import pymc as pm
from _common import compare_timed, sample_timed

import pymc_subsample as pms

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cod-rna"


def load():
    if DATA.exists():
        data = pms.datasets.load_cod_rna(DATA, part="all", standardize=True)
        names = ["intercept", *data.feature_names]
        return np.column_stack([np.ones(data.X.shape[0]), data.X]), data.y, names, "cod-rna"
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(331_152), rng.standard_normal((331_152, 8))])
    y = (rng.random(X.shape[0]) < 1 / (1 + np.exp(-X @ rng.normal(size=9)))).astype(float)
    return X, y, [f"x{j}" for j in range(9)], "synthetic (cod-rna absent)"


def main():
    X, y, names, label = load()
    with pm.Model(coords={"feature": names}):
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y)
        t = time.perf_counter()
        step = pms.HMCECS(subsample_size=1000)
        setup = time.perf_counter() - t
        idata, wall = sample_timed(
            step=step, draws=1000, tune=1000, chains=2, cores=1, random_seed=1, progressbar=False
        )
        reference, reference_wall = sample_timed(nuts_sampler="pymc", draws=500, tune=500, chains=2, cores=1,
                                                 random_seed=1, progressbar=False)
    result, how = compare_timed(idata, setup, wall, reference, reference_wall, label="HMC-ECS",
                                n_rows=X.shape[0])
    print(f"\n{label}: N = {X.shape[0]}, d = {X.shape[1]}, HMC-ECS m = {step.subsample_size}, "
          f"reference PyMC NUTS; {how}")
    print(repr(result))


if __name__ == "__main__":
    main()
