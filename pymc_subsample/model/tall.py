"""From a PyMC model to a *tall model*: prior part, row data and per-row log-likelihoods.

The tall model is the only place that touches PyMC's graph. Everything
downstream (control variates, estimators, kernels) sees plain NumPy arrays and
a handful of compiled functions over a flat unconstrained parameter vector
``theta`` (the same raveling PyMC's step methods use) and a *batch*: a tuple
of arrays holding the rows of every row leaf for an index vector.

A :class:`TallModel` is one use of its model graph's analysis
(:class:`~pymc_subsample.model.analysis.GraphAnalysis`: the observation axis, the row graphs, the
prior part, the data sources, the compiled functions), kept for the next TallModel of the same graph
(:mod:`~pymc_subsample.model.kept`). It answers through two views: the generic graph
(:class:`~pymc_subsample.model.graph_view.GraphView`), and the distributional regression where the
model is one (:class:`~pymc_subsample.model.views.ModelViews`).
"""

from __future__ import annotations

import weakref

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from pytensor.graph.traversal import io_toposort
from pytensor.tensor.math import variadic_add

from pymc_subsample.model.affine_rows import kept_affine_rows
from pymc_subsample.model.analysis import GraphAnalysis, joined_inputs, model_initial_point
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE
from pymc_subsample.model.closed_form_prior import closed_form_prior
from pymc_subsample.model.distributional import NUMPY_TERMS_MIN_ROWS
from pymc_subsample.model.graph_view import GraphView
from pymc_subsample.model.kept import KEPT
from pymc_subsample.model.observation import (
    check_finite,
    check_rows_independent,
    observation_axis_length,
    observation_lengths,
)
from pymc_subsample.model.op_patterns import constant_slice
from pymc_subsample.model.rows import RowBatch
from pymc_subsample.model.views import ModelViews

__all__ = ["TallModel", "as_tall_model", "observation_axis_length", "observation_lengths"]


