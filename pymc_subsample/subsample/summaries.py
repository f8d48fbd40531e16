"""Summary statistics S for informed sub-sampling (ISS-MCMC, Alquier's ISS slides).

ISS weights a subset U of n rows by ν(U) ∝ exp(−ε‖Δ_n(U)‖²) where Δ_n(U) compares
the summary statistics of the subset with those of the full data ("From sufficient
statistics to summary statistics", Alquier's ISS slides). Three kinds of S are offered:

``MomentSummary`` ("moments")
    Per-row statistics s(y_k): every column of the row data (covariates and observed
    values, flattened) and their pairwise products, i.e. the sufficient statistics of
    a Gaussian linear model. Sums are additive over rows, so the slides' *sum form*
    Δ_n(U) = Σ_{k≤N} s(y_k) − (N/n) Σ_{k∈U} s(y_k) is used ("Motivating example:
    exponential family") and a swap of r rows updates it in O(r).
    Each statistic is standardised by its full-data mean and standard deviation
    (constant statistics are dropped) so no column dominates ‖Δ‖ because of its
    units; this only rescales ε.
``MapSummary`` ("map")
    S(Y_U) = MAP of the scaled sub-posterior f(Y_U|θ)^{N/n} π(θ), the choice the
    slides recommend ("Choice of summary statistics", item 3). It is a *mean-type*
    statistic, so Δ(U) = (S(Y) − S(Y_U)) / sd, with sd the full-data Laplace standard
    deviation (Δ in units of posterior standard deviations). A subset's MAP is found by
    Newton's method started from the full-data centre θ* every time, with a fixed
    tolerance and step budget, on the subset's rows in index order: S(Y_U) is then a
    function of the set U alone, as ν_{n,ε}(U) ∝ exp(−ε‖Δ_n(U)‖²) requires (a start
    at the current subset's MAP would make Δ(U') depend on the path, and the subset
    acceptance ratio would no longer be that of a Metropolis chain on ν_{n,ε}).
``CallableSummary`` (a user function ``summary(rows) -> 1-d array``)
    ``rows`` maps each row-data name to that data's rows in the subset. Per-row sums
    are not available, so the statistic must be mean-type (e.g. Yule–Walker
    coefficients, sample moments) and Δ(U) = S(Y) − S(Y_U) without the N/n factor.
"""

from __future__ import annotations

import numpy as np
from pymc.logprob.utils import ParameterValueError

from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE

__all__ = ["CallableSummary", "MapSummary", "MomentSummary", "make_summary"]

_ALL_PRODUCTS_MAX_COLS = 20  # above this many columns, keep squares only (p grows as q²)


def _row_matrix(batch) -> np.ndarray:
    """Row data of every leaf flattened to one (m, q) float matrix."""
    cols = [np.asarray(a, dtype=float).reshape(np.shape(a)[0], -1) for a in batch]
    return np.concatenate(cols, axis=1) if cols else np.zeros((0, 0))


class MomentSummary:
    """Standardised first and second moments of the row data (sum form, incremental).

    Parameters
    ----------
    tall : TallModel
    chunk_size : int
        Rows per chunk of the two full-data passes (mean, then standard deviation).
    """

    incremental = True
    kind = "moments"

    def __init__(self, tall, chunk_size=DEFAULT_CHUNK_SIZE):
        self.n_rows = tall.n_rows
        q = _row_matrix(tall.row_slice(0, 1)).shape[1]
        iu = np.triu_indices(q)
        if q > _ALL_PRODUCTS_MAX_COLS:
            iu = (np.arange(q), np.arange(q))
        self._pairs = iu
        self._keep = None
        self._shift = 0.0
        self._scale = 1.0
        total = np.zeros(q + len(iu[0]))
        for start in range(0, tall.n_rows, chunk_size):
            total += self._raw(tall.row_slice(start, start + chunk_size)).sum(axis=0)
        mean = total / tall.n_rows
        sq = np.zeros_like(total)
        for start in range(0, tall.n_rows, chunk_size):
            sq += ((self._raw(tall.row_slice(start, start + chunk_size)) - mean) ** 2).sum(axis=0)
        sd = np.sqrt(sq / tall.n_rows)
        # constant statistics (an intercept column, a constant observed value) carry no
        # information about the subset and would divide by zero.
        keep = sd > 1e-12 * np.maximum(1.0, np.abs(mean))
        self._keep = keep
        self._shift = mean[keep]
        self._scale = sd[keep]
        self.size = int(keep.sum())
        # Standardised statistics sum to exactly 0 over the full data, so
        # Δ_n(U) = 0 − (N/n) Σ_U t_k; keep the formula general anyway.
        self.full_sum = np.zeros(self.size)

    def _raw(self, batch) -> np.ndarray:
        z = _row_matrix(batch)
        i, j = self._pairs
        return np.concatenate([z, z[:, i] * z[:, j]], axis=1)

    def row_stats(self, batch) -> np.ndarray:
        """Standardised per-row statistics t_k, shape (m, p)."""
        raw = self._raw(batch)
        if self._keep is not None:
            raw = (raw[:, self._keep] - self._shift) / self._scale
        return raw

    def delta(self, subset_sum, n) -> np.ndarray:
        """Δ_n(U) = Σ_N t_k − (N/n) Σ_U t_k."""
        return self.full_sum - (self.n_rows / n) * subset_sum


