"""Exact subsampling against the rest: ESS/s with set-up, and row evaluations per ESS.

Data sets: Skin Segmentation (N = 245,057, d = 4) and cod-rna (N = 331,152, d = 9), intercept
first, standardised, N(0, 1) priors; synthetic logistic regressions at N = 10⁶ and 10⁷ with d = 31
(intercept + 30 standard-normal features). Samplers, side by side in one run with the same
settings: ``pms.FireflyMC()``, ``pms.ZigZag()`` (rows drawn ∝ their Lipschitz constants; and
``zigzag_uniform``: the paper's uniform rows), ``pms.HMCECS(estimator="signed")`` (exact after
sign weighting), ``pms.HMCECS()`` (perturbed, with its measured bias) and full-data NUTS
(``pm.sample``; skipped at N = 10⁷, where one iteration costs ~10 s on this machine).

ESS/s = min bulk ESS over coefficients / (set-up + sampling seconds); for the signed HMCECS the
sign-weighted ESS is not used, the plain ESS is (an upper bound). Evaluations per ESS = the
sampler's ``n_loglik_evals`` summed over warm-up and draws, divided by the min ESS (set-up passes
not counted; for NUTS, N per gradient evaluation). The reference for |Δmean|/sd and sd ratios is
the stored full-data NUTS run on Skin, and this run's NUTS elsewhere (at 10⁷: FireflyMC's run).

Usage: python benchmarks/exact.py [--sets skin cod-rna 1e6 1e7] [--draws 1000] [--tune 500]
       [--samplers firefly zigzag zigzag_uniform signed perturbed nuts] [--seed 1]
"""

import argparse
import json
import platform
import time
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from _synthetic import logistic_data, logistic_model

import pymc_subsample as pms

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
        "divergent": int(stats.diverging.sum()) if "diverging" in stats else 0,
        "mean": posterior.mean(("chain", "draw")).values, "sd": posterior.std(("chain", "draw")).values,
        "step": step,
    }
    row["evals_per_ess_draws"] = float(stats.n_loglik_evals.sum()) / ess
    if "n_switches" in stats:
        row["efficiency"] = float(stats.n_switches.sum()) / max(float(stats.n_proposed_switches.sum()), 1.0)
    if "sign" in stats:  # signed HMCECS: sign-weighted moments (Dang et al. 2019 eq. 5.3)
        weighted = pms.sign_weighted(idata, var_names=["beta"])
        row["mean"], row["sd"] = weighted["mean"].values, weighted["sd"].values
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
        if isinstance(step, pms.ZigZag):
            print(f"  {label}: thinning efficiency (switches per candidate) {r['efficiency']:.2%}, "
                  f"post-warm-up evaluations per ESS {r['evals_per_ess_draws']:.3g}")
        if isinstance(step, pms.FireflyMC):
            print(f"  {label}: slack ε = {step.slack:.3g}, proposal rate q = {step.proposal_rate:.3g}, "
                  f"pilot bright fraction {step.expected_bright_fraction:.2e}")
        if reference is not None:
            mean, sd = np.asarray(reference["mean"]), np.asarray(reference["sd"])
            print(f"  {label}: max |Δmean|/sd_ref = {np.max(np.abs(r['mean'] - mean) / sd):.3f}, "
                  f"sd ratio {np.min(r['sd'] / sd):.3f}–{np.max(r['sd'] / sd):.3f}")


SAMPLERS = {
    "firefly": ("FireflyMC()", lambda: pms.FireflyMC(progressbar=False)),
    "zigzag": ("ZigZag()", lambda: pms.ZigZag(progressbar=False)),
    "zigzag_uniform": ('ZigZag(rows="uniform")', lambda: pms.ZigZag(rows="uniform", progressbar=False)),
    "signed": ("HMCECS(signed)", lambda: pms.HMCECS(estimator="signed", progressbar=False)),
    "perturbed": ("HMCECS()", lambda: pms.HMCECS(progressbar=False)),
}


def nuts_row(model, n_rows, draws, tune):
    with model:
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False, discard_tuned_samples=False)
        seconds = time.perf_counter() - t
    ess = float(np.min(az.ess(idata).beta.values))
    grads = float(idata.sample_stats.n_steps.sum() + idata.warmup_sample_stats.n_steps.sum())
    posterior = idata.posterior.beta
    return {"setup_s": 0.0, "sampling_s": seconds, "min_ess": ess, "ess_per_s": ess / seconds,
            "evals_per_ess": grads * n_rows / ess, "n_bright": np.nan, "n_proposed": np.nan,
            "divergent": int(idata.sample_stats.diverging.sum()),
            "mean": posterior.mean(("chain", "draw")).values, "sd": posterior.std(("chain", "draw")).values,
            "step": None}


def data_set(name):
    if name == "skin":
        data = pms.datasets.load_skin(DATA / "skin", standardize=True)
        reference = json.loads((DATA / "skin" / "reference_nuts.json").read_text())
    elif name == "cod-rna":
        data, reference = pms.datasets.load_cod_rna(DATA / "cod-rna", part="all", standardize=True), None
    else:
        X, y = logistic_data(int(float(name)), 30, seed=0)
        return np.column_stack([np.ones(X.shape[0]), X]), y, None
    return np.column_stack([np.ones(data.X.shape[0]), data.X]), data.y, reference


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", nargs="+", default=["skin", "cod-rna", "1e6", "1e7"])
    parser.add_argument("--samplers", nargs="+", default=[*SAMPLERS, "nuts"])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1, help="random_seed of the subsampling runs")
    parser.add_argument("--nuts-draws", type=int, default=300, help="draws and tune of NUTS at N ≥ 10⁶")
    args = parser.parse_args()
    print(platform.platform(), "| PyMC", pm.__version__, "| 1 chain,", args.tune, "tune +", args.draws,
          "draws")
    for name in args.sets:
        X, y, reference = data_set(name)
        model = logistic_model(X, y)
        rows = {}
        if "nuts" in args.samplers and len(y) < 5_000_000:
            n_nuts = args.draws if len(y) < 500_000 else args.nuts_draws
            rows["NUTS (full data)"] = nuts_row(model, len(y), n_nuts, min(args.tune, n_nuts))
        for key in args.samplers:
            if key in SAMPLERS:
                label, make = SAMPLERS[key]
                rows[label] = run(model, make, args.draws, args.tune, seed=args.seed)
        if reference is None:
            reference = rows.get("NUTS (full data)") or rows.get("FireflyMC()") or rows.get("HMCECS()")
        report(name, rows, len(y), reference)


if __name__ == "__main__":
    main()
