"""Step methods that run PyMC's own NUTS or HMC on a potential of their own (HMCECS, FireflyMC).

The NumPyro ``HMCGibbs`` pattern: the outer step updates its auxiliary state (a subsample, the
brightness of the rows) and hands PyMC's unchanged NUTS/HMC a ``logp_dlogp_func`` whose value
and gradient read that state. What the two steps share lives here: the adapter that gives a
kernel's potential to PyMC, building the inner sampler, passing tuning and the random generator on
to it, and renaming its stats to ArviZ's names.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import scipy.linalg
from pymc.blocking import RaveledVars
from pymc.step_methods.hmc.quadpotential import (
    QuadPotentialDiagAdapt,
    QuadPotentialFull,
    QuadPotentialFullAdapt,
)

from pymc_subsample.pymc_protocol import PotentialForPyMC

__all__ = [
    "CURVED_TARGET_ACCEPT",
    "DENSE_ADAPT_MAX_DIM",
    "INNER_HMC_STATS",
    "INNER_STAT_NAMES",
    "MASS_MATRICES",
    "TARGET_ACCEPT",
    "InnerHMC",
    "LaplaceMetric",
    "PyMCPotential",
    "choose_metric",
]

#: stats of PyMC's NUTS/HMC that the steps wrapping it (HMCECS, FireflyMC) report, ArviZ's names
INNER_HMC_STATS = {
    "diverging": (bool, []),
    # the inner sampler's count of divergent draws after warm-up in this chain, as NUTS's own
    # "divergences" stat (the progress bar's "div" column reads it)
    "divergences": (np.int64, []),
    "energy": (np.float64, []),
    "energy_error": (np.float64, []),
    "max_energy_error": (np.float64, []),
    "step_size": (np.float64, []),
    "step_size_bar": (np.float64, []),
    "acceptance_rate": (np.float64, []),
    "n_steps": (np.int64, []),
    "tree_depth": (np.int64, []),
    "perf_counter_diff": (np.float64, []),
}
#: PyMC's NUTS/HMC stat name → ArviZ's name, for the stats above
INNER_STAT_NAMES = {
    "mean_tree_accept": "acceptance_rate",
    "accept": "acceptance_rate",
    "depth": "tree_depth",
    "tree_size": "n_steps",
}

#: the inner sampler's mass matrix (HMCECS's ``mass_matrix``)
MASS_MATRICES = ("auto", "laplace", "laplace_adapt", "adapt")
# measured on crossed effects with 121 parameters: the chain left the posterior soon after PyMC's
# adapted matrix took over (σ_b from 0.8 to 0.001, log posterior from −59,700 to −4·10⁶, σ̂² from 0.2
# to 10⁸), whether or not rows were computed exactly; with the Laplace matrix fixed, or a first
# window of 2d draws, σ̂² stayed at 0.05-0.24 and σ_b at 0.8-0.9
#: "auto" adapts a dense mass matrix only below this many parameters: after its first window of 75
#: warm-up draws, PyMC's dense adaptation drops the Laplace start and estimates the covariance from
#: the draws since then alone, singular while they are fewer than the parameters and noisy for long
#: after (its next window is 150 draws), which can drive a chain out of the posterior
DENSE_ADAPT_MAX_DIM = 75
# measured on the non-centred hierarchical logistic regression of the zoo (N = 20,000, 20 groups,
# 12 seeds × 2000 draws): 0.9 gave 0-5 divergent draws where 0.8 gave 2-28 (one chain in 29 stuck
# for 500 draws in a tail, μ_a's ESS 4), 1.3× the leapfrog steps per draw and 1.5× the ESS of μ_a
# and τ_a: more ESS per gradient
#: the inner sampler's dual-averaging target by default: PyMC's 0.8, and 0.9 on a curved posterior
#: (rows affine in a non-linear φ(θ), a non-centred μ + τ z[g]), whose metric, adapted where the
#: posterior's mass is, is too wide in its tails: the higher target gives fewer divergences and
#: more ESS per gradient there
TARGET_ACCEPT, CURVED_TARGET_ACCEPT = 0.8, 0.9


def choose_metric(requested, curved, ndim, potential_given):
    """The inner sampler's mass matrix for a requested one of :data:`MASS_MATRICES`.

    ``"auto"``: the Laplace metric, fixed; adapted by PyMC's dense adaptation from the Laplace start
    where the posterior is ``curved`` (rows affine in a non-linear row-free φ(θ)), with a first
    window of 2d draws from :data:`DENSE_ADAPT_MAX_DIM` parameters on, unless the caller gives
    PyMC its own ``potential``.

    Returns
    -------
    reported : str
        ``mass_matrix`` as the step reports it (``"adapt"`` for the dense adaptation over 2d draws).
    built : str
        The ``mass_matrix`` of :meth:`InnerHMC._make_inner`.
    adaptation_window : int or None
        PyMC's first adaptation window; None: its default.
    """
    if requested != "auto":
        return requested, requested, None
    # measured at N = 20,000: on a curved posterior the fixed Laplace metric took trees of depth 7
    # where the adapted one takes 3, 37-55× the ESS/s; elsewhere adapting it cost 0.66-1.27× the
    # ESS/s (benchmarks/README.md)
    if not curved:
        return "laplace", "laplace", None
    if ndim >= DENSE_ADAPT_MAX_DIM and not potential_given:
        # PyMC's dense adaptation with a first window of 2d draws, which estimate a d × d matrix
        return "adapt", "laplace_adapt", 2 * ndim
    return "laplace_adapt", "laplace_adapt", None


def check_inner_keywords(step, kwargs):
    """Refuse, before any set-up, the keywords for PyMC's NUTS/HMC that the step sets itself."""
    if "initial_point" in kwargs:
        raise TypeError(
            f"{step} takes no initial_point: each chain starts at a draw of the Laplace approximation "
            "around the control variates' centre. To start elsewhere, pass center= (a point dict or a "
            "flat unconstrained vector)."
        )