class CallableSummary:
    """A user's mean-type summary ``summary(rows) -> 1-d array``; Δ = S(Y) − S(Y_U).

    Parameters
    ----------
    tall : TallModel
    fn : callable
        Receives a dict {row-data name: rows of that data} and returns a 1-d array of
        finite floats of the same length for the full data and for every subset.
    """

    incremental = False
    kind = "callable"

    def __init__(self, tall, fn):
        self._fn = fn
        self._names = [leaf.name for leaf in tall.leaves]
        self.full_value = self._call({leaf.name: leaf.data for leaf in tall.leaves}, "the full data")
        self.size = self.full_value.shape[0]

    def _call(self, rows, what):
        out = np.asarray(self._fn(rows), dtype=float)
        expected = getattr(self, "size", None)
        if out.ndim != 1 or out.size == 0 or (expected is not None and out.shape != (expected,)):
            want = f"shape ({expected},)" if expected is not None else "a non-empty 1-d array"
            raise ValueError(
                f"summary(rows) must return {want} on {what}; got shape {out.shape}. Return a "
                "1-d array of floats of the same length for every subset (e.g. np.array([...]))."
            )
        if not np.all(np.isfinite(out)):
            raise ValueError(
                f"summary(rows) returned non-finite values on {what}: {out}. Make the summary "
                "finite for every subset of rows (e.g. guard divisions by a small variance)."
            )
        return out

    def value(self, batch):
        """S(Y_U) for the rows ``batch``, and 0 passes of the likelihood over them.

        Returns
        -------
        value : ndarray, shape (size,)
        passes : int
            Per-row likelihood evaluations divided by the number of rows (none here).
        """
        return self._call(dict(zip(self._names, batch, strict=True)), "a subset"), 0

    def delta(self, value) -> np.ndarray:
        return self.full_value - value


