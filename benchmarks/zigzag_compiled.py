"""ZigZag's compiled event loop against its NumPy kernel and HMCECS, side by side in one process.

Synthetic logistic regression (``_synthetic.py``): N rows, an intercept and 30 standard-normal
features (d = 31), N(0, 1) priors. Samplers, each with its defaults: ``pms.HMCECS()``,
``pms.ZigZag()`` (the compiled loop, ``kernels/zigzag_compiled.py``) and
``pms.ZigZag(compiled=False)`` (the NumPy kernel, one Python segment per switch); 1 chain, the
same tune + draws and seed for all; ``--rounds`` alternates the samplers so that a slow period of
a shared machine falls on all of them. ESS/s = min bulk ESS over the coefficients / (set-up +
sampling seconds), and over sampling seconds alone; ms/iteration = sampling seconds / (tune +
draws). ZigZag's "rows ms/it" is what its row sampler (``draw(rng, size)``, in Python) costs per
iteration: its seconds per row, timed after the run over 20 batches, times the rows read per
iteration (``n_loglik_evals``).

``--first-draw``: set-up, then the compiled kernel's first and second step of the warm-up's first
horizon, timed directly (``zigzag_compiled.step``): the first includes compiling the loop, or
loading it from Numba's cache. Run it on fresh caches for the cold cost, then again on the same
caches for a second process's::

    export PYTENSOR_FLAGS=base_compiledir=$(mktemp -d) NUMBA_CACHE_DIR=$(mktemp -d)
    python benchmarks/zigzag_compiled.py --first-draw

Usage: python benchmarks/zigzag_compiled.py [--rows 1e6] [--draws 2000] [--tune 500] [--rounds 1]
       [--samplers hmcecs compiled numpy] [--row-batch 4096] [--seed 1] [--first-draw]
"""

import argparse
import os
import platform
import time

import numpy as np
import pymc as pm
import pytensor
from _synthetic import logistic_data, logistic_model
from exact import run

import pymc_subsample as pms
from pymc_subsample.kernels import zigzag, zigzag_compiled

LABELS = {"hmcecs": "HMCECS()", "compiled": "ZigZag()", "numpy": "ZigZag(compiled=False)"}


def make_step(key, row_batch):
    if key == "hmcecs":
        return pms.HMCECS(progressbar=False)
    return pms.ZigZag(compiled=key == "compiled", row_batch=row_batch, progressbar=False)


def row_seconds(step, row_batch, batches=20):
    """Seconds per row of ZigZag's row sampler, over ``batches`` batches of ``row_batch`` rows."""
    rng = np.random.default_rng(0)
    step._draw_rows(rng, row_batch)
    start = time.perf_counter()
    for _ in range(batches):
        step._draw_rows(rng, row_batch)
    return (time.perf_counter() - start) / (batches * row_batch)


def first_draw(model, row_batch):
    with model:
        start = time.perf_counter()
        step = pms.ZigZag(row_batch=row_batch, progressbar=False)
        setup = time.perf_counter() - start
    rng = np.random.default_rng(0)
    state = zigzag.init(step.proxy.center, rng, row_batch)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        state, info = zigzag_compiled.step(rng, state, step.horizon, step.process, step._draw_rows)
        seconds.append(time.perf_counter() - start)
    print(f"set-up {setup:.2f} s; compiled step of T = {step.horizon:.3g} ({info.switches} switches): "
          f"first {seconds[0]:.3f} s, second {seconds[1]:.3f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--samplers", nargs="+", default=list(LABELS), choices=list(LABELS))
    parser.add_argument("--row-batch", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first-draw", action="store_true")
    args = parser.parse_args()
    print(platform.platform(), "| Python", platform.python_version(), "| PyMC", pm.__version__, "| PyTensor",
          pytensor.__version__, "| numba", __import__("numba").__version__)
    print(f"N = {int(args.rows):,}, d = 31, 1 chain, {args.tune} tune + {args.draws} draws, random_seed "
          f"{args.seed}, row_batch {args.row_batch}, rounds {args.rounds}, NUMBA_CACHE_DIR "
          f"{os.environ.get('NUMBA_CACHE_DIR', '(default)')}")
    X, y = logistic_data(int(args.rows), 30, seed=0)
    model = logistic_model(np.column_stack([np.ones(len(y)), X]), y)
    if args.first_draw:
        first_draw(model, args.row_batch)
        return
    print(f"{'round':<6}{'sampler':<24}{'set-up s':>9}{'sample s':>9}{'ms/it':>8}{'rows ms/it':>11}"
          f"{'minESS':>8}{'ESS/s':>8}{'ESS/s sampling':>15}{'switches/it':>12}{'efficiency':>11}")
    for round_ in range(args.rounds):
        for key in args.samplers:
            r = run(model, lambda key=key: make_step(key, args.row_batch), args.draws, args.tune,
                    seed=args.seed)
            iterations = args.draws + args.tune
            rows_ms = switches = efficiency = ""
            if "efficiency" in r:
                rows_per_it = r["evals_per_ess"] * r["min_ess"] / iterations
                rows_ms = f"{row_seconds(r['step'], args.row_batch) * rows_per_it * 1e3:.2f}"
                efficiency = f"{r['efficiency']:.2%}"
                switches = f"{r['step'].total_switches / iterations:.0f}"
            print(f"{round_:<6}{LABELS[key]:<24}{r['setup_s']:>9.1f}{r['sampling_s']:>9.1f}"
                  f"{r['sampling_s'] / iterations * 1e3:>8.2f}{rows_ms:>11}{r['min_ess']:>8.0f}"
                  f"{r['ess_per_s']:>8.1f}{r['min_ess'] / r['sampling_s']:>15.1f}{switches:>12}"
                  f"{efficiency:>11}", flush=True)


if __name__ == "__main__":
    main()
