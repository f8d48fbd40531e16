"""The HMC-ECS estimate of the log posterior as one function of θ, the batch and the shared values.

:class:`~pymc_subsample.estimators.target.SubsampledTarget`'s estimates add Σq in NumPy after each
compiled call and return σ̂² or the mini-batch terms for Python to reduce. A kernel that runs a whole
HMC-ECS iteration in one Numba call (:mod:`pymc_subsample.kernels.compiled_hmc`) calls the potential
from Numba instead: :class:`EstimateGraph` compiles ``potential(θ, *batch, *shared) -> (value, grad,
extras)`` with Σq in the graph and the extras reduced there. Everything the estimate depends on is an
input (Σq's sums included), so the compiled function fits every set-up of the same model graph, and
PyTensor's cache serves the next process.

The formulas are those of the target: perturbed, log p(θ) + ℓ̂ − σ̂²/2 over the rows computed exactly
and a subsample of the others (Dang et al. 2019 eqs. 4.1-4.5, :meth:`SubsampledTarget.perturbed_with_exact`);
signed, log p(θ) + log|L̂| of the block-Poisson estimator (eq. 5.1) with its sign (eq. 5.3).
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from pymc_subsample.estimators.loglik import block_poisson_log_abs
from pymc_subsample.model.compile import SLOW_REWRITES, compile_function

__all__ = ["EstimateGraph"]


class EstimateGraph:
    """The perturbed or signed estimate of a target as one compiled function, with its inputs' values.

    Attributes
    ----------
    batch_variables : list
        The inputs that change with the subsample: the batch's rows, their terms at θ* (a
        distributional regression), and (perturbed) the 0/1 marks of the subsampled rows.
    shared_variables : list
        The others: θ* (generic graph), the estimator's scalars, Σq's sums. Both are built with the
        graph, only where :meth:`function` compiles it.
    extras : tuple of str
        The names of the potential's extras: ``("loglik_var",)`` (perturbed: σ̂²) or
        ``("loglik_var", "sign")`` (signed: the variance of one mini-batch's d̂, and the sign of L̂).
    """

    def __init__(self, target, estimator):
        self.target, self.estimator = target, estimator
        self._sum_values = target.proxy.sum_graph()[2]
        self.extras = ("loglik_var",) if estimator == "perturbed" else ("loglik_var", "sign")
        self._graph = self._function = None

    def __getstate__(self):
        # a chain's process gets the compiled function from the tall model's kept functions (PyTensor's
        # cache), not through a pipe
        return dict(self.__dict__, _function=None)

    def _build(self):
        target, estimator = self.target, self.estimator
        tall = target.tall
        at_center = target.center_variables()
        glm = target.glm is not None
        self.batch_variables = [*tall.batch_inputs, *(at_center.flat() if glm else [])]
        shared = [] if glm else [at_center]
        sum_q, sum_inputs, _ = target.proxy.sum_graph()
        prior = tall.prior_graph + sum_q
        d = target.differences_graph(at_center)
        if estimator == "perturbed":
            rest, m = pt.dscalar("n_rest"), pt.dscalar("m_rest")
            subsampled = pt.vector("subsampled", dtype="float64")
            self.batch_variables.append(subsampled)
            shared += [rest, m]
            # as SubsampledTarget.perturbed_with_exact: Σ r d and Σ r d² over the whole batch, with r
            # the 0/1 marks of the subsampled rows
            rd = subsampled * d
            s1, s2 = rd.sum(), (rd * d).sum()
            sigma2 = rest * rest / (m * m) * (s2 - s1 * s1 / m)
            value = prior + (d.sum() - s1) + rest * s1 / m - 0.5 * sigma2
            extras = pt.stack([sigma2])
        else:
            m = pt.lscalar("batch_size")
            a, lam = pt.dscalar("a"), pt.dscalar("lam")
            shared += [m, a, lam]
            n = target.n_rows
            d_hat = (n / m) * d.reshape((-1, m)).sum(axis=1)
            value = prior + block_poisson_log_abs(d_hat, a, lam, pt.log)
            factors = pt.sign(d_hat - a)
            sign = pt.switch(pt.eq(pt.prod(factors), 0), 1.0, pt.prod(factors))  # a zero factor: measure 0
            rows = pt.cast(d.shape[0], "float64")
            variance = pt.switch(rows > 0, n * n * pt.var(d) / pt.cast(m, "float64"), 0.0)
            extras = pt.stack([variance, sign])
        self.shared_variables = shared + sum_inputs
        self._graph = [value, tall.gradient(value), extras]

    def function(self):
        """The compiled ``potential(θ, *batch, *shared) -> (value, grad, extras)``, kept with the tall
        model's functions (a second set-up of the same model graph compiles nothing).
        """
        def compiled():
            self._build()
            # X @ β and Xᵀw stay BLAS products here, not the fused sums of the target's per-call
            # functions: measured at m = 1000, 37 µs an estimate at d = 31 against 66 µs (33 against
            # 35 µs at d = 4), and this function runs at every leapfrog step of a compiled iteration
            inputs = [self.target.tall.theta, *self.batch_variables, *self.shared_variables]
            return compile_function(inputs, self._graph, exclude=SLOW_REWRITES)

        if self._function is None:
            key = self.key()
            tall = self.target.tall
            self._function = self.target.functions.kept(key, lambda: tall.kept_function(key, compiled))
        return self._function

    def batch_args(self, batch, terms, n_exact=0) -> list:
        """The values of :attr:`batch_variables` for ``batch`` and its rows' ``terms`` at θ*
        (:meth:`SubsampledTarget.center_args`), whose first ``n_exact`` rows are computed exactly.
        """
        args = [*batch, *(terms if self.target.glm is not None else ())]
        if self.estimator == "perturbed":
            subsampled = np.ones(len(batch[0]) if batch else 0)
            subsampled[:n_exact] = 0.0
            args.append(subsampled)
        return args

    def shared_args(self, *, n_rest=None, rows=None, n_exact=0, batch_size=None, a=0.0, lam=1) -> list:
        """The values of :attr:`shared_variables`: perturbed, ``n_rest`` rows subsampled by the
        ``rows − n_exact`` of a batch; signed, mini-batches of ``batch_size`` rows, ``a`` and λ.
        """
        target = self.target
        args = [] if target.glm is not None else [target.center.astype(target.tall.theta.dtype)]
        if self.estimator == "perturbed":
            args += [np.asarray(n_rest, dtype="float64"), np.asarray(rows - n_exact, dtype="float64")]
        else:
            args += [np.asarray(batch_size, dtype="int64"), np.asarray(a, dtype="float64"),
                     np.asarray(lam, dtype="float64")]
        return args + list(self._sum_values)

    def key(self) -> tuple:
        """What a compiled function of this graph depends on besides the model's graph."""
        target = self.target
        kind = "eta" if target.glm is not None else "generic"
        proxy = type(target.proxy).__name__
        return ("EstimateGraph", self.estimator, kind, target.order, target.n_rows, proxy)
