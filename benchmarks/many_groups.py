"""Hierarchical models with many groups (issue 10): the set-up as the number of groups grows.

The zoo's hierarchical models (tests/zoo.py, group index, x and y as pm.Data) with G groups at N
rows: HMCECS's first and warm construction (seconds, and the warm one in passes of PyMC's own full
gradient), beside PyMC's warm ``logp_dlogp_function`` (NUTS's set-up), and one full gradient.
A group effect a[g_k] makes d grow with G while each row reads one group (model/one_hot.py).

Usage: python benchmarks/many_groups.py [--rows 100000] [--groups 20 200 1000]
       [--models hierarchical_centred hierarchical_noncentred]
"""

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import zoo  # noqa: E402
from estimator import best_time  # noqa: E402

import pymc_subsample as pms  # noqa: E402

warnings.filterwarnings("ignore")


def seconds(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--groups", type=int, nargs="*", default=[20, 200, 1000])
    parser.add_argument("--models", nargs="*", default=["hierarchical_centred", "hierarchical_noncentred"])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"N = {args.rows}, HMCECS defaults")
    print("\n| model | groups | d | HMCECS first / warm set-up (s) | PyMC's warm logp_dlogp_function (s) | "
          "PyMC's gradient (ms) | HMCECS warm in passes |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        for groups in args.groups:
            print(measure(getattr(zoo, name)(args.rows, groups=groups), name, groups), flush=True)


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
