"""Firefly Monte Carlo benchmark (issue 14): ESS per second with set-up, and row evaluations per ESS.

Skin Segmentation (N = 245,057, d = 4, intercept first, standardised, N(0, 1) priors) and a synthetic
logistic regression (default N = 10⁶, d = 31: intercept + 30 standard-normal features). For each,
``pms.FireflyMC()`` with its defaults (MAP-tuned Jaakkola-Jordan bound with "auto" slack) and, side by
side in the same run and settings, ``pms.HMCECS()``; on Skin also ``FireflyMC(slack=0)``, the tight
bound of Maclaurin & Adams, to show what the slack buys.

ESS/s = min bulk ESS over coefficients / (set-up + sampling seconds). Evaluations per ESS = the
sampler's ``n_loglik_evals`` summed over warm-up and draws, divided by the min ESS; set-up passes
(centre, Taylor sums for the mass matrix, collapsed bound sums) are not in it and are listed as
seconds. One chain, fixed seed.

Usage: python benchmarks/exact_firefly.py [--rows 1000000] [--features 30] [--draws 1000] [--tune 500]
       [--skip-synthetic] [--skip-hmcecs]
"""

import argparse
import json
import platform
import time
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from _synthetic import logistic_data

import pymc_subsample as pms

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def model_of(X, y):
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        y_ = pm.Data("y_obs", y)
        beta = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y_)
    return model


def run(model, make_step, draws, tune, seed=1):
    with model:
        t = time.perf_counter()
        step = make_step()
        setup = time.perf_counter() - t
        t = time.perf_counter()
        idata = pm.sample(step=step, draws=draws, tune=tune, chains=1, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False, discard_tuned_samples=False)
        sampling = time.perf_counter() - t
    posterior = idata.posterior.beta
    ess = float(np.min(az.ess(idata).beta.values))
    stats = idata.sample_stats
    evals = float(stats.n_loglik_evals.sum()) + float(idata.warmup_sample_stats.n_loglik_evals.sum())
    row = {
        "setup_s": setup, "sampling_s": sampling, "min_ess": ess, "ess_per_s": ess / (setup + sampling),
        "evals_per_ess": evals / ess,
        "n_bright": float(stats.n_bright.mean()) if "n_bright" in stats else np.nan,
        "n_proposed": float(stats.n_proposed.mean()) if "n_proposed" in stats else np.nan,
        "divergent": int(stats.diverging.sum()), "mean": posterior.mean(("chain", "draw")).values,
        "sd": posterior.std(("chain", "draw")).values, "step": step,
    }
    return row


def report(name, rows, n_rows, reference=None):
    print(f"\n== {name} (N = {n_rows:,}) ==")
    print(f"{'sampler':<28}{'setup s':>9}{'sample s':>9}{'minESS':>8}{'ESS/s':>8}{'evals/ESS':>11}"
          f"{'bright':>8}{'proposed':>9}{'div':>5}")
    for label, r in rows.items():
        print(f"{label:<28}{r['setup_s']:>9.1f}{r['sampling_s']:>9.1f}{r['min_ess']:>8.0f}{r['ess_per_s']:>8.1f}"
              f"{r['evals_per_ess']:>11.3g}{r['n_bright']:>8.1f}{r['n_proposed']:>9.1f}{r['divergent']:>5d}")
    for label, r in rows.items():
        step = r["step"]
        if isinstance(step, pms.FireflyMC):
            print(f"  {label}: slack ε = {step.slack:.3g}, proposal rate q = {step.proposal_rate:.3g}, "
                  f"pilot bright fraction {step.expected_bright_fraction:.2e}")
        if reference is not None:
            mean, sd = np.asarray(reference["mean"]), np.asarray(reference["sd"])
            print(f"  {label}: max |Δmean|/sd_ref = {np.max(np.abs(r['mean'] - mean) / sd):.3f}, "
                  f"sd ratio {np.min(r['sd'] / sd):.3f}–{np.max(r['sd'] / sd):.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=30)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--skip-hmcecs", action="store_true")
    args = parser.parse_args()
    print(platform.platform(), "| PyMC", pm.__version__, "| 1 chain,", args.tune, "tune +", args.draws,
          "draws")

    skin = pms.datasets.load_skin(DATA / "skin", standardize=True)
    X = np.column_stack([np.ones(skin.X.shape[0]), skin.X])
    reference = json.loads((DATA / "skin" / "reference_nuts.json").read_text())
    model = model_of(X, skin.y)
    rows = {"FireflyMC()": run(model, pms.FireflyMC, args.draws, args.tune),
            "FireflyMC(slack=0)": run(model, lambda: pms.FireflyMC(slack=0.0), args.draws, args.tune)}
    if not args.skip_hmcecs:
        rows["HMCECS()"] = run(model, pms.HMCECS, args.draws, args.tune)
    report("Skin Segmentation", rows, len(skin.y), reference)

    if not args.skip_synthetic:
        Xs, ys = logistic_data(args.rows, args.features, seed=0)
        Xs = np.column_stack([np.ones(args.rows), Xs])
        model = model_of(Xs, ys)
        rows = {"FireflyMC()": run(model, pms.FireflyMC, args.draws, args.tune)}
        if not args.skip_hmcecs:
            rows["HMCECS()"] = run(model, pms.HMCECS, args.draws, args.tune)
        report(f"synthetic logistic, d = {Xs.shape[1]}", rows, args.rows)


if __name__ == "__main__":
    main()
