"""Gradient estimators for stochastic-gradient MCMC (El hanchi 2019 §4.1-§5.2.2, Dang et al. 2019 eq. 4.7).

Every estimator here estimates the full-data log-likelihood gradient
∇ℓ(θ) = Σ_k ∇ℓ_k(θ) (the prior is added exactly by the caller) and is written as

    ĝ = offset + (1/m) Σ_{i=1..m} z_i,       z_i iid given the past,

so one helper, :func:`~pymc_subsample.estimators.sg_terms.estimator_covariance`, gives the
covariance of *any* of them from the same m terms: Cov(ĝ) ≈ Cov_sample(z) / m. The noise
adjustment of El hanchi 2019 §5.2.2 and the ``grad_var`` statistic both use it.

========== ============================== ============================================
name       offset                         z_i (row u_i, drawn with probability p_i)
========== ============================== ============================================
plain      0                              N ∇ℓ_{u_i}                (p_i = 1/N, Alg. 2)
cv         ∇Σq(θ) = A + B v               N (∇ℓ_{u_i} − ∇q_{u_i})   (Dang et al. 2019 eq. 4.7)
saga       Σ_j h_j                        N (∇ℓ_{u_i} − h_{u_i})    (El hanchi 2019 §4.3)
is         0                              ∇ℓ_{u_i} / p_{u_i}        (p ∝ L, El hanchi 2019 §4.3)
is-saga    Σ_j h_j                        (∇ℓ_{u_i} − h_{u_i}) / p_{u_i}
adaptive   Σ_j h_j                        as is-saga, p from El hanchi 2019 §5.1
========== ============================== ============================================

All are unbiased for sampling with replacement; :class:`SagaTable` keeps the
per-row last gradients h_j and their running sum.
"""

from __future__ import annotations

import tempfile

import numpy as np

from pymc_subsample.estimators.sg_terms import importance_terms, saga_terms, uniform_terms
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE

__all__ = [
    "GRADIENTS",
    "SGGradient",
    "SagaTable",
    "adaptive_probabilities",
    "lipschitz_probabilities",
    "linear_predictor_lipschitz",
    "row_gradient_table",
    "row_lipschitz_bounds",
]


# ------------------------------------------------------------------ SAGA table
class SagaTable:
    """Per-row last gradients h_j (N, d), their sum, and their age (El hanchi 2019 §4.3, §5.1).

    Parameters
    ----------
    grads : ndarray (N, d)
        Initial h_j, e.g. every row's gradient at the centre θ* (one full pass).
    on_disk : bool
        Keep the table (float32) and the per-row ages in anonymous temporary files instead of
        memory, for models whose rows are ``pms.Data``.

    Attributes
    ----------
    total : ndarray (d,)
        Σ_j h_j, kept up to date in O(m d) per update (never re-summed).
    updated_at : ndarray (N,) of int
        Iteration at which h_j was last written (for β_j of §5.1).
    drift_at : ndarray (N,)
        Value of the running drift sum (see :meth:`record_drift`) when h_j was written,
        so that K_{β_j} = drift_now − drift_at[j] in O(1) per row without a history.
    """

    def __init__(self, grads, on_disk=False):
        n = grads.shape[0]
        # tall data (pms.Data): the N×d table would not fit in memory (25 GB at 10⁸ × 31 in
        # float64), so it lives in an anonymous float32 file, deleted when the table is
        if on_disk:
            self.grads = _disk_array(grads.shape, np.float32)
            for start in range(0, n, 1 << 20):
                self.grads[start : start + (1 << 20)] = grads[start : start + (1 << 20)]
        else:
            self.grads = np.array(grads, dtype=float)
        self.total = self.grads.sum(axis=0, dtype=float)
        self.updated_at = _disk_array(n, np.int64) if on_disk else np.zeros(n, dtype=np.int64)
        self.drift_at = _disk_array(n, np.float64) if on_disk else np.zeros(n)
        self.drift = 0.0
        self.iteration = 0

    @property
    def n_rows(self):
        return self.grads.shape[0]

    def rows(self, idx):
        return self.grads[idx]

    def update(self, idx, row_grads):
        """Write h_{idx} ← ∇ℓ_idx(θ_t); duplicates (sampling with replacement) hold the same value."""
        idx = np.asarray(idx)
        uniq, first = np.unique(idx, return_index=True)
        new = np.asarray(row_grads, dtype=float)[first]
        self.total += new.sum(axis=0) - self.grads[uniq].sum(axis=0)
        self.grads[uniq] = new
        self.updated_at[uniq] = self.iteration
        self.drift_at[uniq] = self.drift

    def record_drift(self, squared_norm):
        """Advance one iteration, adding ‖θ_{t+1} − θ_t − noise‖² to the running drift sum."""
        self.drift += float(squared_norm)
        self.iteration += 1


