"""The N-independent part of a warm set-up, against PyMC's own, in 10⁶-row passes.

Per zoo model (tests/zoo.py, X and y as pm.Data): constructing ``pms.HMCECS()`` a second time on
the 20,000-row model (its full-data passes cost ~2% of a 10⁶-row one, so what is left is graph
construction, loading the compiled functions and the pilot), and PyMC's ``logp_dlogp_function`` a
second time on the same model (what NUTS's set-up builds, rewrites and links), each as a multiple
of one full-data gradient of PyMC's own at 10⁶ rows at HMCECS's centre, as ``zoo.py`` times it —
the unit of the goal "warm set-up ≤ 15 full-data gradient passes".

A third column is a floor for any sampler that reads the model's graph: ``model.logp()`` and its
gradient graph built, with no rewriting, compiling or pass over the data (what every PyMC step
method's construction starts from). Where it alone is above 15 passes the goal cannot be met at
that N by a set-up built from the model (its graphs are the same size at any N).

Usage: python benchmarks/setup_fixed_part.py [model ...]
"""

import os
import platform
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import pytensor  # noqa: E402
from estimator import best_time  # noqa: E402
from zoo import ZOO, build  # noqa: E402

import pymc_subsample as pms  # noqa: E402

warnings.filterwarnings("ignore")


def model_graph(model):
    """The model's joint log-density and its gradient as graphs, nothing compiled."""
    logp = model.logp()
    return pytensor.grad(logp, model.value_vars)


def measure(name):
    """(HMCECS's warm set-up at 2·10⁴ rows, PyMC's warm logp_dlogp_function there, the model's
    logp and gradient graphs alone, PyMC's full gradient at 10⁶ rows), in seconds.
    """
    small = build(name, 20_000)
    with small:
        pms.HMCECS(rng=0, progressbar=False)
        ours = best_time(lambda: pms.HMCECS(rng=0, progressbar=False), 2)
        small.logp_dlogp_function(ravel_inputs=True)
        pymc = best_time(lambda: small.logp_dlogp_function(ravel_inputs=True), 2)
        graph = best_time(lambda: model_graph(small), 3)
    big = build(name, 1_000_000)
    with big:
        full = big.logp_dlogp_function(ravel_inputs=True)
        center = pms.HMCECS(rng=0, progressbar=False).proxy.center  # where zoo.py times the pass
    full.set_extra_values({})
    return ours, pymc, graph, best_time(lambda: full(center), 5)


def main():
    names = sys.argv[1:] or [m for m in ZOO if m != "mvnormal_lkj"]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("\n| model | HMCECS warm set-up at 2·10⁴ rows (s) | PyMC's warm logp_dlogp_function (s) | "
          "model's logp + gradient graphs alone (s) | PyMC's full gradient at 10⁶ (ms) | "
          "HMCECS's fixed part in 10⁶ passes | PyMC's in 10⁶ passes | the graphs alone in 10⁶ passes |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        ours, pymc, graph, pass_s = measure(name)
        print(f"| {name} | {ours:.2f} | {pymc:.2f} | {graph:.3f} | {pass_s * 1e3:.1f} | "
              f"{ours / pass_s:.0f} | {pymc / pass_s:.0f} | {graph / pass_s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
