"""One update of each stochastic-gradient dynamics, as plain NumPy functions.

Conventions: ``grad`` is an estimate of ∇log π(θ) (log-posterior, prior included);
every function takes a ``numpy.random.Generator`` and returns new arrays.

Langevin (El hanchi 2019 §3, Alg. 2, with U = −log π):

    θ' = θ + ε ĝ + √(2ε) ξ,   ξ ~ N(0, I).

Dang et al. 2019 §6.2 writes the same scheme as θ' = θ + (ε'/2) ĝ + N(0, ε'), i.e. ε' = 2ε.
On N(0, σ²) with the exact gradient, θ' = (1 − ε/σ²) θ + √(2ε) ξ is AR(1), so its
stationary variance is v = 2ε / (1 − (1 − ε/σ²)²) = σ² / (1 − ε/(2σ²)): the
step-size bias of every method here (see :func:`langevin_stationary_variance`).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "adjusted_noise_factor",
    "langevin_stationary_variance",
    "langevin_step",
    "osgfs_convergence",
    "osgfs_k",
    "osgfs_noise_cov",
    "osgfs_step",
    "psd_factor",
    "sgfs_step",
    "sghmc_step",
]


def langevin_stationary_variance(sigma2, step_size):
    """Stationary variance of exact-gradient Langevin on N(0, σ²): σ² / (1 − ε/(2σ²))."""
    return sigma2 / (1.0 - step_size / (2.0 * sigma2))


def psd_factor(cov):
    """A factor F with F Fᵀ = cov⁺ (negative eigenvalues clipped to 0) and whether cov ≻ 0."""
    cov = 0.5 * (cov + cov.T)
    vals, vecs = np.linalg.eigh(cov)
    positive = bool(vals.min() > 0)
    return vecs * np.sqrt(np.clip(vals, 0.0, None)), positive


def adjusted_noise_factor(step_size, grad_cov):
    """Injected-noise factor for the noise adjustment of El hanchi 2019 §5.2.2.

    ε ĝ already carries noise of covariance ε² Cov(ĝ); injecting N(0, 2εI − ε² Cov(ĝ))
    instead of N(0, 2εI) makes the total noise that of exact Langevin when ĝ is
    Gaussian. Returns the factor and False when 2εI − ε² Cov(ĝ) is not positive
    definite (the step is too large for this estimator; the noise is then clipped).
    """
    d = grad_cov.shape[0]
    return psd_factor(2.0 * step_size * np.eye(d) - step_size**2 * grad_cov)


def langevin_step(rng, theta, grad, step_size, noise_factor=None):
    """θ' = θ + ε ĝ + noise; noise ~ N(0, 2ε I), or F ξ with a given factor F (El hanchi 2019 Alg. 2)."""
    xi = rng.standard_normal(theta.shape[0])
    noise = np.sqrt(2.0 * step_size) * xi if noise_factor is None else noise_factor @ xi
    return theta + step_size * grad + noise


def sghmc_step(rng, theta, grad_fn, step_size, num_steps, friction, mass_inv=None):
    """One SG-HMC trajectory of Dang et al. 2019 §6.2 with B̂ = 0, C = friction·I.

    p ~ N(0, M) is resampled, then for l = 1..L

        θ_l = θ_{l−1} + ε M⁻¹ p_{l−1}
        p_l = p_{l−1} + ε ĝ(θ_l) − ε C M⁻¹ p_{l−1} + N(0, 2 C ε)

    (Dang et al. 2019 writes ∇Û = −ĝ). There is no accept/reject step.

    Parameters
    ----------
    grad_fn : callable
        θ -> (ĝ(θ), info); ``info`` of the last call is returned.
    mass_inv : ndarray (d, d), optional
        M⁻¹ (identity when None).

    Returns
    -------
    theta, infos : ndarray, list
    """
    d = theta.shape[0]
    if mass_inv is None:
        p = rng.standard_normal(d)
        minv = lambda x: x  # noqa: E731 - identity mass matrix, no d×d product
    else:
        chol = np.linalg.cholesky(np.linalg.inv(mass_inv))
        p = chol @ rng.standard_normal(d)
        minv = lambda x: mass_inv @ x  # noqa: E731
    noise_sd = np.sqrt(2.0 * friction * step_size)
    infos = []
    theta = theta.copy()
    for _ in range(num_steps):
        v = minv(p)
        theta = theta + step_size * v
        if not np.all(np.isfinite(theta)):
            break  # diverged: the caller rejects the trajectory; no gradient at a non-finite point
        g, info = grad_fn(theta)
        infos.append(info)
        p = p + step_size * g - step_size * friction * v + noise_sd * rng.standard_normal(d)
    return theta, infos


