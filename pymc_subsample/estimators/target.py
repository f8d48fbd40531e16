"""One subsampled target for every step method (docs/design.md, "One target").

A :class:`SubsampledTarget` owns the tall model, the centre θ*, the Taylor proxy and
the Laplace precision, and compiles one function per need:

- :meth:`differences`: d_i = ℓ_i(θ) − q_i(θ) on a batch (value only: MH tests, tuning);
- :meth:`perturbed`: log p(θ) + ℓ̂ − σ̂²/2 and its exact gradient (HMC-ECS, eq. 4.5);
- :meth:`signed`: log p(θ) + log|L̂| of the block-Poisson estimator and its gradient
  (eq. 5.1), with the mini-batch estimates d̂ that give the sign;
- :meth:`difference_gradient`: the control-variate gradient ∇ℓ̂ (eq. 4.7) for SG methods.

Each is ONE compiled call over the m-row batch graph: q_i needs ℓ_i(θ*) and the first
and second directional derivatives of ℓ_batch at θ* along v = θ − θ* (forward mode,
O(m)); the gradient is reverse mode through the estimator's own formula, which
computes ∇Σq + VJP_θ(ℓ_batch, w) − VJP_θ*(ℓ_batch, w) − HVP_θ*(w·ℓ_batch, v) with
w = ∂value/∂d. No per-row gradient, no ``vectorize_graph``, no ``Blockwise``.
Σq(θ) and its gradient are O(d²) in NumPy from the proxy's sums and added outside (a proxy in η
of rows affine in a row-free φ(θ) gives Σq as a small graph in θ, compiled into the same function).
For a GLM or any distributional regression (ℓ_k = f(y_k, η_k), η ∈ R^p affine in θ, or in a
row-free φ(θ) with the proxy taken in η: ``RowFreeTaylorProxy``) the same d is
written in η instead (:mod:`~pymc_subsample.estimators.glm_differences`): no forward mode, and
the rows' terms at θ* are inputs computed once per batch (a subsample change), not per call.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace

from pymc_subsample.control_variates.taylor import (
    RowFreeTaylorProxy,
    eta_differences_at_thetas,
    make_proxy,
    truncate,
)
from pymc_subsample.estimators.eta_estimate import EtaPerturbedFunction
from pymc_subsample.estimators.eta_kernels import closed_form_differences
from pymc_subsample.estimators.glm_differences import glm_differences_graph
from pymc_subsample.estimators.loglik import block_poisson_log_abs, difference_parts
from pymc_subsample.model.analysis import directional_derivative
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.model.compile import SLOW_REWRITES, compile_function
from pymc_subsample.model.distributional import NUMPY_TERMS_MIN_ROWS, RowTerms
from pymc_subsample.model.functions import CompiledFunctions
from pymc_subsample.model.graph_view import batch_length
from pymc_subsample.model.op_patterns import matrix_vector_products_as_sums
from pymc_subsample.subsample.batch import RecentBatches

__all__ = ["KEPT_TERMS_MAX_VALUES", "SubsampledTarget"]

#: the rows' terms at θ* of all N rows are kept in memory up to this many values (160 MB): 10⁶ rows
#: of a regression with two linear predictors (eight terms a row) fit two and a half times over
KEPT_TERMS_MAX_VALUES = 20_000_000


class SubsampledTarget:
    """The subsampled log posterior of a tall model around a centre.

    Parameters
    ----------
    tall : TallModel
    center : ndarray (d,)
        θ* of the control variates.
    order : {0, 1, 2}
        Taylor order of the control variates.
    chunk_size : int
        Rows per chunk of the one full-data pass (Σℓ, A, B at θ*).
    """

    def __init__(self, tall, center, order=2, *, chunk_size=DEFAULT_CHUNK_SIZE, glm="auto"):
        self.tall = tall
        self.n_rows = tall.n_rows
        self._glm_choice = glm
        # the set-up's prior as the step that made this target chose it, for its later calls too
        self._setup_prior_compiled = tall.setup_prior_compiled
        self.proxy = make_proxy(tall, self.glm, center, order, chunk_size=chunk_size)
        self._chunk_size = chunk_size
        self.center = self.proxy.center
        self.order = self.proxy.order
        #: the functions this target calls, by :meth:`_compile`'s key, per compile mode
        self.functions = CompiledFunctions()
        self._precision = None
        #: whether :meth:`laplace_precision` is the identity it falls back to (no Laplace precision)
        self.laplace_fallback = False
        self._batch_terms = None  # (batch, its rows' terms at θ*): the last batch the η path saw
        self._recent_arguments = RecentBatches()  # the η kernel's arguments of the last few batches
        self._sum_q_parts = None  # (Σq's graph, its inputs, their values) where the proxy has one

    @property
    def glm(self):
        """The distributional-regression view the difference graph is written in
        (``glm_differences``), or None (generic).

        ``glm="auto"`` (default) uses it whenever the model's rows are univariate distributions
        with parameters affine in θ (or a row-free φ(θ)) through a link and f matches the model's own rows
        (``TallModel.regression_view``); ``glm="affine"`` only where they are affine in θ itself
        (a model affine in a non-linear φ keeps the generic graph and the proxy in θ);
        ``glm=False`` forces the generic forward-mode graph.
        """
        view = self.tall.regression_view if self._glm_choice else None
        if self._glm_choice == "affine" and view is not None and view.phi is not None:
            return None
        return view

    # ------------------------------------------------------------------ graphs
    def center_variables(self):
        """The inputs at θ*: the rows' terms there (a distributional regression, :meth:`center_args`),
        or θ* itself (the generic graph).
        """
        if self.glm is not None:
            return self.glm.row_terms_variables()
        return self.tall.theta.type(name="center")

    def differences_graph(self, at_center):
        """D = ℓ_batch(θ) − q_batch(θ) (``at_center`` from :meth:`center_variables`), with q from
        directional derivatives at θ* along v; for a distributional regression, from the rows' terms
        at θ*.
        """
        tall = self.tall
        if self.glm is not None:
            return glm_differences_graph(self.glm, self.order, at_center)
        center = at_center
        # derivatives along a free direction, then v = θ − θ* substituted: the second derivative
        # must hold v fixed, not differentiate through its dependence on θ*
        direction = tall.theta.type(name="v")
        at_center = graph_replace(tall.batch_loglik, {tall.theta: center}, strict=False)
        slope = directional_derivative(at_center, center, direction) if self.order >= 1 else None
        curvature = directional_derivative(slope, center, direction) if self.order == 2 else None
        q = truncate(self.order, at_center, slope, curvature)
        q = graph_replace(q, {direction: tall.theta - center}, strict=False)
        return tall.batch_loglik - q

    #: the functions a leapfrog step calls, whose X @ β and Xᵀw stay BLAS products: measured at
    #: m = 1000 on a cold cache and per call, logistic (d = 5) 7.6 against 6.5 s and 46 against 48 µs,
    #: crossed effects (d = 121) 11.9 against 12.8 s and 53 against 93 µs, d = 31 37 against 66 µs
    BLAS_PRODUCTS = ("perturbed", "signed")

    def _compile(self, key, build):
        """The function ``key``: ``build(at_center) -> (its other inputs, derive)``, where ``derive()``
        builds its outputs, called only when no TallModel of the same graph has the function yet.
        """
        def compiled():
            at_center = self.center_variables()
            extra, derive = build(at_center)
            flat = at_center.flat() if self.glm is not None else [at_center]
            outputs = derive()
            many = isinstance(outputs, (list, tuple))
            if key not in self.BLAS_PRODUCTS:
                # X @ β and its gradient's products as fused sums: no Numba kernel of their own
                outputs = matrix_vector_products_as_sums(outputs if many else [outputs])
            else:
                outputs = list(outputs) if many else [outputs]
            return compile_function(self._inputs(flat, *extra), outputs if many else outputs[0],
                                    exclude=SLOW_REWRITES)

        def shared():
            # kept with the tall model's functions too, which a TallModel of the same model graph
            # shares (TallModel: the kept analysis): a second set-up then builds and compiles no
            # graph. Every input is a variable (θ, the batch, the terms at θ*, Σq's values), so the
            # function fits any target of the same rows, kind, order and Σq's place
            kind = "eta" if self.glm is not None else "generic"
            products = "BLAS" if key in self.BLAS_PRODUCTS else "sums"
            recipe = f"SubsampledTarget.{key}, {kind} graph, order {self.order}, N {self.n_rows}, {products}"
            return self.tall.kept_function(("SubsampledTarget", recipe, self.proxy.sum_in_graph), compiled)

        return self.functions.kept(key, shared)

    def _rows(self):
        """The batch's number of rows as a graph: every batch input has its rows on the first axis
        (``TallModel`` turns other models away), so the first input's length is every input's
        (:func:`~pymc_subsample.estimators.loglik.difference_parts`: why not ``d.shape[0]``).
        """
        return self.tall.batch_inputs[0].shape[0] if self.tall.batch_inputs else 1

    def _inputs(self, at_center, *extra):
        return [self.tall.theta, *extra, *self.tall.batch_inputs, *at_center, *self._sum_q()[1]]

    def _theta(self, theta):
        return np.asarray(theta, dtype=self.tall.theta.dtype)

    def _args(self, theta, batch, *extra):
        return (self._theta(theta), *self.arguments(batch, *extra))

    def arguments(self, batch, *extra) -> tuple:
        """The arguments after θ of a compiled function of this target (:meth:`perturbed_function`,
        :meth:`signed_function`) on ``batch``, after its own ``extra`` ones.
        """
        return (*extra, *batch, *self.center_args(batch), *self._sum_q()[2])

    def __getstate__(self):
        # a chain's process computes the kept terms again (one pass) rather than receive up to
        # KEPT_TERMS_MAX_VALUES values through a pipe
        state = dict(self.__dict__, _batch_terms=None, _recent_arguments=RecentBatches())
        for kept in ("_kept_terms", "_eta_perturbed"):
            state.pop(kept, None)
        return state

    def center_args(self, batch, parent=None):
        """θ* itself (generic graph), or the rows' terms at θ* of ``batch`` (η path).

        The terms depend on θ* and the row's data alone. Where they are kept for all N rows
        (:meth:`_kept_terms`), a batch that knows its rows (``Batch.rows``) reads them. Otherwise they
        are computed once per row: a sampler passes the same batch object until its subsample
        changes (batches are never changed in place), and a batch made by a block update from the
        last one (:class:`~pymc_subsample.subsample.batch.Batch`) keeps the terms of the unchanged
        positions, so an HMC-ECS iteration computes m/G rows' terms. ``parent``: (a batch, its terms)
        to take the unchanged positions' terms from instead of the last batch seen.
        """
        if self.glm is None:
            return (self.center.astype(self.tall.theta.dtype),)
        last = self._batch_terms if parent is None else parent
        if last is not None and last[0] is batch:  # every leapfrog step of an iteration
            return last[1]
        rows = getattr(batch, "rows", None)
        parent_token = getattr(batch, "parent_token", None)
        from_parent = last is not None and parent_token == getattr(last[0], "token", -1)
        if from_parent and (rows is None or self._kept_terms is None):
            changed = batch.changed
            terms = last[1].copy()
            terms[:, changed] = self._row_terms(tuple(a[changed] for a in batch))
        else:
            terms = self._row_terms(batch, rows)
        self._batch_terms = (batch, terms)
        return terms

    def _row_terms(self, batch, rows=None) -> np.ndarray:
        """The terms at θ* (n_terms, m) of the rows of ``batch``: read from the kept ones by their row
        indices ``rows`` where both are there, else computed.
        """
        if rows is not None and self._kept_terms is not None:
            # C order: indexed along the rows, NumPy gives them F-ordered, and the η kernels read a
            # term of every row at a time (in F order the closed form took 29 µs, not 14, at m = 1000)
            return np.ascontiguousarray(self._kept_terms[:, rows])
        return np.array(self.glm.row_terms(self.center, batch).flat(), dtype=float)

    def eta_kept_rows(self) -> tuple | None:
        """(y, η(0), J, block coefficients, block entries, terms at θ*) of all N rows, as
        :func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_iteration` reads a proposal's rows from them,
        where the estimate is the closed form's
        (:func:`~pymc_subsample.estimators.eta_kernels.closed_form_sums`) and all of them are kept;
        else None. y is the closed form's column of all rows, cast as the
        model casts it, read once and kept.
        """
        function = self._eta_perturbed
        if function is None or function.closed_form is None or self._kept_terms is None:
            return None
        if "_kept_y" not in self.__dict__:
            self._kept_y = function.closed_form.y(self.tall.row_slice(0, self.n_rows))
        kept = self._kept_affine
        return self._kept_y, kept.offset, kept.jacobian, kept.coef, kept.owner, self._kept_terms

    def terms_kept(self) -> bool:
        """Whether the rows' terms at θ* are kept for all N rows already (:meth:`_kept_terms`): a pass
        over the rows then reads them, by batches that know their rows, instead of computing them
        chunk by chunk (a negative binomial's trigamma at every row), and never computes them itself.
        """
        return self.__dict__.get("_kept_terms") is not None

    @functools.cached_property
    def _kept_terms(self):
        """The rows' terms at θ* of all N rows (one pass, in chunks through NumPy), or None.

        Kept where the data are in memory and the terms hold at most :data:`KEPT_TERMS_MAX_VALUES`
        values: a sampler's per-iteration rows then read them instead of calling a compiled
        function, so a first run compiles no function of the rows' terms at all, and a negative
        binomial's trigamma, which PyTensor's Numba backend runs in object mode, is never called
        per iteration.
        """
        # measured: the rows' terms' Numba function took seconds to compile on a cold cache, and the
        # trigamma in object mode 40 µs a row
        n_terms = len(self.glm.row_terms_variables().flat())
        if self.tall.rows_streamed or n_terms * self.n_rows > KEPT_TERMS_MAX_VALUES:
            return None
        kept = np.empty((n_terms, self.n_rows))
        chunk = max(self._chunk_size, NUMPY_TERMS_MIN_ROWS)
        for start in range(0, self.n_rows, chunk):
            stop = min(start + chunk, self.n_rows)
            kept[:, start:stop] = self.glm.row_terms(self.center, self.tall.row_slice(start, stop)).flat()
        self.tall.full_passes += 1
        return kept

    @functools.cached_property
    def _eta_perturbed(self):
        """The perturbed estimate with only f compiled from the model
        (:class:`~pymc_subsample.estimators.eta_estimate.EtaPerturbedFunction`), where the rows are
        affine in θ, or in a row-free φ(θ) with the proxy taken in η, their data in memory, and η's
        offsets and sparse Jacobians of all N rows fit
        :data:`~pymc_subsample.model.affine_rows.KEPT_AFFINE_MAX_VALUES`; else None.
        """
        if self.glm is None or self.tall.rows_streamed:
            return None
        in_phi = self.glm.phi is not None
        if in_phi != isinstance(self.proxy, RowFreeTaylorProxy) or self._kept_affine is None:
            return None
        return EtaPerturbedFunction(self, self._kept_affine)

    @property
    def _kept_affine(self):
        """η_k(0) and J_k of all N rows in θ or φ, kept by the tall model (one pass through NumPy), or
        None where they are too many (:meth:`~pymc_subsample.model.tall.TallModel.kept_affine`).
        """
        return self.tall.kept_affine(phi=self.glm.phi is not None)

    def _affine_rows(self, batch):
        """η_k(0) and J_k of the rows of ``batch``
        (:class:`~pymc_subsample.model.affine_rows.AffineRows`): read from the kept ones by
        the batch's row indices, or computed where it has none (the arguments they go into are kept
        per batch, :meth:`_eta_arguments`).
        """
        rows = getattr(batch, "rows", None)
        if rows is not None:
            return self._kept_affine.rows(rows)
        # a batch without row indices: its own, the η_j constant over all rows as kept
        return self._kept_affine.with_rows(*self.glm.sparse_affine(batch, phi=self.glm.phi is not None))

    def _sum_q(self):
        """(Σ_k q_k(θ) as a graph or None, its inputs, their values): the proxy's
        :meth:`~pymc_subsample.control_variates.taylor.TaylorProxy.sum_graph` where it has one.
        """
        if self._sum_q_parts is None:
            self._sum_q_parts = self.proxy.sum_graph() if self.proxy.sum_in_graph else (None, [], [])
        return self._sum_q_parts

    def _prior_and_sum_q(self):
        """Log p(θ), plus Σ_k q_k(θ) where the proxy is compiled into the graph (:meth:`add_sum_q`)."""
        sum_q = self._sum_q()[0]
        return self.tall.prior_graph if sum_q is None else self.tall.prior_graph + sum_q

    @property
    def perturbed_adds_sum_q(self) -> bool:
        """Whether :meth:`perturbed_function`'s value and gradient hold Σq already (the η estimate's
        always do; else :meth:`add_sum_q` adds it).
        """
        return self._eta_perturbed is not None or self.proxy.sum_in_graph

    def add_sum_q(self, theta, value, grad):
        """(value, grad) of a compiled call plus Σq and its gradient, unless the graph held them
        (public: the step methods that call :meth:`perturbed_function` themselves add it so).
        """
        value = float(value)
        if not self.proxy.sum_in_graph:
            sum_q, sum_q_grad = self.proxy.sum_value_and_grad(theta)
            return value + sum_q, grad + sum_q_grad
        return value, grad

    # --------------------------------------------------------------- functions
    def differences(self, theta, batch):
        """d_i = ℓ_i(θ) − q_i(θ) for the rows of ``batch``, shape (m,)."""

        def build(at_center):
            return [], lambda: self.differences_graph(at_center)

        return self._compile("differences", build)(*self._args(theta, batch))

    def differences_at_thetas(self, thetas, batch):
        """d_i(θ) of :meth:`differences` at each row of ``thetas`` (k, d), shape (k, m), for the set-up's
        pilots and passes: for a distributional regression in NumPy, from one call at all k points
        (:func:`eta_differences_at_thetas`), which compiles nothing.
        """
        if self.glm is not None:
            closed_form = self._closed_form_differences(thetas, batch)
            if closed_form is not None:
                return closed_form
            at_center = RowTerms.from_flat(self.center_args(batch), self.glm.n_eta, self.glm.pairs)
            return eta_differences_at_thetas(self.glm, self.order, thetas, batch, at_center)
        return np.stack([self.differences(theta, batch) for theta in thetas])

    def _closed_form_differences(self, thetas, batch):
        """:meth:`differences_at_thetas` in one call of the closed form's Numba kernel
        (:func:`~pymc_subsample.estimators.eta_kernels.closed_form_differences`), where the estimate
        is the closed form's in θ, it is made already, and the batch's rows are kept (a sampler's
        passes: the end of warm-up's choice of exact rows); else None.
        """
        # measured at 10⁶ rows (2026-12-01): the warm-up's pass over every row at 9 points took 0.92 s
        # (linear) and 1.60 s (negative binomial) in NumPy (η and f at all points, then q_k), 0.50
        # and 0.67 s here
        function = self.__dict__.get("_eta_perturbed")
        rows = getattr(batch, "rows", None)
        if (function is None or function.closed_form is None or function.in_phi or rows is None
                or not self.terms_kept()):
            return None
        form = function.closed_form
        thetas = np.ascontiguousarray(thetas, dtype=float)
        # consecutive rows (a pass's chunk) are read as a slice: copies of the kept arrays' columns,
        # not gathers by index (0.2 → 0.1 s of a pass at 10⁶ rows and 5 points, with its chunks)
        span = _as_slice(rows)
        kept_y = self.__dict__.get("_kept_y")
        y = form.y(batch) if kept_y is None else np.ascontiguousarray(kept_y[:, span])
        terms = np.ascontiguousarray(self._kept_terms[:, span])
        return closed_form_differences(form.code, form.eta_index, form.constants, y,
                                       *self._kept_affine.rows(span), thetas, terms, function.pairs,
                                       int(self.order))

    def perturbed(self, theta, batch):
        """Log p(θ) + ℓ̂ − σ̂²/2, its gradient, and σ̂² (Dang et al. 2019 eqs. 4.1-4.5, 4.7): every row of
        ``batch`` subsampled, :meth:`perturbed_with_exact` with no exact rows (one compiled function
        for both).
        """
        return self.perturbed_with_exact(theta, batch, 0, self.n_rows)

    def perturbed_function(self):
        """The compiled function of :meth:`perturbed_with_exact`: (θ, n_R, m, r, batch, terms at θ*, Σq's
        values) ↦ (value without a Σq added in NumPy, gradient, σ̂²); its other arguments from
        :meth:`perturbed_arguments`. For rows affine in θ whose η's Jacobians are kept, an
        :class:`~pymc_subsample.estimators.eta_estimate.EtaPerturbedFunction`, called alike.
        """
        if self._eta_perturbed is not None:
            return self._eta_perturbed
        # measured with slices: 51 more nodes and a second compiled estimator on crossed effects, 10⁵ rows
        def build(at_center):
            rest, m = pt.dscalar("n_rest"), pt.dscalar("m_rest")
            subsampled = pt.vector("subsampled", dtype="float64")

            def derive():
                d = self.differences_graph(at_center)
                rd = subsampled * d
                s1, s2 = rd.sum(), (rd * d).sum()
                sigma2 = rest * rest / (m * m) * (s2 - s1 * s1 / m)
                value = self._prior_and_sum_q() + (d.sum() - s1) + rest * s1 / m - 0.5 * sigma2
                return [value, self.tall.gradient(value), sigma2]

            return [rest, m, subsampled], derive

        return self._compile("perturbed", build)

    def perturbed_with_exact(self, theta, batch, n_exact, n_rest):
        """As :meth:`perturbed`, with the first ``n_exact`` rows of ``batch`` a set E computed exactly
        and the others a uniform subsample of the remaining ``n_rest`` rows R (Dang et al. 2019 eqs. 4.1-4.5):

            ℓ̂ = Σ_k q_k + Σ_{k∈E} d_k + (n_R/m) Σ_{i≤m} d_{u_i},   σ̂² = (n_R²/m²) Σ_i (d_{u_i} − d̄_u)²,

        i.e. eq. (4.2) on R with ω_k = 1/n_R, plus E's rows, known without error: still unbiased, and
        σ̂² holds only R's spread. With ``n_exact = 0`` and ``n_rest`` = N it is :meth:`perturbed`;
        with ``n_exact = 0`` and a batch of R's rows it is the estimate on R alone (pilots).

        The rows of R are marked by a 0/1 input r over the whole batch, and every sum is over the
        batch (Σ r d, Σ r d², Σ d − Σ r d): one fused pass over d whose gradient is elementwise in d.
        Slices d[:n_exact] and d[n_exact:] would make the gradient scatter into d, a larger graph.
        """
        arguments = self.perturbed_arguments(batch, n_exact, n_rest)
        value, grad, sigma2 = self.perturbed_function()(self._theta(theta), *arguments)
        if not self.perturbed_adds_sum_q:
            value, grad = self.add_sum_q(theta, value, grad)
        return float(value), grad, float(sigma2)

    def perturbed_arguments(self, batch, n_exact, n_rest) -> tuple:
        """The arguments after θ of :meth:`perturbed_function` on ``batch`` (:meth:`perturbed_with_exact`)."""
        if self._eta_perturbed is not None:
            return self._eta_arguments(batch, n_exact, n_rest)
        rows = batch_length(batch)
        subsampled = np.ones(rows)
        subsampled[:n_exact] = 0.0
        extra = (np.asarray(n_rest, dtype="float64"), np.asarray(rows - n_exact, dtype="float64"), subsampled)
        return self.arguments(batch, *extra)

    def _eta_arguments(self, batch, n_exact, n_rest) -> tuple:
        """:meth:`perturbed_arguments` of the η kernel, kept for the last few batches. A batch made by
        a block update from one of them (a proposal from the current subsample) takes its arguments
        with the changed positions' rows read anew: m/G rows an iteration, where reading all m rows'
        terms and J from the kept ones by index took 30-60 µs at m = 1000 (d = 4).
        """
        key = (n_exact, n_rest)
        arguments = self._recent_arguments.get(batch, key)
        if arguments is not None:
            return arguments
        parent = self._recent_arguments.parent(batch, key)
        rows = getattr(batch, "rows", None)
        if parent is not None and rows is not None:
            changed = batch.changed
            new_rows = rows[changed]
            terms = self._row_terms(tuple(a[changed] for a in batch), new_rows)
            arguments = self._eta_perturbed.with_rows(parent, changed, batch, terms, self._kept_affine,
                                                      new_rows)
        else:
            subsampled = np.ones(batch_length(batch))
            subsampled[:n_exact] = 0.0
            terms, affine = self.center_args(batch), self._affine_rows(batch)
            arguments = self._eta_perturbed.arguments(batch, terms, affine, subsampled, n_rest)
        self._recent_arguments.put(batch, key, arguments)
        return arguments

    def difference_gradient(self, theta, batch):
        """∇ log p(θ) + ∇ℓ̂ = ∇log p + ∇Σq + (N/m) Σ_i (∇ℓ_i − ∇q_i) (Dang et al. 2019 eq. 4.7)."""

        def build(at_center):
            def derive():
                total, _ = difference_parts(self.differences_graph(at_center), self.n_rows, self._rows())
                return self.tall.gradient(self._prior_and_sum_q() + total)

            return [], derive

        grad = self._compile("difference_grad", build)(*self._args(theta, batch))
        return self.add_sum_q(theta, 0.0, grad)[1]

    def difference_jacobian(self, theta, batch):
        """Per-row ∇d_i(θ) = ∇ℓ_i(θ) − ∇q_i(θ), shape (m, d), for SG methods that keep the terms.

        Forward mode along the d unit vectors: d compiled calls over the batch (a loop over
        parameters, never over rows), so it costs about d times :meth:`differences`.
        """

        def build(at_center):
            direction = self.tall.theta.type(name="unit")
            return [direction], lambda: directional_derivative(self.differences_graph(at_center),
                                                               self.tall.theta, direction)

        fn = self._compile("difference_jvp", build)
        dt = self.tall.theta.dtype
        out = np.empty((batch_length(batch), self.tall.ndim))
        for j, e in enumerate(np.eye(self.tall.ndim, dtype=dt)):
            out[:, j] = fn(*self._args(theta, batch, e))
        return out

    def signed_function(self):
        """The compiled function of :meth:`signed`: (θ, m, a, λ, batch, terms at θ*, Σq's values) ↦ (value
        without a Σq added in NumPy, gradient, d); its other arguments from :meth:`arguments`.
        """
        def build(at_center):
            m = pt.lscalar("batch_size")
            a_, lam_ = pt.dscalar("a"), pt.dscalar("lam")

            def derive():
                d = self.differences_graph(at_center)
                d_hat = (self.n_rows / m) * d.reshape((-1, m)).sum(axis=1)
                value = self._prior_and_sum_q() + block_poisson_log_abs(d_hat, a_, lam_, pt.log)
                return [value, self.tall.gradient(value), d]

            return [m, a_, lam_], derive

        return self._compile("signed", build)

    def signed(self, theta, batch, batch_size, a, lam):
        """Log p(θ) + log|L̂| of the block-Poisson estimator (eq. 5.1), its gradient, and d (B·m,).

        ``batch`` holds B·m rows, B ≥ 1 mini-batches of ``batch_size`` rows each, in order.
        """
        arguments = self.signed_arguments(batch, batch_size, a, lam)
        value, grad, d = self.signed_function()(self._theta(theta), *arguments)
        value, grad = self.add_sum_q(theta, value, grad)
        return value, grad, d

    def signed_arguments(self, batch, batch_size, a, lam) -> tuple:
        """The arguments after θ of :meth:`signed_function` on ``batch`` (:meth:`signed`)."""
        scalars = (np.asarray(batch_size, dtype="int64"), np.asarray(a, dtype=float),
                   np.asarray(lam, dtype=float))
        return self.arguments(batch, *scalars)

    # ------------------------------------------------------------------ set-up
    def laplace_precision(self) -> np.ndarray:
        """−(∇²log p(θ*) + Σ_k H_k(θ*)), the precision of the Laplace approximation at θ*.

        The one computation every step method uses (mass matrix, proposal scale, SG
        preconditioner, strong convexity), right for every proxy order. When it is not
        positive definite (θ* far from a mode), the identity is used with a warning.
        """
        if self._precision is None:
            prec = -(self.tall.prior_hessian(self.center) + self.proxy.hess_sum)
            prec = 0.5 * (prec + prec.T)
            try:
                np.linalg.cholesky(prec)
            except np.linalg.LinAlgError:
                warnings.warn(
                    "The Hessian of the log posterior at the centre is not negative definite; "
                    "using the identity instead of the Laplace precision. Pass a `center` closer "
                    "to the posterior mode (e.g. pms.find_map()).",
                    UserWarning,
                    stacklevel=3,
                )
                prec = np.eye(self.tall.ndim)
                self.laplace_fallback = True
            self._precision = prec
        return self._precision

    def proxy_log_posterior(self, theta) -> float:
        """The log posterior with every row's term replaced by its proxy, log p(θ) + Σ_k q_k(θ), from no
        row and no compiled function (where the set-up's pilot points are plausible,
        :func:`~pymc_subsample.kernels.tuning.plausible_laplace_draws`).
        """
        prior = self.tall.prior_value_and_grad(theta, setup=True, compiled=self._setup_prior_compiled)[0]
        return float(prior) + self.proxy.sum_value(theta)

    def prior_value(self, theta) -> float:
        return float(self.tall.prior_value_and_grad(theta)[0])


def _as_slice(rows):
    """``rows`` as a slice where they are consecutive and ascending, else ``rows`` itself."""
    rows = np.asarray(rows)
    if rows.size and rows[-1] - rows[0] == rows.size - 1 and np.all(np.diff(rows) == 1):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows
