"""The subsampled potential: log posterior estimate and its gradient on the current subsample.

This is the Hamiltonian's potential energy −Û(θ) of Dang et al. 2019 eq. (3.4), with the
same subsample u in the dynamics and in the acceptance (eq. 3.6-3.7). Its
``logp_dlogp(q)`` and ``dtype`` are what a leapfrog integrator needs; the step method hands them
to PyMC's own NUTS and HMC through
:class:`~pymc_subsample.step_methods.inner_hmc.PyMCPotential`, so those run on it unchanged — the
NumPyro ``HMCGibbs`` pattern of a wrapper around an untouched inner kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_subsample.estimators.loglik import block_poisson_spread_and_sign
from pymc_subsample.subsample.batch import Subsample

__all__ = ["Estimate", "SignedSubsample", "SubsampledPotential"]


@dataclass
class Estimate:
    """An estimate of the log posterior at θ on one subsample."""

    value: float  # log p(θ) + log |L̂(θ)|
    grad: np.ndarray
    loglik_var: float  # σ̂² (perturbed) or the variance proxy of the signed estimator
    sign: int


@dataclass
class SignedSubsample:
    """Rows of the block-Poisson estimator: λ groups of X_l ~ Pois(1) mini-batches of m rows."""

    rows: Subsample  # all B = Σ X_l mini-batches, concatenated
    batches_per_group: np.ndarray  # X_l, shape (λ,)
    batch_size: int  # m

    def group_positions(self, groups):
        """Row positions (into ``rows``) of the mini-batches of ``groups``."""
        starts = np.concatenate([[0], np.cumsum(self.batches_per_group)]) * self.batch_size
        return np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups]).astype(int)


class SubsampledPotential:
    """log p(θ) + log L̂(θ; u) and its gradient for the current subsample ``u``.

    Parameters
    ----------
    target : SubsampledTarget
    estimator : {"perturbed", "signed"}
    a, lam : float, int
        Block-Poisson parameters (signed only).
    """

    def __init__(self, target, estimator="perturbed", *, a=0.0, lam=1):
        self.target = target
        self.estimator = estimator
        self.a = float(a)
        self.lam = int(lam)
        self.dtype = target.tall.theta.dtype
        self.subsample = None
        # perturbed: rows computed exactly in every estimate, first in each batch, and the number of
        # the other rows, which the subsample is drawn from (SubsampledTarget.perturbed_with_exact)
        self.n_exact, self.n_rest = 0, target.n_rows
        self.n_rows_evaluated = 0
        self._trajectory = None

    def record_trajectory(self, theta=None, known=None):
        """Keep every estimate made from now on, keyed by θ, until the next call; ``known``, the
        estimate at ``theta`` on the current subsample, is returned at that θ without a call.

        PyMC's NUTS evaluates the potential at the trajectory's start, where the subsample update
        has just made that very estimate: one evaluation of 5 per HMC-ECS iteration at d = 4.
        """
        self._trajectory = {}
        if known is not None:
            self._trajectory[self._key(theta)] = known

    def forget_trajectory(self):
        """Stop keeping estimates (every call evaluates again), until :meth:`record_trajectory`."""
        self._trajectory = None

    def _key(self, theta):
        return np.asarray(theta, dtype=self.dtype).tobytes()

    def recorded(self, theta):
        """The estimate made at ``theta`` since :meth:`record_trajectory`, or None."""
        return (self._trajectory or {}).get(self._key(theta))

    def rows_in(self, subsample) -> int:
        return subsample.rows.size if self.estimator == "signed" else subsample.size + self.n_exact

    def estimate(self, theta, subsample=None) -> Estimate:
        """The estimate at θ on ``subsample`` (default: the current one)."""
        sub = self.subsample if subsample is None else subsample
        self.n_rows_evaluated += self.rows_in(sub)
        if self.estimator == "perturbed" and self.n_exact:
            value, grad, var = self.target.perturbed_with_exact(theta, sub.batch, self.n_exact, self.n_rest)
            return Estimate(value, grad, var, 1)
        if self.estimator == "perturbed":
            value, grad, var = self.target.perturbed(theta, sub.batch)
            return Estimate(value, grad, var, 1)
        return self._signed(theta, sub)

    def _signed(self, theta, sub: SignedSubsample) -> Estimate:
        target = self.target
        if sub.rows.size == 0:  # no mini-batch drawn: L̂ = exp(Σq + a + λ)
            prior, prior_grad = target.tall.prior_value_and_grad(theta)
            sum_q, sum_q_grad = target.proxy.sum_value_and_grad(theta)
            return Estimate(float(prior) + sum_q + self.a + self.lam, prior_grad + sum_q_grad, 0.0, 1)
        m = sub.batch_size
        value, grad, d = target.signed(theta, sub.rows.batch, m, self.a, self.lam)
        return Estimate(value, grad, *block_poisson_spread_and_sign(d, target.n_rows, m, self.a))

    def logp_dlogp(self, q):
        """(logp, dlogp) at the raveled q in ``dtype``, as a leapfrog integrator takes them; an
        estimate recorded since :meth:`record_trajectory` is returned without evaluating again.
        """
        est = self.recorded(q)
        if est is None:
            est = self.estimate(q)
            if self._trajectory is not None:
                self._trajectory[self._key(q)] = est
        return np.asarray(est.value, dtype=self.dtype), est.grad.astype(self.dtype)
