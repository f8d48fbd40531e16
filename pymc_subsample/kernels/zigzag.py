r"""The Zig-Zag process with control variates (Bierkens, Fearnhead & Roberts, Ann. Statist. 2019).

Plain NumPy: nothing here knows about PyMC. Notation of the package, not of the paper (the paper
writes ξ for the position and θ for the velocity): position θ ∈ ℝ^d, velocity v ∈ {−1, +1}^d,
potential U(θ) = U₀(θ) − Σ_k ℓ_k(θ) with U₀ = −log p the prior part.

**Process** (paper §2). θ moves at velocity v; coordinate j flips v_j at rate λ_j(θ, v). The law
π(θ) ⊗ Uniform{±1}^d is invariant whenever λ_j(θ, v) − λ_j(θ, F_j v) = v_j ∂_jU(θ) (F_j flips
v_j). The canonical rate is max(0, v_j ∂_jU(θ)). Positions at fixed times are then draws of π
along one path (the skeleton is not needed).

**Subsampling with control variates** (paper §3, ZZ-CV). For a row I drawn with probability
p_k = w_k/W (W = Σ_k w_k; the paper's uniform rows are w ≡ 1, W = N),

    Ê_j^I(θ) = ∂_jU₀(θ) − A_j − (W/w_I) (∂_jℓ_I(θ) − ∂_jℓ_I(θ*)),   A = Σ_k ∇ℓ_k(θ*),

has E_I Ê_j^I = ∂_jU. The rate λ̃_j = E_I max(0, v_j Ê_j^I) satisfies the rate condition above
(max(0, x) − max(0, −x) = x under the expectation), so the process still has π as invariant law
for any weights: subsampling changes the speed of mixing, not the target. Unlike the paper, the
prior part is kept exact (it is O(d)) instead of being split into N shares.

**Thinning bound.** Rows ℓ_k = f(y_k, η_k) with η_k(θ) = η_k(θ*) + J_k·(θ − θ*) and |f''| ≤ κ
give |∂_jℓ_k(θ) − ∂_jℓ_k(θ*)| ≤ κ |J_kj| |J_k·(θ − θ*)|. With R upper triangular, RᵀR = P (a
positive-definite matrix, the Laplace precision) and Cauchy-Schwarz, |J_k·Δ| ≤ ‖R⁻ᵀJ_k‖₂ ‖RΔ‖₂;
along the segment θ + vs, |J_k·v| ≤ ‖J_k‖₁. So, with the per-row constants computed in one pass

    a_j = κ max_k |J_kj| ‖R⁻ᵀJ_k‖₂ / w_k,    b_j = κ max_k |J_kj| ‖J_k‖₁ / w_k,

and a quadratic log-prior (constant Hessian H₀ = ∇²log p), every row k and s ≥ 0 satisfy

    v_j Ê_j^k(θ + vs) ≤ α_j + β_j s,
    α_j = v_j (∂_jU₀(θ) − A_j) + W a_j ‖RΔ‖₂,    β_j = −v_j (H₀v)_j + W b_j.

This is the paper's affine bound a_i + b_i t of §3.2 (there with a p-norm Lipschitz constant C_i:
a_i = (θ_i ∂_iΨ(ξ*))⁺ + C_i‖ξ − ξ*‖_p, b_i = C_i d^{1/p}) with the prior part exact and the
norm of Δ measured in the posterior's own metric, which keeps a_j‖RΔ‖ of the order of the
true rate, √N, whatever the scale and correlation of the covariates. Candidate times are drawn
from the bound; a candidate for coordinate j is a switch with probability
max(0, v_j Ê_j^I)/max(0, α_j + β_j s) for a fresh row I. The counters record every candidate
whose estimate exceeds its bound (there must be none).

**Which rows.** Uniform rows (w ≡ 1) make the bound N max_k |J_kj|‖R⁻ᵀJ_k‖₂: set by the most
extreme row, it grows with N for unbounded covariates (≈ √(2 log N) for Gaussian ones), and the
thinning efficiency falls with it. Rows drawn in proportion to their own Lipschitz constant,
w_k = ‖J_k‖_∞ ‖R⁻ᵀJ_k‖₂
(:func:`~pymc_subsample.control_variates.zigzag_bounds.lipschitz_row_weights`; the Lipschitz
importance sampling of El hanchi 2019 §4.3, applied to the Zig-Zag rates), give a_j ≤ 1, so
W a_j ≤ Σ_k w_k: N times the mean constant instead of N times the largest. Likewise
b_j ≤ max_k ‖J_k‖₁/‖R⁻ᵀJ_k‖₂, a ratio of norms that no single row can make large. So the bound
stops depending on the extreme rows. One weight per row is kept (not one per row and coordinate:
d·N numbers would not fit at N = 10⁸).

**Simulation.** The bound from a segment's start holds along the whole line until v changes, so
candidate times of all d coordinates are drawn ahead (K per coordinate, complete up to the
earliest K-th time, a stopping time of the candidate process at which it restarts), and their
estimates are evaluated in vectorised chunks of 8, 16, 32, … until the first switch. Candidates
after the first switch are discarded unused (their randomness is independent of the path), so
this is the sequential algorithm, with fewer Python iterations.
:mod:`~pymc_subsample.kernels.zigzag_compiled` runs the sequential algorithm itself, one
candidate at a time in a Numba loop per horizon, on the same :class:`ZigZagCV` and rows.

**Shape** (BlackJAX's). :func:`init` gives a :class:`ZigZagState` (θ, v and the rows drawn ahead)
and :func:`step` ``(rng, state, horizon, process, draw) -> (state, ZigZagInfo)`` runs the process
for a time ``horizon``; :class:`ZigZagCV` holds the constants of the rates and of the bound, and
``draw`` is the row sampler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

__all__ = [
    "RowStream",
    "ZigZagCV",
    "ZigZagCounts",
    "ZigZagInfo",
    "ZigZagState",
    "first_arrival_times",
    "first_chunk_size",
    "init",
    "initial_horizon",
    "random_velocity",
    "step",
    "tuned_horizon",
]

CANDIDATES_PER_COORDINATE = 64  # K: candidate times drawn per coordinate at a segment start
FIRST_CHUNK = 8  # candidates evaluated in the first chunk of a segment (then doubling)
MAX_FIRST_CHUNK = 1024  # candidates evaluated at once at most, whatever the thinning efficiency
EXCEED_RTOL = 1e-9  # rounding slack of the bound check


def first_arrival_times(alpha, beta, level):
    r"""τ solving ∫₀^τ max(0, α + βs) ds = level, elementwise (∞ when the rate never gets there).

    α > 0: τ = 2·level/(α + √(α² + 2β·level)) (the smaller root, stable as β → 0; ∞ when β < 0
    and the total mass α²/(2|β|) is below ``level``). α ≤ 0 < β: the rate is zero until −α/β,
    then τ = −α/β + √(2·level/β). α ≤ 0, β ≤ 0: ∞. ``alpha`` and ``beta`` broadcast against
    ``level`` (e.g. (d,) against (K, d)).
    """
    alpha, beta, level = np.asarray(alpha, float), np.asarray(beta, float), np.asarray(level, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = alpha * alpha + 2.0 * beta * level
        early = 2.0 * level / (alpha + np.sqrt(disc))
        late = np.sqrt(2.0 * level / beta) - alpha / beta
        tau = np.where(alpha > 0, np.where(disc >= 0, early, np.inf), np.where(beta > 0, late, np.inf))
    return tau


@dataclass
class RowStream:
    """Rows drawn ahead in batches: (J_k, y_k, η_k(θ*), 1/w_k) for the proposals, in order.

    The row of each proposal is independent of the process, so drawing B of them at once is
    exact and turns B single-row gathers into one. Plain arrays only, so that PyMC's per-chain
    state can copy it; ``draw(rng, size) -> (jac (size, d), y (size,), eta_center (size,),
    inv_weight (size,))`` is passed at each call and never stored. ``uniforms`` are the compiled
    loop's random numbers (:mod:`~pymc_subsample.kernels.zigzag_compiled`), drawn ahead in the same
    way (4 per row of a batch: one thinning uniform and one exponential per candidate, d per
    segment); the NumPy kernel does not read them.
    """

    batch: int = 4096
    jac: np.ndarray | None = None
    y: np.ndarray | None = None
    eta_center: np.ndarray | None = None
    inv_weight: np.ndarray | None = None
    pos: int = 0
    uniforms: np.ndarray | None = None
    uniform_pos: int = 0

    def refill(self, draw, rng, size=None):
        """Draw a fresh batch of ``max(batch, size)`` rows (float64, contiguous) in place of the rest."""
        jac, y, eta_center, inv_weight = draw(rng, max(self.batch, size or 0))
        n = len(y)
        self.jac = np.ascontiguousarray(jac, dtype=np.float64)
        self.y, self.eta_center = (np.ascontiguousarray(np.broadcast_to(a, n), dtype=np.float64)
                                   for a in (y, eta_center))
        self.inv_weight = np.ascontiguousarray(np.broadcast_to(inv_weight, n), dtype=np.float64)
        self.pos = 0

    def refill_uniforms(self, rng):
        """Draw a fresh block of 4·``batch`` uniforms in place of the rest."""
        self.uniforms = rng.random(4 * self.batch)
        self.uniform_pos = 0

    def take(self, n, draw, rng):
        """The next ``n`` rows (refilling from ``draw`` as needed)."""
        parts = []
        while n > 0:
            if self.jac is None or self.pos >= len(self.y):
                self.refill(draw, rng, n)
            k = min(n, len(self.y) - self.pos)
            sl = slice(self.pos, self.pos + k)
            parts.append((self.jac[sl], self.y[sl], self.eta_center[sl], self.inv_weight[sl]))
            self.pos += k
            n -= k
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate(p) for p in zip(*parts))


@dataclass
class ZigZagCV:
    """Zig-Zag with control-variate rates and affine thinning bounds (see the module docstring).

    Parameters
    ----------
    center : ndarray (d,)
        θ*.
    prior_grad_center : ndarray (d,)
        ∇log p(θ*).
    prior_hessian : ndarray (d, d)
        H₀ = ∇²log p, constant (a Gaussian or flat prior on θ).
    loglik_grad_center : ndarray (d,)
        A = Σ_k ∇ℓ_k(θ*).
    weight_total : float
        W = Σ_k w_k over the N rows, which are drawn with probability w_k/W (N for uniform rows).
    score : callable
        ∂ℓ/∂η (y, η), vectorised.
    curvature : float
        κ ≥ sup |∂²ℓ/∂η²|.
    lipschitz_a, lipschitz_b : ndarray (d,)
        max_k |J_kj| ‖R⁻ᵀJ_k‖₂ / w_k and max_k |J_kj| ‖J_k‖₁ / w_k over all N rows (without κ;
        :func:`~pymc_subsample.control_variates.zigzag_bounds.row_lipschitz_maxima`).
    metric_r : ndarray (d, d)
        R, with ‖RΔ‖₂ the norm of Δ in the bound.
    compiled_score : CompiledScore or None
        The family's score for the compiled loop
        (:func:`~pymc_subsample.kernels.zigzag_compiled.compiled_score`); None: only the NumPy
        kernel (:func:`step`) runs this process.
    """

    center: np.ndarray
    prior_grad_center: np.ndarray
    prior_hessian: np.ndarray
    loglik_grad_center: np.ndarray
    weight_total: float
    score: object
    curvature: float
    lipschitz_a: np.ndarray
    lipschitz_b: np.ndarray
    metric_r: np.ndarray
    compiled_score: object = None
    _na: np.ndarray = field(init=False, repr=False)
    _nb: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if not np.isfinite(self.curvature):
            raise ValueError(
                "The Zig-Zag thinning bound needs a finite bound κ on |∂²ℓ/∂η²|; got "
                f"{self.curvature!r}. Families with unbounded curvature (Poisson with a log link) "
                "have no global Lipschitz bound."
            )
        self._na = self.weight_total * self.curvature * np.asarray(self.lipschitz_a, dtype=float)
        self._nb = self.weight_total * self.curvature * np.asarray(self.lipschitz_b, dtype=float)

    def exact_gradient(self, theta):
        """∂U₀(θ) − A: the exact part of every estimate Ê^I (a quadratic prior), shape (d,)."""
        delta = np.asarray(theta) - self.center
        return -(self.prior_grad_center + self.prior_hessian @ delta) - self.loglik_grad_center

    def segment(self, theta, v):
        """The exact part v_j(∂_jU₀ − A_j) at θ, its slope along v, and the bound's α, β (all (d,)).

        v_j Ê_j^k(θ + vs) = exact_j + slope_j s − v_j (W/w_k)(∂_jℓ_k(θ + vs) − ∂_jℓ_k(θ*)) ≤ α_j + β_j s
        for every row k and s ≥ 0 (module docstring).
        """
        exact = v * self.exact_gradient(theta)
        slope = -v * (self.prior_hessian @ v)
        spread = float(np.linalg.norm(self.metric_r @ (theta - self.center)))
        return exact, slope, exact + self._na * spread, slope + self._nb

    def rate_bounds(self, theta, v):
        """α, β (d,) with v_j Ê_j^k(θ + vs) ≤ α_j + β_j s for every row k and s ≥ 0."""
        return self.segment(theta, v)[2:]

    def estimates(self, theta, v, times, coords, jac, y, eta_center, inv_weight, exact=None, slope=None):
        """v_j Ê_j^I(θ + t v) for candidates (t_i, j_i, row I_i) on the segment from θ.

        Rows are ``jac`` (m, d), ``y`` (m,), ``eta_center`` = η_I(θ*) (m,) and ``inv_weight`` =
        1/w_I (m,; ones for uniform rows, or a scalar). Along the segment,
        η_I = η_I(θ*) + J_I·(θ − θ*) + t J_I·v and the exact part is linear in t (quadratic prior),
        so a chunk costs two mat-vecs over its rows. ``exact``, ``slope`` from :meth:`segment`.
        """
        if exact is None:
            exact, slope = self.segment(theta, v)[:2]
        eta = eta_center + jac @ (theta - self.center) + times * (jac @ v)
        diff = self.score(y, eta) - self.score(y, eta_center)
        data = (self.weight_total * v[coords]) * inv_weight * diff * jac[np.arange(len(coords)), coords]
        return exact[coords] + slope[coords] * times - data

    def advance(self, theta, v, horizon, rng, rows, draw, counts=None, first_chunk=FIRST_CHUNK):
        """:func:`step` from (θ, v) with the rows ahead ``rows``; returns (θ, v, counts), the step's
        :class:`ZigZagInfo` added to ``counts`` (a fresh :class:`ZigZagCounts` when None).
        """
        state, info = step(rng, ZigZagState(theta, v, rows), horizon, self, draw, first_chunk)
        counts = ZigZagCounts() if counts is None else counts
        counts.add(info)
        return state.theta, state.velocity, counts


class ZigZagState(NamedTuple):
    """The process at one time: position θ (d,), velocity v ∈ {−1, +1}^d and the rows drawn ahead.

    ``rows`` is a buffer that :func:`step` reads in place: the rows are drawn independently of the
    path, so a buffer passed from state to state gives the rows one drawn afresh would.
    """

    theta: np.ndarray
    velocity: np.ndarray
    rows: RowStream


class ZigZagInfo(NamedTuple):
    """What one :func:`step` did."""

    switches: int
    proposed: int  # candidates on the path (those up to and including each switch)
    rows: int  # rows evaluated (≥ proposed: the last chunk of a segment may overshoot)
    bound_exceeded: int  # candidates on the path whose estimate exceeded the bound
    time: float


@dataclass
class ZigZagCounts:
    """Totals of :class:`ZigZagInfo` over steps."""

    switches: int = 0
    proposed: int = 0
    rows: int = 0
    bound_exceeded: int = 0
    time: float = 0.0

    def add(self, info: ZigZagInfo):
        for name, value in info._asdict().items():
            setattr(self, name, getattr(self, name) + value)


def init(theta, rng, row_batch=4096) -> ZigZagState:
    """The process at θ with a uniform velocity (one uniform of ``rng`` per coordinate), no rows drawn.

    ``row_batch`` rows are drawn at once each time the buffer runs out (:class:`RowStream`).
    """
    theta = np.array(theta, dtype=float)
    return ZigZagState(theta, random_velocity(rng, theta.size), RowStream(batch=row_batch))


def step(rng, state: ZigZagState, horizon, process: ZigZagCV, draw, first_chunk=FIRST_CHUNK
         ) -> tuple[ZigZagState, ZigZagInfo]:
    """Run the process for time ``horizon`` from ``state`` (module docstring, "Simulation").

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the candidate times, the rows (through ``draw``) and the thinning uniforms.
    state : ZigZagState
    horizon : float
    process : ZigZagCV
        The rates' and the bound's constants.
    draw : callable
        ``draw(rng, size) -> (jac (size, d), y (size,), eta_center (size,), inv_weight (size,))``, the
        row sampler that refills ``state.rows``.
    first_chunk : int
        Candidates evaluated first in each segment (then twice as many each time): about the
        candidates per switch (:func:`first_chunk_size`) keeps both the Python iterations and the
        rows evaluated past a switch small.

    Returns
    -------
    state : ZigZagState
        At time ``horizon``.
    info : ZigZagInfo
    """
    theta = np.array(state.theta, dtype=float)
    v = np.array(state.velocity, dtype=float)
    switches = proposed = rows_read = exceeded = 0
    elapsed, left = 0.0, float(horizon)
    shape = (CANDIDATES_PER_COORDINATE, theta.size)
    first_chunk = max(1, int(first_chunk))
    while left > 0:
        exact, slope, alpha, beta = process.segment(theta, v)
        times = first_arrival_times(alpha, beta, np.cumsum(rng.standard_exponential(shape), axis=0))
        complete = min(float(times[-1].min()), left)  # every candidate before it is known
        js, ts = _sorted_candidates(times, complete)
        hit, start, size = None, 0, first_chunk
        while start < len(ts) and hit is None:
            j, t = js[start : start + size], ts[start : start + size]
            jac, y, eta_c, inv_w = state.rows.take(len(t), draw, rng)
            rate = process.estimates(theta, v, t, j, jac, y, eta_c, inv_w, exact, slope)
            bound = alpha[j] + beta[j] * t
            switch = rng.random(len(t)) * bound < rate  # probability max(0, rate)/bound
            first = int(np.argmax(switch)) if switch.any() else len(t)
            on_path = min(first + 1, len(t))
            rows_read += len(t)
            proposed += on_path
            exceeded += int(np.count_nonzero(
                rate[:on_path] > bound[:on_path] * (1.0 + EXCEED_RTOL) + EXCEED_RTOL))
            if first < len(t):
                hit = (int(j[first]), float(t[first]))
            start += size
            size *= 2
        travel = complete if hit is None else hit[1]
        theta += travel * v
        left -= travel
        elapsed += travel
        if hit is not None:
            v[hit[0]] = -v[hit[0]]
            switches += 1
    return ZigZagState(theta, v, state.rows), ZigZagInfo(switches, proposed, rows_read, exceeded, elapsed)


def first_chunk_size(proposed, switches, maximum=MAX_FIRST_CHUNK) -> int:
    """About the candidates per switch seen so far, between :data:`FIRST_CHUNK` and ``maximum``: a
    segment's first chunk then holds its switch most of the time, and reads few rows past it.
    """
    if switches == 0:
        return FIRST_CHUNK
    return int(np.clip(proposed / switches, FIRST_CHUNK, maximum))


def _sorted_candidates(times, until):
    """Coordinates and times of the candidates before ``until``, in time order."""
    mask = times < until
    js = np.nonzero(mask)[1]
    ts = times[mask]
    order = np.argsort(ts, kind="stable")
    return js[order], ts[order]


def initial_horizon(precision) -> float:
    """A first horizon: the mean Laplace sd, the time a coordinate needs to cross one sd."""
    cov = np.linalg.inv(np.asarray(precision, dtype=float))
    return float(np.mean(np.sqrt(np.clip(np.diag(cov), 0.0, None)))) or 1.0


def tuned_horizon(switches_per_draw, total_time, total_switches, current, maximum=np.inf) -> float:
    """The horizon giving ``switches_per_draw`` switches at the switching rate seen so far.

    At most ``maximum`` (the step uses 100 Laplace sd): a process that hardly switches is
    drifting on a nearly flat potential, and a longer horizon would only take it further.
    """
    if total_switches <= 0 or total_time <= 0:
        return float(min(2.0 * current, maximum))  # no switch yet: the horizon is far too short
    return float(min(switches_per_draw * total_time / total_switches, maximum))


def random_velocity(rng, d) -> np.ndarray:
    return np.where(rng.random(d) < 0.5, -1.0, 1.0)
