"""How a warm set-up grows with N (issue 10's goal "warm set-up ≤ 15 full-data gradient passes").

Per zoo model (tests/zoo.py, X and y as pm.Data), at each N: constructing ``pms.HMCECS()`` again
in the process, as a multiple of one full-data gradient of PyMC's own at N (``logp_dlogp_function``
at HMCECS's centre), in two ways: with the compiled functions the process keeps in memory (a second
set-up in one session: a notebook cell run again, a loop over data sets), and with that memory
cleared, so that each function is loaded from the disk cache and linked again, as in a new process
(less the imports, and the reading of PyTensor's module index, which ``zoo.py``'s new-process column
includes); each the median of three constructions. Then the part that does not grow with N (the
same constructions on 2·10⁴ rows, whose passes cost 2% of a 10⁶-row one) and the rest, the set-up's
work on the rows, in the same unit; and how many full passes over the rows the set-up made
(``TallModel.full_passes``: the centre's, the proxy's).

The row part in passes is what the set-up costs as N grows; the fixed part is set against PyMC's
own warm construction of NUTS's function in ``setup_fixed_part.py``.

Usage: python benchmarks/setup_scaling.py [--rows 1000000 10000000] [--models logistic ...]
"""

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from estimator import best_time  # noqa: E402
from zoo import ZOO, build  # noqa: E402

import pymc_subsample as pms  # noqa: E402
from pymc_subsample.model import function_cache  # noqa: E402

warnings.filterwarnings("ignore")
SMALL = 20_000


def warm_setup(model, repeats=3):
    """(median seconds of constructing HMCECS on ``model`` again with the process's functions in
    memory, the same with them loaded from the disk cache, the last step).
    """
    with model:
        pms.HMCECS(rng=0, progressbar=False)
        in_memory, from_disk = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            step = pms.HMCECS(rng=0, progressbar=False)
            in_memory.append(time.perf_counter() - start)
            function_cache._in_memory_functions.clear()  # as a new process finds them
            start = time.perf_counter()
            step = pms.HMCECS(rng=0, progressbar=False)
            from_disk.append(time.perf_counter() - start)
        return statistics.median(in_memory), statistics.median(from_disk), step


def pymc_gradient_seconds(model, center):
    with model:
        full = model.logp_dlogp_function(ravel_inputs=True)
    full.set_extra_values({})
    return best_time(lambda: full(center), 5)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--models", nargs="*", default=[m for m in ZOO if m != "mvnormal_lkj"])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"HMCECS defaults, X and y as pm.Data")
    print("\n| model | N | PyMC's gradient (ms) | warm set-up (s) | in passes | from disk (s) | in passes | "
          "fixed part (s) | from disk | row part in passes | full passes made |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        fixed, fixed_disk, _ = warm_setup(build(name, SMALL))
        for n_rows in args.rows:
            model = build(name, n_rows)
            seconds, disk, step = warm_setup(model)
            pass_s = pymc_gradient_seconds(model, step.proxy.center)
            print(f"| {name} | {n_rows:.0e} | {pass_s * 1e3:.1f} | {seconds:.2f} | {seconds / pass_s:.1f} | "
                  f"{disk:.2f} | {disk / pass_s:.1f} | {fixed:.2f} | {fixed_disk:.2f} | "
                  f"{(seconds - fixed) / pass_s:.1f} | {step.tall.full_passes} |", flush=True)
            del model, step
            gc.collect()

if __name__ == "__main__":
    main()
