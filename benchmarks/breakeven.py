"""Which sampler when: full-data NUTS against HMCECS and the best SG method, by N.

For each zoo model (tests/zoo.py, X and y as pm.Data) and each N, measured side by side in one
process on a warm PyTensor cache:
- full-data NUTS: ``pm.sample`` (1 chain), wall-clock seconds of the whole call (compilation,
  initialisation and sampling);
- HMCECS with its defaults (m = 1000), and with ``--auto`` also ``subsample_size="auto"``: the
  step's construction (centre, proxy sums, compilation) plus ``pm.sample``;
- SGLD() and SGHMC() with their defaults (control-variate gradients, tuned step size), set-up
  included likewise; the better of the two in ESS/s is the "best SG" column.
ESS/s = min over parameters of bulk ESS / those seconds; [·] is the largest |Δmean| against the
NUTS run in NUTS posterior sds. A model's Deterministics over all N rows are left out of every
sampler's trace (``var_names``, the step methods' remedy). Break-even is the first N where a
column's ESS/s exceeds NUTS's.

Above ``--nuts-max-rows`` full-data NUTS is not run (at 10⁷ rows one NUTS draw costs seconds on
2 cores). Its ESS/s there is *estimated* from the largest N where it ran: the same ESS in that
run's seconds times the ratio of one full-data gradient's time at the two N, both gradient times
measured in this run (at such N NUTS's time is its gradients'). Those cells say "est.", and
[·] then compares with the HMCECS run of the same N instead (marked "vs HMCECS").

Usage: python benchmarks/breakeven.py [--models logistic poisson_offset] [--rows 10000 100000 ...]
       [--draws 500] [--nuts-max-rows 1000000] [--auto] [--skip-sg]
"""

import argparse
import os
import platform
import sys
import time
import warnings
from functools import partial
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


def gradient_seconds(model, repeats=5):
    """Seconds of one full-data gradient of log p (PyMC's compiled dlogp), the best of ``repeats``."""
    dlogp = model.compile_dlogp()
    point = model.initial_point()
    dlogp(point)
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        dlogp(point)
        best = min(best, time.perf_counter() - t)
    return best


def traced(model):
    """``pm.sample``'s ``var_names`` for every sampler: without the Deterministics over all N rows
    (PyMC and nutpie evaluate those on every row at every draw, which the step methods warn about with
    this remedy), else None (everything traced).
    """
    rows = model.observed_RVs[0].shape[0].eval()
    over_rows = {d.name for d in model.deterministics if d.ndim and d.shape[0].eval() == rows}
    if not over_rows:
        return None
    kept = [d.name for d in model.deterministics if d.name not in over_rows]
    return [v.name for v in model.free_RVs] + kept


def nuts(model, draws):
    names = traced(model)  # the harness's choice, before the clock (its shape evaluation compiles)
    with model:
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=draws, random_seed=1, var_names=names, **SAMPLE)
    return min_ess(idata), time.perf_counter() - t, idata


def run_step(model, draws, make_step):
    """(min ESS, seconds of construction + pm.sample, step, idata)."""
    names = traced(model)
    with model:
        t = time.perf_counter()
        step = make_step()
        idata = pm.sample(step=step, draws=draws, tune=draws, random_seed=2, var_names=names,
                          **SAMPLE)
    return min_ess(idata), time.perf_counter() - t, step, idata


def cell(ess, sec, shift=None):
    tail = "" if shift is None else f" [{shift:.2f}]"
    return f"{ess:.0f} / {sec:.1f} s = {ess / sec:.1f}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["logistic", "poisson_offset"])
    parser.add_argument("--rows", nargs="+", type=int, default=[10_000, 100_000, 1_000_000, 10_000_000])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--nuts-max-rows", type=int, default=1_000_000)
    parser.add_argument("--auto", action="store_true", help='also HMCECS(subsample_size="auto")')
    parser.add_argument("--skip-sg", action="store_true", help="no SGLD/SGHMC columns (faster)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"1 chain, tune = draws = {args.draws}; warm cache (each model built once first); "
          f"NUTS run up to N = {args.nuts_max_rows:,}")
    auto_head = " HMCECS auto (m) |" if args.auto else ""
    print(f"\n| model | N | NUTS ESS / s = ESS/s | HMCECS (default) |{auto_head} best SG (method) | "
          "HMCECS / NUTS | SG / NUTS |")
    print("|---|---|---|---|" + ("---|" if args.auto else "") + "---|---|---|")
    for name in args.models:
        warm = build(name, 5_000)  # warm the compilation cache for this model's graphs
        sg_methods = () if args.skip_sg else ("SGLD", "SGHMC")
        for make in [lambda: pms.HMCECS(rng=0)] + [partial(getattr(pms, m), rng=0) for m in sg_methods]:
            run_step(warm, 50, make)
        measured = None  # (N, seconds, ESS, gradient seconds) of the largest NUTS run so far
        for n in args.rows:
            model = build(name, n)
            grad_sec = gradient_seconds(model)
            ess_h, sec_h, _, hmc = run_step(model, args.draws, lambda: pms.HMCECS(rng=0))
            if n <= args.nuts_max_rows:
                ess_n, sec_n, ref = nuts(model, args.draws)
                measured = (n, sec_n, ess_n, grad_sec)
                nuts_cell, against = cell(ess_n, sec_n), ref
                shift_h = max_shift(hmc, ref)
            else:
                _, sec_m, ess_n, grad_m = measured
                sec_n = sec_m * grad_sec / grad_m
                nuts_cell = f"est. {ess_n:.0f} / {sec_n:.0f} s = {ess_n / sec_n:.2f}"
                against, shift_h = hmc, None
            row = [name, f"{n:,}", nuts_cell, cell(ess_h, sec_h, shift_h)]
            if args.auto:
                ess_a, sec_a, step_a, auto = run_step(model, args.draws,
                                                      lambda: pms.HMCECS(subsample_size="auto", rng=0))
                row.append(f"({step_a.subsample_size}) " + cell(ess_a, sec_a, max_shift(auto, against)))
            sg = []
            for method in sg_methods:
                ess_s, sec_s, _, sg_idata = run_step(model, args.draws, partial(getattr(pms, method), rng=0))
                sg.append((ess_s / sec_s, method, ess_s, sec_s, max_shift(sg_idata, against)))
            nuts_rate = ess_n / sec_n
            if sg:
                rate, method, ess_s, sec_s, shift_s = max(sg)
                vs = "" if against is not hmc else " vs HMCECS"
                row.append(cell(ess_s, sec_s, shift_s) + f"{vs} ({method})")
                row += [f"{ess_h / sec_h / nuts_rate:.2f}", f"{rate / nuts_rate:.2f}"]
            else:
                row += ["–", f"{ess_h / sec_h / nuts_rate:.2f}", "–"]
            print("| " + " | ".join(row) + " |", flush=True)
        print(f"| {name}: one full-data gradient at N = {measured[0]:,}: {measured[3] * 1e3:.1f} ms; "
              f"at N = {args.rows[-1]:,}: {grad_sec * 1e3:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
