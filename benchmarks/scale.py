"""Data beyond RAM: HMCECS on logistic regression with X and y in zarr on local disk.

Synthetic logistic regression, d = 31 features, float32, rows in zarr chunks of ``--chunk-rows``
rows; the model reads them through ``pms.Data``. Each N runs in its own process, so that its
peak resident memory (VmHWM) is its own. Per N it prints:
- pass: seconds of one streamed full pass (Σℓ and ∇Σℓ at θ = 0, chunks of 20,000 rows);
- set-up: seconds to build ``pms.HMCECS(subsample_size=1000, num_blocks=100)`` (centre, proxy
  sums, compilation), the same in units of one pass's time, and the number of streamed full
  passes it made (counted by ``chunked_sum``);
- ms/iter: wall-clock per HMCECS iteration inside ``pm.sample`` (tune + draws, 1 chain);
- peak RSS in GB;
- agreement: max over coefficients of |posterior mean − true β|/posterior sd, and against the
  Laplace approximation at the full-data mode (three Newton steps from θ*, one streamed pass
  each): max |Δmean|/sd_Laplace and the range of sd/sd_Laplace;
- θ* off: max |θ* − mode|/sd_Laplace of HMCECS's centre, and the mean σ̂² of the run.

``--compression none`` writes the zarr chunks uncompressed, so that ``pms.Data`` reads each row
alone from its chunk's file (``ZarrChunkRows``); the default, zarr's own zstd, makes every row
read decode a whole chunk.

Usage: python benchmarks/scale.py [--rows 100000 1000000 10000000 100000000] [--dir /tmp/pms_scale]
       [--format zarr|npy] [--compression zstd|none] [--chunk-rows 4096] [--draws 300]
       [--numpyro [--skip-ours]]
The data are written once per N under --dir (12.4 GB at N = 10⁸) and reused.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

D = 31
WRITE_BLOCK = 1_000_000


def write_data(root: Path, n_rows: int, chunk_rows: int, fmt: str, compression="zstd", seed=0):
    root.mkdir(parents=True, exist_ok=True)
    if (root / "done").exists():
        return
    rng = np.random.default_rng(seed)
    beta = rng.normal(scale=0.5, size=D) / np.sqrt(D / 4)
    if fmt == "zarr":
        import zarr

        codecs = {} if compression == "zstd" else {"compressors": None}
        X = zarr.create_array(str(root / "X.zarr"), shape=(n_rows, D), dtype="float32",
                              chunks=(chunk_rows, D), overwrite=True, **codecs)
        y = zarr.create_array(str(root / "y.zarr"), shape=(n_rows,), dtype="float32",
                              chunks=(chunk_rows,), overwrite=True, **codecs)
    else:
        X = np.lib.format.open_memmap(root / "X.npy", mode="w+", dtype="float32", shape=(n_rows, D))
        y = np.lib.format.open_memmap(root / "y.npy", mode="w+", dtype="float32", shape=(n_rows,))
    for start in range(0, n_rows, WRITE_BLOCK):
        stop = min(start + WRITE_BLOCK, n_rows)
        x = rng.standard_normal((stop - start, D), dtype=np.float32)
        X[start:stop] = x
        y[start:stop] = (rng.random(stop - start) < 1 / (1 + np.exp(-(x @ beta)))).astype(np.float32)
    np.save(root / "beta.npy", beta)
    (root / "done").write_text("ok")


def peak_rss_gb() -> float:
    """This process's peak resident memory in GB: Linux's VmHWM, the high-water mark of its own
    address space. Not ``ru_maxrss``, which Linux carries across fork and exec: a child started
    right after this script wrote 12.4 GB of rows through a memory map reported 12.3 GB (its own
    peak, watched: 0.54 GB)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, kB elsewhere
    return peak / (2**30 if sys.platform == "darwin" else 2**20)


