"""ISS-MCMC on the AR(2) model of Alquier's ISS slides ("Example 2: Auto regressive model").

y_t = θ1 y_{t-1} + θ2 y_{t-2} + ζ_t, ζ_t ~ N(0, θ3²), N = 10^6 simulated rows (the two
lags are the columns of a pm.Data matrix), priors θ1,2 ~ N(0, 10²), θ3 ~ HalfNormal(5).
Runs, on the same data, side by side:

* full-data PyMC NUTS (1 chain; the accuracy reference together with the exact σ
  marginal, computed on a grid with θ1, θ2 integrated out analytically);
* ``pms.ISS`` with n ∈ {100, 1000}, Yule–Walker (callable) or "moments" summaries,
  ε = "auto", plus ε = 0 (uniform subsets) and the HMC inner update;
* ``pms.SubsampleMH`` (pseudo-marginal, difference estimator, m = 1000) if present.

It prints time per iteration, per-row likelihood evaluations per iteration, ESS of σ,
and the accuracy of the σ = θ3 marginal, and writes ``benchmarks/out_iss/`` (a JSON of
the numbers and a PNG of the marginals if matplotlib is installed).

``--glm`` instead runs ``pms.ISS`` with its defaults, and with the old default summary
("moments"), on the zoo GLMs "linear" (unknown σ) and "poisson_offset" (X and y as
``pm.Data``) against full-data PyMC NUTS: per run the largest |Δmean| in NUTS
posterior sds, the largest sd ratio, the smallest bulk ESS, seconds per iteration, and
which Laplace-check warnings fired.

Usage::

    python benchmarks/iss.py [--N 1000000] [--draws 10000] [--tune 2000] [--nuts-draws 500]
        [--reuse-nuts] [--only SUBSTRING ...]
    python benchmarks/iss.py --glm [--glm-N 50000] [--seeds 1 2]

``--reuse-nuts`` takes the NUTS row from ``out_iss/nuts_N{N}.json`` written by an earlier
run of this script on the same data (full-data NUTS at N = 10^6 takes ~7 minutes here).
``--only`` runs the ISS configurations whose name contains one of the substrings.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from scipy.special import logsumexp

from pymc_subsample.model.tall import TallModel
from pymc_subsample.step_methods.iss import ISS

# one AR(2) set-up (simulator, PyMC model, Yule-Walker summary) for the tests and this benchmark
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_iss import ar2_model, simulate_ar2, yule_walker  # noqa: E402
from zoo import build  # noqa: E402

OUT = Path(__file__).resolve().parent / "out_iss"


def sigma_reference(X, y, tau=10.0, sigma_sd=5.0):
    """Exact σ marginal on a grid (β integrated out analytically)."""
    N = len(y)
    XX, Xy, yy = X.T @ X, X.T @ y, y @ y
    s_hat = np.sqrt((yy - Xy @ np.linalg.solve(XX, Xy)) / N)
    grid = s_hat + np.linspace(-12, 12, 2001) * s_hat / np.sqrt(2 * N)
    logp = np.array([
        -0.5 * s**2 / sigma_sd**2 - N * np.log(s) - yy / (2 * s**2)
        + 0.5 * (Xy / s**2) @ np.linalg.solve(XX / s**2 + np.eye(2) / tau**2, Xy / s**2)
        - 0.5 * np.linalg.slogdet(XX / s**2 + np.eye(2) / tau**2)[1]
        for s in grid
    ])
    w = np.exp(logp - logsumexp(logp))
    mean = w @ grid
    return grid, w / (grid[1] - grid[0]), mean, np.sqrt(w @ (grid - mean) ** 2)


def run(name, model, step, draws, tune, chains, ref, nuts=None):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        idata = pm.sample(step=step, draws=draws, tune=tune, chains=chains, cores=1, random_seed=7,
                          progressbar=False, compute_convergence_checks=False, model=model)
    wall = time.perf_counter() - t0
    per_iter = idata.posterior.attrs.get("sampling_time", wall) / (chains * (draws + tune))
    s = idata.posterior["sigma"]
    m, sd = float(s.mean()), float(s.std())
    ss = idata.sample_stats
    row = {
        "method": name, "sec_per_iter": per_iter, "wall_s": wall,
        "sigma_mean": m, "sigma_sd": sd, "ess_sigma": float(az.ess(s)),
        "dmean_over_sd_exact": abs(m - ref[2]) / ref[3], "sd_ratio_exact": sd / ref[3],
        "evals_per_iter": float(ss["n_loglik_evals"].mean()) if "n_loglik_evals" in ss else float("nan"),
        "refresh_rate": ([float(r) for r in ss["refresh_rate"].values[:, -1]]
                         if "refresh_rate" in ss else None),
    }
    if nuts is not None:
        row["dmean_over_sd_nuts"] = abs(m - nuts[0]) / nuts[1]
        row["sd_ratio_nuts"] = sd / nuts[1]
    print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    return row, s.values.ravel()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=1_000_000)
    ap.add_argument("--draws", type=int, default=10000, help="ISS draws per chain")
    ap.add_argument("--tune", type=int, default=2000, help="ISS tuning iterations per chain")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--nuts-draws", type=int, default=500)
    ap.add_argument("--reuse-nuts", action="store_true")
    ap.add_argument("--no-nuts", action="store_true", help="compare with the exact marginal only")
    ap.add_argument("--mh-draws", type=int, default=2000, help="SubsampleMH draws (1 chain)")
    ap.add_argument("--only", nargs="+", default=None, help="ISS configurations to run (substrings)")
    ap.add_argument("--glm", action="store_true", help="zoo GLMs against NUTS instead of AR(2)")
    ap.add_argument("--glm-N", type=int, default=50_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.glm:
        return glm_main(args)

    X, y = simulate_ar2(args.N)
    ref = sigma_reference(X, y)
    print(f"N = {args.N}: exact sigma marginal mean {ref[2]:.6f} sd {ref[3]:.6f}", flush=True)
    model = ar2_model(X, y)
    t0 = time.perf_counter()
    tall = TallModel(model)
    print(f"TallModel set-up {time.perf_counter() - t0:.2f} s", flush=True)
    rows, draws_by = [], {}

    nuts_file = OUT / f"nuts_N{args.N}.json"
    if args.no_nuts:
        row = None
    elif args.reuse_nuts and nuts_file.exists():
        row = json.loads(nuts_file.read_text())
        print("NUTS row reused from", nuts_file, json.dumps(row), flush=True)
    else:
        row, d = run("NUTS full data", model, pm.NUTS(model=model), args.nuts_draws, args.nuts_draws,
                     1, ref)
        row["evals_per_iter"] = None
        nuts_file.write_text(json.dumps(row))
        draws_by[row["method"]] = d
    nuts = None if row is None else (row["sigma_mean"], row["sigma_sd"])
    if row is not None:
        rows.append(row)

    configs = [
        ("ISS n=1000 YW eps=0 (uniform)", dict(subset_size=1000, epsilon=0.0, summary=yule_walker)),
        ("ISS n=100 YW auto", dict(subset_size=100, summary=yule_walker)),
        ("ISS n=1000 YW auto", dict(subset_size=1000, summary=yule_walker)),
        ("ISS n=1000 YW auto HMC", dict(subset_size=1000, summary=yule_walker, inner="hmc")),
        ("ISS n=100 moments auto", dict(subset_size=100, summary="moments")),
        ("ISS n=1000 moments auto", dict(subset_size=1000, summary="moments")),
        ("ISS n=1000 YW auto refresh 1%", dict(subset_size=1000, summary=yule_walker, target_refresh=0.01)),
        ("ISS n=1000 moments auto refresh 1%",
         dict(subset_size=1000, summary="moments", target_refresh=0.01)),
        ("ISS n=100 map auto", dict(subset_size=100, summary="map")),
        ("ISS defaults (n=sqrt N, map, auto)", dict()),
    ]
    if args.only:
        configs = [(name, kw) for name, kw in configs if any(o in name for o in args.only)]
    for name, kw in configs:
        t0 = time.perf_counter()
        step = ISS(model=tall, **{"thin": 1, **kw})  # one iteration per draw unless a config says
        setup = time.perf_counter() - t0
        row, d = run(name, model, step, args.draws, args.tune, args.chains, ref, nuts)
        row["setup_s"] = setup
        rows.append(row)
        draws_by[name] = d

    try:
        from pymc_subsample.step_methods.subsample_mh import SubsampleMH
    except ImportError:
        SubsampleMH = None
    if SubsampleMH is not None and not args.only:
        t0 = time.perf_counter()
        with model:
            step = SubsampleMH(test="pseudo-marginal", subsample_size=1000, thin=1)
        setup = time.perf_counter() - t0
        row, d = run("SubsampleMH pseudo-marginal m=1000", model, step, args.mh_draws, args.mh_draws // 2,
                     1, ref, nuts)
        row["setup_s"] = setup
        rows.append(row)
        draws_by[row["method"]] = d

    summary = {"N": args.N, "exact_sigma": list(ref[2:]), "rows": rows}
    (OUT / ("iss_ar2_only.json" if args.only else "iss_ar2.json")).write_text(json.dumps(summary, indent=1))
    if args.only:
        return  # a partial run: keep the full run's figure
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(ref[0], ref[1], "k-", lw=2, label="exact")
    for name, d in draws_by.items():
        if "eps=0" in name:
            continue
        ax.hist(d, bins=60, density=True, histtype="step", label=name)
    ax.set_xlabel("θ3 (noise sd)")
    ax.set_xlim(ref[2] - 12 * ref[3], ref[2] + 12 * ref[3])
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "iss_ar2_sigma.png", dpi=120)


# ------------------------------------------------------------------ zoo GLMs
# (label, ISS keyword arguments as a function of n, draws, tune); "old defaults" are those
# the earlier defaults: summary="moments" and swap_size = max(1, n // 100)
GLM_CONFIGS = [
    ("defaults (map, swap 1)", lambda n: {}, 300, 300),
    ("old defaults (moments, swap n//100)", lambda n: {"summary": "moments", "swap_size": max(1, n // 100)},
     300, 300),
    ("moments, swap 1", lambda n: {"summary": "moments"}, 300, 300),
    ("defaults (map, swap 1)", lambda n: {}, 3000, 1000),
    ("old defaults (moments, swap n//100)", lambda n: {"summary": "moments", "swap_size": max(1, n // 100)},
     3000, 1000),
    ("moments, swap 1", lambda n: {"summary": "moments"}, 3000, 1000),
]


def _nuts_moments(name, N):
    """Per-coordinate mean and sd of full-data NUTS (1 chain, 500 + 500), cached in out_iss/."""
    path = OUT / f"nuts_glm_{name}_N{N}.json"
    if path.exists():
        return {k: np.asarray(v) for k, v in json.loads(path.read_text()).items()}
    with build(name, N), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        idata = pm.sample(draws=500, tune=500, chains=1, random_seed=0, progressbar=False,
                          compute_convergence_checks=False)
    out = {}
    for var in idata.posterior.data_vars:
        x = idata.posterior[var].values.reshape(-1, int(np.prod(idata.posterior[var].shape[2:])))
        out[var] = np.stack([x.mean(0), x.std(0)])
    path.write_text(json.dumps({k: v.tolist() for k, v in out.items()}))
    return out


def glm_main(args):
    rows = []
    for name in ["linear", "poisson_offset"]:
        ref = _nuts_moments(name, args.glm_N)
        model = build(name, args.glm_N)
        n = math.ceil(math.sqrt(args.glm_N))
        for label, kw, draws, tune in GLM_CONFIGS:
            for seed in args.seeds:
                t0 = time.perf_counter()
                with model:
                    step = ISS(**{"thin": 1, **kw(n)})
                setup = time.perf_counter() - t0
                with warnings.catch_warnings(record=True) as record:
                    warnings.simplefilter("always")
                    t0 = time.perf_counter()
                    idata = pm.sample(step=step, draws=draws, tune=tune, chains=1, random_seed=seed,
                                      progressbar=False, compute_convergence_checks=False, model=model)
                    wall = time.perf_counter() - t0
                shifts, ratios, ess = [], [], []
                for var, (mean, sd) in ref.items():
                    x = idata.posterior[var].values.reshape(draws, -1)
                    shifts += list(np.abs(x.mean(0) - mean) / sd)
                    ratios += list(x.std(0) / sd)
                    ess += [float(az.ess(x[None, :, j])) for j in range(x.shape[1])]
                fired = sorted({("spread" if "standard deviation is" in str(r.message) else "shift")
                                for r in record if "Laplace standard deviation" in str(r.message)})
                row = {"model": name, "N": args.glm_N, "config": label, "draws": draws, "tune": tune,
                       "seed": seed, "n": step.n, "swap_size": step.swap_size,
                       "max_abs_dmean_over_sd": max(shifts),
                       "max_sd_ratio": max(ratios), "min_sd_ratio": min(ratios), "min_ess": min(ess),
                       "sec_per_iter": wall / (draws + tune), "setup_s": setup,
                       "refresh_rate": float(idata.sample_stats["refresh_rate"].values[0, -1]),
                       "epsilon": float(idata.sample_stats["epsilon"].values[0, -1]),
                       "laplace_warnings": fired}
                print(json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v)
                                  for k, v in row.items()}), flush=True)
                rows.append(row)
    (OUT / f"iss_glm_N{args.glm_N}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
