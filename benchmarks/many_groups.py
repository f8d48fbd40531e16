"""Hierarchical models with many groups: the set-up as the number of groups grows.

The zoo's hierarchical models (tests/zoo.py, group index, x and y as pm.Data) with G groups at N
rows: HMCECS's first and warm construction (seconds, and the warm one in passes of PyMC's own full
gradient), beside PyMC's warm ``logp_dlogp_function`` (NUTS's set-up), and one full gradient.
A group effect a[g_k] makes d grow with G while each row reads one group (model/one_hot.py).
``--models`` also takes other ways of writing group effects (``group_form``): in the likelihood,
varying slopes as two vectors or as one matrix, centred or not.

Usage: python benchmarks/many_groups.py [--rows 100000] [--groups 20 200 1000]
       [--models hierarchical_centred hierarchical_noncentred]
       python benchmarks/many_groups.py --groups 200 1000 --models effects_in_likelihood slopes_as_vectors
           slopes_as_vectors_noncentred slopes_as_matrix slopes_as_matrix_noncentred
"""

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import zoo  # noqa: E402
from estimator import best_time  # noqa: E402

import pymc_subsample as pms  # noqa: E402

warnings.filterwarnings("ignore")


def _logistic_rows(rng, n, groups):
    g, x = rng.integers(0, groups, n), rng.normal(size=n)
    eta = rng.normal(0, 0.5, groups)[g] + rng.normal(0.5, 0.3, groups)[g] * x
    return g, x, (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)


def group_form(form):
    """A logistic model with group effects written in one of the ways PyMC users write them:
    ``effects_in_likelihood`` μ + σ z[g] + b x; ``slopes_as_vectors`` a[g] + b[g] x (Bambi's form);
    ``slopes_as_vectors_noncentred`` σ_a z_a[g] + (β + σ_b z_b[g]) x; ``slopes_as_matrix``
    (β[g] · (1, x)).sum(), β (G, 2); ``slopes_as_matrix_noncentred`` the same with β = μ + zσ."""

    def build(n, groups, seed=0):
        g, x, y = _logistic_rows(np.random.default_rng(seed), n, groups)
        with pm.Model(coords={"group": np.arange(groups), "coef": ["intercept", "slope"]}) as model:
            g_, x_ = pm.Data("g", g), pm.Data("x", x)
            design = pm.math.stack([pm.math.ones_like(x_), x_], axis=1)
            if form == "effects_in_likelihood":
                mu, sa, b = pm.Normal("mu", 0, 1), pm.HalfNormal("sa", 1), pm.Normal("b", 0, 1)
                eta = mu + sa * pm.Normal("za", 0, 1, dims="group")[g_] + b * x_
            elif form == "slopes_as_vectors":
                a, b = pm.Normal("a", 0, 1, dims="group"), pm.Normal("b", 0, 1, dims="group")
                eta = a[g_] + b[g_] * x_
            elif form == "slopes_as_vectors_noncentred":
                sa, sb, mb = pm.HalfNormal("sa", 1), pm.HalfNormal("sb", 1), pm.Normal("mb", 0, 1)
                za, zb = pm.Normal("za", 0, 1, dims="group"), pm.Normal("zb", 0, 1, dims="group")
                eta = sa * za[g_] + (mb + sb * zb[g_]) * x_
            elif form == "slopes_as_matrix":
                eta = (pm.Normal("beta", 0, 1, dims=("group", "coef"))[g_] * design).sum(axis=1)
            else:  # slopes_as_matrix_noncentred
                mu, sd = pm.Normal("mu", 0, 1, dims="coef"), pm.HalfNormal("sd", 1, dims="coef")
                beta = pm.Deterministic("beta", mu + pm.Normal("z", 0, 1, dims=("group", "coef")) * sd,
                                        dims=("group", "coef"))
                eta = (beta[g_] * design).sum(axis=1)
            pm.Bernoulli("y", logit_p=eta, observed=pm.Data("y_obs", y))
        return model

    return build


FORMS = ["effects_in_likelihood", "slopes_as_vectors", "slopes_as_vectors_noncentred", "slopes_as_matrix",
         "slopes_as_matrix_noncentred"]


def seconds(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--groups", type=int, nargs="*", default=[20, 200, 1000])
    parser.add_argument("--models", nargs="*", default=["hierarchical_centred", "hierarchical_noncentred"],
                        help=f"zoo models, or these forms of group effects: {', '.join(FORMS)}")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"N = {args.rows}, HMCECS defaults")
    print("\n| model | groups | d | HMCECS first / warm set-up (s) | PyMC's warm logp_dlogp_function (s) | "
          "PyMC's gradient (ms) | HMCECS warm in passes |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        for groups in args.groups:
            build = group_form(name) if name in FORMS else getattr(zoo, name)
            print(measure(build(args.rows, groups=groups), name, groups), flush=True)


def measure(model, name, groups):
    """One table row for ``model``."""
    with model:
        first, _ = seconds(lambda: pms.HMCECS(rng=0, progressbar=False))
        warm, step = seconds(lambda: pms.HMCECS(rng=0, progressbar=False))
        model.logp_dlogp_function(ravel_inputs=True)
        nuts, full = seconds(lambda: model.logp_dlogp_function(ravel_inputs=True))
    full.set_extra_values({})
    pass_s = best_time(lambda: full(step.proxy.center), 5)
    return (f"| {name} | {groups} | {step.tall.ndim} | {first:.1f} / {warm:.2f} | {nuts:.2f} | "
            f"{pass_s * 1e3:.2f} | {warm / pass_s:.0f} |")

if __name__ == "__main__":
    main()
