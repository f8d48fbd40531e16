"""How a warm set-up grows with N (issue 10's goal "warm set-up ≤ 15 full-data gradient passes").

Per zoo model (tests/zoo.py, X and y as pm.Data), at each N: constructing ``pms.HMCECS()`` a second
time in the process (its functions loaded from the disk cache, as ``zoo.py``'s warm column), as a
multiple of one full-data gradient of PyMC's own at N (``logp_dlogp_function`` at HMCECS's centre);
the part that does not grow with N (the same construction on 2·10⁴ rows, whose passes cost 0.2% of a
10⁷-row one) and the rest, the set-up's work on the rows, in the same unit; and how many full passes
over the rows the set-up made (``TallModel.full_passes``: the centre's, the proxy's).

The row part in passes is what the set-up costs as N grows; the fixed part is set against PyMC's
own warm construction of NUTS's function in ``setup_fixed_part.py``.

Usage: python benchmarks/setup_scaling.py [--rows 1000000 10000000] [--models logistic ...]
"""

import argparse
import gc
import os
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from estimator import best_time  # noqa: E402
from zoo import ZOO, build  # noqa: E402

import pymc_subsample as pms  # noqa: E402

warnings.filterwarnings("ignore")
SMALL = 20_000


def warm_setup(model):
    """(seconds of a second construction of HMCECS on ``model``, that step)."""
    with model:
        pms.HMCECS(rng=0, progressbar=False)
        start = time.perf_counter()
        step = pms.HMCECS(rng=0, progressbar=False)
        return time.perf_counter() - start, step


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
    print("\n| model | N | PyMC's gradient (ms) | warm set-up (s) | in passes | fixed part (s) | "
          "row part in passes | full passes made |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        fixed, _ = warm_setup(build(name, SMALL))
        for n_rows in args.rows:
            model = build(name, n_rows)
            seconds, step = warm_setup(model)
            pass_s = pymc_gradient_seconds(model, step.proxy.center)
            print(f"| {name} | {n_rows:.0e} | {pass_s * 1e3:.1f} | {seconds:.2f} | {seconds / pass_s:.1f} | "
                  f"{fixed:.2f} | {(seconds - fixed) / pass_s:.1f} | {step.tall.full_passes} |", flush=True)
            del model, step
            gc.collect()


if __name__ == "__main__":
    main()
