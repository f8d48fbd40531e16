"""Seed 004 (Dang et al. 2019, HMC-ECS), §6.5 on a HIGGS-shaped stand-in: Figs. 1–2 and Tables 1–2.

Data: the HIGGS file in ``../shared/data/higgs`` has 7,500 rows, too few for a tall-data run,
so this example builds a **synthetic stand-in with HIGGS's d = 28** (plus an intercept): the
feature rows are drawn with replacement from the 7,500 standardised HIGGS rows (so the skewed
masses, the discrete b-tags and their correlations are HIGGS's), and y is simulated from the
logistic regression fitted to those 7,500 rows. Default N = 10⁶ (the paper: 10.5·10⁶). Without
``../shared/data/higgs`` the features are independent N(0, 1) and the coefficients N(0, 0.5²).

Compared, from the same centre θ* and Laplace mass matrix (the paper's "negative inverse Hessian
from all the data"): perturbed HMC-ECS, signed HMC-ECS, SG-HMC and SGLD with second-order control
variates (the package's default, preconditioned step sizes), against full-data NUTS with the
same dense mass matrix. Printed: seed 004 Table 2 (acceptance rates, L, IF, ESS, τ̂, % of data),
Table 1 (RCT against perturbed HMC-ECS: min / median / max over parameters) and agreement
(|Δmean|/sd, sd ratio). Figures: ``docs/seed004_hmcecs_densities.png`` (Fig. 1: four random
coefficients), ``docs/seed004_hmcecs_moments.png`` (Fig. 2) and ``..._loglik_var.png`` (σ̂²
trace) from ``pms.plot_compare`` for perturbed HMC-ECS, and ``docs/seed004_hmcecs_methods.png``
(every method's Δmean/sd and sd ratio per coefficient).

Usage: python examples/seed004_hmcecs.py [--rows 1000000] [--draws 1000] [--tune 500]
       [--ref-draws 200] [--ref-tune 100] [--data ../shared/data] [--out docs]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import arviz_stats as azs
import numpy as np
import pymc as pm
from _common import DATA, DOCS, SAMPLE, data_path, flat, logistic_model, print_table, pyplot, save_png, timed
from pymc.step_methods.hmc.quadpotential import QuadPotentialFull
from scipy.optimize import minimize

import pymc_subsample as pms


def higgs_stand_in(data_root, n_rows, seed=0):
    """(X with intercept, y, label): HIGGS rows resampled, y from the fitted logistic regression."""
    rng = np.random.default_rng(seed)
    path = data_path(data_root, "higgs")
    if path is None:
        X = np.column_stack([np.ones(n_rows), rng.standard_normal((n_rows, 28))])
        beta = rng.normal(0.0, 0.5, 29)
        label = "independent N(0,1) features (../shared/data/higgs absent)"
    else:
        higgs = pms.datasets.load_higgs(path, part="all", standardize=True)
        Xh = np.column_stack([np.ones(higgs.n_obs), higgs.X])

        def loss(b):  # negative log posterior of the 7,500 rows under the N(0, 1) prior, and gradient
            eta = Xh @ b
            p = 1.0 / (1.0 + np.exp(-eta))
            return (np.sum(np.logaddexp(0.0, eta) - higgs.y * eta) + 0.5 * b @ b,
                    Xh.T @ (p - higgs.y) + b)

        beta = minimize(loss, np.zeros(29), jac=True, method="L-BFGS-B").x
        X = Xh[rng.integers(0, higgs.n_obs, n_rows)]
        label = f"HIGGS rows resampled ({higgs.n_obs} originals), y from their fitted logistic regression"
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(np.float64)
    return X, y, label


def run(model, make_step, draws, tune, seconds, name, seed=1):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. PyMC's "could not extract data"
        with timed(seconds, name + " set-up"):
            step = make_step()
        with timed(seconds, name):
            idata = pm.sample(step=step, draws=draws, tune=tune, chains=1, random_seed=seed, **SAMPLE)
    return idata, step


def table2_row(name, idata, n_rows, m, draws):
    """Seed 004 Table 2: α_θ, α_u, L, IF (mean over parameters), ESS = R/IF, τ̂, 100 m/N."""
    st = idata.sample_stats
    ess = azs.ess(idata, var_names=["beta"])["beta"].values
    inefficiency = float(np.mean(draws / ess))

    def mean(stat):
        return float(st[stat].mean()) if stat in st else float("nan")

    tau = float((st["sign"].values > 0).mean()) if "sign" in st else float("nan")
    steps = mean("n_steps")
    return [name, mean("acceptance_rate"), mean("subsample_accept"), steps, inefficiency,
            draws / inefficiency, tau, 100 * m / n_rows if m else 100.0]


def cost_per_effective_draw(idata, n_rows):
    """CT per coefficient (seed 004 §6.2): IF × per-row evaluations per draw. The evaluations are
    ``n_loglik_evals`` (HMC-ECS: value and gradient of m rows per leapfrog step), ``n_grad_evals``
    (SG methods: per-row gradients) or, for full-data NUTS, leapfrog steps × N."""
    st = idata.sample_stats
    draws = st.sizes["chain"] * st.sizes["draw"]
    if "n_loglik_evals" in st:
        evals = float(st["n_loglik_evals"].sum())
    elif "n_grad_evals" in st:
        evals = float(st["n_grad_evals"].sum())
    else:
        evals = float(st["n_steps"].sum()) * n_rows
    ess = azs.ess(idata, var_names=["beta"])["beta"].values
    return draws / ess * evals / draws


def plot_methods(plt, runs, reference, path):
    ref = flat(reference)
    ref_mean, ref_sd = ref.mean(0), ref.std(0)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    j = np.arange(ref.shape[1])
    for k, (name, idata) in enumerate(runs.items()):
        b = flat(idata)
        axes[0].plot(j, (b.mean(0) - ref_mean) / ref_sd, "o-", ms=3, lw=0.8, label=name, color=f"C{k}")
        axes[1].plot(j, b.std(0) / ref_sd, "o-", ms=3, lw=0.8, color=f"C{k}")
    axes[0].axhline(0, color="k", lw=0.8)
    axes[1].axhline(1, color="k", lw=0.8)
    axes[0].set_ylabel("(mean − mean_NUTS) / sd_NUTS")
    axes[1].set_ylabel("sd / sd_NUTS")
    for ax in axes:
        ax.set_xlabel("coefficient (0 = intercept)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Every method against full-data NUTS, per coefficient (seed 004 Fig. 2, as deviations)",
                 fontsize=9)
    fig.tight_layout()
    save_png(fig, path)


def main(args):
    X, y, label = higgs_stand_in(args.data, args.rows)
    n_rows, d = X.shape
    print(f"data: {label}; N = {n_rows}, d = {d} (intercept + 28)")
    model = logistic_model(X, y)
    seconds, runs = {}, {}

    runs["HMC-ECS perturbed"], step = run(model, lambda: pms.HMCECS(), args.draws, args.tune, seconds,
                                          "HMC-ECS perturbed")
    center, m = step.target.center, step.subsample_size  # the shared θ* and m (as in the paper)
    precision = step.target.laplace_precision()
    runs["HMC-ECS signed"], signed = run(model, lambda: pms.HMCECS(estimator="signed", center=center),
                                         args.draws, args.tune, seconds, "HMC-ECS signed")
    runs["SG-HMC (cv)"], _ = run(model, lambda: pms.SGHMC(center=center, batch_size=m), args.draws,
                                 args.tune, seconds, "SG-HMC (cv)")
    runs["SGLD (cv)"], _ = run(model, lambda: pms.SGLD(center=center, batch_size=m), args.draws,
                               args.tune, seconds, "SGLD (cv)")
    # full-data NUTS with the same dense mass matrix, started at θ*
    reference, _ = run(model, lambda: pm.NUTS(potential=QuadPotentialFull(np.linalg.inv(precision))),
                       args.ref_draws, args.ref_tune, seconds, "NUTS full data")

    print("\nSeed 004 Table 2 (post-warm-up means; IF averaged over the 29 coefficients)")
    rows = [table2_row(name, idata, n_rows, s, args.draws)
            for (name, idata), s in zip(runs.items(), [m, signed.subsample_size, m, m])]
    rows.append(table2_row("NUTS full data", reference, n_rows, None, args.ref_draws))
    print_table(["method", "α_θ", "α_u", "L (leapfrogs)", "IF", "ESS", "τ̂", "100 m/N"], rows)

    print("\nSeed 004 Table 1 (RCT = CT / CT of perturbed HMC-ECS; CT = IF × row evaluations per draw, "
          "post-warm-up) and agreement with full-data NUTS")
    base_ct = None
    rows = []
    for name, idata in {**runs, "NUTS full data": reference}.items():
        ct = cost_per_effective_draw(idata, n_rows)
        base_ct = ct if base_ct is None else base_ct
        rct = ct / base_ct
        agree = ("–", "–")
        if idata is not reference:
            t = pms.compare(idata, reference).table
            agree = (f"{t['abs_mean_diff_over_sd'].max():.3f}",
                     f"{t['sd_ratio'].min():.2f}–{t['sd_ratio'].max():.2f}")
        secs = seconds[name] + seconds[name + " set-up"]
        rows.append([name, f"{secs:.0f}", f"{np.min(rct):.3g}", f"{np.median(rct):.3g}", f"{np.max(rct):.3g}",
                     *agree])
    print_table(["method", "seconds (set-up + sampling)", "RCT min", "RCT median", "RCT max",
                 "max |Δmean|/sd", "sd ratio"], rows)

    plt = pyplot()
    pick = np.sort(np.random.default_rng(4).choice(d, 4, replace=False))  # "four randomly selected"
    # DataTree.isel selects in the groups that have the dim (the posterior) and keeps the others whole
    sub = runs["HMC-ECS perturbed"].isel(beta_dim_0=pick)
    figures = pms.plot_compare(sub, reference.isel(beta_dim_0=pick), figsize=(9, 2.6),
                               kind=["densities"])
    figures.update(pms.plot_compare(runs["HMC-ECS perturbed"], reference, kind=["moments", "loglik_var"],
                                    figsize=(8, 3.2)))
    names = ["intercept", *pms.datasets.HIGGS_FEATURE_NAMES]
    for ax, j in zip(figures["densities"].axes, pick):  # plot_compare labels by position in the subset
        ax.set_title(f"beta[{j}] {names[j]}", fontsize=9)
    for kind, fig in figures.items():
        save_png(fig, Path(args.out) / f"seed004_hmcecs_{kind}.png")
    plot_methods(plt, runs, reference, Path(args.out) / "seed004_hmcecs_methods.png")
    print("seconds:", {k: round(v, 1) for k, v in seconds.items()})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--ref-draws", type=int, default=200)
    parser.add_argument("--ref-tune", type=int, default=100)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=DOCS)
    main(parser.parse_args())
