r"""The observed distributions and links the package specialises, in one table.

A row's log-likelihood is ℓ_k(θ) = f(y_k, η_k(θ)), with each free parameter of the observed
distribution written as link⁻¹(η) and η affine in θ (:mod:`pymc_subsample.model.distributional`).
Each entry of :data:`FAMILIES` (a :class:`Family`) is one distribution under one choice of links:

============================  ==================================================================
Bernoulli(logit)              f = yη − softplus(η),  ∂f = y − σ(η),  |∂²f| ≤ κ = 1/4
Poisson(log)                  f = yη − e^η − log y!,  ∂f = y − e^η,  κ = ∞
Normal(identity, σ known)     f = −½((y − η)/σ)² − log σ − ½ log 2π,  ∂f = (y − η)/σ²,  κ = 1/σ²
Normal(identity, log)         f = −½(y − η₁)² e^{−2η₂} − η₂ − ½ log 2π  (η₂ = log σ)
Normal(μ known, log)          the same with η₁ = μ a constant
StudentT(log, identity, log)  f = log Γ((ν+1)/2) − log Γ(ν/2) − ½ log(νπ) − η₃
                              − (ν+1)/2 · log(1 + z²/ν),  ν = e^{η₁}, z = (y − η₂) e^{−η₃}
NegativeBinomial(log, logit)  f = log Γ(y + n) − log Γ(n) − log y! − n softplus(−η₂) − y softplus(η₂),
                              n = e^{η₁}  (log p = −softplus(−logit p), log(1 − p) = −softplus(logit p))
============================  ==================================================================

The first three are also the GLMs of the exact methods (:mod:`pymc_subsample.model.glm`), named by
:attr:`Family.glm`: their score ∂f/∂η, the bound κ ≥ sup_η |∂²f/∂η²| of the Zig-Zag thinning
bound (:mod:`pymc_subsample.kernels.zigzag`) and, for the logistic, the Jaakkola-Jordan lower bound
of Firefly Monte Carlo (:mod:`pymc_subsample.control_variates.firefly_bounds`), and the bounds
M_j ≥ sup |∂ʲf/∂ηʲ| (j = 1, 2, 3) of the confidence sampler's default range bound (Bernoulli-logit:
1, 1/4, 1/(6√3); Poisson: unbounded; Normal with known σ: ∞, 1/σ², 0). The derivatives in η
that the distributional view and the estimators take (∂_j f, ∂_jl f) come from ``pytensor.grad`` of
f; only the score, which the NumPy kernels evaluate, is written out (and again as a Numba scalar
function for the compiled Zig-Zag loop, :mod:`pymc_subsample.kernels.zigzag_compiled`, tested against it).

**One formula for NumPy and PyTensor.** The distributional view builds PyTensor graphs from f (they
are compiled and differentiated), while Firefly and Zig-Zag evaluate f and ∂f in NumPy on the few
rows of a step, where a compiled function's per-call overhead would cost more than the arithmetic.
Every formula here takes an array namespace ``xp`` first (:data:`NUMPY` or :data:`PYTENSOR`, an
:class:`ArrayFunctions`) and calls only its elementwise functions and arithmetic, so it is written
once and read by both; ``tests/test_families.py`` checks the two forms against each other and
against PyMC's own ``logp``. The namespaces differ only in how a primitive is computed where that
was measured or matters numerically (softplus as NumPy's ``logaddexp``, the NumPy logit as a
formula).

Links: :data:`LINKS` maps a link's name to η from the parameter, the parameter from η, and the
PyTensor scalar op a model's graph writes link⁻¹ with (``pm.math.exp``, ``pm.math.sigmoid``): where
the graph holds that op, η is its input exactly. The graph is matched by
:func:`pymc_subsample.model.op_patterns.elementwise_input`.

This module imports PyTensor and SciPy, not PyMC: the kernels read it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.scalar import Exp, Sigmoid
from pytensor.tensor.random.basic import BernoulliRV, NegBinomialRV, NormalRV, PoissonRV, StudentTRV
from scipy.special import expit, gammaln

__all__ = [
    "FAMILIES",
    "GLM_FAMILIES",
    "LINKS",
    "NUMPY",
    "PYTENSOR",
    "ArrayFunctions",
    "Family",
    "Link",
    "PointMassMixture",
    "closed_form",
    "glm_family_of",
    "jaakkola_jordan_coefficients",
    "jaakkola_jordan_lambda",
    "row_loglik",
]


@dataclass(frozen=True)
class ArrayFunctions:
    """The elementwise functions the formulas of the table call, for one kind of array."""

    exp: Callable
    log: Callable
    log1p: Callable
    softplus: Callable  # log(1 + e^x)
    gammaln: Callable
    sigmoid: Callable  # 1 / (1 + e^{−x})
    logit: Callable  # log(p / (1 − p))
    where: Callable
    equal: Callable
    maximum: Callable
    abs: Callable


# measured: the NumPy logit as a formula took 0.15 against 0.70 ms for SciPy's ufunc on the set-up's
# (d + 1) × 20,000 values of a NegativeBinomial's p per chunk
#: NumPy and SciPy; softplus as log(e⁰ + e^x) (no overflow), the logit as SciPy's formula without its ufunc
NUMPY = ArrayFunctions(
    exp=np.exp, log=np.log, log1p=np.log1p, softplus=lambda x: np.logaddexp(0.0, x), gammaln=gammaln,
    sigmoid=expit, logit=lambda p: np.log(p / (1.0 - p)), where=np.where, equal=np.equal,
    maximum=np.maximum, abs=np.abs,
)
#: PyTensor graphs; the logit as log p − log1p(−p), which keeps digits for p near 0
PYTENSOR = ArrayFunctions(
    exp=pt.exp, log=pt.log, log1p=pt.log1p, softplus=pt.softplus, gammaln=pt.gammaln, sigmoid=pt.sigmoid,
    logit=lambda p: pt.log(p) - pt.log1p(-p), where=pt.switch, equal=pt.eq, maximum=pt.maximum,
    abs=pt.abs,
)


@dataclass(frozen=True)
class Link:
    """A link: η = ``to_eta``(parameter), parameter = ``from_eta``(η), functions of
    :class:`ArrayFunctions` by name (None: the identity).

    ``written_as`` is the PyTensor scalar op of link⁻¹ (``pytensor.scalar.Exp`` for the log link): a
    parameter the graph writes as that op of x has η = x exactly, with no round trip through the link.
    """

    name: str
    to_eta: str | None
    from_eta: str | None
    written_as: type | None = None

    def forward(self, xp, parameter):
        """η from the parameter."""
        return parameter if self.to_eta is None else getattr(xp, self.to_eta)(parameter)

    def inverse(self, xp, eta):
        """The parameter from η."""
        return eta if self.from_eta is None else getattr(xp, self.from_eta)(eta)


#: link name → :class:`Link`, in the order the distributional view tries them
LINKS = {link.name: link for link in (Link("identity", None, None),
                                      Link("log", "log", "exp", Exp),
                                      Link("logit", "logit", "sigmoid", Sigmoid))}


@dataclass(frozen=True)
class Family:
    """One observed distribution under one link per parameter: a row of the table (module docstring).

    Attributes
    ----------
    rv_op : type
        The PyTensor ``RandomVariable`` class of the distribution (``NormalRV``, ...).
    links : tuple of (str or None)
        Per parameter in the op's order, a key of :data:`LINKS`, or None for a constant parameter
        (data or a number, e.g. a known σ), which the formulas take as it is.
    logp : callable
        f(xp, y, *parameters): the row's log-density, parameters as η under ``links`` or constants.
    glm : str or None
        The name of the GLM family of the exact methods (one η), or None.
    score : callable or None
        ∂f/∂η (xp, y, η, *constants) of a GLM family.
    curvature : callable or None
        κ(*constants) ≥ sup_η |∂²f/∂η²| of a GLM family (∞: unbounded).
    firefly_bound : callable or None
        (η_k(θ*), y_k) → (a_k, b_k, c_k) of a collapsible bound a + bη + cη² ≤ f(y_k, η) for every η,
        in NumPy (:mod:`~pymc_subsample.control_variates.firefly_bounds`).
    no_firefly_bound : str
        Why a GLM family has no built-in Firefly bound (for the error message).
    derivative_bounds : callable or None
        (*constants) → (M₁, M₂, M₃), M_j ≥ sup_{y, η} |∂ʲf/∂ηʲ| (∞: unbounded) of a GLM family: the
        Taylor remainder of an order-r proxy is bounded with M_{r+1} (the confidence sampler's default
        range bound, :func:`~pymc_subsample.kernels.mh_tests.confidence.glm_taylor_range_bound`).
    spelling : str
        How a PyMC model writes a GLM family (for the error messages).
    """

    rv_op: type
    links: tuple
    logp: Callable
    glm: str | None = None
    score: Callable | None = None
    curvature: Callable | None = None
    firefly_bound: Callable | None = None
    no_firefly_bound: str = ""
    spelling: str = ""
    derivative_bounds: Callable | None = None

    def score_function(self, *constants):
        """∂f/∂η as a NumPy function of (y, η) with the constant parameters fixed."""
        return lambda y, eta: self.score(NUMPY, y, eta, *constants)

    def derivative_bound(self, order, *constants) -> float:
        """M_j ≥ sup |∂ʲf/∂ηʲ| for j = ``order`` in 1..3 (∞ where unbounded or not tabulated)."""
        if self.derivative_bounds is None or not 1 <= order <= 3:
            return math.inf
        return float(self.derivative_bounds(*constants)[order - 1])

    def max_curvature(self, *constants) -> float:
        """κ ≥ sup_η |∂²f/∂η²| at the constant parameters."""
        return float(self.curvature(*constants))


_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


def _normal(xp, y, mu, log_sigma):
    """Normal(μ, σ = e^{log σ}): −½((y − μ) e^{−log σ})² − log σ − ½ log 2π."""
    return -0.5 * ((y - mu) * xp.exp(-log_sigma)) ** 2 - log_sigma - _HALF_LOG_2PI


def _normal_known_sigma(xp, y, mu, sigma):
    """Normal(μ, σ) with σ a constant, as PyMC writes it: −½((y − μ)/σ)² − log σ − ½ log 2π.

    A constant σ keeps its own dtype (σ = 1.5 is float32 in PyMC's graph), so log σ rounds as the
    model's own rows do and f equals them, not only their changes; the division is in float64
    (y − μ is), so 1/σ does not round to float32.
    """
    return -0.5 * ((y - mu) / sigma) ** 2 - xp.log(sigma) - _HALF_LOG_2PI


def _student_t(xp, y, log_nu, mu, log_sigma):
    """StudentT(ν = e^{log ν}, μ, σ = e^{log σ}) (module docstring)."""
    nu = xp.exp(log_nu)
    z = (y - mu) * xp.exp(-log_sigma)
    return (xp.gammaln(0.5 * (nu + 1.0)) - xp.gammaln(0.5 * nu) - 0.5 * (log_nu + np.log(np.pi))
            - log_sigma - 0.5 * (nu + 1.0) * xp.log1p(z * z / nu))


def _negative_binomial(xp, y, log_n, logit_p):
    """NegativeBinomial(n = e^{log n}, p = σ(logit p)) as PyTensor parametrises it (module docstring)."""
    n = xp.exp(log_n)
    return (xp.gammaln(y + n) - xp.gammaln(n) - xp.gammaln(y + 1.0)
            - n * xp.softplus(-logit_p) - y * xp.softplus(logit_p))


def jaakkola_jordan_lambda(xi):
    """λ(ξ) = tanh(ξ/2) / (4ξ), with its limit 1/8 − ξ²/96 near ξ = 0 (no 0/0)."""
    xi = np.abs(np.asarray(xi, dtype=float))
    small = xi < 1e-4
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(safe / 2.0) / (4.0 * safe))


def jaakkola_jordan_coefficients(eta_center, y):
    r"""(a, b, c) of Jaakkola & Jordan's bound on the logistic row, tight at η_k(θ*).

    With s = (2y − 1)η (so that ℓ = log σ(s)),

    .. math:: \log σ(s) \ge \log σ(ξ) + (s − ξ)/2 − λ(ξ)(s² − ξ²),\quad λ(ξ) = \tanh(ξ/2)/(4ξ),

    with equality at s = ±ξ (Maclaurin & Adams 2014, §4); ξ_k = |η_k(θ*)|. As a quadratic in η
    (s² = η²): a = log σ(ξ) − ξ/2 + λξ², b = (2y − 1)/2, c = −λ.
    """
    xi = np.abs(np.asarray(eta_center, dtype=float))
    lam = jaakkola_jordan_lambda(xi)
    log_sig_xi = -np.logaddexp(0.0, -xi)
    a = log_sig_xi - xi / 2.0 + lam * xi**2
    b = (2.0 * np.asarray(y, dtype=float) - 1.0) / 2.0
    return a, b, -lam


#: the table (module docstring); the GLM families first, in the order their names are listed to users
FAMILIES = (
    Family(BernoulliRV, ("logit",), lambda xp, y, eta: y * eta - xp.softplus(eta),
           glm="bernoulli_logit", score=lambda xp, y, eta: y - xp.sigmoid(eta), curvature=lambda: 0.25,
           firefly_bound=jaakkola_jordan_coefficients,
           spelling="pm.Bernoulli(logit_p=η) (or p=pm.math.sigmoid(η))",
           # |σ − y| ≤ 1, σ(1 − σ) ≤ 1/4, |σ(1 − σ)(1 − 2σ)| ≤ 1/(6√3) (at σ = ½ ± 1/(2√3))
           derivative_bounds=lambda: (1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0)))),
    Family(PoissonRV, ("log",), lambda xp, y, eta: y * eta - xp.exp(eta) - xp.gammaln(y + 1.0),
           glm="poisson_log", score=lambda xp, y, eta: y - xp.exp(eta), curvature=lambda: np.inf,
           no_firefly_bound="no quadratic in η bounds yη − e^η from below for all η",
           spelling="pm.Poisson(mu=pm.math.exp(η))", derivative_bounds=lambda: (math.inf,) * 3),
    Family(NormalRV, ("identity", None), _normal_known_sigma,
           glm="normal_identity", score=lambda xp, y, eta, sigma: (y - eta) * (1.0 / sigma**2),
           curvature=lambda sigma: 1.0 / sigma**2,
           no_firefly_bound="its log-likelihood is itself quadratic in η: full-data sums of X'X and X'y "
                            "give the posterior in closed form, no sampler needed",
           spelling="pm.Normal(mu=η, sigma=a known constant)",
           derivative_bounds=lambda sigma: (math.inf, 1.0 / sigma**2, 0.0)),
    Family(NormalRV, ("identity", "log"), _normal),
    Family(NormalRV, (None, "log"), _normal),
    Family(StudentTRV, ("log", "identity", "log"), _student_t),
    Family(NegBinomialRV, ("log", "logit"), _negative_binomial),
)
# measured: PyMC's Bernoulli logp cost ~25% more per estimator call than y·η − softplus(η); its
# StudentT and NegativeBinomial logps took 4.5 s to rewrite in the estimator's graph on every
# construction, cache or not
#: (random variable class, links) → :class:`Family`: the distributional view's closed forms, used in
#: place of PyMC's logp (parameter checks, a switch to the Poisson limit, log p and log(1 − p) by cases)
CLOSED_FORMS = {(family.rv_op, family.links): family for family in FAMILIES}
#: GLM family name → :class:`Family`
GLM_FAMILIES = {family.glm: family for family in FAMILIES if family.glm is not None}


def closed_form(op, links) -> Family | None:
    """The family of a random variable ``op`` under ``links`` (None: a constant parameter), or None."""
    return CLOSED_FORMS.get((type(op), tuple(links)))


def glm_family_of(op) -> Family | None:
    """The GLM family whose distribution ``op`` (a random variable op) has, or None."""
    return next((family for family in GLM_FAMILIES.values() if isinstance(op, family.rv_op)), None)


def row_loglik(family, eta, y):
    """ℓ_k and ∂ℓ_k/∂η_k in NumPy (arrays (m,)) for a GLM family without constant parameters."""
    entry = GLM_FAMILIES.get(family)
    if entry is None or None in entry.links:
        supported = ", ".join(name for name, f in GLM_FAMILIES.items() if None not in f.links)
        raise ValueError(f"No row log-likelihood for family {family!r}; supported: {supported}.")
    return entry.logp(NUMPY, y, eta), entry.score(NUMPY, y, eta)


@dataclass(frozen=True)
class PointMassMixture:
    """A row's density (1 − w)·1[y = c] + w·p(y | component), as PyMC's zero-inflated distributions
    write it (:func:`~pymc_subsample.model.op_patterns.point_mass_mixture`): its parameters are w
    and then the component's.
    """

    component: object  # the component's RandomVariable op
    point: float

    def logp(self, xp, observed, weight, weight_link, component_logp):
        """Log f = log w + log p(y) off the point; at it log((1 − w) + w p(c)), in logs (no −∞:
        the switch's other branch is finite, so its derivatives are too). log w and log(1 − w) from
        η itself under the logit link (−softplus(∓η)), which the view finds for PyMC's ψ.
        """
        if weight_link == "logit":
            log_w, log_rest = -xp.softplus(-weight), -xp.softplus(weight)
        else:
            w = LINKS[weight_link].inverse(xp, weight) if weight_link else weight
            log_w, log_rest = xp.log(w), xp.log1p(-w)
        inflated = log_w + component_logp
        high = xp.maximum(inflated, log_rest)
        at_point = high + xp.log1p(xp.exp(-xp.abs(inflated - log_rest)))
        return xp.where(xp.equal(observed, self.point), at_point, inflated)