def run_one(root: Path, draws: int, fmt: str) -> dict:
    import arviz as az
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.model.chunks import chunked_sum

    warnings.filterwarnings("ignore", message="Could not extract data from symbolic observation")
    with pm.Model() as model:
        X = pms.Data("X", root / f"X.{fmt}")
        y = pms.Data("y", root / f"y.{fmt}")
        beta = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("obs", logit_p=X @ beta, observed=y)
    out = {}
    t0 = time.perf_counter()
    with model:
        step = pms.HMCECS(subsample_size=1000, num_blocks=100, progressbar=False)
    out["setup_s"] = time.perf_counter() - t0
    tall = step.tall
    out["setup_passes"] = tall.full_passes
    t0 = time.perf_counter()
    chunked_sum(tall, tall.loglik_sum_value_and_grad, np.zeros(D))
    out["pass_s"] = time.perf_counter() - t0
    with model:
        t0 = time.perf_counter()
        idata = pm.sample(step=step, draws=draws, tune=draws, chains=1, random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
    out["ms_per_iter"] = 1e3 * (time.perf_counter() - t0) / (2 * draws)
    post = idata.posterior["beta"].values.reshape(-1, D)
    mean, sd = post.mean(axis=0), post.std(axis=0)
    true_beta = np.load(root / "beta.npy")
    lap_mean, cov = laplace_at_mode(tall, step.target.center)
    lap_sd = np.sqrt(np.diag(cov))
    out["center_off"] = float(np.max(np.abs(step.target.center - lap_mean) / lap_sd))
    out["loglik_var"] = float(idata.sample_stats["loglik_var"].mean())
    out["max_z_true"] = float(np.max(np.abs(mean - true_beta) / sd))
    out["max_dmean_laplace"] = float(np.max(np.abs(mean - lap_mean) / lap_sd))
    ratio = sd / lap_sd
    out["sd_ratio_range"] = [float(ratio.min()), float(ratio.max())]
    out["min_ess"] = float(np.min(az.ess(idata, method="bulk")["beta"].values))
    out["peak_rss_gb"] = peak_rss_gb()
    return out


def run_numpyro(root: Path, draws: int, fmt: str) -> dict:
    """NumPyro's HMCECS on the same rows (side by side): it needs them in memory.

    The data are loaded into JAX arrays; the Taylor proxy is centred at a Newton-step MLE on the
    first 20,000 rows (NumPy, a fraction of a second); m = 1000, 100 blocks, ``draws`` warm-up
    + ``draws`` draws. Total seconds from loading to the last draw, and the peak resident memory.
    """
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import HMCECS, MCMC, NUTS

    t0 = time.perf_counter()
    if fmt == "npy":
        X, y = np.load(root / "X.npy"), np.load(root / "y.npy")
    else:
        import zarr

        X, y = zarr.open_array(str(root / "X.zarr"))[:], zarr.open_array(str(root / "y.zarr"))[:]
    n = X.shape[0]
    Xs, ys, center = X[:20_000].astype(float), y[:20_000].astype(float), np.zeros(D)
    for _ in range(8):  # Newton steps for the logistic MLE with the N(0, 1) prior, on a subset
        p = 1 / (1 + np.exp(-(Xs @ center)))
        grad = Xs.T @ (ys - p) * (n / Xs.shape[0]) - center
        hess = -(Xs.T * (p * (1 - p))) @ Xs * (n / Xs.shape[0]) - np.eye(D)
        center = center - np.linalg.solve(hess, grad)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    del X, y

    def model(X, y):
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(D), 1.0).to_event(1))
        with numpyro.plate("N", n, subsample_size=1000) as idx:
            numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ beta), obs=y[idx])

    proxy = HMCECS.taylor_proxy({"beta": jnp.asarray(center, dtype=jnp.float32)})
    kernel = HMCECS(NUTS(model), num_blocks=100, proxy=proxy)
    mcmc = MCMC(kernel, num_warmup=draws, num_samples=draws, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), Xj, yj)
    beta = np.asarray(mcmc.get_samples()["beta"])
    true_beta = np.load(root / "beta.npy")
    return {"total_s": time.perf_counter() - t0,
            "peak_rss_gb": peak_rss_gb(),
            "max_z_true": float(np.max(np.abs(beta.mean(0) - true_beta) / beta.std(0)))}


def numpyro_row(args, n, root, limit_gb=21.0):
    """NumPyro's HMCECS at this N in its own process, killed if its resident memory passes
    ``limit_gb`` (this is a 24 GB VM); one printed line."""
    import psutil

    proc = subprocess.Popen([sys.executable, __file__, "--numpyro-one", str(root), "--draws",
                             str(args.draws), "--format", args.format],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watched, peak = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss / 2**30)
        except psutil.NoSuchProcess:
            break
        if peak > limit_gb:
            proc.kill()
            break
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if not line:
        why = f"killed at {peak:.1f} GB resident" if peak > limit_gb else stderr[-1500:]
        print(f"{n:>11} NumPyro HMCECS failed: {why}", flush=True)
        return
    r = json.loads(line[0][7:])
    print(f"{n:>11} NumPyro HMCECS (data in memory): total {r['total_s']:.1f} s (load, compile, "
          f"{2 * args.draws} iterations), peak RSS {r['peak_rss_gb']:.2f} GB, z true {r['max_z_true']:.2f}",
          flush=True)


