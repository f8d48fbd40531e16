"""Default step sizes of the stochastic-gradient dynamics, from their stationary variance.

SG-MCMC has no accept/reject step, so its step size sets its bias. The rules here pick the
largest step whose stationary variance on the *whitened* Laplace approximation stays within
a stated inflation, given the measured gradient noise. Whitening by the Laplace precision
P = C Cᵀ at the centre θ* (z = Cᵀ(θ − θ*)) makes the posterior ≈ N(0, I), so one rule fits
every model: the only model-specific input is the gradient noise in those units,

    s = λ_max(C⁻¹ Cov(ĝ) C⁻ᵀ),

measured from the estimator's own terms at a few Laplace draws (see
:func:`whitened_gradient_noise`). Both rules are exact for a Gaussian posterior with
Gaussian gradient noise of covariance s I; on other posteriors they are the leading term.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_discrete_lyapunov, solve_triangular

from pymc_subsample.estimators.sg_terms import estimator_covariance

__all__ = [
    "Whitening",
    "estimator_noise",
    "langevin_step_size",
    "langevin_whitened_variance",
    "osgfs_batch_size",
    "osgfs_window",
    "sghmc_step_size",
    "sghmc_whitened_variance",
    "whitened_gradient_noise",
]

#: Default stationary sd inflation of the SG dynamics: the sd of each whitened coordinate is
#: at most 5% too large (variance (1.05)² ≈ 1.10), well inside the spread of a 1000-draw run.
SD_INFLATION = 0.05


class Whitening:
    """z = Cᵀ(θ − θ*) for a precision P = C Cᵀ, or the identity map (``precision=None``).

    Langevin dynamics with identity preconditioning in z is preconditioned Langevin in θ,
    θ' = θ + ε P⁻¹ ĝ + √(2ε) C⁻ᵀ ξ: a constant preconditioner, so no extra drift term.
    """

    def __init__(self, center, precision=None):
        self.center = np.asarray(center, dtype=float)
        self.chol = None if precision is None else np.linalg.cholesky(0.5 * (precision + precision.T))

    def to_z(self, theta):
        return theta if self.chol is None else self.chol.T @ (theta - self.center)

    # check_finite=False: a non-finite gradient or position propagates to θ, where the step method
    # rejects the move as a divergence and warns (it raised from SciPy here, losing the run)
    def to_theta(self, z):
        if self.chol is None:
            return z
        return self.center + solve_triangular(self.chol.T, z, lower=False, check_finite=False)

    def gradient(self, grad):
        """∇_z log π = C⁻¹ ∇_θ log π."""
        if self.chol is None:
            return grad
        return solve_triangular(self.chol, grad, lower=True, check_finite=False)

    def covariance(self, cov):
        """Cov(∇_z) = C⁻¹ Cov(∇_θ) C⁻ᵀ."""
        if self.chol is None:
            return cov
        left = solve_triangular(self.chol, cov, lower=True)
        return solve_triangular(self.chol, left.T, lower=True).T


def langevin_whitened_variance(step_size, noise):
    """Stationary variance of θ' = θ + ε(−θ + η) + √(2ε)ξ, Var η = s, on N(0, 1).

    θ' = (1 − ε)θ + εη + √(2ε)ξ is AR(1): v (1 − (1 − ε)²) = ε² s + 2ε, so
    v = (ε s + 2) / (2 − ε). At s = 0 this is :func:`~.sg_dynamics.langevin_stationary_variance`.
    """
    return (step_size * noise + 2.0) / (2.0 - step_size)


def langevin_step_size(noise, sd_inflation=SD_INFLATION):
    """Largest ε with :func:`langevin_whitened_variance` ≤ (1 + δ)²: ε = 2(V − 1)/(s + V)."""
    v = (1.0 + sd_inflation) ** 2
    return 2.0 * (v - 1.0) / (max(float(noise), 0.0) + v)


def sghmc_whitened_variance(step_size, friction, noise):
    """Stationary variance of θ under the SGHMC update of :func:`~.sg_dynamics.sghmc_step` on N(0, 1).

    With M = I and ĝ = −θ + η (Var η = s), one step maps x = (θ, p) to A x + noise with
    A = [[1, ε], [−ε, 1 − ε² − εC]] and noise covariance diag(0, ε² s + 2Cε); the stationary
    covariance solves the discrete Lyapunov equation Σ = A Σ Aᵀ + Q. Returns Σ_θθ, or inf
    when A is not stable (ε too large).
    """
    eps, c = float(step_size), float(friction)
    a = np.array([[1.0, eps], [-eps, 1.0 - eps**2 - eps * c]])
    if np.max(np.abs(np.linalg.eigvals(a))) >= 1.0:
        return math.inf
    q = np.diag([0.0, eps**2 * max(float(noise), 0.0) + 2.0 * c * eps])
    return float(solve_discrete_lyapunov(a, q)[0, 0])


def sghmc_step_size(noise, friction=1.0, sd_inflation=SD_INFLATION, largest=0.5):
    """Largest ε ≤ ``largest`` with :func:`sghmc_whitened_variance` ≤ (1 + δ)² (by bisection)."""
    target = (1.0 + sd_inflation) ** 2
    if sghmc_whitened_variance(largest, friction, noise) <= target:
        return largest
    lo, hi = 0.0, largest
    for _ in range(50):  # the variance grows with ε on (0, largest]; bisect to ~1e-15 relative
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sghmc_whitened_variance(mid, friction, noise) <= target else (lo, mid)
    return lo


def whitened_gradient_noise(estimate, whitening, rng, num_points=4):
    """Noise s = max over Laplace draws z ~ N(0, I) of λ_max(Cov_z(ĝ)), from the estimator's own terms.

    Parameters
    ----------
    estimate : callable
        θ -> terms (m, d) of the estimator (None for an exact gradient); Cov(ĝ) ≈ Cov(terms)/m.
    whitening : Whitening
    rng : numpy.random.Generator
    num_points : int
        Laplace draws at which the noise is measured: at θ* itself the control-variate
        noise vanishes, so the centre alone would understate it.
    """
    worst = 0.0
    d = whitening.center.shape[0]
    for _ in range(num_points):
        z = rng.standard_normal(d)
        terms = estimate(whitening.to_theta(z))
        if terms is None:
            continue
        cov, _ = estimator_covariance(terms, full=True)
        if cov is None or not np.all(np.isfinite(cov)):
            continue
        worst = max(worst, float(np.linalg.eigvalsh(whitening.covariance(cov)).max()))
    return worst


def estimator_noise(estimator, whitening, num_points=4):
    """The noise s of :func:`whitened_gradient_noise` of a gradient estimator, with a fixed seed.

    ``estimator(rng, θ, table, ε)`` returns (ĝ, terms, evaluations) (an
    :class:`~pymc_subsample.estimators.sg_gradients.SGGradient`); one that ``uses_table`` gets a
    SAGA table of its own from ``new_table()``. The seed is fixed so that the set-up is
    deterministic: every chain gets the same default step size.
    """
    table = estimator.new_table() if estimator.uses_table else None
    rng = np.random.default_rng(0)
    return whitened_gradient_noise(lambda theta: estimator(rng, theta, table, 0.1)[1], whitening, rng,
                                   num_points=num_points)


def osgfs_batch_size(n, c, largest=50_000):
    """Default |S| of OSGFS: the smallest batch that lets the step fraction k of El hanchi 2018
    eq. (16) reach its cap c, |S| = cN/(4 − c), between ⌈√N⌉ and ``largest`` rows (at most N).

    k ≤ 4|S|/(N + |S|) keeps the noise of eq. (8) positive, and each step moves θ a fraction k/2
    of its distance to the mode whatever |S|: small batches make many slow steps.
    """
    at_cap = min(math.ceil(c * n / (4 - c)), largest)
    return min(n, max(math.ceil(math.sqrt(n)), at_cap))


def osgfs_window(n, batch_size, k_cap):
    """⌈1/k_min⌉ with k_min = min(k_cap, 4|S|/(N + |S|)), the smallest step fraction of eq. (16):
    the length of the window of criterion (17), and OSGFS's default steps per draw (about 0.4 of a
    relaxation time).
    """
    return math.ceil(1 / min(k_cap, 4 * batch_size / (n + batch_size)))
