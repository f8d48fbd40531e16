"""The confidence sampler (Bardenet, Doucet & Holmes 2014) and the range bounds it needs."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from pymc_subsample.kernels.mh_tests.shared import (
    RowStream,
    SequentialTest,
    look_level,
    look_size,
    row_differences,
)

__all__ = [
    "Confidence",
    "check_bound_order",
    "confidence_test",
    "empirical_range_bound",
    "glm_taylor_range_bound",
    "linear_predictor_bound",
    "logistic_range_bound",
]


def confidence_test(row_terms, n_rows, offset, log_u, rng, *, batch_size, error,
                    range_bound, gamma=2.0, p=2.0):
    """Confidence sampler of Bardenet, Doucet & Holmes (2014) with an empirical-Bernstein bound.

    Rows are drawn without replacement; the batch grows geometrically (t ← ⌈γ t⌉). At
    the k-th look, with δ_k = (p − 1) δ / (p k^p) so that Σ_k δ_k ≤ δ = ``error``
    (:func:`look_level`),

        c_k = σ̂ √(2 log(3/δ_k)/t) + 6 C log(3/δ_k)/t

    (σ̂ the sample sd of the t_k, C = ``range_bound`` ≥ max_k |t_k|, so 2C bounds their
    range). Stop when |t̄ − μ₀| ≥ c_k, or at t = N (exact). Accept iff t̄ > μ₀. With
    probability ≥ 1 − δ the decision equals the exact MH decision — only if C really bounds
    every |t_k|: ``stats["max_abs_term"]``, the largest |t_k| read, lets the caller check
    it (:class:`~pymc_subsample.SubsampleMH` warns when it exceeds C).

    Returns
    -------
    accept, rows_used, stats
        ``stats`` also holds ``max_abs_term``.
    """
    if not (np.isfinite(range_bound) and range_bound >= 0):
        raise ValueError(f"range_bound must be a finite non-negative number; got {range_bound!r}.")
    mu0 = (log_u - offset) / n_rows
    stream = RowStream(rng, n_rows)
    values = np.empty(0)
    target, look = min(int(batch_size), n_rows), 0
    while True:
        values = np.concatenate([values, np.asarray(row_terms(stream.take(target - values.size)), float)])
        t = values.size
        look += 1
        mean = float(values.mean())
        if t >= n_rows:
            break
        log_term = math.log(3.0 / look_level(error, look, p))
        c = float(values.std()) * math.sqrt(2.0 * log_term / t) + 6.0 * range_bound * log_term / t
        if abs(mean - mu0) >= c:
            break
        target = min(n_rows, max(t + 1, math.ceil(gamma * t)))
    return bool(mean > mu0), t, {"delta_hat": offset + n_rows * mean, "loglik_var": math.nan,
                                 "max_abs_term": float(np.max(np.abs(values))), "looks": look}


def logistic_range_bound(X, center, proxy_order=2):
    """Range bound C(θ, θ') ≥ max_k |t_k| for Bernoulli-logit rows ℓ_k = log σ(±x_kᵀθ).

    Uses |d^j/dz^j log σ(z)| ≤ M_j with M_1 = 1, M_2 = 1/4, M_3 = 1/(6√3) and Taylor's
    remainder |ℓ_k(θ) − q_k(θ)| ≤ M_{r+1}/(r+1)! |x_kᵀ(θ − θ*)|^{r+1} for a proxy of order
    r (Bardenet et al.'s bound for GLMs, Alquier's ISS slides), so with R = max_k ||x_k||:

    * no proxy (``proxy_order=None``): C = M_1 R ||θ' − θ||;
    * order r: C = M_{r+1}/(r+1)! R^{r+1} (||θ − θ*||^{r+1} + ||θ' − θ*||^{r+1}).

    Valid only when θ is exactly the coefficient vector of the linear predictor x_kᵀθ, and
    only for the terms of the proxy order it was built for: a bound for order 2 falls like
    ||θ − θ*||³ while the remainders of an order-1 proxy fall like ||θ − θ*||², so near θ*
    it is far too small.

    Returns
    -------
    callable
        ``bound(theta, theta_prop) -> C``, with attribute ``proxy_order`` (the order it was
        built for, None for no proxy) that :class:`~pymc_subsample.SubsampleMH` checks
        against its own ``proxy_order`` / ``control_variates``.
    """
    radius = float(np.max(np.linalg.norm(np.asarray(X, float), axis=1)))
    center = np.asarray(center, float)
    if proxy_order is None:
        def bound(theta, theta_prop):
            return radius * float(np.linalg.norm(np.asarray(theta_prop) - np.asarray(theta)))

        bound.proxy_order = None
        return bound
    if proxy_order not in (0, 1, 2):
        raise ValueError(f"proxy_order must be None, 0, 1 or 2; got {proxy_order!r}.")
    m_next = (1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0)))[proxy_order]
    r = proxy_order + 1
    factor = m_next / math.factorial(r) * radius**r

    def bound(theta, theta_prop):
        a = np.linalg.norm(np.asarray(theta) - center)
        b = np.linalg.norm(np.asarray(theta_prop) - center)
        return float(factor * (a**r + b**r))

    bound.proxy_order = proxy_order
    return bound


def linear_predictor_bound(radius, box=None, laplace_radius=None, inv_chol=None):
    """``U(v) ≥ max_k |J_kᵀv|`` for every v, from what one pass over the rows gives: the smallest of
    ρ ||v|| (ρ = ``radius`` = max_k ||J_k||), Σ_j c_j |v_j| (c = ``box``, c_j = max_k |J_kj|) and
    ρ_L ||L⁻¹v|| (ρ_L = ``laplace_radius`` = max_k ||LᵀJ_k||, ``inv_chol`` = L⁻¹), each a
    Cauchy-Schwarz or triangle bound; the smallest holds too.
    """
    radius = float(radius)
    box = None if box is None else np.asarray(box, float)
    inv = None if inv_chol is None else np.asarray(inv_chol, float)
    values = [radius, *([] if box is None else box), *([] if laplace_radius is None else [laplace_radius])]
    if not all(math.isfinite(x) and x >= 0 for x in values):
        raise ValueError(f"the radii of the rows must be finite and non-negative; got {values!r}.")

    def bound(v):
        v = np.asarray(v, float)
        out = radius * float(np.linalg.norm(v))
        if box is not None:
            out = min(out, float(box @ np.abs(v)))
        if inv is not None:
            out = min(out, float(laplace_radius) * float(np.linalg.norm(inv @ v)))
        return out

    return bound


def glm_taylor_range_bound(eta_bound, center, derivative_bound, proxy_order):
    r"""Range bound C(θ, θ') ≥ max_k |t_k| for GLM rows ℓ_k = f(y_k, η_k), η_k = a_k + J_kᵀθ.

    The default bound of ``SubsampleMH(test="confidence")`` where the model is a GLM whose family
    tabulates M_j ≥ sup |∂ʲf/∂ηʲ| (:attr:`pymc_subsample.families.Family.derivative_bounds`).
    ``eta_bound(v) ≥ max_k |J_kᵀv|`` (:func:`linear_predictor_bound`); A = U(θ − θ*),
    B = U(θ' − θ*), H = U(θ' − θ):

    * plain differences (``proxy_order`` None or 0): |f(η') − f(η)| ≤ M₁ |η' − η|, so C = M₁ H;
    * remainders of the order-r Taylor proxy at θ* (r = 1, 2), t_k = g_k(η_k') − g_k(η_k) with
      g_k = f − T_r f(·; η_k*): Taylor's remainder |g_k(η)| ≤ M_{r+1}/(r+1)! |η − η*|^{r+1}
      gives C₁ = M_{r+1}/(r+1)! (A^{r+1} + B^{r+1}), the Taylor-remainder form that Bardenet,
      Doucet & Holmes (2017, §7) use for their proxies; the mean-value theorem with |g_k'(s)| ≤ M_{r+1}/r!
      |s − η*|^r gives C₂ = M_{r+1}/r! H max(A, B)^r. C = min(C₁, C₂): both hold.

    The proxy's sum is added exactly, so the concentration inequality of :func:`confidence_test`
    applies to these t_k with range 2C, and δ keeps its meaning. Valid only for a proxy that is
    the Taylor expansion in θ at ``center`` of rows whose η is affine in θ (the step checks it).

    Returns
    -------
    callable
        ``bound(theta, theta_prop) -> C`` with attribute ``proxy_order`` (None for plain
        differences), as :func:`check_bound_order` reads it.
    """
    order = None if proxy_order in (None, 0) else int(proxy_order)
    if order not in (None, 1, 2):
        raise ValueError(f"proxy_order must be None, 0, 1 or 2; got {proxy_order!r}.")
    m = float(derivative_bound)
    if not (math.isfinite(m) and m >= 0):
        raise ValueError(f"derivative_bound must be finite and non-negative; got {m!r}.")
    center = np.asarray(center, float)

    if order is None:
        def bound(theta, theta_prop):
            return m * eta_bound(np.asarray(theta_prop, float) - np.asarray(theta, float))
    else:
        r = order + 1
        whole, slope = m / math.factorial(r), m / math.factorial(order)

        def bound(theta, theta_prop):
            theta, theta_prop = np.asarray(theta, float), np.asarray(theta_prop, float)
            a, b = eta_bound(theta - center), eta_bound(theta_prop - center)
            h = eta_bound(theta_prop - theta)
            return min(whole * (a**r + b**r), slope * h * max(a, b) ** order)

    bound.proxy_order = order
    return bound


def check_bound_order(bound, proxy_order, control_variates):
    """A range bound that declares the proxy order it was built for must match the terms read.

    The confidence sampler's terms are remainders t_k of the order-r proxy, or plain
    differences of ℓ_k without a proxy (control_variates=False or order 0, whose constant proxy
    cancels). A bound for another order does not bound them (Alquier's ISS slides). Bounds without
    a ``proxy_order`` attribute cannot be checked here; the run-time check still applies.
    """
    # measured: a bound for order 2 with an order-1 proxy was exceeded 4-40x
    if not hasattr(bound, "proxy_order") or proxy_order not in (0, 1, 2):
        return
    declared = bound.proxy_order
    terms = proxy_order if control_variates and proxy_order > 0 else None
    if declared == terms or (terms is None and declared in (None, 0)):
        return
    what = (f"remainders of an order-{terms} proxy (proxy_order={terms}, control_variates=True)"
            if terms is not None
            else "plain differences ℓ_k(θ') − ℓ_k(θ) (control_variates=False or proxy_order=0)")
    fix = (f"set proxy_order={declared}" + ("" if control_variates else " and control_variates=True")
           if declared not in (None, 0) else "set control_variates=False")
    raise ValueError(
        f"range_bound was built for proxy order {declared} (its proxy_order attribute), but the "
        f"confidence sampler reads {what}: the bound does not bound these terms, so δ would mean "
        f"nothing. Build it for the terms read (e.g. logistic_range_bound(X, center, "
        f"proxy_order={terms})), or {fix}.")


def empirical_range_bound(target, chol, control_variates, chunk_size):
    """Heuristic C(θ, θ') from the full data at 8 Laplace draws (``range_bound="empirical"``).

    C = 2 · max over the N rows and the draws θ = θ* + 2Lz of |ℓ_k − q_k| / ||2z||^{r+1}, times
    ||θ − θ*||_Σ^{r+1} + ||θ' − θ*||_Σ^{r+1} (L = ``chol``, Σ = LLᵀ, the identity where ``chol`` is
    None); without the proxy, 2 · max |ℓ_k(θ) − ℓ_k(θ*)| / ||2z|| times ||θ' − θ||_Σ. It assumes the
    remainder scales like a Taylor remainder, which voids the confidence sampler's δ guarantee.
    """
    tall, proxy = target.tall, target.proxy
    chol = chol if chol is not None else np.eye(tall.ndim)
    inv = np.linalg.inv(chol)
    center, power = proxy.center, (proxy.order + 1 if control_variates else 1)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(8):
        z = rng.standard_normal(tall.ndim)
        theta = center + 2.0 * chol @ z
        for start in range(0, tall.n_rows, chunk_size):
            batch = tall.row_slice(start, min(start + chunk_size, tall.n_rows))
            if control_variates:
                rem = target.differences(theta, batch)
            else:  # Lipschitz-type constant of ℓ_k along the draw
                rem = tall.loglik_rows(theta, batch) - tall.loglik_rows(center, batch)
            worst = max(worst, float(np.max(np.abs(rem))) / float(np.linalg.norm(2.0 * z)) ** power)

    def bound(theta, theta_prop):
        if not control_variates:
            return 2.0 * worst * float(np.linalg.norm(inv @ (theta_prop - theta)))
        a = np.linalg.norm(inv @ (theta - center)) ** power
        b = np.linalg.norm(inv @ (theta_prop - center)) ** power
        return 2.0 * worst * float(a + b)

    # built for the terms the sampler reads (see check_bound_order)
    bound.proxy_order = proxy.order if control_variates and proxy.order > 0 else None
    return bound


@dataclass
class Confidence(SequentialTest):
    """:func:`confidence_test` on the move's terms t_k with C = ``range_bound(θ, θ′)``, first look
    ``subsample_size`` rows, δ = ``error``; a term read above C warns once per sampler (δ is then
    void).
    """

    range_bound: Any = None
    chunk_size: int = 0  # rows per chunk of the empirical bound's passes
    _warned: bool = field(default=False, init=False, repr=False)

    name: ClassVar[str] = "confidence"

    @classmethod
    def configure(cls, n_rows, options):
        bound = options.range_bound
        if bound is None:
            raise ValueError(
                "test='confidence' needs a bound C(θ, θ') on max_k |t_k| for its concentration "
                "inequality. The step derives one (range_bound='glm') for a GLM whose family tabulates "
                "derivative bounds (Bernoulli-logit; Normal with known σ); for other models pass "
                "range_bound=callable(theta, theta_prop) or range_bound='empirical' (heuristic), or use "
                "another test."
            )
        if callable(bound):
            check_bound_order(bound, options.proxy_order, options.control_variates)
        return cls(look_size(n_rows, options.subsample_size), options.error, options.control_variates,
                   range_bound=bound, chunk_size=int(options.chunk_size))

    def prepare(self, target, laplace_chol):
        if callable(self.range_bound):
            return self
        if self.range_bound == "glm":
            raise ValueError("range_bound='glm' is derived by SubsampleMH from the model's GLM view "
                             "(glm_taylor_range_bound); pass the callable it returns to this test.")
        return replace(self, range_bound=empirical_range_bound(target, laplace_chol, self.control_variates,
                                                                 self.chunk_size))

    def run(self, rng, u, move, offset, proxied):
        c = float(self.range_bound(move.theta, move.theta_p))
        accept, rows, info = confidence_test(row_differences(move, proxied), move.target.n_rows, offset,
                                             math.log(u), rng, batch_size=self.subsample_size,
                                             error=self.error, range_bound=c)
        self._check_range(info["max_abs_term"], c, move, move.target.proxy.order if proxied else None)
        return accept, rows, info

    def _check_range(self, observed, bound, move, order):
        """Warn once when a term read exceeds C(θ, θ'): the confidence sampler's δ is then void."""
        # 1e-9 relative slack: a valid bound may be matched to the last bits by a term
        if self._warned or not observed > bound * (1.0 + 1e-9):
            return
        self._warned = True
        terms = (f"remainders of the order-{order} proxy (proxy_order={order}, control_variates=True)"
                 if order is not None else "differences ℓ_k(θ') − ℓ_k(θ) (no proxy)")
        ratio = observed / bound if bound > 0 else math.inf
        warnings.warn(
            f"SubsampleMH(test='confidence'): a term |t_k| = {observed:.3g} read at step {move.number} "
            f"exceeds the range bound C(θ, θ') = {bound:.3g} ({ratio:.3g}x), "
            f"so the error level δ = {self.error:g} is not guaranteed. The terms are {terms}: pass a "
            "range_bound that bounds them (logistic_range_bound(X, center, proxy_order="
            f"{order}) with the sampler's center for logistic regression), or a larger one. "
            "Warned once per sampler.", UserWarning, stacklevel=2)
