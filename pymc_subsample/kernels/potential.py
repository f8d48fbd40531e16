"""The subsampled potential: log posterior estimate and its gradient on the current subsample.

This is the Hamiltonian's potential energy −Û(θ) of seed 004 eq. (3.4), with the
same subsample u in the dynamics and in the acceptance (eq. 3.6-3.7). It speaks
the small protocol PyMC's ``CpuLeapfrogIntegrator`` expects of a
``logp_dlogp_func`` (``_pytensor_function``, ``_raveled_inputs``, ``dtype``,
``_extra_vars_shared``), so PyMC's own NUTS and HMC run on it unchanged — the
NumPyro ``HMCGibbs`` pattern of a wrapper around an untouched inner kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_subsample.estimators.loglik import block_poisson, combine_gradient
from pymc_subsample.estimators.subsampled import perturbed_value_and_grad
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
    tall : TallModel
    proxy : TaylorProxy
    estimator : {"perturbed", "signed"}
    a, lam : float, int
        Block-Poisson parameters (signed only).
    """

    _raveled_inputs = True  # PyMC's integrator passes the raveled vector q
    _extra_vars_shared: dict = {}

    def __init__(self, tall, proxy, estimator="perturbed", *, a=0.0, lam=1):
        self.tall = tall
        self.proxy = proxy
        self.estimator = estimator
        self.a = float(a)
        self.lam = int(lam)
        self.dtype = tall.theta.dtype
        self.subsample = None
        self.n_rows_evaluated = 0

    def rows_in(self, subsample) -> int:
        return subsample.rows.size if self.estimator == "signed" else subsample.size

    def estimate(self, theta, subsample=None) -> Estimate:
        """The estimate at θ on ``subsample`` (default: the current one)."""
        sub = self.subsample if subsample is None else subsample
        prior, prior_grad = self.tall.prior_value_and_grad(theta)
        if self.estimator == "signed":
            value, grad, var, sign = self._signed(theta, sub)
        else:
            value, grad, var = self._perturbed(theta, sub)
            sign = 1
        self.n_rows_evaluated += self.rows_in(sub)
        return Estimate(float(prior) + value, prior_grad + grad, var, sign)

    def _perturbed(self, theta, sub):
        return perturbed_value_and_grad(self.tall, self.proxy, sub, theta)

    def _signed(self, theta, sub: SignedSubsample):
        sum_q, sum_q_grad = self.proxy.sum_value_and_grad(theta)
        m = sub.batch_size
        if sub.rows.size == 0:
            return sum_q + self.a + self.lam, sum_q_grad, 0.0, 1
        rows = sub.rows
        loglik, loglik_grads, q, q_grads = self.proxy.rows_loglik_and_proxy(theta, rows.terms, rows.batch)
        d = (loglik - q).reshape(-1, m)
        log_abs, sign, weights = block_poisson(d, self.tall.n_rows, self.a, self.lam, sum_q)
        grad = combine_gradient(sum_q_grad, weights.ravel(), loglik_grads, q_grads)
        var = self.tall.n_rows**2 * float(np.var(d)) / m  # σ² of one mini-batch's d̂
        return log_abs, grad, var, sign

    def _pytensor_function(self, q):
        """(logp, dlogp) at the raveled q, as PyMC's leapfrog integrator calls it."""
        est = self.estimate(q)
        return np.asarray(est.value, dtype=self.dtype), est.grad.astype(self.dtype)
