"""Zoo benchmark: per model, set-up, ms per leapfrog step and one full-data gradient.

For each zoo model (tests/zoo.py, X and y as pm.Data) at N rows, measured side by side in one
process:
- warm set-up: constructing ``pms.HMCECS()`` a second time (compiled functions cached on disk),
  in seconds and as a multiple of one full-data gradient pass, beside PyMC's own warm set-up for
  NUTS (``logp_dlogp_function`` a second time) in the same unit;
- ms per leapfrog step: one call of the subsampled potential at the default subsample size m
  after a 160-draw warm-up, which chooses m again (printed; what PyMC's integrator calls once per
  leapfrog step);
- one full-data gradient: PyMC's own ``logp_dlogp_function`` on all N rows (what full-data
  NUTS pays per leapfrog step), and the ratio.

Then, in a new process on the same (now warm) PyTensor cache, what a user's second run of a script
costs: constructing ``pms.HMCECS()`` against PyMC's ``logp_dlogp_function``, in full-gradient passes
(both rewrite their graphs again in every process; PyTensor's Numba cache serves the kernels).

``--cold`` also measures, each in a subprocess with an empty PyTensor cache (a new
``base_compiledir``, which holds PyTensor's Numba cache too), the time from ``pm.sample`` with
HMCECS to the end of a 1-draw run against the same for PyMC's NUTS and for nutpie.

Usage: python benchmarks/zoo.py [--rows 100000] [--models logistic linear ...] [--cold]
"""

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import pymc as pm  # noqa: E402
from estimator import best_time  # noqa: E402
from zoo import ZOO, build  # noqa: E402

import pymc_subsample as pms  # noqa: E402

warnings.filterwarnings("ignore")


def measure(name, n_rows):
    model = build(name, n_rows)
    with model:
        t = time.perf_counter()
        pms.HMCECS(rng=0)
        first = time.perf_counter() - t
        t = time.perf_counter()
        step = pms.HMCECS(rng=0)
        warm = time.perf_counter() - t
        model.logp_dlogp_function(ravel_inputs=True)  # PyMC's NUTS function, compiled once
        t = time.perf_counter()
        full = model.logp_dlogp_function(ravel_inputs=True)  # and again, warm: NUTS's own set-up
        nuts_warm = time.perf_counter() - t
        full.set_extra_values({})
        x0 = step.proxy.center
        t_full = best_time(lambda: full(x0), 10)
        # the subsample size a chain samples with: the default chooses m again during warm-up
        # (kernels.ecs_tuning.SIZE_RETUNE_AT), so a short warm-up, after which m is final
        pm.sample(step=step, draws=1, tune=160, chains=1, random_seed=0, progressbar=False,
                  compute_convergence_checks=False)
    # one estimate of value and gradient on the chain's last subsample: what a leapfrog step costs
    t_leap = best_time(lambda: step.estimate(x0 + 1e-3), 200)
    return dict(d=step.tall.ndim, first=first, warm=warm, passes=warm / t_full, leap=t_leap, full=t_full,
                m=step.subsample_size, nuts_passes=nuts_warm / t_full)


COLD = """
import time, warnings, sys
warnings.filterwarnings("ignore")
sys.path.insert(0, {tests!r})
from zoo import build
import pymc as pm, pymc_subsample as pms
model = build({name!r}, {rows})
t = time.perf_counter()
with model:
    if {sampler!r} == "hmcecs":
        pm.sample(step=pms.HMCECS(rng=0), draws=1, tune=0, chains=1, progressbar=False,
                  compute_convergence_checks=False)
    else:
        pm.sample(draws=1, tune=0, chains=1, progressbar=False, compute_convergence_checks=False,
                  nuts_sampler={sampler!r})
print(time.perf_counter() - t)
"""


