"""The generic view of a tall model: functions compiled from the model's own graphs.

Per-row values and their forward-mode derivatives (O(m) for m rows, any model graph), the summed
value, gradient and Hessian of a batch from the one set-up function
(:mod:`~pymc_subsample.model.setup_function`), and the prior's value, gradient and Hessian. A
distributional regression takes its set-up sums from η instead
(:meth:`~pymc_subsample.model.tall.TallModel.uses_eta_sums`); every model has this view.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.model.compile import compile_function, compile_python
from pymc_subsample.model.differences import VECTORISED_MIN_D, central_hessian, vectorised_gradient
from pymc_subsample.model.setup_function import setup_function

__all__ = ["GraphView", "batch_length"]


class GraphView:
    """The functions of one TallModel's graphs (a :class:`~pymc_subsample.model.analysis.GraphAnalysis`),
    compiled into the analysis's table, which every TallModel of the model graph shares.

    Parameters
    ----------
    graphs : GraphAnalysis
    gather : callable
        The TallModel's ``gather``: the rows of an index vector, as a batch.
    """

    def __init__(self, graphs, gather):
        self._graphs = graphs
        self._gather = gather
        self._prior_batch = None  # one row: the set-up function computes the prior too

    def _theta(self, theta):
        return np.asarray(theta, dtype=self._graphs.theta.dtype)

    # ------------------------------------------------------------------- rows
    def loglik_rows(self, theta, batch):
        """ℓ_k(θ) for the rows of ``batch``, shape (m,), from a compiled function."""
        g = self._graphs
        fn = g.functions.compile("rows", lambda: ([g.theta, *g.batch_inputs], g.batch_loglik))
        return fn(self._theta(theta), *batch)

    def model_loglik_rows(self, theta, batch):
        """The model's log-likelihood terms over ``batch`` on PyTensor's Python linker: the checks
        call it ~20 times on ≤ 16 rows, where compiling a kernel would cost more than every call.
        """
        g = self._graphs
        fn = g.functions.compile("rows_check", lambda: ([g.theta, *g.batch_inputs], g.batch_loglik),
                                 python=True)
        return np.asarray(fn(self._theta(theta), *batch))

    def rows_directional(self, theta, u, v, batch):
        """ℓ_k(θ), ∇ℓ_k(θ)ᵀu and uᵀH_k(θ)v for every row of ``batch`` (forward mode, O(m))."""
        g = self._graphs
        fn = g.functions.compile(
            "rows_dir",
            lambda: ([g.theta, g.direction, g.direction2, *g.batch_inputs],
                     [g.batch_loglik, *g.rows_directional_graphs]),
        )
        return fn(self._theta(theta), self._theta(u), self._theta(v), *batch)

    def loglik_rows_and_grads(self, theta, batch):
        """Per-row ℓ_k (m,) and per-row gradients ∇ℓ_k (m, d): d forward passes of O(m)."""
        theta = self._theta(theta)
        grads = np.empty((batch_length(batch), self._graphs.ndim))
        loglik = None
        for j, e in enumerate(np.eye(self._graphs.ndim, dtype=theta.dtype)):
            loglik, grads[:, j], _ = self.rows_directional(theta, e, e, batch)
        if loglik is None:
            loglik = self.loglik_rows(theta, batch)
        return np.asarray(loglik), grads

    def rows_hessian_vector(self, theta, direction, batch):
        """Per-row H_k(θ) v, shape (m, d), without forming the m × d × d Hessians."""
        theta = self._theta(theta)
        out = np.empty((batch_length(batch), self._graphs.ndim))
        for j, e in enumerate(np.eye(self._graphs.ndim, dtype=theta.dtype)):
            out[:, j] = self.rows_directional(theta, e, direction, batch)[2]
        return out

    # ------------------------------------------------------------------- sums
    def setup_terms(self, theta, directions, batch):
        """The set-up function's outputs at θ along ``directions`` (k, d) over ``batch``."""
        return setup_function(self._graphs)[0](self._theta(theta), directions, *batch)

    def no_directions(self):
        return np.zeros((0, self._graphs.ndim), dtype=self._graphs.theta.dtype)

    def sum_value_grad_hessian(self, theta, batch):
        """Σ ℓ_k, Σ ∇ℓ_k and Σ H_k over ``batch``: the set-up function's Hessian-vector products
        along the d unit vectors, all in one call when they are vectorised, else one call per
        direction.
        """
        theta = self._theta(theta)
        d = self._graphs.ndim
        eye = np.eye(d, dtype=theta.dtype)
        if setup_function(self._graphs)[1]:
            _, _, total, grad, hess = self.setup_terms(theta, eye, batch)
            return total, grad, hess
        hess = np.empty((d, d))
        total = grad = None
        for j in range(d):
            _, _, total, grad, hvp = self.setup_terms(theta, eye[j : j + 1], batch)
            hess[j] = hvp[0]
        return total, grad, hess

    # ------------------------------------------------------------------ prior
    def setup_prior(self, theta):
        """The prior log p(θ) and its gradient from the set-up function, which set-up code compiles anyway."""
        if self._prior_batch is None:
            self._prior_batch = self._gather(np.zeros(1, dtype=int))
        prior, prior_grad, *_ = self.setup_terms(theta, self.no_directions(), self._prior_batch)
        return prior, prior_grad

    def prior(self, theta, python=False):
        """The prior log p(θ) and its gradient from a small function of their own: compiled, or
        with ``python`` on PyTensor's Python linker
        (:data:`~pymc_subsample.model.compile.PYTHON_LINKER_ARRAYS`).
        """
        return tuple(self.prior_function(python)(self._theta(theta)))

    def prior_function(self, python=False):
        """The function θ ↦ [log p(θ), ∇log p(θ)] of :meth:`prior`, in the current compile mode."""
        g = self._graphs
        graphs = [g.prior_graph, g.prior_grad_graph]
        return g.functions.kept("prior_setup" if python else "prior",
                                lambda: (compile_python([g.theta], graphs, arrays=True) if python else
                                         compile_function([g.theta], graphs)))

    def prior_hessian(self, theta, prior_grad):
        """The Hessian of log p(θ), shape (d, d): central differences of ``prior_grad(θ)``, the
        gradients at many points in few vectorised calls where θ is long.
        """
        g = self._graphs
        gradients = None
        if g.ndim >= VECTORISED_MIN_D:  # a hierarchical model's many groups: few vectorised calls
            gradients = g.functions.kept("prior_gradients",
                                         lambda: vectorised_gradient(g.theta, g.prior_grad_graph))
        return central_hessian(prior_grad, self._theta(theta), gradients)


def batch_length(batch) -> int:
    """Rows in ``batch`` (its inputs hold their rows on the first axis); 1 for a batch of no inputs."""
    return int(np.shape(batch[0])[0]) if batch else 1