class PyMCPotential(PotentialForPyMC):
    """PyMC's ``logp_dlogp_func`` over a kernel's potential, which knows nothing of PyMC.

    Parameters
    ----------
    potential : object
        A potential of :mod:`pymc_subsample.kernels` (``SubsampledPotential``,
        ``FireflyPotential``): its ``logp_dlogp(q)`` gives (logp, dlogp) at the raveled q in its
        ``dtype``.
    """

    def __init__(self, potential):
        self.potential = potential
        self.dtype = potential.dtype
        # the potential's own bound method: PyMC's integrator reads it once and calls it at every
        # leapfrog step, so the adapter adds no call per step
        self.logp_dlogp = potential.logp_dlogp


class LaplaceMetric(QuadPotentialFull):
    """PyMC's fixed dense metric given by its covariance M⁻¹ = LLᵀ, with the momentum p ~ N(0, M)
    drawn as L⁻ᵀz by a product with L⁻ᵀ computed once.

    PyMC draws it by ``scipy.linalg.solve_triangular(Lᵀ, z)``, which validates both arrays and checks
    their finiteness on every call, a cost per HMC-ECS iteration that the product avoids. Velocity,
    energy, the random generator and everything else are PyMC's own; given the same generator the
    momenta are PyMC's to rounding (``tests/test_hmcecs.py``).
    """

    def __init__(self, cov, dtype=None, rng=None):
        super().__init__(cov, dtype=dtype, rng=rng)
        chol = scipy.linalg.cholesky(np.asarray(cov, dtype=float), lower=True)
        self._inverse_chol_t = scipy.linalg.solve_triangular(chol, np.eye(len(chol)), lower=True).T.astype(
            self.dtype)

    def random(self):
        """A momentum p ~ N(0, M) = L⁻ᵀ z, z ~ N(0, I) from this potential's generator."""
        # measured at d = 4: 1.2 µs a draw, against 10.6 µs for PyMC's solve_triangular (one draw
        # per HMC-ECS iteration, whose PyMC's-NUTS part is ~0.12 ms there)
        return self._inverse_chol_t @ self.rng.normal(size=len(self._inverse_chol_t)).astype(self.dtype)

    __call__ = random


