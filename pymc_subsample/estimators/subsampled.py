"""Evaluate an estimator on a model's subsample: the glue between rows and formulas."""

from __future__ import annotations

from pymc_subsample.estimators.loglik import perturbed_loglik

__all__ = ["perturbed_value"]


def perturbed_value(target, subsample, theta):
    """Perturbed log-likelihood ℓ̂ − σ̂²/2 (no prior) at θ on ``subsample``; returns (value, σ̂²).

    Value only (MH-type methods): one compiled call for the differences d, the rest in NumPy.
    """
    d = target.differences(theta, subsample.batch)
    sum_q, _ = target.proxy.sum_value_and_grad(theta)
    value, _, sigma2 = perturbed_loglik(d, target.n_rows, sum_q)
    return value, sigma2