class TallModel:
    """A PyMC model seen as prior part + N exchangeable rows.

    Parameters
    ----------
    model : pm.Model, optional
        Defaults to the model on the context stack.
    vars : list of value variables, optional
        Defaults to all of the model's value variables. Every free variable must
        be included: the likelihood of each row depends on all of them.

    Attributes
    ----------
    n_rows : int
        N, the length of the observation axis: the observed variables' common length, or the sum
        of their lengths where they differ (their rows stacked, :mod:`~pymc_subsample.model.stacked`).
    data_set_rows : dict or None
        Where the lengths differ, each observed variable's rows [start, stop) on that axis.
    data_sets : dict or None
        Where the lengths differ, each observed variable's
        :class:`~pymc_subsample.model.stacked.DataSetRows` (its padded data and row mask).
    ndim : int
        d, the length of the unconstrained parameter vector.
    leaves : list of RowLeaf
        The row data, in the order of batch arrays.
    """

    def __init__(self, model=None, vars=None):
        model = pm.modelcontext(model)
        vars = None if vars is None else list(vars)
        lengths = observation_lengths(model)
        analysis, kept = KEPT.analysis(model, vars, lengths, lambda: analyse(model, vars, lengths))
        if kept:
            check_finite(analysis.leaves)  # the values may have changed (pm.set_data)
        self._use(analysis, model=model)
        if kept and analysis.random_initial_point:  # each use draws its own, as PyMC's initial_point
            self.initial_point = model_initial_point(model)

    def _use(self, analysis, model=None, model_ref=None):
        """Use ``analysis``: its results, which every TallModel of the model graph shares,
        and the use's own state (no Dask client, no passes yet).
        """
        self._analysis = analysis
        self._model, self._model_ref = model, model_ref
        self.n_rows, self.ndim, self.theta = analysis.n_rows, analysis.ndim, analysis.theta
        self.value_vars, self.initial_point = analysis.value_vars, analysis.initial_point
        self.leaves, self.data_sets = analysis.leaves, analysis.data_sets
        self.prior_graph = analysis.prior_graph
        self.batch_inputs, self.batch_loglik = analysis.batch_inputs, analysis.batch_loglik
        self._graph = GraphView(analysis, self.gather)
        self.client = None  # Dask client of the full passes (model/chunks.py); None: the active one
        self.progressbar = False  # progress bars over the chunks of long full passes
        self.full_passes = 0  # full-data passes so far (set-up cost, counted by chunked_sum)
        #: whether the set-up's calls of the prior take the compiled function (prior_value_and_grad);
        #: each step sets it for its own set-up (SubsampleStep.compiles_prior)
        self.setup_prior_compiled = False
        self._kept_affine = {}  # in θ (False) or φ (True): kept_affine's KeptAffineRows or None
        self.pass_memo = None  # full passes' sums by (fn, chunk size, θ) while set-up remembers them

    @property
    def model(self):
        """The PyMC model (held weakly by the TallModel the views are built on, :func:`analyse`)."""
        if self._model is not None:
            return self._model
        return None if self._model_ref is None else self._model_ref()

    @property
    def data_set_rows(self) -> dict | None:
        """Where the observed variables' lengths differ, each one's rows [start, stop) on the axis."""
        if self.data_sets is None:
            return None
        return {name: (rows.start, rows.stop) for name, rows in self.data_sets.items()}

    def __getstate__(self):
        # shipped to Dask workers for full passes: never the client itself, nor a weak reference
        return dict(self.__dict__, client=None, _model_ref=None, _kept_affine={})

    # ------------------------------------------------------------------ graphs
    def batch_graph(self, outputs):
        """Per-row graphs of the model (in free variables or data) rewritten to (θ, batch).

        For quantities other than ℓ_k that a method needs row by row, e.g. the linear predictor
        of a GLM: free variables become slices of the flat θ, row leaves become the batch inputs.
        """
        outputs = self.model.replace_rvs_by_values(list(outputs))
        point = {v.name: self.initial_point[v.name] for v in self.value_vars}
        outputs, _ = joined_inputs(point, outputs, self.value_vars, self.theta)
        return self._analysis.batch_rows(outputs)

    @property
    def _functions(self) -> dict:
        """The model's compiled functions in the current compile mode, by key."""
        return self._analysis.functions.current

    def kept_function(self, key, make):
        """``make()``, a function of this model's graphs made by other code (an estimator's), kept
        under ``key`` with the model's own functions: TallModels of the same model graph share them
        (:mod:`~pymc_subsample.model.kept`). ``key`` must name everything the function depends on
        besides the model's graph.
        """
        return self._analysis.functions.kept(key, make)

    def gradient(self, cost):
        """∇_θ ``cost`` as a graph. Where θ enters ``cost`` only through slices θ[a:b] with constant
        bounds that tile θ (the model's free variables), the gradients in the slices, summed per
        slice and joined (one ``Join``); else ``pytensor.grad`` in θ itself, which adds each slice's
        gradient into a vector of zeros: one ``IncSubtensor`` a slice, each a kernel for Numba to
        compile (4 of the logistic estimator's 36 nodes).
        """
        readers = [node for node in io_toposort([self.theta], [cost]) if self.theta in node.inputs]
        slices = [constant_slice(node) for node in readers]
        bounds = sorted(set(slices), key=lambda ab: ab[0] if ab else -1)
        starts, stops = [ab and ab[0] for ab in bounds], [ab and ab[1] for ab in bounds]
        if not bounds or None in bounds or starts != [0, *stops[:-1]] or stops[-1] not in (None, self.ndim):
            return pytensor.grad(cost, self.theta)
        grads = pytensor.grad(cost, [node.outputs[0] for node in readers], disconnected_inputs="ignore")
        per_slice = {ab: [] for ab in bounds}
        for ab, g in zip(slices, grads, strict=True):
            per_slice[ab].append(g)
        parts = [variadic_add(*per_slice[ab]) for ab in bounds]
        return pt.concatenate(parts) if len(parts) > 1 else parts[0]

    @property
    def prior_grad_graph(self):
        """∇ log p(θ) as a graph, built once for the functions that need it (compiling clones it)."""
        return self._analysis.prior_grad_graph

    # --------------------------------------------------------------- functions
    def prior_value_and_grad(self, theta, *, setup=False, compiled=None):
        """Log p(theta) (with transforms' Jacobians) and its gradient.

        By default from a small compiled function of its own, for samplers that call it every
        iteration. ``setup=True``, for the set-up's calls (the centre's optimiser, the prior
        Hessian's differences), takes them from the set-up function instead, which set-up code
        compiles anyway. A distributional regression, whose set-up sums come from η, has no set-up
        function: there they come from the same graph on PyTensor's Python linker
        (:data:`~pymc_subsample.model.compile.PYTHON_LINKER_ARRAYS`), nothing compiled, since
        compiling the prior costs more at set-up than its few calls in Python; where its rows are
        affine in a row-free φ(θ) and in memory, from the function of φ and the prior that its
        perturbed estimate compiles
        (:meth:`~pymc_subsample.model.row_free.RowFreeParameters.prior_and_pullback`). There
        ``compiled`` (default :attr:`setup_prior_compiled`, which the step being set up chose) takes
        the compiled function instead: the choice is the step's, never what happens to be compiled
        already, so that a step's set-up gives the same numbers whatever ran before it.
        """
        # measured: a compiled prior was 2.4 s of a first run's set-up of the linear zoo model,
        # against 0.2-0.9 ms a call in Python (zoo models), 0.05-0.2 s of a warm set-up; the
        # sampler's own compiled function is about 7 µs a call, the set-up function's about 50 µs
        if setup and not self.uses_eta_sums():
            return self._graph.setup_prior(theta)
        view = self.regression_view
        if setup and view.phi is not None and not self.rows_streamed:
            # rows affine in a row-free φ(θ) with data in memory: the small function of φ and the
            # prior that their estimate compiles anyway, ~5 µs a call against ~0.7 ms in Python
            _, prior, gradient = view.phi.prior_and_pullback(self)(np.asarray(theta, dtype=self.theta.dtype),
                                                                   np.zeros(view.phi.size))
            return prior, gradient
        # measured: the compiled prior here, for rows the package's kernel computes, saved 0.1 s of a
        # warm set-up but moved the prior's Numba compilation into the set-up, where the chains of a
        # first run on a cold cache compiled it each in parallel: the demo's set-up 0.2 → 0.8 s. So
        # the set-up takes the compiled prior only where the step's sampling calls it anyway
        # (SubsampleStep.compiles_prior): compiling it for the Python linker too cost 0.25-0.6 s of
        # PyTensor's rewriting (zoo models, 10⁵ rows, 2026-11-30)
        closed_form = self.closed_form_prior
        if closed_form is not None:  # compiled once per installation, the same for every step
            return closed_form(theta)
        compiled = self.setup_prior_compiled if compiled is None else compiled
        return self._graph.prior(theta, python=setup and not compiled)

    @property
    def closed_form_prior(self):
        """The prior as the package's closed-form kernel computes it
        (:class:`~pymc_subsample.model.closed_form_prior.ClosedFormPrior`, called θ ↦ (log p(θ),
        ∇log p(θ))), or None where it does not (:func:`~.closed_form_prior.closed_form_prior`).
        Found once per model graph, on first use.
        """
        # measured: the prior compiled from the graph was 3.3 s of a 3.8 s set-up on an empty PyTensor
        # cache, and 0.1-0.25 s of a warm one (the linear zoo model, 10⁵ rows, 2026-12-01)
        return self._analysis.functions.kept("closed_form_prior", lambda: closed_form_prior(
            self.model, self.value_vars, self.initial_point, self.theta, self.prior_graph,
            self.prior_grad_graph, self.initial_theta, self._analysis.potential_graph))

    def prior_function(self):
        """The compiled function θ ↦ [log p(θ), ∇log p(θ)] of :meth:`prior_value_and_grad` (θ of the
        model's dtype), in the current compile mode: for samplers that keep it and call it every step.
        """
        return self._graph.prior_function()

    @property
    def rows_streamed(self) -> bool:
        """Whether some of the rows' data are streamed from a store rather than held in memory."""
        return any(leaf.streamed for leaf in self.leaves)

    def prior_hessian(self, theta):
        """Hessian of log p(theta) on the unconstrained scale, shape (d, d).

        Central differences of the compiled prior gradient (2d calls of a d-vector function),
        symmetrised: a separately compiled Hessian graph costs more compile time at set-up than the
        2d gradient calls it replaces, for a d×d matrix used twice at set-up (Newton step, Laplace
        precision). The step h = 1e-5·max(1, |θ_j|) leaves a relative error of about 1e-10 on
        smooth priors.
        """
        # measured: a separately compiled Hessian graph cost 3 s of a fresh machine's first run
        return self._graph.prior_hessian(theta, lambda t: self.prior_value_and_grad(t, setup=True)[1])

    def loglik_rows(self, theta, batch):
        """Per-row log-likelihoods ℓ_k(theta) for the rows in ``batch``, shape (m,)."""
        return self._graph.loglik_rows(theta, batch)

    def rows_directional(self, theta, u, v, batch):
        """ℓ_k(θ), ∇ℓ_k(θ)ᵀu and uᵀH_k(θ)v for every row of ``batch`` (forward mode, O(m))."""
        return self._graph.rows_directional(theta, u, v, batch)

    def loglik_rows_and_grads(self, theta, batch):
        """Per-row ℓ_k (m,) and per-row gradients ∇ℓ_k (m, d).

        Only for algorithms that store per-row gradients (SAGA tables, SGFS's empirical
        Fisher). Forward mode along the d unit vectors: d compiled calls over the batch,
        a loop over parameters, never over rows, so the cost is d passes of O(m).
        """
        return self._graph.loglik_rows_and_grads(theta, batch)

    def rows_hessian_vector(self, theta, direction, batch):
        """Per-row H_k(theta) v, shape (m, d), without forming the m x d x d Hessians."""
        return self._graph.rows_hessian_vector(theta, direction, batch)

    def rows_hessians(self, theta, batch):
        """Per-row Hessians H_k(theta), shape (m, d, d) (d² forward passes: tests, small d)."""
        eye = np.eye(self.ndim)
        return np.stack([self.rows_hessian_vector(theta, e, batch) for e in eye], axis=2)

    def loglik_sum_value(self, theta, batch) -> tuple:
        """(Σ_k ℓ_k,) over the rows of ``batch``, for passes that need no gradient."""
        if self.uses_eta_sums():
            return (float(np.sum(self.regression_view.row_terms(theta, batch).value)),)
        return (self._graph.setup_terms(theta, self._graph.no_directions(), batch)[2],)

    def loglik_sum_value_and_grad(self, theta, batch):
        """Σ_k ℓ_k and its gradient over the rows of ``batch`` (one reverse pass, or from η)."""
        if self.uses_eta_sums():
            return self.regression_view.sums(theta, batch, hessian=False)
        return self._graph.setup_terms(theta, self._graph.no_directions(), batch)[2:4]

    def loglik_sum_value_grad_hessian(self, theta, batch):
        """Σ ℓ_k, Σ ∇ℓ_k and Σ H_k over ``batch`` (set-up only).

        Σ H_k is the Jacobian of the summed gradient: the set-up function's Hessian-vector
        products along the d unit vectors, all in one call when they are vectorised, else one
        call per direction (:mod:`~pymc_subsample.model.setup_function`). A distributional
        regression takes all three from η instead (:meth:`uses_eta_sums`).
        """
        if self.uses_eta_sums():
            return self.regression_view.sums(np.asarray(theta, dtype=self.theta.dtype), batch, hessian=True)
        return self._graph.sum_value_grad_hessian(theta, batch)

    def uses_eta_sums(self) -> bool:
        """Whether Σℓ_k, Σ∇ℓ_k and Σ H_k come from η (:meth:`DistributionalRegression.sums
        <pymc_subsample.model.distributional.DistributionalRegression.sums>`) instead of the set-up
        function: for a distributional regression of up to
        :data:`~pymc_subsample.model.views.ETA_HESSIAN_MAX_ROWS` rows whose f reproduces the model's
        rows. Its first run then compiles no gradient of the model's own graph, only its value for
        the checks (StudentT, NegativeBinomial: the digamma-heavy kernels).
        """
        return self._analysis.views.uses_eta_sums(lambda: self.initial_theta)

    def model_loglik_sum(self, theta, batch) -> float:
        """Σ_k ℓ_k over ``batch`` from the model's own graph, never from η (for checks on a few rows)."""
        return float(np.sum(self._graph.model_loglik_rows(theta, batch)))

    @property
    def regression_view(self):
        """The model as a distributional regression
        (:class:`~pymc_subsample.model.distributional.DistributionalRegression`: univariate rows whose
        parameters are affine in θ, or in a row-free φ(θ), through a link, e.g. GLMs, a non-centred
        hierarchical ``a[g]``, a Normal or StudentT with unknown
        scale, a NegativeBinomial) when its f gives the model's own rows (checked numerically);
        else None.

        Up to :data:`~pymc_subsample.model.views.ETA_HESSIAN_MAX_ROWS` rows (any number by default)
        its set-up sums come from η (:meth:`uses_eta_sums`): fewer compiled modules on a first run,
        and with J from one vectorised call of η per chunk, faster passes than the set-up function's
        Hessian-vector products.
        """
        # measured: 9 fewer C modules of 41 on a logistic regression's first run (about 4 s, a cold
        # start 1.6× → 1.1× NUTS's); 10⁶ rows, d = 30: Hessian pass 0.24 against 0.30 s; 10⁷ rows
        # from npy: set-up 14.0 against 18.7 s
        return self._analysis.views.regression_view(lambda: self.initial_theta)

    # ------------------------------------------------------------------- rows
    def gather(self, idx) -> tuple:
        """The batch of rows ``idx`` of every row leaf (O(m) copies)."""
        idx = np.asarray(idx)
        return tuple(np.ascontiguousarray(leaf.data[idx]) for leaf in self.leaves)

    def row_slice(self, start, stop) -> RowBatch:
        """Rows ``start:stop`` of every leaf, as views (no copy), for chunked passes."""
        return RowBatch((leaf.data[start:stop] for leaf in self.leaves), row_range=slice(start, stop))

    def kept_affine(self, phi=False):
        """η's offsets and sparse Jacobians of all N rows, in θ or in φ
        (:class:`~pymc_subsample.model.affine_rows.AffineRows`), read in one pass on first use and
        kept with this TallModel (not with the model graph's analysis: they are the data's); None
        where the model has no regression view, its rows are streamed, or they are too many
        (:func:`~pymc_subsample.model.affine_rows.kept_affine_rows`).
        """
        if phi not in self._kept_affine:
            view = self.regression_view if self.uses_eta_sums() else None
            kept = None
            if view is not None and (view.phi is not None) == phi and not self.rows_streamed:
                kept = kept_affine_rows(view, self.n_rows, self.row_slice,
                                        max(DEFAULT_CHUNK_SIZE, NUMPY_TERMS_MIN_ROWS), phi=phi)
                if kept is not None:
                    self.full_passes += 1
            self._kept_affine[phi] = kept
        return self._kept_affine[phi]

    def loglik_sums_in_phi(self, theta, batch):
        """(Σ_k f_k, A, B) in φ over ``batch``
        (:meth:`~pymc_subsample.model.distributional.DistributionalRegression.phi_sums`): J read
        from :meth:`kept_affine` by the batch's rows where they are kept, else η at the layout's points.
        """
        return self._sums_in_phi(theta, batch, hessian=True)

    def loglik_gradient_sums_in_phi(self, theta, batch):
        """(Σ_k f_k, A) of :meth:`loglik_sums_in_phi`, without B."""
        return self._sums_in_phi(theta, batch, hessian=False)

    def _sums_in_phi(self, theta, batch, hessian):
        # measured on crossed effects at 10⁶ rows: a pass with B 0.125 s from η at the six points
        view, kept = self.regression_view, self._kept_affine.get(True)
        rows = getattr(batch, "row_range", None)
        if kept is None or rows is None:
            return view.phi_sums(theta, batch, hessian=hessian)
        return view.phi_sums(theta, batch, hessian=hessian, affine=kept.rows(rows))

    def check_subsample_size(self, m, name="subsample_size") -> int:
        """Validate a subsample size against 1..N and return it as int."""
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= self.n_rows:
            raise ValueError(
                f"{name} must be an integer between 1 and the number of rows N = {self.n_rows}; got {m!r}."
            )
        return int(m)

    # ------------------------------------------------------------------ points
    def point_to_theta(self, point: dict) -> np.ndarray:
        """Ravel a point (dict of value variables) into theta."""
        names = [info[0] for info in self._analysis.point_map_info]
        return np.concatenate([np.ravel(point[n]) for n in names]).astype(self.theta.dtype)

    def theta_to_point(self, theta) -> dict:
        """Unravel theta into a dict of value-variable arrays."""
        return DictToArrayBijection.rmap(RaveledVars(np.asarray(theta), self._analysis.point_map_info))

    @property
    def initial_theta(self) -> np.ndarray:
        """The initial point as θ."""
        return self.point_to_theta(self.initial_point)


def analyse(model, vars, lengths) -> GraphAnalysis:
    """The model's graph analysed (:class:`~pymc_subsample.model.analysis.GraphAnalysis`), its rows
    checked for independence and its views looked for, with a TallModel that holds the model weakly,
    which the views are built on and kept with: the kept analysis keeps no model alive.
    """
    analysis = GraphAnalysis(model, vars, lengths, KEPT.logp_terms(model))
    base = object.__new__(TallModel)
    base._use(analysis, model_ref=weakref.ref(model))
    check_rows_independent(base._graph.model_loglik_rows, base.gather, base.n_rows, base.initial_theta,
                           analysis.loglik_rows)
    analysis.views = ModelViews(base)  # needs the model, which a copy in another process does not have
    return analysis


def as_tall_model(model=None, vars=None) -> TallModel:
    """Return ``model`` itself when it is a TallModel, else wrap the PyMC model."""
    if isinstance(model, TallModel):
        return model
    return TallModel(model=model, vars=vars)
