"""Seed 001 (Vetrov's slides on Seita et al.'s minibatch MH test): mean batch size against exact decisions.

Data: synthetic, as in the slides' "Efficiency" example: N = 10⁶ points from the Gaussian mixture
of Welling & Teh (2011), x ~ ½ N(θ1, 2) + ½ N(θ1 + θ2, 2) with θ = (0, 1), priors θ1 ~ N(0, 10),
θ2 ~ N(0, 1).

1. ``pms.SubsampleMH(test="barker", error=δ)`` chains (Laplace-shaped random walk from θ*, one
   move per draw, minibatch increment ⌈√N⌉ = 1000) for δ = None (the slides' first rule:
   grow until σ²(Δ*) < 1), 0.3, 0.1 and 0.03 (both rules of "Algorithm", step 2: σ² < 1 and
   the bound (6.4 E|Z|³ + 2 E|Z|)/√b < δ, Seita et al.'s bound alone: the step's test with
   ``smoothed=False``; that bound is ≥ 8.4/√b, so δ = 0.01 would read
   > 705,600 rows a decision, in effect the exact test). Stats: the minibatch size of every decision
   (``batch_size``), the fraction of decisions that needed all N rows (the exact Barker test)
   and the acceptance rate.
2. The decisions themselves, with the kernel ``pymc_subsample.kernels.mh_tests.barker_test`` on
   the same per-row terms the chains use (Taylor remainders around θ*, ``control_variates=True``): for
   proposals drawn along the chain, how often the minibatch decision equals the exact Barker
   decision Δ + logit(u) > 0 on the same uniform u, and the mean of accept − S(Δ) over
   proposals and repeats (S the logistic CDF; seed 001 bounds |P(accept) − S(Δ)| by δ).

Figure ``docs/seed001_barker.png``: the histogram of minibatch sizes per δ (Seita et al.'s
figure) and the mean batch size against the rate of decisions equal to the exact one.

Usage: python examples/seed001_barker.py [--rows 1000000] [--draws 300] [--tune 100] [--proposals 100]
       [--out docs]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from _common import DOCS, SAMPLE, flat, print_table, pyplot, save_png
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.kernels import mh_tests

ERRORS = (None, 0.3, 0.1, 0.03)  # δ = 0.01 needs > 705,600 rows a decision: all of N here


def mixture_model(x):
    with pm.Model() as model:
        theta1 = pm.Normal("theta1", 0.0, math.sqrt(10.0))
        theta2 = pm.Normal("theta2", 0.0, 1.0)
        mu = pm.math.stack([theta1, theta1 + theta2])
        pm.NormalMixture("x", w=np.array([0.5, 0.5]), mu=mu, sigma=math.sqrt(2.0), observed=x)
    return model


def proposals_and_terms(step, thetas, n_proposals, seed):
    """Proposals θ' = θ + random walk from chain states θ, with the chains' per-row terms on all N rows:
    t_k = r_k(θ') − r_k(θ), r_k = ℓ_k − q_k the Taylor remainder, and the offset the test adds
    exactly (the Σq difference and the prior ratio)."""
    rng = np.random.default_rng(seed)
    tall, target, proxy = step.tall, step.target, step.proxy
    everything = tall.row_slice(0, tall.n_rows)
    chol = np.linalg.cholesky(np.linalg.inv(target.laplace_precision()))
    scale = 2.38 / math.sqrt(tall.ndim)  # the chains' initial random-walk scale
    out = []
    for _ in range(n_proposals):
        theta = thetas[rng.integers(len(thetas))]
        prop = theta + scale * chol @ rng.standard_normal(tall.ndim)
        t = target.differences(prop, everything) - target.differences(theta, everything)
        offset = float(target.prior_value(prop) - target.prior_value(theta)
                       + proxy.sum_value_and_grad(prop)[0] - proxy.sum_value_and_grad(theta)[0])
        out.append((t, offset))
    return out


def decision_agreement(problems, error, batch_size, seed, repeats=10):
    """Rate at which the minibatch Barker decision equals the exact one Δ + logit(u) > 0 on the
    same u, mean rows read, and the mean of accept − S(Δ) over proposals and repeats (the
    acceptance-probability error that seed 001 bounds by δ, averaged)."""
    rng = np.random.default_rng(seed)
    same = rows = bias = 0.0
    for t, offset in problems:
        delta = offset + float(t.sum())
        for _ in range(repeats):
            u = rng.random()
            accept, used, _ = mh_tests.barker_test(t.__getitem__, len(t), offset, u, rng,
                                                   batch_size=batch_size, error=error, smoothed=False)
            same += accept == mh_tests.exact_barker_test(delta, u)
            rows += used
            bias += accept - expit(delta)
    count = len(problems) * repeats
    return same / count, rows / count, bias / count


def main(args):
    rng = np.random.default_rng(0)
    x = rng.normal(np.where(rng.random(args.rows) < 0.5, 0.0, 1.0), math.sqrt(2.0))
    model = mixture_model(x)
    print(f"Gaussian mixture, N = {args.rows}")
    rows, sizes = [], {}
    step = center = problems = None
    for error in ERRORS:
        print(f"δ = {error}", flush=True)
        start = time.perf_counter()
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "δ cannot be met below N": in the table
            step = pms.SubsampleMH(test="barker", error=error, thin=1, center=center, progressbar=False)
            # Seita et al.'s bound alone, as in the slides (the step's default also stops on the
            # smoothing bound, of order σ³(Δ*), which the proxy-corrected terms meet at the first look)
            step.accept_test = dataclasses.replace(step.accept_test, smoothed=False)
            center = step.target.center  # one θ* for every run
            idata = pm.sample(step=step, draws=args.draws, tune=args.tune, chains=1, random_seed=1, **SAMPLE)
        secs = time.perf_counter() - start
        st = idata.sample_stats
        b = st["batch_size"].values.ravel()
        sizes[error] = b
        thetas = np.column_stack([flat(idata, "theta1")[:, 0], flat(idata, "theta2")[:, 0]])
        if problems is None:  # the same proposals for every δ, drawn along the first chain
            problems = proposals_and_terms(step, thetas, args.proposals, seed=3)
        agree, mean_rows, bias = decision_agreement(problems, error, step.subsample_size, seed=4)
        rows.append(["None (σ² < 1 only)" if error is None else error, f"{b.mean():.0f}",
                     f"{b.mean() / args.rows:.2%}", f"{np.mean(b >= args.rows):.2f}",
                     f"{float(st['accepted'].mean()):.3f}", f"{agree:.3f}",
                     f"{mean_rows:.0f}", f"{bias:+.3f}",
                     f"{thetas.mean(0)[0]:.4f}, {thetas.mean(0)[1]:.4f}", f"{secs:.0f}"])
    print_table(["δ", "mean batch", "of N", "decisions on all N rows", "acceptance",
                 "same decision as exact Barker", "rows (kernel)",
                 "mean accept − S(Δ)", "mean θ", "chain s"], rows)

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    bins = np.geomspace(500, args.rows * 1.05, 40)
    for k, (error, b) in enumerate(sizes.items()):
        axes[0].hist(b, bins=bins, histtype="step", lw=1.5, color=f"C{k}",
                     label="δ = None (σ² < 1)" if error is None else f"δ = {error}")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("minibatch size per decision (rows)")
    axes[0].set_ylabel("decisions")
    axes[0].legend(fontsize=7)
    axes[0].set_title("Minibatch sizes (Seita et al.'s histogram)", fontsize=9)
    count = args.proposals * 10  # decisions per δ in decision_agreement
    for k, row in enumerate(rows):
        x, y = float(row[1]), float(row[5])
        axes[1].errorbar(x, y, yerr=2 * math.sqrt(y * (1 - y) / count), fmt="o", color=f"C{k}", capsize=3)
        label = f"δ = {row[0]}".replace(" (σ² < 1 only)", "") + f"\naccept − S(Δ) = {row[7]}"
        axes[1].annotate(label, (x, y), fontsize=7, xytext=(4, -22), textcoords="offset points")
    axes[1].set_ylim(0.8, 1.0)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("mean minibatch size (rows)")
    axes[1].set_ylabel("same decision as exact (±2 SE)")
    axes[1].set_title(f"Cost against exactness, N = {args.rows:.0e}", fontsize=9)
    fig.suptitle("Minibatch Barker test (seed 001) on the Gaussian mixture of Welling & Teh", fontsize=9)
    fig.tight_layout()
    save_png(fig, Path(args.out) / "seed001_barker.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=100)
    parser.add_argument("--proposals", type=int, default=100)
    parser.add_argument("--out", type=Path, default=DOCS)
    main(parser.parse_args())
