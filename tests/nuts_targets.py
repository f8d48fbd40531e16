"""Potentials and Gaussian targets shared by the tests of the Numba NUTS kernels."""

import numba
import numpy as np


@numba.njit
def gaussian(theta, mu, prec, const):
    """log N(θ; μ, P⁻¹) (``const`` its normalising constant), its gradient, and the quadratic part."""
    d = theta.shape[0]
    grad = np.empty(d)
    quad = 0.0
    for i in range(d):
        gi = 0.0
        for j in range(d):
            gi -= prec[i, j] * (theta[j] - mu[j])
        grad[i] = gi
        quad += 0.5 * (theta[i] - mu[i]) * gi
    extras = np.empty(1)
    extras[0] = quad
    return np.asarray(quad + const), grad, extras


@numba.njit
def ball(theta, radius):
    """Flat inside |θ| < radius, −∞ outside."""
    inside = np.sqrt(np.sum(theta * theta)) < radius
    return np.asarray(0.0 if inside else -np.inf), np.zeros(theta.shape[0]), np.zeros(1)


def gaussian_args(mu, cov):
    sign, logdet = np.linalg.slogdet(2 * np.pi * cov)
    return (np.asarray(mu, float), np.linalg.inv(cov), -0.5 * logdet)


def covariance(sds, rho):
    d = len(sds)
    corr = np.full((d, d), rho) + (1 - rho) * np.eye(d)
    return corr * np.outer(sds, sds)


MU4, COV4 = [0.0, 1.0, -2.0, 3.0], covariance([1.0, 2.0, 0.5, 1.0], 0.8)
TARGETS = {  # name: (mean, covariance, exact metric?, step size)
    "d1": ([1.5], np.array([[4.0]]), False, 1.0),
    "d4-correlated-identity": (MU4, COV4, False, 0.2),
    "d4-correlated-exact": (MU4, COV4, True, 0.8),
    # ε near the leapfrog's stability limit of 2 in the whitened coordinates: mean tree accept 0.32,
    # so that the e^{−ΔH} weights matter (with equal weights the variance is 20 MCSEs off)
    "d4-correlated-exact-large-step": (MU4, COV4, True, 1.7),
    "d10-scaled-identity": (np.arange(10.0), covariance(np.logspace(-0.5, 0.5, 10), 0.5), False, 0.15),
    "d10-scaled-exact": (np.arange(10.0), covariance(np.logspace(-1, 1, 10), 0.5), True, 0.6),
}
