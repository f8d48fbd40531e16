"""Seed 002 (Maire, Friel & Alquier, informed sub-sampling MCMC): the Bernoulli toy and the AR(2) example.

Synthetic data, as in the slides (no file needed):

* **Bernoulli toy**: N = 10,000 draws Y_k ~ Be(0.3), prior p ~ Beta(1, 1); ``pms.ISS`` with the
  sufficient statistic as summary (``summary="moments"``: the subset mean, so
  ‖Δ_n(U)‖ ∝ |Σ Y − (N/n) Σ_U Y|), subsets of n = 100 and 1000 rows, and ε from 0 (uniform
  subsets) upwards, plus ``epsilon="auto"`` (tuned to a 5% refresh rate). Reference: the exact
  Beta posterior. Shows the widening of the p-marginal as ε → 0 and the refresh rate that pays
  for a large ε.
* **AR(2)** ("Example 2"): y_t = θ1 y_{t−1} + θ2 y_{t−2} + ζ_t, ζ_t ~ N(0, θ3²), N = 10⁶
  (``--ar-rows``), priors θ1,2 ~ N(0, 10²), θ3 ~ HalfNormal(5). ISS with Yule–Walker summaries
  (φ1, φ2, σ²) at n = 100 and 1000, with uniform subsets (ε = 0), and with the package's default
  summary (the subset MAP), 4 chains each as in the slides' "4 independent ISS-MCMC". Reference:
  the exact θ3 marginal (θ1, θ2 integrated out analytically, on a grid).

Printed: per run ε, the final refresh rate, the marginal's mean and sd against the exact ones
(sd ratio = widening) and seconds. Figure: ``docs/seed002_iss.png``.

Usage: python examples/seed002_iss.py [--draws 2000] [--tune 1000] [--ar-rows 1000000] [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from _common import DOCS, SAMPLE, print_table, pyplot, save_png
from scipy import stats
from scipy.special import logsumexp

import pymc_subsample as pms
from pymc_subsample.model.tall import TallModel

# the AR(2) series and the slides' Yule-Walker summary, as tests/test_iss.py and benchmarks/iss.py use them
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_iss import simulate_ar2, yule_walker  # noqa: E402


def run_iss(tall, var, draws, tune, chains, **kwargs):
    """ISS draws (chains, draws) of the first free variable, the refresh rates, ε and seconds."""
    start = time.perf_counter()
    step = pms.ISS(model=tall, thin=1, **kwargs)  # one iteration per draw, as in the seed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the run checks' warnings: the table shows why
        idata = pm.sample(step=step, draws=draws, tune=tune, chains=chains, random_seed=7, model=tall.model,
                          **SAMPLE)
    st = idata.sample_stats
    return (idata.posterior[var].values, st["refresh_rate"].values[:, -1], float(st["epsilon"].values[0, -1]),
            time.perf_counter() - start)


def bernoulli(args, rows):
    N, p_true = 10_000, 0.3
    y = (np.random.default_rng(1).random(N) < p_true).astype(float)
    with pm.Model() as model:
        pm.Bernoulli("y", p=pm.Beta("p", 1, 1), observed=y)
    tall = TallModel(model)
    tall.progressbar = False  # no bars for the full-data passes
    exact = stats.beta(1 + y.sum(), 1 + N - y.sum())
    results = {}
    for n in (100, 1000):
        # ε in units of one 0↔1 swap next to the best subset: Δ moves by N/(n sd(y)) per swap
        unit2 = 2 * (N / (n * y.std())) ** 2
        for c in (0.0, 0.1, 1.0, "auto"):
            eps = c if c == "auto" else c / unit2
            draws, refresh, eps_used, secs = run_iss(tall, "p", args.draws, args.tune, 2, subset_size=n,
                                                     epsilon=eps, summary="moments")
            results[(n, c)] = draws.ravel()
            rows.append(["Bernoulli", n, "moments", f"{eps_used:.3g}", f"{refresh.min():.3f}",
                         f"{draws.mean():.4f}", f"{draws.std():.4f}", f"{exact.mean():.4f}",
                         f"{exact.std():.4f}",
                         f"{draws.std() / exact.std():.2f}", f"{secs:.0f}"])
    return results, exact


def sigma_marginal(X, y, tau=10.0, sigma_sd=5.0):
    """Exact θ3 marginal on a grid: the Gaussian θ1, θ2 integrated out analytically."""
    N = len(y)
    XX, Xy, yy = X.T @ X, X.T @ y, y @ y
    s_hat = np.sqrt((yy - Xy @ np.linalg.solve(XX, Xy)) / N)
    grid = s_hat * (1 + np.linspace(-12, 12, 1201) / np.sqrt(2 * N))
    logp = np.array([-0.5 * s**2 / sigma_sd**2 - N * np.log(s) - yy / (2 * s**2)
                     + 0.5 * (Xy / s**2) @ np.linalg.solve(XX / s**2 + np.eye(2) / tau**2, Xy / s**2)
                     - 0.5 * np.linalg.slogdet(XX / s**2 + np.eye(2) / tau**2)[1] for s in grid])
    w = np.exp(logp - logsumexp(logp))
    mean = w @ grid
    return grid, w / (grid[1] - grid[0]), mean, np.sqrt(w @ (grid - mean) ** 2)


def ar2(args, rows):
    X, y = simulate_ar2(args.ar_rows)
    grid, density, mean, sd = sigma_marginal(X, y)
    with pm.Model() as model:
        X_, y_ = pm.Data("X", X), pm.Data("y_obs", y)
        theta = pm.Normal("theta", 0, 10.0, shape=2)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("y", mu=X_ @ theta, sigma=sigma, observed=y_)
    tall = TallModel(model)
    tall.progressbar = False  # no bars for the full-data passes
    configs = [("YW, ε = 0 (uniform)", dict(subset_size=1000, epsilon=0.0, summary=yule_walker)),
               ("YW, n = 100", dict(subset_size=100, summary=yule_walker)),
               ("YW, n = 1000", dict(subset_size=1000, summary=yule_walker)),
               ("MAP (default), n = 1000", dict(subset_size=1000))]
    results = {}
    for label, kw in configs:
        draws, refresh, eps_used, secs = run_iss(tall, "sigma", args.draws, args.tune, 4, **kw)
        results[label] = draws
        rows.append([f"AR(2) θ3, N = {args.ar_rows:.0e}", kw["subset_size"], label.split(",")[0],
                     f"{eps_used:.3g}", f"{refresh.min():.3f}", f"{draws.mean():.5f}", f"{draws.std():.5f}",
                     f"{mean:.5f}", f"{sd:.5f}", f"{draws.std() / sd:.2f}", f"{secs:.0f}"])
    return results, (grid, density, mean, sd)


def main(args):
    rows = []
    bern, exact = bernoulli(args, rows)
    ar, (grid, density, mean, sd) = ar2(args, rows)
    print_table(["model", "n", "summary", "ε", "min refresh rate", "mean", "sd", "exact mean", "exact sd",
                 "sd / exact sd", "seconds"], rows)

    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4))
    for ax, n in zip(axes[0], (100, 1000)):
        wide = max(np.std(bern[(n, c)]) for c in (0.0, 0.1, 1.0, "auto"))  # show the widest marginal
        x = np.linspace(exact.mean() - 3.5 * wide, exact.mean() + 3.5 * wide, 300)
        ax.plot(x, exact.pdf(x), "k", lw=2, label="exact Beta")
        for k, c in enumerate((0.0, 0.1, 1.0, "auto")):
            label = ("ε = 0 (uniform)" if c == 0.0 else "ε auto (5% refresh)" if c == "auto"
                     else f"ε = {c} × unit")
            ax.hist(bern[(n, c)], bins=60, range=(x[0], x[-1]), density=True, histtype="step", color=f"C{k}",
                    label=label)
        ax.set_title(f"Bernoulli toy, n = {n} of N = 10,000: p", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    lim = (mean - 10 * sd, mean + 10 * sd)
    for chain in ar["YW, n = 1000"]:
        axes[1, 0].hist(chain, bins=50, range=lim, density=True, histtype="step")
    axes[1, 0].plot(grid, density, "k", lw=2)
    axes[1, 0].set_title("AR(2) θ3, Yule–Walker summary, n = 1000: 4 chains", fontsize=9)
    for k, (label, draws) in enumerate(ar.items()):
        axes[1, 1].hist(draws.ravel(), bins=80, range=lim, density=True, histtype="step", color=f"C{k}",
                        label=label)
    axes[1, 1].plot(grid, density, "k", lw=2, label="exact")
    axes[1, 1].set_title(f"AR(2) θ3, N = {args.ar_rows:.0e}: chains pooled", fontsize=9)
    axes[1, 1].legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlim(*lim)
    for ax in axes.ravel():
        ax.set_yticks([])
    fig.suptitle("ISS-MCMC (seed 002): marginals widen as ε → 0 (uniform subsets); black: exact posterior",
                 fontsize=9)
    fig.tight_layout()
    save_png(fig, Path(args.out) / "seed002_iss.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--ar-rows", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=DOCS)
    main(parser.parse_args())