def laplace_at_mode(tall, theta, newton_steps=3):
    """The Laplace approximation at the full-data mode: Newton steps from θ*, one streamed pass each."""
    from pymc_subsample.model.chunks import chunked_sum

    for _ in range(newton_steps):
        _, grad, hess = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, theta)
        precision = -(hess + tall.prior_hessian(theta))
        theta = theta + np.linalg.solve(precision, grad + tall.prior_value_and_grad(theta)[1])
    return theta, np.linalg.inv(precision)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=float, nargs="+", default=[1e5, 1e6, 1e7, 1e8])
    parser.add_argument("--dir", default="/tmp/pms_scale")
    parser.add_argument("--chunk-rows", type=int, default=4096)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--format", choices=["zarr", "npy"], default="zarr")
    parser.add_argument("--compression", choices=["zstd", "none"], default="zstd")
    parser.add_argument("--numpyro", action="store_true",
                        help="also NumPyro's HMCECS on the same data, after ours at each N (extra bench)")
    parser.add_argument("--skip-ours", action="store_true", help="with --numpyro: NumPyro only")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--numpyro-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(Path(args.one), args.draws, args.format)))
        return
    if args.numpyro_one:
        print("RESULT " + json.dumps(run_numpyro(Path(args.numpyro_one), args.draws, args.format)))
        return
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; d = {D}, "
          f"float32 {args.format}" + (f", chunks of {args.chunk_rows} rows, {args.compression}"
                                      if args.format == "zarr" else "")
          + "; HMCECS m = 1000, 100 blocks, "
          f"{args.draws} + {args.draws} iterations, 1 chain")
    print(f"{'N':>11} {'write s':>8} {'pass s':>7} {'set-up s':>8} {'=passes':>7} {'counted':>7} "
          f"{'ms/iter':>7} {'RSS GB':>6} {'z true':>6} {'Δ/sd Lap':>8} {'sd/sd Lap':>11} {'ESS':>5} "
          f"{'θ* off':>6} {'σ̂²':>5}")
    base = None
    for n in map(int, args.rows):
        suffix = "" if args.compression == "zstd" or args.format == "npy" else "_raw"
        root = Path(args.dir) / f"{args.format}_n{n}_c{args.chunk_rows}{suffix}"
        t0 = time.perf_counter()
        write_data(root, n, args.chunk_rows, args.format, args.compression)
        written = time.perf_counter() - t0
        if args.numpyro and args.skip_ours:
            numpyro_row(args, n, root)
            continue
        proc = subprocess.run([sys.executable, __file__, "--one", str(root), "--draws", str(args.draws),
                               "--format", args.format],
                              capture_output=True, text=True)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            print(f"{n:>11} failed:\n{proc.stderr[-2000:]}")
            continue
        r = json.loads(line[0][7:])
        base = base or r["ms_per_iter"]
        print(f"{n:>11} {written:>8.1f} {r['pass_s']:>7.2f} {r['setup_s']:>8.1f} "
              f"{r['setup_s'] / r['pass_s']:>7.1f} {r['setup_passes']:>7d} {r['ms_per_iter']:>7.2f} "
              f"{r['peak_rss_gb']:>6.2f} "
              f"{r['max_z_true']:>6.2f} {r['max_dmean_laplace']:>8.2f} "
              f"{r['sd_ratio_range'][0]:>5.2f}-{r['sd_ratio_range'][1]:<5.2f} {r['min_ess']:>5.0f} "
              f"{r['center_off']:>6.2f} {r['loglik_var']:>5.2f}"
              f"   iteration {r['ms_per_iter'] / base:.2f}x that at the first N"
              f"; total {r['setup_s'] + 2 * args.draws * r['ms_per_iter'] / 1e3:.1f} s", flush=True)
        if args.numpyro:
            numpyro_row(args, n, root)


if __name__ == "__main__":
    main()