class InnerHMC:
    """Mixin for a :class:`SubsampleStep` whose ``self.inner`` is PyMC's NUTS/HMC on ``self.potential``,
    a kernel's potential.
    """

    def _make_inner(self, inner, mass_matrix, precision, trajectory_length, target_accept, kwargs,
                    adaptation_window=None):
        """PyMC's NUTS (or HMC with ``trajectory_length``, default 1.2) on ``self.potential``.

        ``mass_matrix``: ``"laplace"`` (``precision``, fixed), ``"laplace_adapt"`` (PyMC's dense
        adaptation started from its inverse, with the weight of 10 draws, PyMC's own default, and a
        first window of ``adaptation_window`` draws, None: PyMC's 75), or ``"adapt"`` (PyMC's
        default diagonal adaptation).
        """
        kwargs = dict(kwargs)
        metric = self._metric(mass_matrix, precision, adaptation_window)
        if metric is not None:
            kwargs["potential"] = metric
        kwargs.update(
            vars=self.tall.value_vars,
            model=self.tall.model,
            logp_dlogp_func=PyMCPotential(self.potential),
            # the tall model's (PyMC reads only its shapes): PyMC would compile and call
            # model.initial_point() again, 5-10 ms of a warm set-up
            initial_point=self.tall.initial_point,
            target_accept=target_accept,
            rng=self.rng.spawn(1)[0],
        )
        if inner == "hmc":
            return pm.HamiltonianMC(
                path_length=1.2 if trajectory_length is None else trajectory_length, **kwargs
            )
        return pm.NUTS(**kwargs)

    def _metric(self, mass_matrix, precision, adaptation_window=None, *, diagonal_default=False):
        """The inner sampler's metric for ``mass_matrix`` (:meth:`_make_inner`): a PyMC potential, or
        None for ``"adapt"`` (PyMC's own default), or with ``diagonal_default`` PyMC's diagonal
        adaptation from unit variances, PyMC's default built here.
        """
        if mass_matrix == "laplace_adapt":
            cov = np.linalg.inv(precision)
            with warnings.catch_warnings():
                # PyMC flags its dense adaptation as experimental; HMCECS's "auto" chose it for the
                # user (documented, measured in benchmarks/README.md), so the user is not warned
                warnings.filterwarnings("ignore", "QuadPotentialFullAdapt is an experimental", UserWarning)
                window = {} if adaptation_window is None else {"adaptation_window": adaptation_window}
                return QuadPotentialFullAdapt(self.tall.ndim, self.proxy.center, 0.5 * (cov + cov.T), 10,
                                              rng=self.rng.spawn(1)[0], **window)
        if mass_matrix == "laplace":
            # Given by the covariance M⁻¹, not by the precision M: the same kinetic energy and
            # momentum law, but PyMC then computes each velocity M⁻¹p as one dense mat-vec instead
            # of a SciPy cho_solve with finiteness checks, 36 µs a call at d = 30 (two calls per
            # leapfrog step: 14% of an HMCECS iteration at m = 1000); and the momentum is drawn by
            # a product too (LaplaceMetric). The inner sampler's setup_chain gives it the chain's generator.
            cov = np.linalg.inv(precision)
            return LaplaceMetric(0.5 * (cov + cov.T), rng=self.rng.spawn(1)[0])
        if diagonal_default:
            return QuadPotentialDiagAdapt(self.tall.ndim, self.proxy.center, np.ones(self.tall.ndim), 10,
                                          rng=self.rng.spawn(1)[0])
        return None

    def _inner_stats(self, inner_stats) -> dict:
        """The inner sampler's stats under ArviZ's names, those this step declares only; HMC's
        ``tree_depth`` is 0 and its ``max_energy_error`` NaN.
        """
        stats = {INNER_STAT_NAMES.get(k, k): v for k, v in inner_stats.items()}
        stats = {k: stats[k] for k in self.stats_dtypes_shapes if k in stats}
        stats.setdefault("tree_depth", 0)
        # PyMC's HamiltonianMC does not track the energy error along its path: not known, not 0
        stats.setdefault("max_energy_error", np.nan)
        return stats

    def _start_near_center(self, q0):
        """q0 at a Laplace draw θ* + Lz around the centre (``self._laplace_chol`` = L), from the step's
        generator: where the kernel's auxiliary state was tuned, and the chain's first point.
        """
        self.started = True
        jitter = self._laplace_chol @ self.rng.standard_normal(self.tall.ndim)
        return RaveledVars((self.proxy.center + jitter).astype(q0.data.dtype), q0.point_map_info)

    def progress_failing(self, stats):
        """Red bar once the chain has a divergence after warm-up, as PyMC's NUTS."""
        return stats.get("divergences", 0) > 0

    def stop_tuning(self):
        super().stop_tuning()
        self.inner.stop_tuning()

    def reset_tuning(self):
        self.inner.reset_tuning()
        self.tune = True
        self.started = False

    def setup_chain(self, rng, tune, draws):
        """The chain's generator for this step, and one spawned from it for the inner sampler."""
        super().setup_chain(rng, tune, draws)
        self.inner.setup_chain(self.rng.spawn(1)[0], tune, draws)
