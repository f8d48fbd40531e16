"""Subsampled MH: control variates in the sequential tests (Skin, synthetic N = 10⁶), and MNIST 0 vs 1.

``python benchmarks/subsample_mh.py control-variates``: for each sequential test of
``pms.SubsampleMH`` with its defaults, with and without control variates, on Skin Segmentation
(N = 245,057, d = 4) and on a synthetic logistic regression (N = 10⁶, d = 4), beside the
pseudo-marginal test and ``pms.HMCECS``: the mean batch (rows per decision), the row evaluations
per ESS (``n_loglik_evals`` of the draws after warm-up over the minimum bulk ESS) and the ESS per
second of sampling (warm-up included). Runs without control variates read most rows, so they take
fewer draws (``--plain-draws``; their ESS is then rough, their rows per decision are not), or, with
``--plain-moves K``, are estimated without a chain (:func:`plain_estimate`).

The default mode (no sub-command) is El hanchi's (2019 §3.2 and §5.2.3) MNIST set-up, error against cost:

Logistic regression on the first 10 principal components of the MNIST digits 0 and 1
(N = 14,780, d = 10, no intercept), prior N(0, I), every chain started at the mode,
proposal N(0, 0.01 I) (random walk, scale 0.1, not adapted), batch ⌈√N⌉ = 122,
ε = δ = 0.01. For full-data MH and each test of ``pms.SubsampleMH`` it records the
2-norm error of the running posterior mean and variance against a long full-data
NUTS reference, as a function of per-observation likelihood evaluations, and prints
the mean fraction of the data used per iteration.

Usage::

    python benchmarks/subsample_mh.py control-variates [--n-rows 1000000] [--draws 300]
        [--plain-draws 40 | --plain-moves 100] [--skin ../shared/data/skin] [--skip skin,synthetic]
        [--tests austerity,confidence,barker,two-sample]
    python benchmarks/subsample_mh.py [--data ../shared/data/mnist] [--iters 5000]
        [--ref-draws 4000] [--out benchmarks/subsample_mh.png]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

from pymc_subsample.control_variates import find_map
from pymc_subsample.datasets import load_mnist
from pymc_subsample.kernels.mh_tests import logistic_range_bound
from pymc_subsample.step_methods.hmcecs import HMCECS
from pymc_subsample.step_methods.subsample_mh import SubsampleMH

ROOT = Path(__file__).resolve().parents[1]
# (label, test, range bound of the confidence sampler)
METHODS = [("exact", "exact", None), ("pseudo-marginal", "pseudo-marginal", None),
           ("austerity", "austerity", None), ("confidence", "confidence", "logistic"),
           ("confidence-emp", "confidence", "empirical"), ("barker", "barker", None),
           ("two-sample", "two-sample", None)]


def build_model(X, y):
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y)
    return model


def reference(model, draws, seed=0):
    """Full-data NUTS, 2 chains: the ground truth (El hanchi 2019 used 50,000 MALA-like HMC draws)."""
    start = time.perf_counter()
    with model:
        idata = pm.sample(draws=draws, tune=1000, chains=2, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    post = idata.posterior["beta"].values
    post = post.reshape(-1, post.shape[-1])
    return post.mean(0), post.var(0), time.perf_counter() - start


def run(model, test, iters, center, X, batch, bound=None, seed=1):
    # thin=1: one move per draw, the papers' chain (the default thin is 2d moves per draw)
    kwargs = dict(test=test, proposal="random-walk", scale=0.1, adapt_scale=False, error=0.01, thin=1,
                  center=center, subsample_size=batch)
    if bound == "logistic":  # rigorous GLM bound (valid: θ is exactly the coefficient vector)
        kwargs["range_bound"] = logistic_range_bound(X, center)
    elif bound == "empirical":  # heuristic, see SubsampleMH's docstring
        kwargs["range_bound"] = "empirical"
    if test == "pseudo-marginal":
        kwargs["num_blocks"] = 61  # 2 rows per block: ρ ≈ 1 − 1/61
    if test == "exact":
        kwargs.pop("subsample_size")
    start = time.perf_counter()
    with model:
        step = SubsampleMH(**kwargs)
        setup = time.perf_counter() - start
        idata = pm.sample(step=step, draws=iters, tune=0, chains=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    draws = idata.posterior["beta"].values[0]
    stats = idata.sample_stats
    return {
        "draws": draws,
        "evals": np.cumsum(stats.n_loglik_evals.values[0]),
        "rows": stats.batch_size.values[0],
        "accept": float(stats.accepted.values[0].mean()),
        "time": time.perf_counter() - start - setup,
        "setup": setup,
    }


def error_curves(draws, ref_mean, ref_var, every=50):
    idx = np.arange(every, draws.shape[0] + 1, every)
    csum, csq = np.cumsum(draws, 0), np.cumsum(draws**2, 0)
    means = csum[idx - 1] / idx[:, None]
    var = csq[idx - 1] / idx[:, None] - means**2
    return idx, np.linalg.norm(means - ref_mean, axis=1), np.linalg.norm(var - ref_var, axis=1)


SEQUENTIAL = ("austerity", "confidence", "barker", "two-sample")


def plain_estimate(model, test, cv_tree, moves, seed=1):
    """(mean batch, row evaluations per ESS) of ``test`` without control variates, estimated without
    its chain: its rows per decision on ``moves`` fixed moves proposed as the control-variate
    chain proposes them (its final scale), times that chain's moves per ESS. Both chains are the
    same MH chain up to decisions that differ with probability ≤ ε, so they mix alike.
    """
    from pymc_subsample.diagnostics.mh_decisions import decision_errors, laplace_moves

    stats = cv_tree["sample_stats"]
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        step = SubsampleMH(test=test, control_variates=False, progressbar=False)
    scale = float(stats["scale"].values[:, -1].mean())
    result = decision_errors(step, laplace_moves(step, moves, seed=seed, scale=scale), seed=seed)
    ess = float(np.min(az.ess(cv_tree, var_names=["beta"])["beta"].values))
    moves_per_ess = float(stats["moves"].sum()) / ess
    batch = float(result.rows.mean())
    return batch, batch * step.accept_test.points * moves_per_ess


def cv_run(model, make_step, draws, seed=1):
    """(mean batch, row evaluations per ESS, ESS/s, min ESS, tree) of one 2-chain run, warm-up = draws."""
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        step = make_step()
        setup = time.perf_counter() - start
        tree = pm.sample(step=step, draws=draws, tune=draws, chains=2, cores=1, random_seed=seed,
                         progressbar=False, compute_convergence_checks=False)
    elapsed = time.perf_counter() - start - setup
    stats = tree["sample_stats"]
    ess = float(np.min(az.ess(tree, var_names=["beta"])["beta"].values))
    batch = float(stats["batch_size"].mean()) if "batch_size" in stats else float("nan")
    evals = float(stats["n_loglik_evals"].sum())
    return batch, evals / ess, ess / elapsed, ess, tree


def control_variates_main(argv):
    parser = argparse.ArgumentParser(description="control variates in SubsampleMH's sequential tests")
    parser.add_argument("--n-rows", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--plain-draws", type=int, default=40)
    parser.add_argument("--plain-moves", type=int, default=0,
                        help="> 0: estimate the runs without control variates from this many fixed moves")
    parser.add_argument("--skip", default="", help="comma-separated data to leave out: skin, synthetic")
    parser.add_argument("--skin", default=str(ROOT.parent / "shared" / "data" / "skin"))
    parser.add_argument("--tests", default=",".join(SEQUENTIAL))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _synthetic import logistic_data, logistic_model

    from pymc_subsample.datasets import load_skin

    print(f"pymc {pm.__version__}, {platform.python_version()}, {platform.processor() or platform.machine()}")
    problems = []
    if Path(args.skin).exists() and "skin" not in args.skip.split(","):
        skin = load_skin(args.skin, standardize=True)
        problems.append(("skin", np.column_stack([np.ones(len(skin.y)), skin.X]), skin.y))
    if "synthetic" not in args.skip.split(","):
        X, y = logistic_data(args.n_rows, 3, seed=0)
        problems.append((f"synthetic N={args.n_rows:.0e}", np.column_stack([np.ones(len(y)), X]), y))
    tests = args.tests.split(",")
    print(f"{'data':<18}{'method':<26}{'mean batch':>12}{'% of N':>8}{'evals/ESS':>12}{'ESS/s':>8}{'ESS':>7}")
    for name, X, y in problems:
        model, n = logistic_model(X, y), len(y)
        runs = [(f"{t} cv", lambda t=t: SubsampleMH(test=t), args.draws) for t in tests]
        if not args.plain_moves:
            runs += [(f"{t} plain", lambda t=t: SubsampleMH(test=t, control_variates=False),
                      args.plain_draws) for t in tests]
        runs += [("pseudo-marginal", lambda: SubsampleMH(), args.draws),
                 ("HMCECS", lambda: HMCECS(), args.draws)]
        trees = {}
        for label, make, draws in runs:
            batch, per_ess, ess_s, ess, trees[label] = cv_run(model, make, draws)
            print(f"{name:<18}{label:<26}{batch:>12.0f}{batch / n:>8.2%}{per_ess:>12.3g}{ess_s:>8.2f}"
                  f"{ess:>7.0f}", flush=True)
        for t in tests if args.plain_moves else ():
            batch, per_ess = plain_estimate(model, t, trees[f"{t} cv"], args.plain_moves)
            print(f"{name:<18}{t + ' plain (estimated)':<26}{batch:>12.0f}{batch / n:>8.2%}{per_ess:>12.3g}"
                  f"{'-':>8}{'-':>7}", flush=True)


def main():
    if sys.argv[1:2] == ["control-variates"]:
        return control_variates_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "mnist"))
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--ref-draws", type=int, default=4000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "subsample_mh.png"))
    args = parser.parse_args()

    ds = load_mnist(args.data, digits=(0, 1), n_components=10)
    X, y = np.asarray(ds.X, float), np.asarray(ds.y, float)
    n = X.shape[0]
    batch = math.ceil(math.sqrt(n))
    model = build_model(X, y)
    print(f"MNIST 0 vs 1, 10 PCs: N = {n}, d = {X.shape[1]}, batch = {batch}")

    ref_mean, ref_var, ref_time = reference(model, args.ref_draws)
    print(f"reference: full-data NUTS, 2 x {args.ref_draws} draws in {ref_time:.0f}s; "
          f"posterior sd range {np.sqrt(ref_var).min():.4f}..{np.sqrt(ref_var).max():.4f}")

    start = time.perf_counter()
    with model:
        center = find_map(progressbar=False)["beta"]  # El hanchi 2019: chains start at the mode
    print(f"MAP in {time.perf_counter() - start:.1f}s")
    results = {}
    header = (f"{'method':<16}{'accept':>8}{'data/iter':>11}{'evals/iter':>12}{'total evals':>13}"
              f"{'|mean err|':>12}{'|var err|':>12}{'s/1k it':>9}")
    print(header)
    for label, test, bound in METHODS:
        res = run(model, test, args.iters, center, X, batch, bound)
        res["curves"] = error_curves(res["draws"], ref_mean, ref_var)
        _, mean_err, var_err = res["curves"]
        results[label] = res
        print(f"{label:<16}{res['accept']:>8.3f}{res['rows'].mean() / n:>11.2%}"
              f"{res['evals'][-1] / args.iters:>12.0f}{res['evals'][-1]:>13.3g}"
              f"{mean_err[-1]:>12.4f}{var_err[-1]:>12.2e}{1000 * res['time'] / args.iters:>9.2f}")

    # error at equal cost: the last checkpoint whose cumulative evaluations fit the budget
    budgets = [1e6, 1e7]
    print("\nerror at a fixed budget of per-observation evaluations (- : budget < 50 iterations)")
    print(f"{'method':<16}" + "".join(f"{f'mean@{b:.0e}':>13}{f'var@{b:.0e}':>13}" for b in budgets))
    for label, res in results.items():
        idx, mean_err, var_err = res["curves"]
        cost = res["evals"][idx - 1]
        cells = []
        for b in budgets:
            fit = np.flatnonzero(cost <= b)
            if fit.size:
                cells.append(f"{mean_err[fit[-1]]:>13.4f}{var_err[fit[-1]]:>13.2e}")
            else:
                cells.append(f"{'-':>13}{'-':>13}")
        print(f"{label:<16}" + "".join(cells))

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, res in results.items():
        idx, mean_err, var_err = res["curves"]
        cost = res["evals"][idx - 1]
        axes[0].loglog(cost, mean_err, label=label)
        axes[1].loglog(cost, var_err, label=label)
    for ax, what in zip(axes, ["mean", "variance"], strict=True):
        ax.set_xlabel("per-observation likelihood evaluations")
        ax.set_ylabel(f"2-norm error of posterior {what}")
    axes[0].legend()
    fig.suptitle(f"SubsampleMH on MNIST 0/1 (N = {n}, d = 10, batch {batch}, ε = 0.01)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
