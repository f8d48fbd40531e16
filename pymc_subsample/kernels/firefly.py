"""Firefly Monte Carlo kernels (Maclaurin & Adams 2014): brightness updates and the θ | z potential.

Plain NumPy over the rows a step touches, never over all N rows. With a collapsible bound
(:mod:`pymc_subsample.control_variates.firefly_bounds`) the augmented target is

    log p(θ, z) = log π(θ) + Σ_k log B_k(θ) + Σ_{z_k = 1} log[(L_k(θ) − B_k(θ)) / B_k(θ)],

and with r_k = ℓ_k − log B_k ≥ 0 the bright term is log(e^{r_k} − 1) = log_expm1(r_k), the
log-odds of z_k = 1 under its conditional P(z_k = 1 | θ) = 1 − B_k/L_k.

Brightness update (implicit sampling, Maclaurin & Adams §3.2): every row k gets its own
Metropolis-Hastings move on z_k given θ, which proposes a flip with probability 1 for a bright
row and ``rate`` = q for a dark one, and accepts with

    dark → bright: min(1, e^{log_expm1(r_k)} / q),   bright → dark: min(1, q e^{−log_expm1(r_k)}).

Each move leaves P(z_k | θ) invariant (detailed balance: p(z)Q(z→z')α = min(p(z)Q(z→z'),
p(z')Q(z'→z))), the z_k are independent given θ, so the product of the N moves does too. Only
bright rows and the dark rows drawn for a proposal (Binomial(N − n_bright, q) of them, drawn as
the dark members of a Binomial(N, q) uniform subset) are touched: O(n_bright + qN) per
iteration. When q ≥ the odds (L_k − B_k)/B_k, a bright row always turns dark and a dark one turns
bright with probability equal to those odds, so z_k is redrawn afresh at every iteration.

The brightness update has BlackJAX's shape: :func:`init` gives a :class:`FireflyState` with every
row dark, and :func:`step` ``(rng, state, θ, rate, n_rows, row_loglik, read) -> (state,
FireflyInfo)`` is one update of z | θ, over the rows' family ``row_loglik`` and ``read``, which
reads the rows a proposal names. The θ | z update is a leapfrog integrator's on
:class:`FireflyPotential` given the bright rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

__all__ = [
    "BOUND_TOLERANCE",
    "BrightRows",
    "FireflyInfo",
    "FireflyPotential",
    "FireflyState",
    "bright_log_odds",
    "d_log_expm1",
    "flip_bright",
    "flip_dark",
    "init",
    "is_member",
    "log_expm1",
    "propose_dark",
    "step",
]

BOUND_TOLERANCE = 1e-9  # r_k = ℓ_k − log B_k below −tol·(1 + |r_k|) is a broken bound, not rounding


def log_expm1(r):
    """log(e^r − 1) for r > 0, stable at both ends (r + log(1 − e^{−r})); −inf for r ≤ 0."""
    r = np.asarray(r, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = r + np.log(-np.expm1(-r))
    return np.where(r > 0, out, -np.inf)


def d_log_expm1(r):
    """d/dr log(e^r − 1) = 1 / (1 − e^{−r})."""
    return 1.0 / -np.expm1(-np.asarray(r, dtype=float))


def bright_log_odds(row_loglik, eta, y, a, b, c):
    """log[(L_k − B_k)/B_k] = log_expm1(ℓ_k − log B_k), and r_k = ℓ_k − log B_k (negative: bound broken).

    ``row_loglik(η, y) -> (ℓ, ∂ℓ/∂η)`` is the rows' family, vectorised over the rows.
    """
    loglik, _ = row_loglik(eta, y)
    r = loglik - (a + b * eta + c * eta**2)
    return log_expm1(r), r


def is_member(rows, sorted_idx):
    """Whether each of ``rows`` is in the sorted index array (O(m log n), no length-N mask)."""
    if sorted_idx.size == 0:
        return np.zeros(np.shape(rows), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_idx, rows), sorted_idx.size - 1)
    return sorted_idx[pos] == rows


def propose_dark(rng, n_rows, rate, bright_idx):
    """Dark rows proposed to become bright: each dark row independently with probability ``rate``.

    A Binomial(N, q) number of distinct uniform rows, bright ones dropped (they have their own
    move), so each dark row is included with probability q independently of the others.
    """
    k = int(rng.binomial(n_rows, rate))
    if k == 0:
        return np.empty(0, dtype=np.int64)
    rows = rng.choice(n_rows, size=k, replace=False).astype(np.int64)
    return np.sort(rows[~is_member(rows, bright_idx)])


def flip_dark(rng, log_odds, rate):
    """Accept dark → bright for proposed rows: log u < log_odds − log q."""
    return np.log(rng.random(np.shape(log_odds))) < log_odds - np.log(rate)


def flip_bright(rng, log_odds, rate):
    """Accept bright → dark for every bright row (proposed with probability 1): log u < log q − log_odds."""
    return np.log(rng.random(np.shape(log_odds))) < np.log(rate) - log_odds


@dataclass
class BrightRows:
    """The bright rows, kept as a sorted index set with what the θ-update needs of each row.

    ``offset`` and ``jac`` give η_k(θ) = offset_k + jac_k·θ; (a, b, c) are the bound's
    coefficients, log B_k = a_k + b_k η_k + c_k η_k².
    """

    idx: np.ndarray
    offset: np.ndarray
    jac: np.ndarray
    y: np.ndarray
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray

    @classmethod
    def empty(cls, ndim):
        z = np.empty(0)
        return cls(np.empty(0, dtype=np.int64), z, np.empty((0, ndim)), z, z, z, z)

    @property
    def size(self) -> int:
        return int(self.idx.size)

    def eta(self, theta):
        return self.offset + self.jac @ theta

    def select(self, keep):
        return BrightRows(**{f.name: getattr(self, f.name)[keep] for f in fields(self)})

    def merge(self, other):
        """Union with ``other`` (disjoint), sorted by row index."""
        parts = {f.name: np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                 for f in fields(self)}
        order = np.argsort(parts["idx"], kind="stable")
        return BrightRows(**{k: v[order] for k, v in parts.items()})


class FireflyState(NamedTuple):
    """The brightness z: the bright rows, every other row dark."""

    bright: BrightRows


class FireflyInfo(NamedTuple):
    """What one :func:`step` did."""

    n_examined: int  # rows whose log-odds were read: the bright ones and the proposed dark ones
    n_proposed: int  # dark rows proposed to become bright
    #: max_k (log B_k − ℓ_k) over the first set of rows read (bright, then proposed) in which a bound
    #: is broken beyond rounding (:data:`BOUND_TOLERANCE`); 0.0 when every bound held
    bound_excess: float


def init(ndim) -> FireflyState:
    """Every row dark (``ndim``: the length of θ, the width of the bright rows' Jacobians)."""
    return FireflyState(BrightRows.empty(ndim))


def step(rng, state: FireflyState, theta, rate, n_rows, row_loglik, read) -> tuple[FireflyState, FireflyInfo]:
    """One update of z | θ (Maclaurin & Adams §3.2): a Metropolis-Hastings flip for every bright row,
    then for each row of a :func:`propose_dark` set of dark rows (module docstring).

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the bright rows' uniforms, the proposed dark rows and their uniforms, in this order.
    state : FireflyState
    theta : ndarray (d,)
    rate : float
        q, the probability that a dark row is proposed.
    n_rows : int
        N.
    row_loglik : callable
        ``(η, y) -> (ℓ, ∂ℓ/∂η)`` of the rows' family, vectorised.
    read : callable
        ``read(idx, θ) -> (η (m,), y, a, b, c, jacobian)`` for the sorted rows ``idx``: their η at θ,
        observations and bound coefficients, and ``jacobian(keep) -> (offset, jac)`` with
        η = offset + jac·θ for the rows where ``keep`` is true (asked for the rows turning bright only).

    Returns
    -------
    state : FireflyState
        The bright rows after the update, sorted by row index.
    info : FireflyInfo
    """
    rows = kept = state.bright
    excess = 0.0
    if rows.size:
        log_odds, r = bright_log_odds(row_loglik, rows.eta(theta), rows.y, rows.a, rows.b, rows.c)
        excess = _bound_excess(r)
        kept = rows.select(~flip_bright(rng, log_odds, rate))
    proposed = propose_dark(rng, n_rows, rate, rows.idx)
    if proposed.size:
        eta, y, a, b, c, jacobian = read(proposed, theta)
        log_odds, r = bright_log_odds(row_loglik, eta, y, a, b, c)
        excess = excess or _bound_excess(r)
        on = flip_dark(rng, log_odds, rate)
        if on.any():
            kept = kept.merge(BrightRows(proposed[on], *jacobian(on), y[on], a[on], b[on], c[on]))
    return FireflyState(kept), FireflyInfo(rows.size + proposed.size, proposed.size, excess)


def _bound_excess(r) -> float:
    """−min_k r_k when some r_k = ℓ_k − log B_k is below −tol·(1 + |r_k|), else 0.0."""
    return -float(np.min(r)) if np.any(r < -BOUND_TOLERANCE * (1.0 + np.abs(r))) else 0.0


class FireflyPotential:
    """log π(θ) + Σ_k log B_k(θ) + Σ_{bright} log_expm1(r_k(θ)) and its gradient, for NUTS/HMC.

    :meth:`logp_dlogp` and ``dtype`` are what a leapfrog integrator needs (as
    :class:`~pymc_subsample.kernels.potential.SubsampledPotential`); the step method hands them to
    PyMC's NUTS, which runs on them unchanged. Per call: the prior (one compiled call), the
    collapsed bound O(d²), and the bright rows O(n_bright · d) in NumPy.

    Parameters
    ----------
    row_loglik : callable
        (η, y) ↦ (ℓ, ∂ℓ/∂η) of the rows' GLM family, vectorised over the rows
        (``control_variates.firefly_bounds.row_loglik`` with the family given).
    prior : callable
        θ ↦ (log π(θ), ∇ log π(θ)).
    collapsed : CollapsedBound
        Σ_k log B_k over all N rows.
    dtype : str
    """

    def __init__(self, row_loglik, prior, collapsed, dtype="float64"):
        self.row_loglik = row_loglik
        self.prior = prior
        self.collapsed = collapsed
        self.dtype = dtype
        self.bright = None
        self.n_rows_evaluated = 0

    def value_and_grad(self, theta):
        theta = np.asarray(theta, dtype=float)
        lp, dlp = self.prior(theta)
        value, grad = self.collapsed.value_and_grad(theta)
        value, grad = value + float(lp), grad + dlp
        rows = self.bright
        if rows is not None and rows.size:
            self.n_rows_evaluated += rows.size
            eta = rows.eta(theta)
            loglik, dloglik = self.row_loglik(eta, rows.y)
            r = loglik - (rows.a + rows.b * eta + rows.c * eta**2)
            if not np.all(r > 0):  # L_k = B_k: the augmented density is 0 here
                return -np.inf, np.zeros_like(theta)
            value += float(np.sum(log_expm1(r)))
            grad = grad + rows.jac.T @ (d_log_expm1(r) * (dloglik - rows.b - 2.0 * rows.c * eta))
        return value, grad

    def logp_dlogp(self, q):
        """(logp, dlogp) at the raveled q in ``dtype``, as a leapfrog integrator takes them."""
        value, grad = self.value_and_grad(q)
        return np.asarray(value, dtype=self.dtype), np.asarray(grad, dtype=self.dtype)
