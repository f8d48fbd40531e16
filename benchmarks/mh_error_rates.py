"""Decision error rates of the austerity and two-sample t-tests against exact MH.

For each of many hard decisions (|Δ − log u| small relative to the sd of Δ̂ at the first
look), run the sequential test and count how often its accept/reject differs from the exact
MH decision log u < Δ on the same uniform. Two rules for the level of the k-th look:

* ``spent`` (the default of ``mh_tests``): ε_k = ε/(2k²), Σ_k ε_k ≤ ε, so the whole decision is
  wrong with probability ≤ ε under the CLT (union bound);
* ``per-look`` (El hanchi 2019, Algorithm 1 as printed, ``per_look=True``): ε at every look, so ε
  bounds the error of one look only.

Problems (fixed seed, the same for every test, rule and ε):

* N rows, t_k ~ N(0, s²) with s ~ U(0.05, 2) per decision; batch b = ⌈√N⌉;
* Δ − log u ~ N(0, (rel · σ₁)²), σ₁ = N ŝ √(1/b − 1/N) the sd of Δ̂ after the first batch;
* two-sample: current-state terms a_k ~ N(0, s²) and proposed-state terms a_k + t_k, so the
  test must see through the noise of both samples.

With ``--mnist-iters K`` it also measures what the rules cost on the MNIST 0/1 set-up of
``benchmarks/subsample_mh.py`` (N = 14,780, d = 10, random walk scale 0.1 from the mode,
batch ⌈√N⌉ = 122, order-2 proxy): acceptance and rows read per iteration of
``pms.SubsampleMH`` over K iterations, for the two t-test rules at ε = 0.01 (``per-look``: the
step's test object with ``per_look=True``) and for Barker at error=None (stop at σ²(Δ*) < 1) and
δ ∈ {0.3, 0.01}; then, on the K steps of an exact-MH chain with the same proposal, how
often each t-test rule at ε = 0.01 decides differently from exact MH on the same uniform.

With ``--pairs K`` it also runs ``pms.SubsampleMH``'s four sequential tests, with and without
control variates, on K fixed moves (θ, θ′, u) of a logistic regression (N = 20,000, d = 3, the
set-up of ``tests/test_mh_error_rates.py``) beside the exact full-data decision on the same uniform
(:mod:`pymc_subsample.diagnostics.mh_decisions`): for the MH tests log u within 0.5 of Δ (hard
decisions) and the fraction of decisions that differ; for Barker, uniform u and mean(accept) −
mean S(Δ), which its δ bounds.

Usage::

    python benchmarks/mh_error_rates.py [--n-rows 1000] [--decisions 2000] [--rel 0.05,0.5]
        [--mnist-iters 1000] [--data ../shared/data/mnist] [--pairs 300] [--level 0.05]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np

from pymc_subsample.kernels import mh_tests

ROOT = Path(__file__).resolve().parents[1]

EPSILONS = (0.01, 0.05, 0.1)


def problems(n_rows, count, rel, seed=1):
    rng = np.random.default_rng(seed)
    batch = math.ceil(math.sqrt(n_rows))
    for _ in range(count):
        s = rng.uniform(0.05, 2.0)
        terms = rng.normal(0.0, s, size=n_rows)
        current = rng.normal(0.0, s, size=n_rows)
        sd_first = n_rows * terms.std(ddof=1) * math.sqrt(1.0 / batch - 1.0 / n_rows)
        log_u = math.log(rng.random())
        offset = log_u - terms.sum() + rng.normal(0.0, rel * sd_first)
        yield terms, current, offset, log_u, batch


def error_rate(test, eps, per_look, n_rows, count, rel):
    wrong, rows = 0, 0
    for i, (t, a, offset, log_u, batch) in enumerate(problems(n_rows, count, rel)):
        rng = np.random.default_rng(10_000 + i)
        if test == "austerity":
            accept, used, _ = mh_tests.austerity_test(t.__getitem__, n_rows, offset, log_u, rng,
                                                      batch_size=batch, error=eps, per_look=per_look)
        else:
            b = a + t
            accept, used, _ = mh_tests.two_sample_test(a.__getitem__, b.__getitem__, n_rows, offset, log_u,
                                                       rng, batch_size=batch, error=eps, per_look=per_look)
            used /= 2  # rows per sample, comparable with austerity
        wrong += accept != mh_tests.exact_mh_test(offset + t.sum(), log_u)
        rows += used
    return wrong, rows / count


def mnist_costs(data, iters):
    import pymc as pm

    from pymc_subsample.control_variates import find_map
    from pymc_subsample.datasets import load_mnist
    from pymc_subsample.step_methods.subsample_mh import SubsampleMH

    ds = load_mnist(data, digits=(0, 1), n_components=10)
    X, y = np.asarray(ds.X, float), np.asarray(ds.y, float)
    n, batch = X.shape[0], math.ceil(math.sqrt(X.shape[0]))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ beta, observed=y)
        center = find_map(progressbar=False)["beta"]
    print(f"\nMNIST 0/1: N = {n}, batch {batch}, {iters} iterations from the mode, random walk scale 0.1")
    print("| test | rule | error | accept | rows read / N | s |")
    print("|---|---|---|---|---|---|")
    runs = [("austerity", "spent", 0.01), ("austerity", "per-look", 0.01),
            ("two-sample", "spent", 0.01), ("two-sample", "per-look", 0.01),
            ("barker", "σ² < 1 only", None), ("barker", "Seita et al. bound", 0.3),
            ("barker", "Seita et al. bound", 0.01)]
    for test, rule, error in runs:
        # per-look: El hanchi 2019 Algorithm 1 as printed, level ε at every look
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Barker at δ = 0.01 warns it reads all rows
            step = SubsampleMH(test=test, proposal="random-walk", scale=0.1, adapt_scale=False, thin=1,
                               error=error, center=center, subsample_size=batch)
            if rule == "per-look":
                step.accept_test = dataclasses.replace(step.accept_test, per_look=True)
            start = time.perf_counter()
            idata = pm.sample(step=step, draws=iters, tune=0, chains=1, random_seed=1, progressbar=False,
                              compute_convergence_checks=False)
        stats = idata.sample_stats
        print(f"| {test} | {rule} | {error} | {float(stats.accepted.mean()):.3f} | "
              f"{float(stats.batch_size.mean()) / n:.1%} | {time.perf_counter() - start:.1f} |", flush=True)

    # decisions met by MCMC: the (θ, θ', u) of an exact-MH chain, every test run on the same u
    with model:
        exact = SubsampleMH(test="exact", proposal="random-walk", scale=0.1, adapt_scale=False,
                            center=center)
    tall, target, proxy = exact.tall, exact.target, exact.proxy
    rows = tall.row_slice(0, n)
    rng = np.random.default_rng(0)
    theta = center.copy()
    remainder = target.differences(theta, rows)
    counts = {}
    for i in range(iters):
        theta_p = theta + 0.1 * rng.standard_normal(theta.size)
        remainder_p = target.differences(theta_p, rows)
        t = remainder_p - remainder
        offset = (exact._log_prior(theta_p) - exact._log_prior(theta)
                  + proxy.sum_value_and_grad(theta_p)[0] - proxy.sum_value_and_grad(theta)[0])
        log_u = math.log(rng.random())
        truth = mh_tests.exact_mh_test(offset + t.sum(), log_u)
        for test in ("austerity", "two-sample"):
            for per_look in (False, True):
                sub = np.random.default_rng(i)
                if test == "austerity":
                    accept, used, _ = mh_tests.austerity_test(t.__getitem__, n, offset, log_u, sub,
                                                              batch_size=batch, error=0.01, per_look=per_look)
                else:
                    accept, used, _ = mh_tests.two_sample_test(remainder.__getitem__, remainder_p.__getitem__,
                                                               n, offset, log_u, sub, batch_size=batch,
                                                               error=0.01, per_look=per_look)
                    used /= 2
                wrong, total = counts.get((test, per_look), (0, 0))
                counts[test, per_look] = (wrong + (accept != truth), total + used)
        if truth:
            theta, remainder = theta_p, remainder_p
    print(f"\nDecision errors at ε = 0.01 on the {iters} steps of an exact-MH chain on MNIST 0/1 "
          "(same θ, θ', u for every test)")
    print("| test | rule | wrong / decisions | rate ± binomial SE | rows per sample / N |")
    print("|---|---|---|---|---|")
    for (test, per_look), (wrong, total) in counts.items():
        rate = wrong / iters
        print(f"| {test} | {'per-look' if per_look else 'spent'} | {wrong} / {iters} | "
              f"{rate:.4f} ± {math.sqrt(rate * (1 - rate) / iters):.4f} | {total / iters / n:.3f} |")


def pair_rates(count, level, near=0.5):
    """The decision errors of the four sequential tests on ``count`` fixed moves, with and without
    control variates (``tests/test_mh_error_rates.py`` asserts them)."""
    import pymc as pm

    from pymc_subsample.diagnostics.mh_decisions import decision_errors, laplace_moves
    from pymc_subsample.step_methods.subsample_mh import SubsampleMH

    rng = np.random.default_rng(5)
    n = 20_000
    X = np.column_stack([np.ones(n), rng.normal(size=(n, 2))])
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ np.array([-0.5, 1.0, -1.5])))).astype(float)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ beta, observed=y)
    print(f"\n{count} fixed moves, logistic regression N = {n}, d = 3, error = {level}")
    print("| test | control variates | error rate (Barker: mean accept − mean S(Δ)) | mean rows / N "
          "| time (s) |")
    print("|---|---|---|---|---|")
    for test in ("austerity", "confidence", "two-sample", "barker"):
        for control_variates in (True, False):
            start = time.perf_counter()
            with model:
                step = SubsampleMH(test=test, error=level, control_variates=control_variates,
                                   progressbar=False)
            moves = laplace_moves(step, count, seed=3)
            result = decision_errors(step, moves, seed=4, near=None if test == "barker" else near)
            value = result.barker_deviation if test == "barker" else result.error_rate
            print(f"| {test} | {control_variates} | {value:+.3f} | {result.rows.mean() / n:.3f} | "
                  f"{time.perf_counter() - start:.1f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-rows", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--rel", default="0.05,0.5", help="comma-separated sd of the gap / σ₁")
    parser.add_argument("--mnist-iters", type=int, default=0, help="0: skip the MNIST cost runs")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "mnist"))
    parser.add_argument("--pairs", type=int, default=0, help="0: skip the fixed-move runs of SubsampleMH")
    parser.add_argument("--level", type=float, default=0.05, help="error of the fixed-move runs")
    args = parser.parse_args()
    n, count = args.n_rows, args.decisions
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"numpy {np.__version__}")
    print(f"N = {n}, batch ⌈√N⌉ = {math.ceil(math.sqrt(n))}, {count} decisions per cell, "
          "t_k ~ N(0, s²), s ~ U(0.05, 2), seed 1")
    for rel in (float(r) for r in args.rel.split(",")):
        print(f"\nΔ − log u ~ N(0, ({rel} σ₁)²)")
        print("| test | rule | ε | wrong / decisions | rate ± binomial SE | rate / ε | rows per sample / N "
              "| time (s) |")
        print("|---|---|---|---|---|---|---|---|")
        for test in ("austerity", "two-sample"):
            for per_look in (False, True):
                for eps in EPSILONS:
                    start = time.perf_counter()
                    wrong, rows = error_rate(test, eps, per_look, n, count, rel)
                    rate = wrong / count
                    se = math.sqrt(rate * (1.0 - rate) / count)
                    rule = "per-look" if per_look else "spent"
                    seconds = time.perf_counter() - start
                    print(f"| {test} | {rule} | {eps} | {wrong} / {count} | {rate:.4f} ± {se:.4f} | "
                          f"{rate / eps:.2f} | {rows / n:.3f} | {seconds:.1f} |", flush=True)
    if args.mnist_iters:
        mnist_costs(args.data, args.mnist_iters)
    if args.pairs:
        pair_rates(args.pairs, args.level)


if __name__ == "__main__":
    main()
