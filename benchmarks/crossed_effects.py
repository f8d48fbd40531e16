"""Crossed non-centred group effects: ESS/s of ``pms.HMCECS()`` against nutpie, set-up included.

The model is :func:`zoo.crossed_effects` (what Bambi builds for ``y ~ x1 + x2 + (1|a) + (1|b)``:
16 and 100 levels with Zipf-distributed sizes, X, y and both indices as ``pm.Data``, d = 121) at
N rows. Side by side in one process, one chain each with PyMC's default 1000 + 1000 iterations:
nutpie on the model as written (full data at every gradient; ``--adaptation``, its mass matrix:
with the default diagonal one the intercept and the group effects, whose sum the rows pin down,
had a bulk ESS of 3-18), then ``pms.HMCECS()`` with its defaults. Times are wall times from the
call (nutpie's compilation, HMCECS's set-up) to the last draw, with a warm PyTensor cache (a first
run of this script fills it). ESS is the smallest bulk ESS over every parameter and group effect;
agreement is the max MCSE-scaled |Δmean| (z) and the range of sd ratios over the same, against
nutpie's draws.

Usage: python benchmarks/crossed_effects.py [--rows 100000 1000000] [--adaptation low_rank|diag]
"""

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
from zoo import agreement, crossed_effects, worst_of  # noqa: E402

import pymc_subsample as pms  # noqa: E402

VARS = ["Intercept", "beta", "sigma_a", "sigma_b", "effect_a", "effect_b"]


def min_ess(idata):
    ess = az.ess(idata, var_names=VARS)
    return min(float(np.min(ess[v].values)) for v in VARS)


def run(n_rows, sampler, adaptation="low_rank"):
    model = crossed_effects(n_rows)
    warnings.filterwarnings("ignore")
    with model:
        start = time.perf_counter()
        if sampler == "nutpie":
            idata = pm.sample(chains=1, random_seed=1, nuts_sampler="nutpie", progressbar=False,
                              compute_convergence_checks=False, nuts={"adaptation": adaptation})
            info = {}
        else:
            step = pms.HMCECS(rng=0, progressbar=False)
            idata = pm.sample(step=step, chains=1, random_seed=1, progressbar=False,
                              compute_convergence_checks=False)
            info = {"m": step.subsample_size, "exact": step.exact_rows.size, "passes": step.tall.full_passes,
                    "depth": float(idata.sample_stats["tree_depth"].mean()),
                    "sigma2": float(idata.sample_stats["loglik_var"].mean())}
        seconds = time.perf_counter() - start
    return idata, seconds, info


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--adaptation", default="low_rank", choices=["low_rank", "diag"])
    args = parser.parse_args()
    print(f"{datetime.date.today()}; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, PyMC {pm.__version__}, PyTensor {pytensor.__version__}, "
          f"ArviZ {az.__version__}; 1 chain, 1000 + 1000 iterations each, warm cache; nutpie's "
          f"adaptation={args.adaptation!r}")
    print("\n| N | nutpie s / min ESS | HMCECS s / min ESS | ESS/s HMCECS ÷ nutpie | m + exact rows | "
          "set-up passes | mean tree depth | mean σ̂² | max z | sd ratios |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.rows:
        ref, ref_s, _ = run(n, "nutpie", args.adaptation)
        ours, ours_s, info = run(n, "hmcecs")
        ess_ref, ess = min_ess(ref), min_ess(ours)
        worst = worst_of(agreement(ours, ref, VARS))
        print(f"| {n:,} | {ref_s:.0f} / {ess_ref:.0f} | {ours_s:.0f} / {ess:.0f} | "
              f"{(ess / ours_s) / (ess_ref / ref_s):.1f} | {info['m']} + {info['exact']} | "
              f"{info['passes']} | {info['depth']:.1f} | {info['sigma2']:.2f} | {worst['z']:.2f} | "
              f"{worst['sd_min']:.2f}-{worst['sd_max']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
