"""Estimators of the log-likelihood and its gradient from a subsample."""

from pymc_subsample.estimators.gradients import control_variate_gradient, plain_gradient
from pymc_subsample.estimators.loglik import (
    block_poisson,
    combine_gradient,
    difference_estimator,
    perturbed_loglik,
)

__all__ = [
    "block_poisson",
    "combine_gradient",
    "control_variate_gradient",
    "difference_estimator",
    "perturbed_loglik",
    "plain_gradient",
]