class MapSummary:
    """MAP of the scaled sub-posterior as the summary ("Choice of summary statistics", item 3).

    S(Y_U) = argmax_θ (N/n) Σ_{k∈U} ℓ_k(θ) + log π(θ) (the mode of the scaled
    sub-posterior π̄_n(θ|Y_U) of the ISS slides' (Alquier) "Definition"), and
    Δ(U) = (S(Y) − S(Y_U)) / sd.

    The mode is found by damped Newton iterations that always start from the full-data
    centre θ* and stop by a rule that looks only at the iterates (Newton decrement below
    ``tol`` or ``max_steps`` reached). The rows are those of U in index order (the caller
    sorts them). So the value is a deterministic function of the *set* U: the subset
    update of ISS-MCMC accepts U' w.p. 1 ∧ exp{−ε(‖Δ_n(U')‖² − ‖Δ_n(U)‖²)} (Alquier's ISS slides,
    "ISS-MCMC", step 1.2), which is a Metropolis step on ν_{n,ε} only if Δ_n is a
    function on subsets. Starting from the current subset's mode instead (a warm
    start) makes Δ_n(U') depend on where the chain came from whenever Newton has not
    fully converged, and its floating-point value depend on it always.

    Parameters
    ----------
    tall : TallModel
    full_map : ndarray
        θ*(Y), the full-data MAP or a centre close to it (unconstrained); also the start
        of every Newton run.
    full_hessian : ndarray
        Hessian of the full-data log posterior at θ*(Y): gives the standardising sd.
    max_steps : int
        Newton steps at most per subset (the step budget).
    tol : float
        Stop when the Newton decrement λ = √(gᵀ(−H)⁻¹g) — the length of the Newton step
        in the sub-posterior's own standard deviations — is below ``tol``. 1e-6 sd is far
        below any ε that matters (ε‖Δ‖² changes by ~ε·2·‖Δ‖·1e-6).

    Notes
    -----
    From θ* a subset of n rows has its mode about √(N/n) posterior sds away for a random
    U, and within ~1 sd for the subsets ISS keeps; Newton's quadratic convergence then
    reaches ``tol`` in 2–5 steps on GLMs (exactly 1–2 on a Gaussian mean). Each step is
    one pass over the n rows for Σℓ, Σ∇ℓ and ΣH (the ``n_loglik_evals`` it costs).
    """

    incremental = False
    kind = "map"

    def __init__(self, tall, full_map, full_hessian, max_steps=20, tol=1e-6):
        self._tall = tall
        self.full_value = np.asarray(full_map, dtype=float).copy()
        cov = np.linalg.pinv(-np.asarray(full_hessian))
        self._sd = np.sqrt(np.clip(np.diag(cov), 1e-300, None))
        self.size = self.full_value.shape[0]
        self.max_steps = int(max_steps)
        self.tol = float(tol)
        self._prior_hessian = np.asarray(tall.prior_hessian(self.full_value), dtype=float)

    def _objective(self, theta, batch, scale):
        """Log π̄_n(θ|Y_U) up to a constant, its gradient and Hessian (one pass over the rows)."""
        tall = self._tall
        try:
            ll, g, h = tall.loglik_sum_value_grad_hessian(theta, batch)
            lp, gp = tall.prior_value_and_grad(theta)
        except ParameterValueError:  # a point outside the support has zero density
            return -np.inf, None, None
        value = float(lp) + scale * float(ll)
        if not np.isfinite(value):
            return -np.inf, None, None
        # the prior's Hessian is taken at θ*: it is O(n/N) of (N/n)ΣH_k, so Newton still
        # converges about quadratically, the fixed point (gradient 0) is exact, and one
        # compiled call per pass is saved (it cost as much as the n-row pass itself)
        return value, scale * np.asarray(g) + gp, scale * np.asarray(h) + self._prior_hessian

    def value(self, batch):
        """S(Y_U) = θ*(Y_U) by Newton from θ*, and the number of passes over the rows.

        Parameters
        ----------
        batch : tuple of ndarray
            The subset's rows, in index order.

        Returns
        -------
        value : ndarray, shape (d,)
        passes : int
            Passes over the n rows (each evaluates Σℓ_k, Σ∇ℓ_k and ΣH_k).
        """
        m = np.shape(batch[0])[0]
        scale = self._tall.n_rows / m
        theta = self.full_value.copy()  # the same start for every subset
        value, grad, hess = self._objective(theta, batch, scale)
        passes = 1
        if grad is None:
            return theta, passes
        for _ in range(self.max_steps):
            try:
                step = np.linalg.solve(hess, grad)  # θ_new = θ − H⁻¹g (H negative definite)
            except np.linalg.LinAlgError:
                break
            decrement_sq = -float(grad @ step)  # λ² = gᵀ(−H)⁻¹g
            if not (np.all(np.isfinite(step)) and decrement_sq > 0):
                break  # not locally concave: keep the last iterate (still a function of U)
            if np.sqrt(decrement_sq) < self.tol:
                theta = theta - step  # converged: the last full step needs no check
                break
            # halve until the sub-posterior does not decrease (a deterministic rule too)
            t = 1.0
            for _ in range(30):
                new = theta - t * step
                new_value, new_grad, new_hess = self._objective(new, batch, scale)
                passes += 1
                if new_grad is not None and new_value >= value - 1e-12 * abs(value):
                    break
                t *= 0.5
            else:
                break
            theta, value, grad, hess = new, new_value, new_grad, new_hess
        return theta, passes

    def delta(self, value) -> np.ndarray:
        return (self.full_value - value) / self._sd


def make_summary(summary, tall, *, chunk_size=DEFAULT_CHUNK_SIZE, full_map=None, full_hessian=None):
    """Build the summary object for ``summary`` ("moments", "map" or a callable)."""
    if callable(summary):
        return CallableSummary(tall, summary)
    if summary == "moments":
        return MomentSummary(tall, chunk_size=chunk_size)
    if summary == "map":
        return MapSummary(tall, full_map, full_hessian)
    raise ValueError(
        f"summary must be 'moments', 'map' or a callable summary(rows) -> 1-d array; got {summary!r}."
    )