def _disk_array(shape, dtype):
    """A zero-filled array in an anonymous temporary file (removed when the array is freed)."""
    return np.memmap(tempfile.TemporaryFile(prefix="pms_saga_"), dtype=dtype, mode="w+", shape=shape)


def row_gradient_table(tall, theta, chunk_size=DEFAULT_CHUNK_SIZE, on_disk=False):
    """∇ℓ_k(θ) for every row k, shape (N, d), computed in row chunks (one full pass).

    With ``on_disk`` the table is a float32 file-backed array (for ``pms.Data`` models).
    """
    shape = (tall.n_rows, tall.ndim)
    out = _disk_array(shape, np.float32) if on_disk else np.empty(shape)
    for start in range(0, tall.n_rows, chunk_size):
        stop = min(start + chunk_size, tall.n_rows)
        out[start:stop] = tall.loglik_rows_and_grads(theta, tall.row_slice(start, stop))[1]
    return out


# ------------------------------------------------------------------ Lipschitz IS
def linear_predictor_lipschitz(X, max_curvature):
    """L_k = sup_η |∂²ℓ/∂η²| ‖x_k‖² for rows that see θ only through η_k = x_kᵀθ.

    ∇²ℓ_k = ℓ''(η_k) x_k x_kᵀ, whose spectral norm is |ℓ''(η_k)| ‖x_k‖², so a bound
    on |ℓ''| gives a true Lipschitz constant of ∇ℓ_k: 1/4 for the logistic (Bernoulli
    with logit link), 1/σ² for a Gaussian with known σ, unbounded for Poisson
    (use :func:`row_lipschitz_bounds` there).
    """
    X = np.asarray(X, dtype=float)
    return float(max_curvature) * np.einsum("ij,ij->i", X, X)


def row_lipschitz_bounds(tall, center, chunk_size=2_000, floor=1e-3):
    """Heuristic per-row Lipschitz constants L_k = ‖H_k(θ*)‖₂ for any model.

    The spectral norm of each row's Hessian at the centre, computed in chunks from
    the vectorised per-row Hessians (O(chunk · d²) memory). It is the local curvature
    at θ*, not a supremum: a heuristic that sets sampling probabilities, so it only
    affects the variance, never the unbiasedness (the estimators divide by p_k).
    Rows with L_k below ``floor`` × mean(L) are raised to it so that every p_k > 0,
    which unbiasedness needs. For linear-predictor models prefer the true bound of
    :func:`linear_predictor_lipschitz`.
    """
    out = np.empty(tall.n_rows)
    for start in range(0, tall.n_rows, chunk_size):
        stop = min(start + chunk_size, tall.n_rows)
        hess = np.asarray(tall.rows_hessians(center, tall.row_slice(start, stop)))
        # per-row Hessians are symmetric: spectral norm = largest |eigenvalue|
        out[start:stop] = np.abs(np.linalg.eigvalsh(hess)).max(axis=1)
    return np.maximum(out, floor * max(out.mean(), np.finfo(float).tiny))