# ------------------------------------------------------------------ SGFS / OSGFS
def osgfs_k(n, batch_size, hess, n_c, c=0.1):
    """Step fraction k of OSGFS, El hanchi 2018 eq. (16).

    k = min{c, 4 max{|S|/(N+|S|), r/(r + N/|S|)}} with
    r = λ_min(H⁻¹) / λ_max(H⁻¹ NC H⁻¹), H = NC + G (eq. 9).
    """
    h_inv = np.linalg.inv(hess)
    lam_min = np.linalg.eigvalsh(0.5 * (h_inv + h_inv.T)).min()
    inner = h_inv @ n_c @ h_inv
    lam_max = np.linalg.eigvalsh(0.5 * (inner + inner.T)).max()
    r = lam_min / lam_max if lam_max > 0 else np.inf
    ratio = n / batch_size
    strong = 1.0 if np.isinf(r) else r / (r + ratio)
    return float(min(c, 4.0 * max(batch_size / (n + batch_size), strong)))


def osgfs_noise_cov(d_mat, n, batch_size, c_mat, hess):
    """Injected noise of the corrected OSGFS update, El hanchi 2018 eq. (8).

    2D − (N²/|S|) D C D − D H D: the gradient noise D ξ_g already brings (N²/|S|) D C D,
    and − D H D removes the discretisation error so that a Gaussian target with
    Hessian H has stationary covariance exactly H⁻¹ (El hanchi 2018 appendix).
    """
    return 2.0 * d_mat - (n**2 / batch_size) * d_mat @ c_mat @ d_mat - d_mat @ hess @ d_mat


def osgfs_step(rng, theta, grad, fisher, hess, n, batch_size, k):
    """The corrected OSGFS update, El hanchi 2018 eqs. (8) and (10).

    θ' = θ + D ĝ + N(0, 2D − (N²/|S|) D C D − D H D) with D = (k/2) H⁻¹, C = ``fisher`` and
    H = NC + G (eq. 9). Returns θ' and whether the noise covariance was positive definite (when it
    is not, its negative eigenvalues are clipped, :func:`psd_factor`).
    """
    d_mat = 0.5 * k * np.linalg.inv(hess)
    factor, ok = psd_factor(osgfs_noise_cov(d_mat, n, batch_size, fisher, hess))
    return theta + d_mat @ grad + factor @ rng.standard_normal(theta.shape[0]), ok


def osgfs_convergence(window_grads, n_c, prior_prec, n, batch_size, b=1.0):
    """Convergence criterion (17) of El hanchi 2018 on the last n stochastic gradients Y_i.

    |mean(Y)| ≤ b √diag[(NC + G)/n + (N²/(n|S|)) C], componentwise. The paper's last
    term reads N²/(n|S|); the variance of a stochastic gradient is (N²/|S|) C (its
    eq. 4), so the C factor is restored here.
    """
    window_grads = np.asarray(window_grads)
    n_win = window_grads.shape[0]
    c_mat = n_c / n
    var = np.diag(n_c + prior_prec) / n_win + (n**2 / (n_win * batch_size)) * np.diag(c_mat)
    return bool(np.all(np.abs(window_grads.mean(axis=0)) <= b * np.sqrt(np.maximum(var, 0.0))))


def sgfs_step(rng, theta, grad, fisher, n, batch_size, step_size, noise_b=None):
    """Original SGFS update (Ahn, Korattikara & Welling 2012; El hanchi 2018 eq. 14 is a special case).

    θ' = θ + 2 (γ N Î + 4B/ε)⁻¹ (ĝ + η),  η ~ N(0, 4B/ε),  γ = (N + |S|)/|S|,

    with Î the running empirical Fisher (per-row gradient covariance) and B = I by
    default. For large ε this is the pure Fisher-scoring step 2/(γN) Î⁻¹ ĝ of eq. (14):
    the gradient noise alone plays the role of the Langevin noise.
    """
    d = theta.shape[0]
    b_mat = np.eye(d) if noise_b is None else noise_b
    gamma = (n + batch_size) / batch_size
    precond = np.linalg.inv(gamma * n * fisher + 4.0 * b_mat / step_size)
    eta = np.linalg.cholesky(4.0 * b_mat / step_size) @ rng.standard_normal(d)
    return theta + 2.0 * precond @ (grad + eta)