NEW_PROCESS = """
import time, warnings, sys
warnings.filterwarnings("ignore")
sys.path.insert(0, {tests!r})
from zoo import build
import numpy as np, pymc as pm, pymc_subsample as pms, pytensor, pytensor.tensor as pt
model = build({name!r}, {rows})
# PyTensor reads its cache's index on the first C function of a process (1-5 s with a compile
# directory of a few thousand modules), whoever compiles it: paid here, outside the timings
x = pt.dvector("x")
pytensor.function([x], pt.exp(x) + 1.0)(np.zeros(1))
with model:
    t = time.perf_counter()
    if {ours}:
        pms.HMCECS(rng=0)
    else:
        model.logp_dlogp_function(ravel_inputs=True)
    print(time.perf_counter() - t)
"""


def new_process(name, n_rows, ours):
    """Seconds of HMCECS's set-up (``ours``) or of PyMC's logp_dlogp_function, each in a process of
    its own on the warm PyTensor cache, after the cache's index was read (see NEW_PROCESS).
    """
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    code = NEW_PROCESS.format(tests=tests, name=name, rows=n_rows, ours=ours)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def cold(name, n_rows, sampler):
    """Seconds from ``pm.sample`` to the first draw in a fresh process with an empty PyTensor cache
    (C modules and Numba's alike), and the CPU seconds of that process and its compilers (start-up
    and imports included). ``sampler``: "hmcecs", or PyMC's ``nuts_sampler`` ("pymc", "nutpie").
    On a shared VM the wall time moves by up to ~2× between runs with the neighbours' load; CPU time
    much less, so both are printed.
    """
    code = COLD.format(tests=str(Path(__file__).resolve().parents[1] / "tests"), name=name, rows=n_rows,
                       sampler=sampler)
    with tempfile.TemporaryDirectory() as compiledir:
        env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={compiledir}")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(out.stdout.strip().splitlines()[-1]), cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--models", nargs="*", default=[m for m in ZOO if m != "mvnormal_lkj"])
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    import datetime

    import pytensor
    print(f"{datetime.date.today()}; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, PyMC {pm.__version__}, PyTensor {pytensor.__version__} "
          f"(mode {pytensor.config.mode}, linker {pytensor.config.linker}); N = {args.rows}, HMCECS "
          "defaults, X and y as pm.Data")
    cold_column = (" cold first draw HMCECS / PyMC NUTS / nutpie (s) | CPU s of those runs |"
                   if args.cold else "")
    print("\n| model | d | set-up first / warm (s) | warm set-up in full-gradient passes | PyMC's warm "
          "logp_dlogp_function in passes | ms per leapfrog (default m) | full-data gradient (ms) | "
          "full / leapfrog | new process, warm cache: HMCECS / PyMC's logp_dlogp_function set-up in "
          "passes |" + cold_column)
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if args.cold else ""))
    for name in args.models:
        r = measure(name, args.rows)
        line = (f"| {name} | {r['d']} | {r['first']:.1f} / {r['warm']:.1f} | {r['passes']:.0f} | "
                f"{r['nuts_passes']:.0f} | "
                f"{r['leap'] * 1e3:.3f} ({r['m']}) | {r['full'] * 1e3:.1f} | {r['full'] / r['leap']:.0f} |")
        ours, nuts = new_process(name, args.rows, True), new_process(name, args.rows, False)
        line += f" {ours / r['full']:.0f} / {nuts / r['full']:.0f} ({ours:.2f} / {nuts:.2f} s) |"
        if args.cold:
            (ours, ours_cpu), (nuts, nuts_cpu), (nutpie, nutpie_cpu) = (
                cold(name, args.rows, s) for s in ("hmcecs", "pymc", "nutpie"))
            line += (f" {ours:.1f} / {nuts:.1f} / {nutpie:.1f} = {ours / nuts:.2f}× NUTS, "
                     f"{ours / nutpie:.2f}× nutpie | {ours_cpu:.1f} / {nuts_cpu:.1f} / {nutpie_cpu:.1f} |")
        print(line, flush=True)


if __name__ == "__main__":
    main()
