"""Estimators of the log-likelihood and its gradient from a subsample."""

from pymc_subsample.estimators.loglik import difference_estimator, perturbed_loglik

__all__ = [
    "difference_estimator",
    "perturbed_loglik",
]
