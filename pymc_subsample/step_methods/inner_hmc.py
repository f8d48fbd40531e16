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
from pymc.step_methods.hmc.quadpotential import QuadPotentialFull, QuadPotentialFullAdapt

from pymc_subsample.pymc_protocol import PotentialForPyMC

__all__ = ["INNER_HMC_STATS", "INNER_STAT_NAMES", "InnerHMC", "LaplaceMetric", "PyMCPotential"]

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

    def _make_inner(self, inner, mass_matrix, precision, trajectory_length, target_accept, kwargs):
        """PyMC's NUTS (or HMC with ``trajectory_length``, default 1.2) on ``self.potential``.

        ``mass_matrix``: ``"laplace"`` (``precision``, fixed), ``"laplace_adapt"`` (PyMC's dense
        adaptation started from its inverse, with the weight of 10 draws, PyMC's own default), or
        ``"adapt"`` (PyMC's default diagonal adaptation).
        """
        kwargs = dict(kwargs)
        if mass_matrix == "laplace_adapt":
            cov = np.linalg.inv(precision)
            with warnings.catch_warnings():
                # PyMC flags its dense adaptation as experimental; HMCECS's "auto" chose it for the
                # user (documented, measured in benchmarks/README.md), so the user is not warned
                warnings.filterwarnings("ignore", "QuadPotentialFullAdapt is an experimental", UserWarning)
                kwargs["potential"] = QuadPotentialFullAdapt(
                    self.tall.ndim, self.proxy.center, 0.5 * (cov + cov.T), 10, rng=self.rng.spawn(1)[0])
        elif mass_matrix == "laplace":
            # Given by the covariance M⁻¹, not by the precision M: the same kinetic energy and
            # momentum law, but PyMC then computes each velocity M⁻¹p as one dense mat-vec instead
            # of a SciPy cho_solve with finiteness checks, 36 µs a call at d = 30 (two calls per
            # leapfrog step: 14% of an HMCECS iteration at m = 1000); and the momentum is drawn by
            # a product too (LaplaceMetric). The inner sampler's setup_chain gives it the chain's generator.
            cov = np.linalg.inv(precision)
            kwargs["potential"] = LaplaceMetric(0.5 * (cov + cov.T), rng=self.rng.spawn(1)[0])
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

    def _inner_stats(self, inner_stats) -> dict:
        """The inner sampler's stats under ArviZ's names, those this step declares only."""
        stats = {INNER_STAT_NAMES.get(k, k): v for k, v in inner_stats.items()}
        return {k: stats[k] for k in self.stats_dtypes_shapes if k in stats}

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
