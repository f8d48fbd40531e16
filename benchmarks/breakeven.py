"""Break-even N (issues 10 and 13): from which N HMCECS beats full-data NUTS in ESS/s, set-up included.

For each zoo model (tests/zoo.py, X and y as pm.Data) and each N, measured side by side in one
process on a warm PyTensor cache:
- full-data NUTS: ``pm.sample`` (1 chain), wall-clock seconds of the whole call (compilation,
  initialisation and sampling);
- HMCECS with m = 1000 (the default) and with ``subsample_size="auto"``: the step's
  construction (centre, proxy sums, compilation) plus ``pm.sample``.
ESS/s = min over parameters of bulk ESS / those seconds. The last column is the best HMCECS
ESS/s over NUTS's; break-even is the first N where it exceeds 1.

Usage: python benchmarks/breakeven.py [--models logistic poisson_offset] [--rows 10000 30000 ...]
       [--draws 500]
"""

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from zoo import build  # noqa: E402

import pymc_subsample as pms  # noqa: E402

SAMPLE = dict(chains=1, progressbar=False, compute_convergence_checks=False)


def min_ess(idata):
    ess = az.ess(idata, method="bulk")
    return float(min(np.min(ess[v].values) for v in ess.data_vars))


def max_shift(idata, reference):
    """Largest |Δmean| over parameters, in the reference's posterior sds (agreement)."""
    a, b = idata.posterior, reference.posterior
    return float(max(np.max(np.abs(a[v].mean(("chain", "draw")) - b[v].mean(("chain", "draw")))
                            / b[v].std(("chain", "draw"))) for v in b.data_vars))


def nuts(model, draws):
    with model:
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=draws, random_seed=1, **SAMPLE)
    return min_ess(idata), time.perf_counter() - t, idata


def hmcecs(model, draws, subsample_size):
    with model:
        t = time.perf_counter()
        step = pms.HMCECS(subsample_size=subsample_size, rng=0)
        idata = pm.sample(step=step, draws=draws, tune=draws, random_seed=2, **SAMPLE)
    return min_ess(idata), time.perf_counter() - t, step.subsample_size, idata


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["logistic", "poisson_offset"])
    parser.add_argument("--rows", nargs="+", type=int, default=[10_000, 30_000, 100_000, 300_000])
    parser.add_argument("--draws", type=int, default=500)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"1 chain, tune = draws = {args.draws}; warm cache (each model built once first)")
    print("\n| model | N | NUTS ESS / s | HMCECS m=1000 ESS / s [max |Δmean|/sd] | "
          "HMCECS auto (m) ESS / s [max |Δmean|/sd] | best HMCECS / NUTS ESS/s |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        hmcecs(build(name, 5_000), 50, 1000)  # warm the compilation cache for this model's graphs
        for n in args.rows:
            model = build(name, n)
            ess_n, sec_n, ref = nuts(model, args.draws)
            ess_f, sec_f, _, fixed = hmcecs(model, args.draws, min(1000, n))
            ess_a, sec_a, m_auto, auto = hmcecs(model, args.draws, "auto")
            best = max(ess_f / sec_f, ess_a / sec_a)
            print(f"| {name} | {n:,} | {ess_n:.0f} / {sec_n:.1f} s = {ess_n / sec_n:.1f} | "
                  f"{ess_f:.0f} / {sec_f:.1f} s = {ess_f / sec_f:.1f} [{max_shift(fixed, ref):.2f}] | "
                  f"({m_auto}) {ess_a:.0f} / {sec_a:.1f} s = {ess_a / sec_a:.1f} "
                  f"[{max_shift(auto, ref):.2f}] | {best / (ess_n / sec_n):.2f} |", flush=True)


if __name__ == "__main__":
    main()
