"""Benchmark of the stochastic-gradient family (El hanchi 2019 §2-§5, El hanchi 2018 §3).

1. MNIST 0 vs 1, 10 principal components, no intercept, N(0, I) prior (El hanchi 2019 §2):
   ε = 0.005, batch ⌈√N⌉ = 122, 5000 iterations from the mode, for LD (full gradient),
   SGLD, SAGA-LD, IS-LD, IS-SAGA-LD and adaptive IS-SAGA-LD with noise adjustment.
   Reports the 2-norm error of the running mean and variance against full-data NUTS as
   a function of gradient-oracle calls (per-row gradient evaluations, SAGA's initial
   full pass included), and the gradient-estimator variance tr Cov(ĝ) per method
   at ε = 5e-3 and 5e-4 (El hanchi 2019 Table 1).
2. OSGFS (El hanchi 2018 Alg. 1) on Skin Segmentation (against the stored NUTS reference)
   and cod-rna (against the Laplace approximation at the full-data MAP).

Run:  python benchmarks/sgmcmc.py [--data ../shared/data] [--out DIR] [--parts mnist,osgfs]
(results JSON, PNG and the cached NUTS reference go to DIR, default $TMPDIR/pymc_subsample_sgmcmc)
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

from pymc_subsample import TallModel
from pymc_subsample.control_variates.center import find_map_theta
from pymc_subsample.datasets import load_cod_rna, load_mnist, load_skin
from pymc_subsample.estimators.sg_gradients import linear_predictor_lipschitz
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.step_methods.sgfs import SGFS, drop_unconverged
from pymc_subsample.step_methods.sgmcmc import SGLD

SAMPLE = dict(cores=1, progressbar=False, compute_convergence_checks=False)
METHODS = [  # label, SGLD kwargs
    ("LD", dict(gradient="full")),
    ("SGLD", dict(gradient="plain")),
    ("SAGA-LD", dict(gradient="saga")),
    ("IS-LD", dict(gradient="is")),
    ("IS-SAGA-LD", dict(gradient="is-saga")),
    ("adaptive IS-SAGA-LD + noise adj.", dict(gradient="adaptive", noise_adjust=True)),
]


def logistic(X, y, prior_sd=1.0):
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, prior_sd, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y)
    return model


def running_errors(draws, evals, ref_mean, ref_var, points=25):
    """‖running mean − ref‖₂ and ‖running var − ref‖₂ at log-spaced checkpoints."""
    idx = np.unique(np.geomspace(20, len(draws), points).astype(int))
    rows = []
    for i in idx:
        part = draws[:i]
        rows.append((int(evals[:i].sum()), float(np.linalg.norm(part.mean(0) - ref_mean)),
                     float(np.linalg.norm(part.var(0) - ref_var))))
    return rows


def mnist_benchmark(data_dir, iterations, out):
    ds = load_mnist(data_dir / "mnist", digits=(0, 1), n_components=10)
    X, y = ds.X, ds.y
    n = len(y)
    model = logistic(X, y)
    tall = TallModel(model)
    center, _ = find_map_theta(tall)
    cache = out / "mnist_nuts_reference.npy"  # the reference is slow (~150 s): reuse it across runs
    t0 = time.perf_counter()
    if cache.exists():
        ref_draws = np.load(cache)
    else:
        with model:
            ref = pm.sample(draws=2000, tune=1000, chains=2, random_seed=1, initvals={"beta": center},
                            **SAMPLE)
        ref_draws = ref.posterior["beta"].values.reshape(-1, X.shape[1])
        np.save(cache, ref_draws)
    t_nuts = time.perf_counter() - t0
    ref_mean, ref_var = ref_draws.mean(0), ref_draws.var(0)
    lip = linear_predictor_lipschitz(X, 0.25)  # logistic: |ℓ''| ≤ 1/4, so L_k = ‖x_k‖²/4 exactly
    batch = math.ceil(math.sqrt(n))
    results = {"N": n, "d": X.shape[1], "batch": batch, "nuts_seconds": t_nuts, "runs": {},
               "ref_mean_norm": float(np.linalg.norm(ref_mean)),
               "ref_var_norm": float(np.linalg.norm(ref_var))}
    for eps in (5e-3, 5e-4):  # the paper's ε, and the ε of its Table 1 where SAGA starts to help
        runs = results["runs"][f"{eps:g}"] = {}
        for label, kw in METHODS:
            extra = {"lipschitz": lip} if kw["gradient"] in ("is", "is-saga", "adaptive") else {}
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                step = SGLD(step_size=eps, batch_size=batch, center=center, **kw, **extra)
                t0 = time.perf_counter()
                idata = pm.sample(step=step, draws=iterations, tune=0, chains=1, random_seed=2,
                                  initvals={"beta": center}, **SAMPLE)
                secs = time.perf_counter() - t0
            draws = idata.posterior["beta"].values[0]
            evals = idata.sample_stats.n_grad_evals.values[0]
            gv = idata.sample_stats.grad_var.values[0]
            res = runs[label] = {
                "seconds": secs, "grad_evals": int(evals.sum()),
                "diverging_draws": int(idata.sample_stats.diverging.values[0].sum()),
                "mean_err": float(np.linalg.norm(draws.mean(0) - ref_mean)),
                "var_err": float(np.linalg.norm(draws.var(0) - ref_var)),
                "grad_var_median": float(np.nanmedian(gv)),
                "grad_var_q90": float(np.nanquantile(gv, 0.9)),
                "curve": running_errors(draws, evals, ref_mean, ref_var),
            }
            print(f"  ε={eps:g} {label:34s} {secs:6.1f}s evals={res['grad_evals']:>10d} "
                  f"mean_err={res['mean_err']:.3f} var_err={res['var_err']:.3f} "
                  f"tr Cov(ĝ) median={res['grad_var_median']:.3g} q90={res['grad_var_q90']:.3g} "
                  f"diverging={res['diverging_draws']}")
    _plot(results, out)
    return results


def _plot(results, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(len(results["runs"]), 2, figsize=(11, 4 * len(results["runs"])), squeeze=False)
    for row, (eps, runs) in zip(axes, results["runs"].items(), strict=True):
        for label, res in runs.items():
            curve = np.array(res["curve"])
            row[0].loglog(curve[:, 0], curve[:, 1], label=label)
            row[1].loglog(curve[:, 0], curve[:, 2], label=label)
        row[0].axhline(results["ref_mean_norm"], color="r", lw=0.8)
        row[1].axhline(results["ref_var_norm"], color="r", lw=0.8)
        for ax, what in zip(row, ("mean", "variance"), strict=True):
            ax.set_xlabel("gradient oracle calls (per-row gradients)")
            ax.set_ylabel(f"2-norm error of the {what}")
            ax.set_title(f"MNIST 0/1, ε = {eps}")
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "sgmcmc_mnist_errors.png", dpi=110)


def osgfs_benchmark(model, reference_mean, reference_sd, batch_size, draws, c=0.2):
    tall = TallModel(model)
    t0 = time.perf_counter()
    center, _ = find_map_theta(tall)
    t_map = time.perf_counter() - t0
    with model:
        t0 = time.perf_counter()
        step = SGFS(batch_size=batch_size, c=c, center=center)
        idata = pm.sample(step=step, draws=draws, tune=0, chains=1, random_seed=5,
                          initvals={"beta": center}, **SAMPLE)
        secs = time.perf_counter() - t0
    kept = drop_unconverged(idata)
    b = kept.posterior["beta"].values.reshape(-1, len(reference_mean))
    import arviz as az

    ess = az.ess(kept).beta.values
    return {
        "N": tall.n_rows, "d": tall.ndim, "batch": batch_size, "map_seconds": t_map, "seconds": secs,
        "first_converged": int(np.argmax(idata.sample_stats.converged.values[0])),
        "k": float(2 * idata.sample_stats.step_size.values[0, -1]),
        "max_abs_dmean_over_sd": float(np.max(np.abs(b.mean(0) - reference_mean) / reference_sd)),
        "sd_ratio": [float(v) for v in b.std(0) / reference_sd],
        "ess_min": float(ess.min()), "grad_evals": int(idata.sample_stats.n_grad_evals.sum()),
    }


def laplace_reference(model):
    tall = TallModel(model)
    center, _ = find_map_theta(tall)
    cov = np.linalg.inv(SubsampledTarget(tall, center).laplace_precision())
    return center, np.sqrt(np.diag(cov))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "pymc_subsample_sgmcmc")
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--parts", default="mnist,osgfs", help="comma-separated: mnist, osgfs")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"machine": f"{platform.processor() or platform.machine()}, {platform.system()}, "
                          "2 cores, no GPU", "python": platform.python_version(), "pymc": pm.__version__}
    if "mnist" in parts:
        print("MNIST 0/1, 10 PCs (El hanchi 2019 §2)")
        results["mnist"] = mnist_benchmark(args.data, args.iterations, args.out)
    if "osgfs" in parts:
        results.update(osgfs_runs(args.data))
    name = "sgmcmc.json" if parts == {"mnist", "osgfs"} else f"sgmcmc_{'_'.join(sorted(parts))}.json"
    (args.out / name).write_text(json.dumps(results, indent=1))


def osgfs_runs(data):
    results = {}
    print("OSGFS on Skin Segmentation")
    skin = load_skin(data / "skin", standardize=True)
    ref = json.loads((data / "skin" / "reference_nuts.json").read_text())
    Xs = np.column_stack([np.ones(len(skin.y)), skin.X])
    results["osgfs_skin"] = osgfs_benchmark(logistic(Xs, skin.y), np.array(ref["mean"]),
                                            np.array(ref["sd"]), 10_000, 8000)
    print(" ", results["osgfs_skin"])
    print("OSGFS on cod-rna (train part)")
    cod = load_cod_rna(data / "cod-rna", standardize=True)
    Xc = np.column_stack([np.ones(len(cod.y)), cod.X])
    model = logistic(Xc, cod.y)
    lap_mean, lap_sd = laplace_reference(model)
    results["osgfs_cod_rna"] = osgfs_benchmark(model, lap_mean, lap_sd, 5_000, 6000)
    print(" ", results["osgfs_cod_rna"])
    return results


if __name__ == "__main__":
    main()
