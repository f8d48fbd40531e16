"""Seed 003 (El hanchi 2018), §3.1 and Fig. 1: OSGFS against full-data Metropolis, as covariance ellipses.

Data: ``../shared/data/skin`` (Skin Segmentation, N = 245,057, 3 features) and
``../shared/data/cod-rna`` (train + test, N = 331,152, 8 features; the paper's 488,565 rows also
include the validation part, which is not in ../shared/data). Features standardised, intercept
added, prior N(0, 10² I) (the paper's N(0, 100 I)). The example skips a data set that is absent.

Both samplers start at the full-data MAP θ*. Metropolis: ``pms.SubsampleMH(test="exact")``, a
random walk shaped by the Laplace covariance, every decision on all N rows, d moves per draw
(the paper ran 100,000 Metropolis draws; 600 thinned draws keep this example under 10 minutes). OSGFS:
``pms.SGFS()`` (seed 003 Alg. 1) with |S| = 10,000 and k = 4|S|/(N + |S|) as in the paper
("since we have a very weak prior"), draws before the convergence criterion (17) held dropped.
As in Fig. 1, the draws are projected on the largest and smallest principal components of the
Metropolis sample, Metropolis in blue with a red 3-sd covariance ellipse, OSGFS in cyan with a
yellow one. Printed: per data set the costs, |Δmean| / sd and sd ratio against Metropolis per
coefficient, and the ratio of the two ellipses' axes. Figure: ``docs/seed003_osgfs.png``.

Usage: python examples/seed003_osgfs.py [--mh-draws 600] [--mh-thin d] [--osgfs-draws 3000] [--batch 10000]
       [--data ../shared/data] [--out docs]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import arviz_stats as azs
import numpy as np
import pymc as pm
from _common import (
    DATA,
    DOCS,
    SAMPLE,
    data_path,
    flat,
    logistic_model,
    print_table,
    pyplot,
    save_png,
    skip,
    timed,
)

import pymc_subsample as pms


def load(data_root):
    """{name: (X with intercept, y)} for the data sets present."""
    out = {}
    if (path := data_path(data_root, "skin")) is not None:
        skin = pms.datasets.load_skin(path, standardize=True)
        out["Skin Segmentation"] = (np.column_stack([np.ones(skin.n_obs), skin.X]), skin.y)
    if (path := data_path(data_root, "cod-rna")) is not None:
        cod = pms.datasets.load_cod_rna(path, part="all", standardize=True)
        out["Cod RNA"] = (np.column_stack([np.ones(cod.n_obs), cod.X]), cod.y)
    return out


def run_pair(name, X, y, args):
    model = logistic_model(X, y, prior_sd=10.0)
    seconds = {}
    n_rows, d = X.shape
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with timed(seconds, "map"):
            center = pms.find_map(progressbar=False)["beta"]
        with timed(seconds, "mh"):
            # d moves per draw (ESS ≈ draws / 3 for a tuned random walk): each move is a full pass
            mh_step = pms.SubsampleMH(test="exact", center=center, thin=args.mh_thin or d, progressbar=False)
            mh = pm.sample(step=mh_step,
                           draws=args.mh_draws, tune=args.mh_tune, chains=1, random_seed=1, **SAMPLE)
        k = 4 * args.batch / (n_rows + args.batch)  # the paper's k for a very weak prior
        with timed(seconds, "osgfs"):
            step = pms.SGFS(batch_size=args.batch, k=k, center=center, progressbar=False)
            sg = pm.sample(step=step, draws=args.osgfs_draws, tune=0, chains=1, random_seed=2, **SAMPLE)
    first = int(np.argmax(sg.sample_stats["converged"].values[0]))
    kept = pms.drop_unconverged(sg)
    a, b = flat(mh), flat(kept)
    sd = a.std(0)
    # the two ellipses along the Metropolis sample's extreme principal axes
    eigval, eigvec = np.linalg.eigh(np.cov(a, rowvar=False))
    axes = eigvec[:, [-1, 0]]  # largest, smallest
    axis_ratio = np.sqrt(np.diag(axes.T @ np.cov(b, rowvar=False) @ axes) / eigval[[-1, 0]])
    evals = float(sg.sample_stats["n_grad_evals"].sum())
    row = [name, n_rows, d, args.batch, f"{k:.3f}", first, b.shape[0],
           f"{float(azs.ess(kept, var_names=['beta'])['beta'].min()):.0f}",
           f"{float(azs.ess(mh, var_names=['beta'])['beta'].min()):.0f}",
           f"{seconds['mh']:.0f}", f"{seconds['osgfs']:.0f}", f"{evals / n_rows:.0f}",
           f"{np.max(np.abs(b.mean(0) - a.mean(0)) / sd):.2f}",
           f"{np.min(b.std(0) / sd):.2f}–{np.max(b.std(0) / sd):.2f}",
           f"{axis_ratio[0]:.2f} / {axis_ratio[1]:.2f}"]
    return row, a, b, axes


def ellipse(ax, draws, axes, color, label):
    """3-sd ellipse of the projected draws' covariance."""
    z = draws @ axes
    cov, mean = np.cov(z, rowvar=False), z.mean(0)
    vals, vecs = np.linalg.eigh(cov)
    t = np.linspace(0, 2 * np.pi, 200)
    circle = np.stack([np.cos(t), np.sin(t)])
    curve = mean[:, None] + vecs @ (3 * np.sqrt(vals)[:, None] * circle)
    ax.plot(curve[0], curve[1], color=color, lw=2, label=label)


def main(args):
    data = load(args.data)
    if not data:
        skip(f"neither skin nor cod-rna is in {args.data}; seed 003's experiment needs the real data")
    plt = pyplot()
    fig, axs = plt.subplots(1, len(data), figsize=(4.2 * len(data), 3.8), squeeze=False)
    rows = []
    for ax, (name, (X, y)) in zip(axs[0], data.items()):
        print(f"{name}: N = {X.shape[0]}, d = {X.shape[1]}")
        row, a, b, axes = run_pair(name, X, y, args)
        rows.append(row)
        centre = a.mean(0)
        za, zb = (a - centre) @ axes, (b - centre) @ axes
        ax.scatter(zb[:, 0], zb[:, 1], s=2, color="c", alpha=0.4, label="OSGFS")
        ax.scatter(za[:, 0], za[:, 1], s=3, color="tab:blue", alpha=0.6, label="Metropolis")  # fewer: on top
        ellipse(ax, a - centre, axes, "red", "Metropolis 3 sd")
        ellipse(ax, b - centre, axes, "gold", "OSGFS 3 sd")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("largest principal component")
        ax.set_ylabel("smallest principal component")
    axs[0, 0].legend(fontsize=7, markerscale=4)
    fig.suptitle("OSGFS (cyan, yellow ellipse) against full-data Metropolis (blue, red ellipse); "
                 "seed 003 Fig. 1",
                 fontsize=9)
    fig.tight_layout()
    print()
    print_table(["data", "N", "d", "|S|", "k", "first converged draw", "OSGFS draws kept", "min ESS OSGFS",
                 "min ESS MH", "MH s", "OSGFS s", "OSGFS grads / N", "max |Δmean|/sd", "sd ratio",
                 "ellipse axes ratio (largest / smallest PC)"], rows)
    save_png(fig, Path(args.out) / "seed003_osgfs.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mh-draws", type=int, default=600)
    parser.add_argument("--mh-tune", type=int, default=100)
    parser.add_argument("--mh-thin", type=int, default=None, help="MH moves per draw (default d)")
    parser.add_argument("--osgfs-draws", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=DOCS)
    main(parser.parse_args())
