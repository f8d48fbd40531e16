"""Estimator and set-up benchmarks, ratios measured side by side in one run.

1. Perturbed log-likelihood value + gradient with the second-order proxy, m = 1000, d = 30,
   N = 10^6 logistic regression: pymc_subsample (graph built from the PyMC model) against a
   hand-written NumPy version of the same formula that exploits the GLM structure.
   X and y are both pm.Data. The compiled call includes log p(θ); so does the NumPy version.
2. The estimator at m = 1000 and 4000 (should scale ~linearly).
3. Set-up (centre by chunked L-BFGS + proxy sums) as a multiple of one full-data gradient pass.

Usage: python benchmarks/estimator.py [--rows 1000000] [--features 30] [--repeats 300]
"""

import argparse
import platform
import time

import numpy as np
import pymc as pm
from _synthetic import logistic_data

from pymc_subsample import TallModel
from pymc_subsample.control_variates.center import find_center
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.model.chunks import chunked_sum
from pymc_subsample.subsample.batch import Subsample


def best_time(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def numpy_perturbed(theta, center, Xu, yu, l_star, g_star, h_star, sums, n):
    """The same estimator written by hand for logistic regression (rank-1 per-row Hessians)."""
    loglik_sum, grad_sum, hess_sum = sums
    v = theta - center
    eta = Xu @ theta
    p = 1.0 / (1.0 + np.exp(-eta))
    loglik = yu * eta - np.logaddexp(0.0, eta)
    grads = (yu - p)[:, None] * Xu
    xv = Xu @ v
    q = l_star + g_star @ v + 0.5 * h_star * xv**2
    q_grads = g_star + (h_star * xv)[:, None] * Xu
    d = loglik - q
    m = d.size
    mean = d.mean()
    sigma2 = n * n / (m * m) * np.sum((d - mean) ** 2)
    bv = hess_sum @ v
    value = loglik_sum + grad_sum @ v + 0.5 * v @ bv + n * mean - 0.5 * sigma2
    weights = n / m - n * n / (m * m) * (d - mean)
    grad = grad_sum + bv + weights @ (grads - q_grads)
    return value, grad


def main(n_rows, n_features, repeats):
    print(
        f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}, "
        f"N = {n_rows}, d = {n_features}"
    )
    X, y = logistic_data(n_rows, n_features)
    with pm.Model() as model:  # X and y both pm.Data: PyMC's own idiom
        X_, y_ = pm.Data("X", X), pm.Data("y", y)
        beta = pm.Normal("beta", 0, 1, shape=n_features)
        pm.Bernoulli("obs", logit_p=X_ @ beta, observed=y_)

    t = time.perf_counter()
    tall = TallModel(model)
    t_model = time.perf_counter() - t
    full_pass = lambda theta: chunked_sum(tall, tall.loglik_sum_value_and_grad, theta)  # noqa: E731
    full_pass(np.zeros(n_features))  # compile
    t_pass = best_time(lambda: full_pass(np.zeros(n_features)), 3)

    t = time.perf_counter()
    center = find_center(tall)
    t_center = time.perf_counter() - t
    t = time.perf_counter()
    target = SubsampledTarget(tall, center, order=2)
    proxy = target.proxy
    t_proxy = time.perf_counter() - t
    # warm set-up (compiled functions cached): the cost a second model of the same shape pays
    t = time.perf_counter()
    center_warm = find_center(tall)
    SubsampledTarget(tall, center_warm, order=2)
    t_setup_warm = time.perf_counter() - t

    rng = np.random.default_rng(1)
    m = 1000
    idx = rng.integers(0, n_rows, size=m)
    sub = Subsample.gather(tall, idx)
    theta = center + rng.normal(scale=0.002, size=n_features)
    ours = lambda: target.perturbed(theta, sub.batch)  # noqa: E731
    Xu, yu = X[idx], y[idx]
    eta_star = Xu @ center
    p_star = 1.0 / (1.0 + np.exp(-eta_star))
    l_star = yu * eta_star - np.logaddexp(0.0, eta_star)
    g_star = (yu - p_star)[:, None] * Xu
    h_star = -p_star * (1 - p_star)
    sums = (proxy.loglik_sum, proxy.grad_sum, proxy.hess_sum)
    def hand():  # the same formula with the N(0, 1) prior, as the compiled target includes it
        value, grad = numpy_perturbed(theta, center, Xu, yu, l_star, g_star, h_star, sums, n_rows)
        return value - 0.5 * theta @ theta - 0.5 * theta.size * np.log(2 * np.pi), grad - theta

    v1, g1, _ = ours()
    v2, g2 = hand()
    assert abs(v1 - v2) <= 1e-6 * abs(v2) and np.allclose(g1, g2, rtol=1e-6, atol=1e-6)
    t_ours, t_hand = best_time(ours, repeats), best_time(hand, repeats)

    rows = {}
    for size in (1000, 4000):
        batch = tall.gather(rng.integers(0, n_rows, size=size))
        rows[size] = (
            best_time(lambda b=batch: target.perturbed(theta, b), repeats),
            best_time(lambda b=batch: target.differences(theta, b), repeats),
        )

    print("\n| quantity | value |\n|---|---|")
    print(f"| perturbed value+grad, pymc_subsample (m={m}) | {t_ours * 1e6:.0f} µs |")
    print(f"| same formula, hand-written NumPy | {t_hand * 1e6:.0f} µs |")
    print(f"| ratio pymc_subsample / NumPy (goal ≤ 1) | {t_ours / t_hand:.2f} |")
    for name, k in (("perturbed value+grad", 0), ("differences d (value only, MH)", 1)):
        print(
            f"| {name} m=1000 / m=4000 | {rows[1000][k] * 1e6:.0f} / {rows[4000][k] * 1e6:.0f} µs "
            f"(ratio {rows[4000][k] / rows[1000][k]:.2f}, linear = 4) |"
        )
    print(f"| one full-data gradient pass | {t_pass:.3f} s |")
    print(f"| TallModel construction (graphs, checks, compile) | {t_model:.2f} s |")
    print(
        f"| centre (20,000-row MAP + one full-data Newton step), first run | {t_center:.2f} s"
        f" = {t_center / t_pass:.1f} passes |"
    )
    print(f"| proxy sums (Σℓ, A, B), first run | {t_proxy:.2f} s = {t_proxy / t_pass:.1f} passes |")
    print(
        f"| set-up total, first run incl. compilation (goal ≤ 15 passes) | "
        f"{(t_center + t_proxy) / t_pass:.1f} passes |"
    )
    print(f"| set-up total, warm (compiled) | {t_setup_warm:.2f} s = {t_setup_warm / t_pass:.1f} passes |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    main(args.rows, args.features, args.repeats)
