"""Every step method with no arguments against full-data NUTS on the zoo GLMs.

For each model (tests/zoo.py: X and y as pm.Data) at N rows: full-data NUTS (1 chain, 1000 + 1000),
then ``pm.sample(step=pms.<Method>(), tune=T, draws=D)`` for each method with its defaults. Prints,
per method and model: seconds (set-up, sampling), min ESS, max |Δmean|/sd_NUTS, max MCSE-scaled z,
sd ratio range, whether it agrees (ESS ≥ 100, z < 4.5, sd within 25%) and the warnings it gave.

Usage: python benchmarks/defaults.py [--rows 100000] [--models linear poisson_offset logistic]
       [--methods SGLD SGHMC SGFS SubsampleMH ISS HMCECS] [--draws 1000]
"""

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path

import pymc as pm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from zoo import agreement, agrees, build, worst_of  # noqa: E402

import pymc_subsample as pms  # noqa: E402

SAMPLE = dict(chains=1, progressbar=False, compute_convergence_checks=False)


def ours(record):
    return sorted({str(w.message).split(":")[0] + ": " + str(w.message).split(":", 1)[-1][:70].strip()
                   for w in record if issubclass(w.category, UserWarning) and "pymc_subsample" in w.filename})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--models", nargs="+", default=["linear", "poisson_offset", "logistic"])
    parser.add_argument("--methods", nargs="+", default=["SGLD", "SGHMC", "SGFS", "SubsampleMH", "ISS"])
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args()
    cpu = platform.processor() or platform.machine()
    print(f"N = {args.rows:,}, 1 chain, tune = draws = {args.draws}; {cpu}")
    print(f"{'model':15s} {'method':12s} {'setup s':>8s} {'sample s':>9s} {'min ESS':>8s} {'|Δ|/sd':>7s} "
          f"{'z':>6s} {'sd ratio':>12s} agrees  warnings")
    for name in args.models:
        model = build(name, args.rows)
        free = [rv.name for rv in model.free_RVs]
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            ref = pm.sample(draws=1000, tune=1000, random_seed=1, **SAMPLE)
            print(f"{name:15s} {'NUTS':12s} {'':8s} {time.perf_counter() - t:9.1f}", flush=True)
        for method in args.methods:
            with model, warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                t = time.perf_counter()
                step = getattr(pms, method)()
                setup = time.perf_counter() - t
                t = time.perf_counter()
                idata = pm.sample(step=step, draws=args.draws, tune=args.draws, random_seed=2, **SAMPLE)
                sample = time.perf_counter() - t
            res = agreement(idata, ref, free)
            worst = worst_of(res)
            print(f"{name:15s} {method:12s} {setup:8.1f} {sample:9.1f} {worst['ess']:8.0f} "
                  f"{worst['shift']:7.3f} {worst['z']:6.2f} "
                  f"{worst['sd_min']:5.2f}-{worst['sd_max']:5.2f}  {'yes' if agrees(res) else 'NO ':5s}  "
                  f"{'; '.join(ours(record)) or '-'}", flush=True)


if __name__ == "__main__":
    main()
