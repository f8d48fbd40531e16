"""What ``pm.sample`` costs around any step method, against HMCECS's whole run, per zoo model and N.

For each zoo model (tests/zoo.py, X and y as pm.Data) and each N, measured side by side in one
process on a warm cache, 1 chain of ``--draws`` warm-up and ``--draws`` kept draws:
- the floor: ``pm.sample`` with a step that returns its point unchanged (no set-up, no work per
  draw): PyMC's own initialisation, trace, per-draw loop and conversion to a DataTree, which every
  step method pays;
- HMCECS with its defaults: construction plus ``pm.sample``, and its min bulk ESS;
- with ``--sizes``, also ``HMCECS(subsample_size=m)`` for each m (fixed m, no pilot), which shows
  what a draw costs at each m.
The Deterministics over all N rows are left out of the trace as in ``breakeven.py``.

A step method whose ESS/s must be R times a reference's (``breakeven.py``: nutpie's) has the whole
run's budget ESS / (R · reference ESS/s); where the floor alone exceeds that budget, no step method
inside ``pm.sample`` meets R at these run lengths. ``--reference`` takes nutpie's ESS/s per model
from a run of ``breakeven.py`` (model=ESS/s pairs) and prints each model's budget for R = ``--ratio``.

HMCECS's own time per kept draw is read from its ``perf_counter_diff`` stat (after warm-up, its
iterations run in Numba, up to 64 a call, each draw's share of its call's time plus its stats):
- "step per draw": that time, in µs, and per row and leapfrog step in ns (its ``n_grad_evals``
  stat: m plus the rows computed exactly, times the leapfrog steps);
- "floor + iterations": the floor plus all warm-up and kept draws at that rate, a lower bound of the
  whole run with this kernel whatever its set-up costs (none) and its warm-up (as cheap as a kept
  draw). Where it exceeds the budget, only a kernel faster per row can meet R.

Usage: python benchmarks/sample_floor.py [--models linear ...] [--rows 1000000] [--draws 500]
       [--reference linear=12.7 ...] [--ratio 100] [--sizes 100 1000]
"""

import argparse
import platform
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pymc as pm
from breakeven import SAMPLE, min_ess, traced
from pymc.step_methods.compound import BlockedStep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from zoo import build  # noqa: E402

import pymc_subsample as pms  # noqa: E402


class Unchanged(BlockedStep):
    """A step that returns its point as it is, with no stats: ``pm.sample``'s own cost per draw."""

    stats_dtypes_shapes = {}

    def __init__(self, vars):
        self.vars = vars

    def step(self, point):
        return point, []


def timed_sample(model, draws, make_step):
    """(seconds of make_step() + pm.sample, the DataTree)."""
    names = traced(model)  # before the clock (its shape evaluation compiles)
    with model:
        start = time.perf_counter()
        step = make_step()
        idata = pm.sample(step=step, draws=draws, tune=draws, random_seed=2, var_names=names,
                          **SAMPLE)
    return time.perf_counter() - start, idata


def step_time(idata):
    """(HMCECS's mean seconds per kept draw, the same per row and leapfrog step) from its stats."""
    stats = idata.sample_stats
    seconds = stats["perf_counter_diff"].values
    # n_grad_evals: the rows of an estimate (m and the exact rows) times the leapfrog steps
    return float(seconds.mean()), float(seconds.sum() / stats["n_grad_evals"].values.sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    cheap = ["linear", "hierarchical_centred", "set_data_predictive", "deterministic_potential"]
    parser.add_argument("--models", nargs="+", default=cheap)
    parser.add_argument("--rows", nargs="+", type=int, default=[1_000_000])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--reference", nargs="*", default=[], help="model=ESS/s of the reference sampler")
    parser.add_argument("--ratio", type=float, default=100.0)
    parser.add_argument("--sizes", nargs="*", type=int, default=[], help="also HMCECS(subsample_size=m)")
    args = parser.parse_args()
    reference = {k: float(v) for k, v in (item.split("=") for item in args.reference)}
    print(f"# {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, PyMC {pm.__version__}, "
          f"{platform.machine()}, 1 chain of {args.draws} + {args.draws}, warm cache")
    print(f"| model | N | floor: pm.sample, a step that does nothing (s) | HMCECS set-up + pm.sample (s) | "
          f"HMCECS min ESS | HMCECS step per draw (a row and leapfrog step) | floor + iterations (s) | "
          f"budget at {args.ratio:g}× the reference (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        for n in args.rows:
            model = build(name, n)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # first runs in the process: imports, PyMC's and the package's kernels loaded
                timed_sample(model, 10, lambda m=model: Unchanged(m.value_vars))
                timed_sample(model, 10, pms.HMCECS)
                floor, _ = timed_sample(model, args.draws, lambda m=model: Unchanged(m.value_vars))
                # each HMCECS run on a model of its own: none reads what another's set-up kept
                runs = [("", timed_sample(build(name, n), args.draws, pms.HMCECS))]
                runs += [(f" (m = {m})", timed_sample(build(name, n), args.draws,
                                                      partial(pms.HMCECS, subsample_size=m)))
                         for m in args.sizes]
            for label, (seconds, idata) in runs:
                ess = min_ess(idata)
                budget = ess / (args.ratio * reference[name]) if name in reference else np.nan
                per_draw, per_row = step_time(idata)
                iterations = floor + 2 * args.draws * per_draw
                print(f"| {name}{label} | {n:,} | {floor:.2f} | {seconds:.2f} | {ess:.0f} | "
                      f"{per_draw * 1e6:.0f} µs, {per_row * 1e9:.1f} ns | {iterations:.2f} | {budget:.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
