"""A tall model seen as a GLM: ℓ_k(θ) = f(y_k, η_k(θ)) with a linear predictor η_k affine in θ.

Exact subsampling methods need more than ℓ_k: Firefly Monte Carlo needs bounds that are
quadratic in η_k (so that their product over N rows collapses to sums), and the Zig-Zag
sampler needs per-row Lipschitz constants of ∇ℓ_k, both from the covariates J_k = ∂η_k/∂θ.
This module finds η in the model's graph, for the families whose link makes such bounds
exist (the GLM families of :mod:`pymc_subsample.families`), and evaluates η, y and J on any
batch of rows in NumPy-friendly form.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.traversal import explicit_graph_inputs

from pymc_subsample.families import GLM_FAMILIES, LINKS, NUMPY, glm_family_of
from pymc_subsample.model.compile import compile_function
from pymc_subsample.model.op_patterns import elementwise_input

__all__ = [
    "LinearPredictorModel",
    "linear_predictor_model",
    "observed_family",
]

_SPELLINGS = [family.spelling for family in GLM_FAMILIES.values()]
_SUPPORTED = (
    f"one observed {', '.join(_SPELLINGS[:-1])} or {_SPELLINGS[-1]}, with η affine in the free variables "
    "(e.g. X @ beta + a)"
)


class LinearPredictorModel:
    """The GLM view of a :class:`TallModel` (build it with :func:`linear_predictor_model`).

    Attributes
    ----------
    tall : TallModel
    family : str
        A key of :data:`~pymc_subsample.families.GLM_FAMILIES`.
    max_curvature : float
        sup_η |∂²ℓ/∂η²|: 1/4 for the logistic, ∞ for the Poisson log link, 1/σ² for the Normal.
    sigma : float or None
        The Normal family's known σ.
    """

    def __init__(self, tall, family, eta, observed, sigma=None):
        self.tall = tall
        self.family = family
        self.sigma = sigma
        #: the family's constant parameters, as its formulas take them after η
        self.constants = () if sigma is None else (sigma,)
        self.max_curvature = GLM_FAMILIES[family].max_curvature(*self.constants)
        eta_rows, y_rows = tall.batch_graph([eta, observed])
        # one η per row even when the model's η is shared (y ~ N(μ, σ): η = μ is a scalar), so that
        # per-row derivatives in η (glm_differences) and J_k have a row each
        eta_rows = pt.broadcast_to(eta_rows, y_rows.shape)
        #: η and y of the batch as graphs in (θ, batch) (the GLM differences of the estimator use them)
        self.eta_rows, self.observed_rows = eta_rows, y_rows.astype("float64")
        self._fn = compile_function([tall.theta, *tall.batch_inputs], [self.eta_rows, self.observed_rows])
        self._check_affine()

    def score(self, y, eta) -> np.ndarray:
        """∂ℓ_k/∂η_k at η_k for rows with observations y_k (arrays (m,)), in NumPy."""
        return GLM_FAMILIES[self.family].score(NUMPY, y, eta, *self.constants)

    def _call(self, theta, batch):
        return self._fn(np.asarray(theta, dtype=self.tall.theta.dtype), *batch)

    def eta(self, theta, batch) -> np.ndarray:
        """η_k(θ) for the rows of ``batch``, shape (m,)."""
        return np.asarray(self._call(theta, batch)[0], dtype=float)

    def observed(self, batch) -> np.ndarray:
        """y_k for the rows of ``batch``, shape (m,)."""
        return np.asarray(self._call(np.zeros(self.tall.ndim), batch)[1], dtype=float)

    def eta_offset(self, batch) -> np.ndarray:
        """η_k(0), shape (m,), so that η_k(θ) = η_k(0) + J_k·θ."""
        return self.eta(np.zeros(self.tall.ndim), batch)

    def eta_jacobian(self, batch) -> np.ndarray:
        """J_k = ∂η_k/∂θ, shape (m, d): η_k(e_j) − η_k(0), exact because η is affine (checked)."""
        return self.eta_offset_and_jacobian(batch)[1]

    def eta_offset_and_jacobian(self, batch) -> tuple[np.ndarray, np.ndarray]:
        """(η_k(0), J_k) from d + 1 evaluations of η, for callers that need both."""
        offset = self.eta_offset(batch)
        return offset, np.column_stack([self.eta(e, batch) - offset for e in np.eye(self.tall.ndim)])

    def _check_affine(self, n_check=8):
        tall = self.tall
        rng = np.random.default_rng(0)
        batch = tall.gather(rng.choice(tall.n_rows, size=min(n_check, tall.n_rows), replace=False))
        offset, jac = self.eta_offset_and_jacobian(batch)
        for _ in range(2):
            theta = rng.normal(scale=2.0, size=tall.ndim)
            expected = offset + jac @ theta
            if not np.allclose(self.eta(theta, batch), expected, rtol=1e-8, atol=1e-8):
                raise ValueError(
                    f"The linear predictor of this {self.family} model is not affine in the free "
                    "variables (on their unconstrained scale), so no collapsible bound exists. "
                    f"Supported: {_SUPPORTED}. A transformed prior (e.g. HalfNormal) inside η, or "
                    "a non-linear mean, breaks this; use pms.HMCECS or pms.SubsampleMH instead."
                )


def observed_family(model) -> str | None:
    """The GLM family (:data:`~pymc_subsample.families.GLM_FAMILIES`) whose distribution the model's
    one observed variable has.

    A cheap look at the distribution only (no graph is built), for argument checks before any
    set-up; None when there is not exactly one observed variable or its distribution has no family.
    The link and the affinity of η are checked later by :func:`linear_predictor_model`.
    """
    observed = model.observed_RVs
    if len(observed) != 1:
        return None
    family = glm_family_of(observed[0].owner.op)
    return None if family is None else family.glm


def linear_predictor_model(tall) -> LinearPredictorModel:
    """Find the GLM structure of ``tall``'s model, or raise a ValueError naming what is supported."""
    model = tall.model
    if len(model.observed_RVs) != 1:
        raise ValueError(
            f"Exact subsampling with bounds needs {_SUPPORTED}; this model has "
            f"{len(model.observed_RVs)} observed variables."
        )
    (rv,) = model.observed_RVs
    op = rv.owner.op
    family = glm_family_of(op)
    if family is None:
        raise ValueError(
            f"Observed variable {rv.name!r} has distribution {type(op).__name__}; exact subsampling with "
            f"bounds needs {_SUPPORTED}. For other likelihoods use pms.HMCECS or pms.SubsampleMH."
        )
    # one parameter is η under the family's link; the others (the Normal's σ) known constants
    params = op.dist_params(rv.owner)
    constants = [_known_sigma(rv, model.replace_rvs_by_values([param])[0])
                 for param, link in zip(params, family.links, strict=True) if link is None]
    ((param, link),) = [(param, LINKS[link]) for param, link in zip(params, family.links, strict=True)
                        if link is not None]
    eta = param if link.written_as is None else elementwise_input(param, link.written_as)
    if eta is None:
        raise ValueError(
            f"Observed variable {rv.name!r} is {type(op).__name__[:-2]} but its parameter is not "
            f"written through the canonical link; exact subsampling with bounds needs {_SUPPORTED}."
        )
    return LinearPredictorModel(tall, family.glm, eta, model.rvs_to_values[rv], *constants)


def _known_sigma(rv, sigma) -> float:
    """σ of a Normal likelihood when it is one known number (no free variable, no row data)."""
    scalar = sigma.type.ndim == 0 or sigma.type.shape == (1,) * sigma.type.ndim
    if list(explicit_graph_inputs([sigma])) or not scalar:  # a free variable, or per-row σ
        value = None
    else:
        try:
            value = float(np.asarray(sigma.eval()).reshape(()))
        except Exception:  # noqa: BLE001 - any failure means "not a known constant"
            value = None
    if value is None or not np.isfinite(value) or value <= 0:
        raise ValueError(
            f"Observed variable {rv.name!r} is Normal with a sigma that is not one known positive "
            f"number; exact subsampling with bounds needs {_SUPPORTED}. Fix sigma, or use "
            "pms.HMCECS or pms.SubsampleMH."
        )
    return value
