"""PyTensor's Numba and C backends side by side for HMCECS's functions.

Per zoo model (tests/zoo.py, X and y as pm.Data) at N rows, in one process for each backend
(``compile_kwargs={"mode": "NUMBA"}`` and ``{"mode": "C"}``, PyTensor's CVM, as PyMC's
``backend="c"``): the set-up's first and second construction of ``pms.HMCECS`` (the second
with every function in PyTensor's caches), and ms per estimate, one call of the subsampled
estimator's value and gradient at the default m (what the integrator calls once per leapfrog
step), best of 200. The caches are whatever this machine holds: run twice for warm numbers.

Usage: python benchmarks/backends.py [--rows 100000] [--models logistic linear ...]
"""

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1] / "tests")
HERE = str(Path(__file__).resolve().parent)

ONE = """
import sys, time, warnings
warnings.filterwarnings("ignore")
sys.path[:0] = [{tests!r}, {here!r}]
from estimator import best_time
from zoo import build
import pymc as pm
import pymc_subsample as pms
with build({name!r}, {rows}):
    t = time.perf_counter()
    pms.HMCECS(rng=0, compile_kwargs={{"mode": {mode!r}}})
    first = time.perf_counter() - t
    t = time.perf_counter()
    step = pms.HMCECS(rng=0, compile_kwargs={{"mode": {mode!r}}})
    second = time.perf_counter() - t
    # one draw: the chain draws its subsample, on which the estimate is timed
    pm.sample(step=step, draws=1, tune=0, chains=1, random_seed=0, progressbar=False,
              compute_convergence_checks=False)
theta = step.proxy.center + 1e-3
estimate = best_time(lambda: step.estimate(theta), 200)
print(first, second, estimate, step.subsample_size)
"""


def run(name, rows, mode):
    code = ONE.format(tests=TESTS, here=HERE, name=name, rows=rows, mode=mode)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second, estimate, m = out.stdout.split()[-4:]
    return float(first), float(second), float(estimate), int(m)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--models", nargs="*", default=["logistic", "linear", "hierarchical_noncentred",
                                                        "crossed_effects"])
    args = parser.parse_args()
    import pymc as pm
    import pytensor

    print(f"{datetime.date.today()}; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, PyMC {pm.__version__}, PyTensor {pytensor.__version__}; "
          f"N = {args.rows}, HMCECS defaults, X and y as pm.Data")
    print("\n| model | m | set-up first / second, Numba (s) | set-up first / second, C (s) | "
          "ms per estimate, Numba / C | Numba ÷ C |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        numba, c = run(name, args.rows, "NUMBA"), run(name, args.rows, "C")
        print(f"| {name} | {numba[3]} | {numba[0]:.1f} / {numba[1]:.1f} | {c[0]:.1f} / {c[1]:.1f} | "
              f"{numba[2] * 1e3:.3f} / {c[2] * 1e3:.3f} | {numba[2] / c[2]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