def lipschitz_probabilities(lipschitz, strong_convexity=None):
    """Sampling probabilities p_k ∝ L_k, or p_k ∝ μN + L_k (El hanchi 2019 §4.3).

    Parameters
    ----------
    lipschitz : ndarray (N,)
        Positive per-row Lipschitz constants of ∇ℓ_k.
    strong_convexity : float, optional
        μ, the strong-convexity constant of the *average* negative log-posterior
        U/N; the mixture with the uniform distribution is the choice that gives SAGA
        its best known rate (El hanchi 2019 ref. [14]).
    """
    lip = np.asarray(lipschitz, dtype=float)
    if lip.ndim != 1 or not np.all(np.isfinite(lip)) or np.any(lip < 0) or lip.sum() <= 0:
        raise ValueError(
            "lipschitz must be a 1-d array of N finite, non-negative per-row constants with a "
            "positive sum."
        )
    weights = lip if strong_convexity is None else lip + float(strong_convexity) * lip.size
    if np.any(weights <= 0):
        raise ValueError(
            "Some rows have Lipschitz constant 0 and would never be sampled, which biases the "
            "importance-sampling estimator; give every row a positive constant."
        )
    return weights / weights.sum()


def adaptive_probabilities(lipschitz, table: SagaTable, step_size, ndim):
    """Adaptive IS-SAGA probabilities of El hanchi 2019 §5.1.

    p_j ∝ L_j √(2ε d β_j + K_{β_j}) + ‖h_j‖, where β_j is the number of iterations
    since h_j was written and K_{β_j} bounds the squared drift of θ over those
    iterations. The paper's derivation writes the drift as Σ ĝ_s; for the update
    θ' = θ + ε ĝ + √(2ε) ξ used here the drift is ε ĝ_s and, by Cauchy–Schwarz,
    ‖Σ_s ε ĝ_s‖² ≤ β Σ_s ‖ε ĝ_s‖², so K_β = β (drift_now − drift_at_j) with the
    running sum of ‖ε ĝ_s‖² kept by :class:`SagaTable` (O(N) scalar work per call,
    O(N d) never). The paper's "2td β_i d" is read as Tr[2ε β I_d] = 2ε d β.
    Rows with h_j = 0 and β_j = 0 keep a tiny positive probability (unbiasedness).
    """
    beta = (table.iteration - table.updated_at).astype(float)
    k_beta = beta * (table.drift - table.drift_at)
    spread = np.sqrt(np.maximum(2.0 * step_size * ndim * beta + k_beta, 0.0))
    weights = np.asarray(lipschitz) * spread + np.sqrt(np.einsum("ij,ij->i", table.grads, table.grads))
    total = weights.sum()
    if not np.isfinite(total) or total <= 0:
        return np.full(weights.size, 1.0 / weights.size)
    weights = np.maximum(weights, 1e-12 * total / weights.size)
    return weights / weights.sum()


# ------------------------------------------------------------------ dispatcher
GRADIENTS = ("plain", "cv", "saga", "is", "is-saga", "adaptive", "full")


