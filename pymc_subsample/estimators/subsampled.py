"""Evaluate an estimator on a model's subsample: the glue between rows and formulas."""

from __future__ import annotations

import numpy as np

from pymc_subsample.estimators.loglik import combine_gradient, perturbed_loglik

__all__ = ["perturbed_value", "perturbed_value_and_grad"]


def perturbed_value(tall, proxy, subsample, theta):
    """Perturbed log-likelihood ℓ̂ − σ̂²/2 at θ on ``subsample``; returns (value, σ̂²)."""
    loglik = tall.loglik_rows(theta, subsample.batch)
    q = proxy.rows_value(theta, subsample.terms, subsample.batch)
    sum_q, _ = proxy.sum_value_and_grad(theta)
    value, _, sigma2 = perturbed_loglik(loglik - q, tall.n_rows, sum_q)
    return value, sigma2


def perturbed_value_and_grad(tall, proxy, subsample, theta):
    """Perturbed log-likelihood, its exact gradient in θ, and σ̂²."""
    loglik, loglik_grads, q, q_grads = proxy.rows_loglik_and_proxy(theta, subsample.terms, subsample.batch)
    sum_q, sum_q_grad = proxy.sum_value_and_grad(theta)
    value, weights, sigma2 = perturbed_loglik(np.asarray(loglik) - q, tall.n_rows, sum_q)
    grad = combine_gradient(sum_q_grad, weights, loglik_grads, q_grads)
    return value, grad, sigma2
