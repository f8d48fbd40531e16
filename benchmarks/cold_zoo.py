"""ESS/s including set-up against nutpie on the zoo, each run in a new process on an empty PyTensor cache.

For each zoo model (tests/zoo.py, X and y as pm.Data) and each N, two runs, each in a process of its
own with a new, empty ``base_compiledir`` (PyTensor's compiled modules and its Numba cache alike):
- nutpie: ``pm.sample(nuts_sampler="nutpie")``, its compilation included;
- HMCECS with its defaults: the step's construction plus ``pm.sample``;
- the floor: ``pm.sample`` with a step that returns its point unchanged (``sample_floor.py``), what
  PyMC's own initialisation, per-draw loop and conversion cost on an empty cache around any step.
Both are timed from just after the model is built to the end of ``pm.sample`` (1 chain, tune =
draws = ``--draws``, the Deterministics over all N rows left out of the trace as in ``breakeven.py``);
the imports, the data's generation and the harness's choice of the traced variables are outside the
timing and the same for both. The package's
own Numba kernels (``@numba.njit(cache=True)``) stay in Numba's cache beside their modules, which an
empty ``base_compiledir`` does not empty: a new installation compiles them once, at its first run
(``--cold-kernels`` empties that cache too, by a new ``NUMBA_CACHE_DIR``, for both runs).

Cells: min bulk ESS / seconds = ESS/s [largest |Δmean| in nutpie's posterior sds]; HMCECS's ESS/s
over nutpie's; the budget, the seconds in which HMCECS's run, at its ESS, would reach the goal
(5× nutpie's ESS/s below 10⁶ rows, 100× from 10⁶), against the floor: where the floor exceeds the
budget, no step method inside ``pm.sample`` reaches the goal on an empty cache. Each process's CPU
seconds (compilers included) are printed too: on a shared VM wall time moves with the neighbours'
load.

Usage: python benchmarks/cold_zoo.py [--models logistic linear ...] [--rows 100000 1000000]
       [--draws 500] [--cold-kernels]
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

RUN = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {benchmarks!r})
sys.path.insert(0, {tests!r})
from zoo import build
import numpy as np, pymc as pm, pymc_subsample as pms
from breakeven import SAMPLE, min_ess, traced
from sample_floor import Unchanged
model = build({name!r}, {rows})
# the harness's own work, before the clock: on an empty cache traced()'s shape evaluation compiles
# (1.6 s on the centred model)
kwargs = dict(draws={draws}, tune={draws}, var_names=traced(model), **SAMPLE)
with model:
    t = time.perf_counter()
    if {sampler!r} == "hmcecs":
        idata = pm.sample(step=pms.HMCECS(rng=0), random_seed=2, **kwargs)
    elif {sampler!r} == "floor":
        idata = pm.sample(step=Unchanged(model.value_vars), random_seed=2, **kwargs)
    else:
        idata = pm.sample(nuts_sampler="nutpie", random_seed=1, **kwargs)
    seconds = time.perf_counter() - t
if {sampler!r} == "floor":
    print(json.dumps(dict(ess=0.0, seconds=seconds, moments={{}})))
    sys.exit()
post = idata["posterior"]
moments = {{v: [np.asarray(post[v].mean(("chain", "draw"))).ravel().tolist(),
               np.asarray(post[v].std(("chain", "draw"))).ravel().tolist()] for v in post.data_vars}}
print(json.dumps(dict(ess=min_ess(idata), seconds=seconds, moments=moments)))
"""


def cold_run(name, n_rows, sampler, draws, cold_kernels):
    """(min bulk ESS, wall seconds, CPU seconds of the process, {variable: [means, sds]}) of one run
    in a new process on an empty PyTensor cache.
    """
    here = Path(__file__).resolve().parent
    code = RUN.format(benchmarks=str(here), tests=str(here.parent / "tests"), name=name, rows=n_rows,
                      draws=draws, sampler=sampler)
    with tempfile.TemporaryDirectory() as compiledir, tempfile.TemporaryDirectory() as numba_cache:
        env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={compiledir}")
        if cold_kernels:
            env["NUMBA_CACHE_DIR"] = numba_cache
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise RuntimeError(f"{sampler} on {name} at N = {n_rows} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result["ess"], result["seconds"], cpu, result["moments"]


def goal(n_rows):
    """The goal's ratio to nutpie's ESS/s: 5× below 10⁶ rows, 100× from 10⁶."""
    return 100.0 if n_rows >= 1_000_000 else 5.0


def max_shift(moments, reference):
    """Largest |Δmean| over the parameters, in the reference's posterior sds."""
    return max(float(np.max(np.abs(np.subtract(moments[v][0], mean)) / np.asarray(sd)))
               for v, (mean, sd) in reference.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["logistic", "linear"])
    parser.add_argument("--rows", nargs="+", type=int, default=[100_000])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--cold-kernels", action="store_true",
                        help="the package's Numba kernels compiled in each process too")
    args = parser.parse_args()
    import pymc  # noqa: PLC0415 (versions only; the runs import in their own processes)
    import pytensor  # noqa: PLC0415

    import pymc_subsample  # noqa: PLC0415
    kernels = "empty too (--cold-kernels)" if args.cold_kernels else "warm (compiled once per installation)"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"PyMC {pymc.__version__}, PyTensor {pytensor.__version__}, pymc_subsample "
          f"{pymc_subsample.__version__}; 1 chain, tune = draws = {args.draws}; every run in a new "
          f"process on an empty PyTensor cache; the package's Numba kernels' cache: {kernels}")
    print("\n| model | N | nutpie, cold | HMCECS(), cold | HMCECS ÷ nutpie | budget at the goal / floor (s) "
          "| CPU s, nutpie / HMCECS |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        for n in args.rows:
            ess_n, sec_n, cpu_n, ref = cold_run(name, n, "nutpie", args.draws, args.cold_kernels)
            ess_h, sec_h, cpu_h, ours = cold_run(name, n, "hmcecs", args.draws, args.cold_kernels)
            _, sec_f, _, _ = cold_run(name, n, "floor", args.draws, args.cold_kernels)
            ratio = (ess_h / sec_h) / (ess_n / sec_n)
            budget = ess_h / (goal(n) * ess_n / sec_n)
            print(f"| {name} | {n:,} | {ess_n:.0f} / {sec_n:.1f} s = {ess_n / sec_n:.1f} | "
                  f"{ess_h:.0f} / {sec_h:.1f} s = {ess_h / sec_h:.1f} [{max_shift(ours, ref):.2f}] | "
                  f"{ratio:.1f} | {budget:.2f} / {sec_f:.2f} | {cpu_n:.1f} / {cpu_h:.1f} |", flush=True)


if __name__ == "__main__":
    main()