class SGGradient:
    """ĝ ≈ ∇log π(θ) by one of :data:`GRADIENTS`, from a TallModel and a TaylorProxy.

    Holds only configuration (batch size, probabilities); the mutable SAGA table is
    passed in by the caller, so a sampler can keep it in its per-chain state.

    Parameters
    ----------
    tall : TallModel
    proxy : TaylorProxy
        Centre θ* (SAGA tables start at ∇ℓ_k(θ*)) and control variates for ``"cv"``.
    gradient : str
        One of :data:`GRADIENTS`; ``"full"`` is the exact full-data gradient (LD).
    batch_size : int
    lipschitz : ndarray (N,), optional
        Per-row Lipschitz constants for the IS estimators; default
        :func:`row_lipschitz_bounds` at θ* (a heuristic, see there).
    strong_convexity : float or "auto", optional
        μ of p_k ∝ μN + L_k; ``"auto"`` uses λ_min of the Laplace precision at θ* / N.
    """

    def __init__(self, target, gradient, batch_size, *, lipschitz=None, strong_convexity=None,
                 chunk_size=DEFAULT_CHUNK_SIZE):
        if gradient not in GRADIENTS:
            raise ValueError(
                f"gradient must be one of {', '.join(map(repr, GRADIENTS))}; got {gradient!r}."
            )
        tall, proxy = target.tall, target.proxy
        self.target, self.tall, self.proxy, self.name = target, tall, proxy, gradient
        self.n = tall.n_rows
        self.m = tall.check_subsample_size(batch_size, "batch_size")
        self.chunk_size = chunk_size
        self.uses_table = gradient in ("saga", "is-saga", "adaptive")
        self._table0 = None
        self.lipschitz = self.probs = None
        if gradient in ("is", "is-saga", "adaptive"):
            if lipschitz is None:
                lipschitz = row_lipschitz_bounds(tall, proxy.center)
            lipschitz = np.asarray(lipschitz, dtype=float)
            if lipschitz.shape != (self.n,):
                raise ValueError(f"lipschitz must have one constant per row, shape ({self.n},); "
                                 f"got {lipschitz.shape}.")
            if isinstance(strong_convexity, str) and strong_convexity == "auto":
                prec = target.laplace_precision()
                strong_convexity = max(np.linalg.eigvalsh(prec).min(), 0.0) / self.n
            self.lipschitz = lipschitz
            self.probs = lipschitz_probabilities(lipschitz, strong_convexity)
            self._cdf = np.cumsum(self.probs)

    def new_table(self):
        """A fresh SAGA table at θ* (the full pass is done once and copied per chain)."""
        on_disk = any(leaf.streamed for leaf in self.tall.leaves)
        if self._table0 is None:
            self._table0 = row_gradient_table(self.tall, self.proxy.center, self.chunk_size, on_disk)
        return SagaTable(self._table0, on_disk)

    def _draw(self, rng, cdf):
        # inverse-CDF sampling with replacement: O(m log N) instead of rng.choice's O(N)
        idx = np.searchsorted(cdf, rng.random(self.m) * cdf[-1], side="right")
        return np.minimum(idx, self.n - 1)

    def __call__(self, rng, theta, table=None, step_size=None):
        """Return (ĝ of log π, terms (m, d) or None, per-row gradient evaluations)."""
        tall = self.tall
        prior_grad = np.asarray(tall.prior_value_and_grad(theta)[1], dtype=float)
        if self.name == "full":
            loglik_grad = np.zeros(tall.ndim)
            for start in range(0, self.n, self.chunk_size):
                batch = tall.row_slice(start, min(start + self.chunk_size, self.n))
                loglik_grad += np.asarray(tall.loglik_sum_value_and_grad(theta, batch)[1])
            return prior_grad + loglik_grad, None, self.n
        if self.name in ("plain", "cv", "saga"):
            idx = rng.integers(0, self.n, size=self.m)
            probs = None
        else:
            if self.name == "adaptive":
                probs_all = adaptive_probabilities(self.lipschitz, table, step_size, tall.ndim)
                idx = self._draw(rng, np.cumsum(probs_all))
            else:
                probs_all = self.probs
                idx = self._draw(rng, self._cdf)
            probs = probs_all[idx]
        batch = tall.gather(idx)
        evals = self.m
        offset = 0.0
        if self.name == "cv":
            # ∇ℓ_i − ∇q_i is the per-row gradient of d_i = ℓ_i − q_i: one forward pass per
            # parameter over the batch graph, no per-row gradients of ℓ and q separately
            terms = self.n * self.target.difference_jacobian(theta, batch)
            offset = self.proxy.sum_value_and_grad(theta)[1]
            # per-row evaluations counted as before: ℓ_k at θ and θ*, and H_k v for order 2
            return prior_grad + offset + terms.mean(axis=0), terms, self.m * (1 + max(self.proxy.order, 1))
        row_grads = np.asarray(tall.loglik_rows_and_grads(theta, batch)[1], dtype=float)
        if self.name == "plain":
            terms = uniform_terms(row_grads, self.n)
        elif self.name == "is":
            terms = importance_terms(row_grads, probs)
        else:
            offset = table.total.copy()
            h = table.rows(idx)
            if probs is None:
                terms = saga_terms(row_grads, h, self.n)
            else:
                terms = importance_terms(row_grads, probs, h)
            if np.all(np.isfinite(row_grads)):  # a NaN row gradient must not poison Σh forever
                table.update(idx, row_grads)
        return prior_grad + offset + terms.mean(axis=0), terms, evals
