"""How a warm set-up grows with N (the goal "warm set-up ≤ 15 full-data gradient passes").

Per zoo model (tests/zoo.py, X and y as pm.Data), at each N: constructing ``pms.HMCECS()`` again in
the process, as a multiple of one full-data gradient of PyMC's own at N (``logp_dlogp_function`` at
HMCECS's centre, timed beside each construction: :func:`warm_setup`), in two ways: with the compiled
functions and model analyses the process keeps in memory (a second set-up in one process: a notebook
cell run again, a loop over data sets), and with the kept analyses cleared, so that the model is
analysed and its functions compiled again (PyTensor's Numba cache serving the kernels), as in a new
process (less the imports, which ``zoo.py``'s new-process column includes); each the median of
five constructions. Then the part that does not grow with N (the same
constructions on 2·10⁴ rows, whose passes cost 2% of a 10⁶-row one) and the rest, the set-up's work
on the rows, in passes of the best of five gradients; and how many full passes over the rows the
set-up made (``TallModel.full_passes``: the centre's, the proxy's).

The row part in passes is what the set-up costs as N grows; the fixed part is set against PyMC's own
warm construction of NUTS's function in ``setup_fixed_part.py``.

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
from pymc_subsample.model.kept import forget_kept_analyses  # noqa: E402

warnings.filterwarnings("ignore")
SMALL = 20_000


def warm_setup(model, repeats=5):
    """Constructing HMCECS on ``model`` again, ``repeats`` times each way: (median seconds with the
    process's functions in memory, the same loaded from the disk cache, the medians of each in
    passes of PyMC's full gradient, the last step).

    A pass is timed just before each construction (best of 3 calls at the step's centre), and each
    construction is counted in the passes of its own moment: on a shared machine whose speed
    changes by 2-3x from one minute to the next, a set-up timed at one moment and a pass at another
    gave ratios that moved by as much.
    """
    with model:
        step = pms.HMCECS(rng=0, progressbar=False)
        gradient = pymc_gradient(model, step.proxy.center)
        seconds = {"memory": [], "disk": []}
        passes = {"memory": [], "disk": []}
        for _ in range(repeats):
            for way in ("memory", "disk"):
                if way == "disk":  # as a new process finds them: no analysis nor function in memory
                    forget_kept_analyses()
                pass_s = best_time(gradient, 3)
                start = time.perf_counter()
                step = pms.HMCECS(rng=0, progressbar=False)
                seconds[way].append(time.perf_counter() - start)
                passes[way].append(seconds[way][-1] / pass_s)
    median = statistics.median
    return (median(seconds["memory"]), median(seconds["disk"]), median(passes["memory"]),
            median(passes["disk"]), step, gradient)


def pymc_gradient(model, center):
    """PyMC's full-data log-density and gradient at ``center``, as NUTS evaluates it."""
    with model:
        full = model.logp_dlogp_function(ravel_inputs=True)
    full.set_extra_values({})
    return lambda: full(center)


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
        fixed, fixed_disk, *_ = warm_setup(build(name, SMALL))
        for n_rows in args.rows:
            model = build(name, n_rows)
            seconds, disk, passes, disk_passes, step, gradient = warm_setup(model)
            pass_s = best_time(gradient, 5)
            print(f"| {name} | {n_rows:.0e} | {pass_s * 1e3:.1f} | {seconds:.2f} | {passes:.1f} | "
                  f"{disk:.2f} | {disk_passes:.1f} | {fixed:.2f} | {fixed_disk:.2f} | "
                  f"{(seconds - fixed) / pass_s:.1f} | {step.tall.full_passes} |", flush=True)
            del model, step, gradient
            gc.collect()

if __name__ == "__main__":
    main()
