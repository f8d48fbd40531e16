"""Hessians of small d-vector functions by central differences of their exact gradients."""

from __future__ import annotations

import numpy as np

__all__ = ["central_hessian"]


def central_hessian(gradient, theta) -> np.ndarray:
    """The symmetrised Jacobian of ``gradient`` at θ, shape (d, d): central differences with
    h = 1e-5·max(1, |θ_j|), 2d calls, a relative error of about 1e-10 on smooth functions.

    For the prior and for a model's row-free φ(θ) (d-dimensional graphs, no rows): a separately
    compiled Hessian graph cost a first run seconds of C compilation or graph rewriting for a
    d × d matrix used a few times at set-up.
    """
    theta = np.asarray(theta)
    hess = np.empty((theta.size, theta.size))
    for j in range(theta.size):
        step = np.zeros_like(theta)
        step[j] = 1e-5 * max(1.0, abs(float(theta[j])))
        hess[:, j] = (np.asarray(gradient(theta + step)) - np.asarray(gradient(theta - step))) / (2 * step[j])
    return 0.5 * (hess + hess.T)
