"""HMCECS's inner mass matrix: the fixed Laplace precision against PyMC's dense adaptation started
from the Laplace covariance (``mass_matrix="laplace"`` / ``"laplace_adapt"``), on zoo models.

    python benchmarks/mass_matrix.py [--models ...] [--rows 20000] [--seeds 6 7]

Prints, per model and seed, the seconds of ``pm.sample`` (1000 tuning + 1000 draws, one chain), the
minimum bulk ESS over all free variables, the mean tree depth, and the ratio of ESS per second.
``mass_matrix="auto"`` (the default) takes the adaptation where the rows are affine in a non-linear
row-free φ(θ) only; this script is the measurement behind that rule.
"""

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import pymc as pm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from zoo import build  # noqa: E402

import pymc_subsample as pms  # noqa: E402

warnings.filterwarnings("ignore")


def run(model, names, mass_matrix, seed):
    with model:
        step = pms.HMCECS(rng=seed, mass_matrix=mass_matrix)
        t = time.perf_counter()
        idata = pm.sample(step=step, draws=1000, tune=1000, chains=1, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
        seconds = time.perf_counter() - t
    ess_by_var = az.ess(idata, var_names=names, method="bulk")  # the posterior group, one array per variable
    ess = min(float(ess_by_var[name].min()) for name in names)
    return seconds, ess, float(idata.sample_stats["tree_depth"].mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=["hierarchical_noncentred", "logistic",
                                                          "hierarchical_centred", "student_t"])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--seeds", nargs="*", type=int, default=[6, 7])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"N = {args.rows}, m = HMCECS default, 1000 + 1000 draws")
    print("| model | seed | fixed Laplace: s, min ESS, depth | Laplace-started dense adaptation | "
          "ESS/s ratio |")
    print("|---|---|---|---|---|")
    for name in args.models:
        model = build(name, args.rows)
        names = [rv.name for rv in model.free_RVs]
        for seed in args.seeds:
            fixed = run(model, names, "laplace", seed)
            adapted = run(model, names, "laplace_adapt", seed)
            ratio = (adapted[1] / adapted[0]) / (fixed[1] / fixed[0])
            print(f"| {name} | {seed} | {fixed[0]:.1f} s, {fixed[1]:.0f}, {fixed[2]:.1f} | "
                  f"{adapted[0]:.1f} s, {adapted[1]:.0f}, {adapted[2]:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
