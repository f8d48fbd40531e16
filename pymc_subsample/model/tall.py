"""From a PyMC model to a *tall model*: prior part, row data and per-row log-likelihoods.

The tall model is the only place that touches PyMC's graph. Everything
downstream (control variates, estimators, kernels) sees plain NumPy arrays and
a handful of compiled functions over a flat unconstrained parameter vector
``theta`` (the same raveling PyMC's step methods use) and a *batch*: a tuple
of arrays holding the rows of every row leaf for an index vector.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.initial_point import make_initial_point_expression
from pymc.logprob.utils import ParameterValueError
from pymc.pytensorf import find_rng_nodes
from pymc.util import get_transformed_name
from pytensor.conditional.op import ifelse
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import applys_between, io_toposort
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import Dot, variadic_add

from pymc_subsample.model.compile import (
    PYTHON_LINKER,
    compile_function,
    compile_python,
    current_mode,
    has_blockwise,
)
from pymc_subsample.model.differences import VECTORISED_MIN_D, central_hessian, vectorised_gradient
from pymc_subsample.model.op_patterns import constant_slice, is_advanced_indexing
from pymc_subsample.model.regression_view import affine_view, view_matching_rows
from pymc_subsample.model.rows import (
    find_row_leaves,
    find_size_constants,
    leaves_with_rows_off_axis,
    substitute_rows,
)
from pymc_subsample.model.stacked import stacked_rows
from pymc_subsample.model.triangular import (
    diagonals_by_indexing,
    factors_from_triangular_products,
    small_triangular_solves,
)

__all__ = ["TallModel", "as_tall_model", "observation_axis_length", "observation_lengths"]

_CHECK_ROWS = 6  # rows used by the row-independence check at construction
# measured: with J from one vectorised call of η per chunk, the η path's set-up is the faster at
# 10⁷ rows too (d = 31: 14.0 against 18.7 s from npy, 66.3 against 72.2 s from zarr), hence no limit
#: a distributional regression of up to this many rows takes its set-up Σ H_k from η
#: (TallModel.regression_view); None: any number
ETA_HESSIAN_MAX_ROWS = None


class _BlockwiseInGraph(Exception):
    """A graph PyTensor could vectorise only with a Blockwise (:meth:`TallModel._vectorised_setup_graph`)."""


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
        key = _structure_key(model, vars, lengths)
        template = _TEMPLATES.get(model)
        kept = template is not None and _same(template._key, key)
        if kept:
            _check_finite(template.leaves)  # the values may have changed (pm.set_data)
        else:
            template = _analysed_template(model, vars, lengths, key)
        # this use: the template's analysis (shared: graphs, views, compiled functions), its own state
        self.__dict__.update(template.__dict__)
        self._model, self._model_ref = model, None
        self._start_use()
        if kept and self._random_initial_point:  # each use draws its own, as PyMC's initial_point
            self.initial_point = _initial_point_and_whether_drawn(model)[0]

    def _start_use(self):
        """A use's own state: no Dask client, no passes yet."""
        self.client = None  # Dask client of the full passes (model/chunks.py); None: the active one
        self.progressbar = False  # progress bars over the chunks of long full passes
        self.full_passes = 0  # full-data passes so far (set-up cost, counted by chunked_sum)
        self.pass_memo = None  # full passes' sums by (fn, chunk size, θ) while set-up remembers them
        self._prior_batch = None  # one row: the set-up function computes the prior too

    @property
    def model(self):
        """The PyMC model (held weakly by the template that :func:`_analysed_template` keeps)."""
        if self._model is not None:
            return self._model
        return None if self._model_ref is None else self._model_ref()

    def _shared(self) -> TallModel:
        """Where the views and choices found after the analysis are kept: the template, which every
        use of the model graph shares. (The view that needs the model itself, ``affine_view``, is
        found during the analysis: a copy unpickled in another process, whose template's weak
        reference to the model was not shipped, needs no model.)
        """
        return self._template

    def _analyse(self, model, vars, lengths):
        """The model's graph read as prior + rows (the work a kept template spares a second use)."""
        self._start_use()
        self.n_rows = _axis_length(lengths)
        self.value_vars = _check_value_vars(model, vars)
        self.initial_point, self._random_initial_point = _initial_point_and_whether_drawn(model)
        for n_rows in set(lengths.values()):
            _check_no_row_sized_free_variables(model, self.initial_point, n_rows)
        # one call for the rows' and the prior's terms: each call derives the logp of the whole
        # model's graph (PyMC's rewriting), so two cost twice (18.9 against 42.4 ms, linear)
        terms = model_logp_terms(model)
        loglik_rows, self.data_sets = _loglik_rows_graph(model, lengths, terms[:len(model.observed_RVs)])
        prior = variadic_add(*(term.sum() for term in terms[len(model.observed_RVs):]))  # as model.logp
        self.leaves = find_row_leaves([loglik_rows], self.n_rows)
        if find_row_leaves([prior], self.n_rows):
            raise ValueError(
                "A prior, potential or hyper-parameter depends on the row data; subsampling "
                "needs every term that touches the N rows to be an observed variable's "
                "log-likelihood. Move the term into an observed variable or a pm.CustomDist."
            )
        _check_finite(self.leaves)
        self._size_constants = find_size_constants([loglik_rows], self.n_rows)
        point = {k: v for k, v in self.initial_point.items() if k in {v_.name for v_ in self.value_vars}}
        (prior, loglik_rows), self.theta = _joined_inputs(point, [prior, loglik_rows], self.value_vars)
        self.theta.name = "theta"
        self._point_map_info = DictToArrayBijection.map(point).point_map_info
        self.ndim = int(sum(np.prod(shape, dtype=int) for _, shape, *_ in self._point_map_info))
        self.prior_graph = prior
        self._loglik_rows = loglik_rows
        self._functions_by_mode = {}
        self._template = self  # where views found later are kept, by every use (_analysed_template)
        self._affine_view = None  # distributional.affine_view, found on first use
        self._affine_view_found = False
        self._regression_view = None  # TallModel.regression_view, checked on first use
        self._regression_view_checked = False
        self._eta_sums = None  # set-up sums from η (TallModel.uses_eta_sums), decided on first use
        self._rows_directional = None
        self._build_row_graphs()
        self._check_rows_independent()
        self._candidate_view()  # needs the model, which a copy in another process does not have

    @property
    def data_set_rows(self) -> dict | None:
        """Where the observed variables' lengths differ, each one's rows [start, stop) on the axis."""
        if self.data_sets is None:
            return None
        return {name: (rows.start, rows.stop) for name, rows in self.data_sets.items()}

    def __getstate__(self):
        # shipped to Dask workers for full passes: never the client itself, nor a weak reference
        return dict(self.__dict__, client=None, _model_ref=None)

    # ------------------------------------------------------------------ graphs
    def _build_row_graphs(self):
        """The m-row batch graph ℓ_batch(θ) and its forward-mode directional derivatives.

        Every derivative the package needs comes from ordinary autodiff passes over this
        one graph (docs/design.md, "The model"): reverse mode for sums and weighted sums, forward mode
        (``Rop``) for directional derivatives. Nothing is vectorised over rows, so no
        ``Blockwise`` node (a Python loop over rows in PyTensor) can appear.
        """
        self.batch_inputs = [leaf.batch_variable() for leaf in self.leaves]
        m = (self.batch_inputs[0].shape[0]) if self.batch_inputs else pt.constant(1)
        (self.batch_loglik,) = substitute_rows(
            [self._loglik_rows], self.leaves, self.batch_inputs, self._size_constants, m
        )
        self.direction = pt.vector("direction", dtype=self.theta.dtype)
        self.direction2 = pt.vector("direction2", dtype=self.theta.dtype)

    def _rows_directional_graphs(self):
        """(J v)_k = ∇ℓ_k(θ)ᵀv and (uᵀH_k v) for every row k, each O(m), built on first use: a
        distributional regression never asks for them, and building both forward-mode graphs is a
        cost every construction would otherwise pay.
        """
        shared = self._shared()
        # measured: building both graphs took 0.08 s of every construction (Bambi form, warm)
        if shared._rows_directional is None:
            jvp = directional_derivative(self.batch_loglik, self.theta, self.direction)
            shared._rows_directional = (jvp, directional_derivative(jvp, self.theta, self.direction2))
        return shared._rows_directional

    def batch_graph(self, outputs):
        """Per-row graphs of the model (in free variables or data) rewritten to (θ, batch).

        For quantities other than ℓ_k that a method needs row by row, e.g. the linear predictor
        of a GLM: free variables become slices of the flat θ, row leaves become the batch inputs.
        """
        outputs = self.model.replace_rvs_by_values(list(outputs))
        point = {v.name: self.initial_point[v.name] for v in self.value_vars}
        outputs, _ = _joined_inputs(point, outputs, self.value_vars, self.theta)
        m = self.batch_inputs[0].shape[0] if self.batch_inputs else pt.constant(1)
        return substitute_rows(outputs, self.leaves, self.batch_inputs, self._size_constants, m)

    def _compile(self, key, build, python=False):
        """Compile ``build() -> (inputs, outputs)`` once per key; graphs are built lazily. ``python``:
        on PyTensor's Python linker, for functions called a few times at set-up (nothing compiled).
        """
        if key not in self._functions:
            inputs, outputs = build()
            if python:
                function = compile_python(inputs, outputs)
            else:
                function = compile_function(inputs, outputs)
            self._functions[key] = function
        return self._functions[key]

    @property
    def _functions(self) -> dict:
        """The model's compiled functions in the mode functions are compiled in now."""
        return self._functions_by_mode.setdefault(current_mode(), {})

    def kept_function(self, key, make):
        """``make()``, a function of this model's graphs made by other code (an estimator's), kept
        under ``key`` with the model's own functions: TallModels of the same model graph share them
        (:func:`_analysed_template`). ``key`` must name everything the function depends on besides
        the model's graph.
        """
        if key not in self._functions:
            self._functions[key] = make()
        return self._functions[key]

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

    @functools.cached_property
    def prior_grad_graph(self):
        """∇ log p(θ) as a graph, built once for the functions that need it (compiling clones it)."""
        return pytensor.grad(self.prior_graph, self.theta)

    # --------------------------------------------------------------- functions
    def prior_value_and_grad(self, theta, *, setup=False):
        """Log p(theta) (with transforms' Jacobians) and its gradient.

        By default from a small compiled function of its own, for samplers that call it every
        iteration. ``setup=True``, for the set-up's calls (the centre's optimiser, the prior
        Hessian's differences), takes them from the set-up function instead, which set-up code
        compiles anyway. A distributional regression, whose set-up sums come from η, has no set-up
        function: there they come from the same graph on PyTensor's Python linker
        (:data:`~pymc_subsample.model.compile.PYTHON_LINKER_ARRAYS`), nothing compiled, since
        compiling the prior costs more at set-up than its few calls in Python.
        """
        # measured: a compiled prior was 2.4 s of a first run's set-up of the linear zoo model,
        # against 0.2-0.9 ms a call in Python (zoo models), 0.05-0.2 s of a warm set-up; the
        # sampler's own compiled function is about 7 µs a call, the set-up function's about 50 µs
        if setup and not self.uses_eta_sums():
            if self._prior_batch is None:
                self._prior_batch = self.gather(np.zeros(1, dtype=int))
            prior, prior_grad, *_ = self._setup_terms(theta, self._no_directions(), self._prior_batch)
            return prior, prior_grad
        key = "prior_setup" if setup else "prior"
        if key not in self._functions:
            graphs = [self.prior_graph, self.prior_grad_graph]
            self._functions[key] = (compile_python([self.theta], graphs, arrays=True) if setup else
                                    compile_function([self.theta], graphs))
        return tuple(self._functions[key](_as_theta(theta, self.theta.dtype)))

    def prior_hessian(self, theta):
        """Hessian of log p(theta) on the unconstrained scale, shape (d, d).

        Central differences of the compiled prior gradient (2d calls of a d-vector function),
        symmetrised: a separately compiled Hessian graph costs more compile time at set-up than the
        2d gradient calls it replaces, for a d×d matrix used twice at set-up (Newton step, Laplace
        precision). The step h = 1e-5·max(1, |θ_j|) leaves a relative error of about 1e-10 on
        smooth priors.
        """
        # measured: a separately compiled Hessian graph cost 3 s of a fresh machine's first run
        gradients = None
        if self.ndim >= VECTORISED_MIN_D:  # a hierarchical model's many groups: few vectorised calls
            if "prior_gradients" not in self._functions:
                self._functions["prior_gradients"] = vectorised_gradient(
                    self.theta, self.prior_grad_graph)
            gradients = self._functions["prior_gradients"]
        return central_hessian(lambda t: self.prior_value_and_grad(t, setup=True)[1],
                               _as_theta(theta, self.theta.dtype), gradients)

    def loglik_rows(self, theta, batch):
        """Per-row log-likelihoods ℓ_k(theta) for the rows in ``batch``, shape (m,)."""
        fn = self._compile("rows", lambda: ([self.theta, *self.batch_inputs], self.batch_loglik))
        return fn(_as_theta(theta, self.theta.dtype), *batch)

    def rows_directional(self, theta, u, v, batch):
        """ℓ_k(θ), ∇ℓ_k(θ)ᵀu and uᵀH_k(θ)v for every row of ``batch`` (forward mode, O(m))."""
        fn = self._compile(
            "rows_dir",
            lambda: (
                [self.theta, self.direction, self.direction2, *self.batch_inputs],
                [self.batch_loglik, *self._rows_directional_graphs()],
            ),
        )
        dt = self.theta.dtype
        return fn(_as_theta(theta, dt), _as_theta(u, dt), _as_theta(v, dt), *batch)

    def loglik_rows_and_grads(self, theta, batch):
        """Per-row ℓ_k (m,) and per-row gradients ∇ℓ_k (m, d).

        Only for algorithms that store per-row gradients (SAGA tables, SGFS's empirical
        Fisher). Forward mode along the d unit vectors: d compiled calls over the batch,
        a loop over parameters, never over rows, so the cost is d passes of O(m).
        """
        theta = _as_theta(theta, self.theta.dtype)
        grads = np.empty((batch_length(batch), self.ndim))
        loglik = None
        for j, e in enumerate(np.eye(self.ndim, dtype=self.theta.dtype)):
            loglik, grads[:, j], _ = self.rows_directional(theta, e, e, batch)
        if loglik is None:
            loglik = self.loglik_rows(theta, batch)
        return np.asarray(loglik), grads

    def rows_hessian_vector(self, theta, direction, batch):
        """Per-row H_k(theta) v, shape (m, d), without forming the m x d x d Hessians."""
        theta = _as_theta(theta, self.theta.dtype)
        out = np.empty((batch_length(batch), self.ndim))
        for j, e in enumerate(np.eye(self.ndim, dtype=self.theta.dtype)):
            out[:, j] = self.rows_directional(theta, e, direction, batch)[2]
        return out

    def rows_hessians(self, theta, batch):
        """Per-row Hessians H_k(theta), shape (m, d, d) (d² forward passes: tests, small d)."""
        eye = np.eye(self.ndim)
        return np.stack([self.rows_hessian_vector(theta, e, batch) for e in eye], axis=2)

    def loglik_sum_value(self, theta, batch) -> tuple:
        """(Σ_k ℓ_k,) over the rows of ``batch``, for passes that need no gradient."""
        if self.uses_eta_sums():
            return (float(np.sum(self.regression_view.row_terms(theta, batch).value)),)
        return (self._setup_terms(theta, self._no_directions(), batch)[2],)

    def loglik_sum_value_and_grad(self, theta, batch):
        """Σ_k ℓ_k and its gradient over the rows of ``batch`` (one reverse pass, or from η)."""
        if self.uses_eta_sums():
            return self.regression_view.sums(theta, batch, hessian=False)
        return self._setup_terms(theta, self._no_directions(), batch)[2:4]

    def loglik_sum_value_grad_hessian(self, theta, batch):
        """Σ ℓ_k, Σ ∇ℓ_k and Σ H_k over ``batch`` (set-up only).

        Σ H_k is the Jacobian of the summed gradient: the set-up function's Hessian-vector
        products along the d unit vectors, all in one call when they are vectorised, else one
        call per direction. A distributional regression takes all three from η instead
        (:meth:`uses_eta_sums`).
        """
        theta = _as_theta(theta, self.theta.dtype)
        if self.uses_eta_sums():
            return self.regression_view.sums(theta, batch, hessian=True)
        eye = np.eye(self.ndim, dtype=self.theta.dtype)
        self._setup_function()
        if self._functions["setup_vectorised"]:
            _, _, total, grad, hess = self._setup_terms(theta, eye, batch)
            return total, grad, hess
        hess = np.empty((self.ndim, self.ndim))
        total = grad = None
        for j in range(self.ndim):
            _, _, total, grad, hvp = self._setup_terms(theta, eye[j : j + 1], batch)
            hess[j] = hvp[0]
        return total, grad, hess

    def _no_directions(self):
        return np.zeros((0, self.ndim), dtype=self.theta.dtype)

    def _setup_terms(self, theta, directions, batch):
        return self._setup_function()(_as_theta(theta, self.theta.dtype), directions, *batch)

    def _setup_function(self):
        """ONE compiled function for every set-up quantity (docs/design.md, "One target"):

        (θ, V (k, d), batch) -> [log p(θ), ∇log p(θ), Σ_k ℓ_k, Σ_k ∇ℓ_k, (Σ_k H_k) Vᵀ (k, d)].

        The prior at set-up, the chunked sums of the centre's optimiser and the Hessian of the
        proxy sums call it: one compiled graph for every need, at the cost of unused outputs in
        each call, a fraction of a gradient pass. With k = 0 the Hessian-vector products cost
        nothing when they are vectorised over the rows of V. When PyTensor cannot vectorise them
        (``a[group]`` indexing stalls its rewrites, MvNormal rows give a Blockwise),
        k must be 0 or 1 and a lazy ``ifelse`` skips the product for k = 0. A distributional
        regression (:meth:`uses_eta_sums`) never compiles it.
        """
        # measured: unused outputs cost ~15% of a gradient pass; a[group] indexing stalled
        # PyTensor's vectorising rewrites for minutes
        if "setup" not in self._functions:
            # kept beside the function, which TallModels of one model graph share
            functions = self._functions
            vectorised = not self._has_advanced_indexing()
            if vectorised:
                try:
                    function = self._compile("setup", self._vectorised_setup_graph)
                except (NotImplementedError, TypeError, ValueError, _BlockwiseInGraph):
                    function = None
                if function is None or has_blockwise(function):
                    functions.pop("setup", None)
                    vectorised = False
            if not vectorised:
                self._compile("setup", lambda: self._build_setup(vectorise=False))
            functions["setup_vectorised"] = vectorised
        return self._functions["setup"]

    def uses_eta_sums(self) -> bool:
        """Whether Σℓ_k, Σ∇ℓ_k and Σ H_k come from η (:meth:`DistributionalRegression.sums
        <pymc_subsample.model.distributional.DistributionalRegression.sums>`) instead of the set-up
        function: for a distributional regression of up to :data:`ETA_HESSIAN_MAX_ROWS` rows whose f
        reproduces the model's rows. Its first run then compiles no gradient of the model's own
        graph, only its value for the checks (StudentT, NegativeBinomial: the digamma-heavy kernels).
        """
        shared = self._shared()
        if shared._eta_sums is None:
            shared._eta_sums = self._eta_candidate() and self.regression_view is not None
        return shared._eta_sums

    def _eta_candidate(self) -> bool:
        within = ETA_HESSIAN_MAX_ROWS is None or self.n_rows <= ETA_HESSIAN_MAX_ROWS
        return within and self._candidate_view() is not None

    def model_loglik_sum(self, theta, batch) -> float:
        """Σ_k ℓ_k over ``batch`` from the model's own graph, never from η (for checks on a few rows)."""
        return float(np.sum(self._model_loglik_rows(theta, batch)))

    def _model_loglik_rows(self, theta, batch):
        """The model's log-likelihood terms over ``batch`` from its own graph, on PyTensor's Python
        linker: the checks call it ~20 times on ≤ 16 rows, where compiling a kernel would cost
        more than every call.
        """
        fn = self._compile("rows_check", lambda: ([self.theta, *self.batch_inputs], self.batch_loglik),
                           python=True)
        return np.asarray(fn(_as_theta(theta, self.theta.dtype), *batch))

    @property
    def regression_view(self):
        """The model as a distributional regression
        (:class:`~pymc_subsample.model.distributional.DistributionalRegression`: univariate rows whose
        parameters are affine in θ, or in a row-free φ(θ), through a link, e.g. GLMs, a non-centred
        hierarchical ``a[g]``, a Normal or StudentT with unknown
        scale, a NegativeBinomial) when its f gives the model's own rows (checked numerically);
        else None.

        Up to :data:`ETA_HESSIAN_MAX_ROWS` rows (any number by default) its set-up sums come from η
        (:meth:`uses_eta_sums`): fewer compiled modules on a first run, and with J from one
        vectorised call of η per chunk, faster passes than the set-up function's Hessian-vector
        products.
        """
        # measured: 9 fewer C modules of 41 on a logistic regression's first run (about 4 s, a cold
        # start 1.6× → 1.1× NUTS's); 10⁶ rows, d = 30: Hessian pass 0.24 against 0.30 s; 10⁷ rows
        # from npy: set-up 14.0 against 18.7 s
        shared = self._shared()
        if not shared._regression_view_checked:
            view = self._candidate_view()
            shared._regression_view = None if view is None else view_matching_rows(view, self.initial_theta)
            shared._regression_view_checked = True
        return shared._regression_view

    def _candidate_view(self):
        """The distributional-regression view before its f is checked against the rows, or None."""
        shared = self._shared()  # the view holds the TallModel it was built on: the template
        if not shared._affine_view_found:
            shared._affine_view = affine_view(shared)
            shared._affine_view_found = True
        return shared._affine_view

    def _has_advanced_indexing(self) -> bool:
        return any(
            is_advanced_indexing(node)
            for node in applys_between([self.theta, *self.batch_inputs], [self.batch_loglik])
        )

    def _vectorised_setup_graph(self):
        """The set-up graph with its Hessian-vector products vectorised over the directions, unless
        PyTensor writes that with a ``Blockwise`` (other than a batched product, which it rewrites
        to a ``Dot``): an op it vectorises only so (a mixture's ``Join`` of its components' log
        densities) would loop over the directions in Python and fail on none (k = 0, every call but
        the Hessian's: "vectorize with zero size not implemented"). Found before compiling, since
        compiling such a graph only to drop it is a first run's largest compile.
        """
        inputs, outputs = self._build_setup(vectorise=True)
        # measured: compiling it only to drop it made a zero-inflated Poisson's first run 23 s
        # longer (cold first draw 57 s against NUTS's 31 s; 34 s without)
        if any(isinstance(node.op, Blockwise) and not isinstance(node.op.core_op, Dot)
               for node in applys_between(inputs, outputs)):
            raise _BlockwiseInGraph
        return inputs, outputs

    def _build_setup(self, vectorise):
        total = pt.sum(self.batch_loglik)
        grad = pytensor.grad(total, self.theta)
        directions = pt.matrix("directions", dtype=self.theta.dtype)
        hvp = pytensor.grad(pt.dot(grad, self.direction), self.theta)
        if vectorise:
            hvps = vectorize_graph(hvp, replace={self.direction: directions})
        else:
            # k is 0 or 1: the sum of the rows is that row, and safe to index when k = 0
            one = graph_replace(hvp, {self.direction: directions.sum(axis=0)}, strict=False)
            none = pt.zeros((0, self.ndim), dtype=self.theta.dtype)
            hvps = ifelse(directions.shape[0] > 0, pt.shape_padleft(one), none)
        return self._setup_io(directions, total, grad, hvps)

    def _setup_io(self, directions, total, grad, hvps):
        prior_grad = self.prior_grad_graph
        return [self.theta, directions, *self.batch_inputs], [self.prior_graph, prior_grad, total, grad, hvps]

    # ------------------------------------------------------------------- rows
    def gather(self, idx) -> tuple:
        """The batch of rows ``idx`` of every row leaf (O(m) copies)."""
        idx = np.asarray(idx)
        return tuple(np.ascontiguousarray(leaf.data[idx]) for leaf in self.leaves)

    def row_slice(self, start, stop) -> tuple:
        """Rows ``start:stop`` of every leaf, as views (no copy), for chunked passes."""
        return tuple(leaf.data[start:stop] for leaf in self.leaves)

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
        names = [info[0] for info in self._point_map_info]
        return np.concatenate([np.ravel(point[n]) for n in names]).astype(self.theta.dtype)

    def theta_to_point(self, theta) -> dict:
        """Unravel theta into a dict of value-variable arrays."""
        return DictToArrayBijection.rmap(RaveledVars(np.asarray(theta), self._point_map_info))

    @property
    def initial_theta(self) -> np.ndarray:
        return self.point_to_theta(self.initial_point)

    # ----------------------------------------------------------------- checks
    def _check_rows_independent(self):
        """Each row's ℓ_k must not depend on the other rows (no reduction over rows)."""
        k = min(_CHECK_ROWS, self.n_rows)
        rng = np.random.default_rng(0)
        idx = rng.choice(self.n_rows, size=k, replace=False)
        # jitter: at the initial point a reduction can vanish (e.g. mean(x) * 0)
        theta = self.initial_theta + rng.normal(scale=0.1, size=self.ndim)
        # with functions the set-up compiles anyway (a separate per-row function cost 4.4 s of a
        # fresh machine's first run): _rows_together_and_apart
        try:
            together, apart = self._rows_together_and_apart(theta, idx)
        except ParameterValueError:  # the model's own check (e.g. a scale that can be negative): its message
            raise
        except (ValueError, AssertionError, IndexError) as err:  # shapes of N met shapes of k rows
            raise ValueError(self._rows_not_on_first_axis_message(err)) from err
        if not np.allclose(together, apart, rtol=1e-8, atol=1e-8, equal_nan=True):
            raise ValueError(
                "The log-likelihood of one row depends on other rows: some observed value or "
                "parameter reduces over the observation axis (e.g. a mean or sum over the data). "
                "Precompute such summaries as constants outside the model, or reshape the data so "
                "that each row is one independent observation."
            )

    def _rows_together_and_apart(self, theta, idx):
        """The log-likelihood of the rows ``idx`` computed together and apart, equal where rows are
        independent: per row, all together against the two halves (the second in reverse order),
        where the model's rows come one value each; else sums, all together and over two different
        splits (one row at a time, the halves), so that a reduction over rows cannot cancel out.
        """
        halves = [part for part in (idx[: len(idx) // 2], idx[len(idx) // 2:][::-1]) if part.size]
        together = self._model_loglik_rows(theta, self.gather(idx))
        if together.shape == (len(idx),):
            apart = {row: value for part in halves
                     for row, value in zip(part, self._model_loglik_rows(theta, self.gather(part)))}
            return together, np.array([apart[row] for row in idx])
        total = self.model_loglik_sum
        together = float(np.sum(together))
        alone = sum(total(theta, self.gather(idx[i : i + 1])) for i in range(len(idx)))
        halves_sum = sum(total(theta, self.gather(part)) for part in halves)
        return np.array([together, halves_sum]), np.array([alone, alone])

    def _rows_not_on_first_axis_message(self, err) -> str:
        off_axis = leaves_with_rows_off_axis([self._loglik_rows], self.n_rows)
        which = f" ({', '.join(off_axis)})" if off_axis else ""
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        return (
            f"The log-likelihood cannot be computed on a subset of the N = {self.n_rows} rows "
            f"({first_line}): some array of the model has one entry per observation but not along its "
            f"first axis{which}. Store every such array with the observations on its first axis, "
            "e.g. pm.Data('X', X) with X of shape (N, features) and `X @ beta` rather than "
            "`beta @ X.T`."
        )


def as_tall_model(model=None, vars=None) -> TallModel:
    """Return ``model`` itself when it is a TallModel, else wrap the PyMC model."""
    if isinstance(model, TallModel):
        return model
    return TallModel(model=model, vars=vars)


def _as_theta(theta, dtype):
    return np.asarray(theta, dtype=dtype)


def batch_length(batch) -> int:
    """Rows in ``batch`` (its inputs hold their rows on the first axis); 1 for a batch of no inputs."""
    return int(np.shape(batch[0])[0]) if batch else 1


def directional_derivative(output, wrt, direction):
    """Forward-mode derivative of ``output`` at ``wrt`` along ``direction`` (same shape as output).

    PyTensor's ``Rop`` by the double-``Lop`` rule: two reverse passes, valid for every op
    that has a gradient, so it works on any model graph.
    """
    return pytensor.gradient.Rop(output, wrt, direction, use_op_rop_implementation=False)


def observation_axis_length(model) -> int:
    """N, from the observed variables' leading axis (cheap: no graph is compiled): the sum of their
    lengths where they differ, their rows then stacked on one axis (:mod:`~pymc_subsample.model.stacked`).
    """
    return _axis_length(observation_lengths(model))


def _axis_length(lengths) -> int:
    """The observed variables' common length (they share their rows), or the sum of their lengths
    where these differ (their rows stacked).
    """
    distinct = set(lengths.values())
    return distinct.pop() if len(distinct) == 1 else sum(lengths.values())


def observation_lengths(model) -> dict[str, int]:
    """Each observed variable's number of rows (its leading axis), by name."""
    if not model.observed_RVs:
        raise ValueError(
            "The model has no observed variables, so there are no rows to subsample. "
            "Pass data with `observed=` to the likelihood."
        )
    _check_no_imputation(model)
    lengths = {}
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        if hasattr(value, "get_value"):
            shape = np.shape(value.get_value(borrow=True))
        elif hasattr(value, "data"):
            shape = np.shape(value.data)
        elif value.type.shape[:1] != (None,):
            shape = value.type.shape
        else:
            # PyTensor's Python linker: nothing compiled (pm.draw here cost 1.8 s of a first run)
            shape = pytensor.function([], value.shape, mode=PYTHON_LINKER)()
        if len(shape) == 0:
            raise ValueError(
                f"Observed variable {rv.name!r} is a scalar: it reduces over the rows. Give the "
                "observations themselves (one row per observation) as `observed=`."
            )
        lengths[rv.name] = int(shape[0])
    return lengths


def _check_no_imputation(model):
    """PyMC turns NaN in an observed array into imputed free variables ``<name>_unobserved``."""
    observed = {rv.name for rv in model.observed_RVs}
    for rv in model.free_RVs:
        if rv.name.endswith("_unobserved") and rv.name[: -len("_unobserved")] + "_observed" in observed:
            name = rv.name[: -len("_unobserved")]
            raise ValueError(
                f"Observed variable {name!r} contains missing (NaN) values, which PyMC imputes as "
                "free variables; subsampling needs complete rows. Drop or impute those rows before "
                "building the model."
            )
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        data = value.get_value(borrow=True) if hasattr(value, "get_value") else getattr(value, "data", None)
        if data is not None:
            bad = count_missing(data)
            if bad:
                raise ValueError(
                    f"Observed variable {rv.name!r} contains {bad} NaN, infinite or masked values; "
                    "subsampling needs complete rows. Drop or impute those rows before building "
                    "the model."
                )


def _check_value_vars(model, vars):
    all_vars = list(model.value_vars)
    if vars is None:
        vars = all_vars
    vars = [model.rvs_to_values.get(v, v) for v in vars]
    missing = [v.name for v in all_vars if v not in vars]
    if missing:
        raise ValueError(
            f"Subsampling step methods must update every free variable, because each row's "
            f"likelihood depends on all of them; missing {missing}. Leave `vars=None`."
        )
    discrete = [v.name for v in vars if v.dtype.startswith(("int", "uint", "bool"))]
    if discrete:
        raise ValueError(
            f"Free variables {discrete} are discrete; subsampling step methods need continuous "
            "parameters. Marginalize the discrete variables (e.g. pymc_extras.marginalize)."
        )
    return all_vars


def _check_no_row_sized_free_variables(model, point, n_rows):
    for name, value in point.items():
        if np.ndim(value) >= 1 and np.shape(value)[0] == n_rows and n_rows > 1:
            raise ValueError(
                f"Free variable {name!r} has length N = {n_rows} along its first axis: a "
                "per-observation latent variable cannot be subsampled. Marginalize it out, or "
                "model it with global parameters only."
            )


def _loglik_rows_graph(model, lengths, terms):
    """(ℓ_k over the N rows, as one graph; where the observed variables' lengths differ, each one's
    :class:`~pymc_subsample.model.stacked.DataSetRows` on the stacked axis, else None), from the
    observed variables' elementwise log-likelihoods ``terms``.
    """
    rows = []
    for rv, term in zip(model.observed_RVs, terms):
        if term.ndim == 0:
            raise ValueError(
                f"Observed variable {rv.name!r} has a scalar log-likelihood that reduces over the "
                "rows; give one row per observation."
            )
        rows.append(pt.sum(term, axis=tuple(range(1, term.ndim))) if term.ndim > 1 else term)
    names = [rv.name for rv in model.observed_RVs]
    data_sets = None
    if len(set(lengths.values())) > 1:
        total, data_sets = stacked_rows(names, rows, [lengths[name] for name in names])
    else:
        total = rows[0]
        for r in rows[1:]:
            total = total + r
    # before any derivative is taken: MvNormal(chol=L) factors L Lᵀ again, the gradients of its
    # log-determinant's diagonal are graphs run in Python, and so are its solves (model/triangular.py)
    total = factors_from_triangular_products(total, model.value_vars)
    total = small_triangular_solves(total, model.value_vars)
    return diagonals_by_indexing(total, model.value_vars), data_sets


def _joined_inputs(point, outputs, inputs, joined=None):
    """``outputs`` with ``inputs`` read from slices of one flat vector ``joined`` (a new one by
    default), in the order of ``inputs``, each of the shape it has in ``point``: PyMC's
    ``join_nonshared_inputs``, with the graphs copied once by ``graph_replace`` instead of rebuilt
    node by node by ``clone_replace`` for each output.
    """
    # measured: PyMC's join took 50 ms against 19 ms here for the centred hierarchical zoo
    # model's prior and rows
    if joined is None:
        joined = pt.concatenate([var.ravel() for var in inputs]).type()  # PyMC's type for it
    replace, start = {}, 0
    for var in inputs:
        shape = point[var.name].shape
        size = int(np.prod(shape, dtype=int))
        replace[var] = var.type.filter_variable(joined[start:start + size].reshape(shape).astype(var.dtype))
        start += size
    return graph_replace(list(outputs), replace, strict=False), joined


def model_initial_point(model) -> dict:
    """``model.initial_point()``: each free variable's initial value on the unconstrained scale,
    by the model's own strategies (PyMC's ``make_initial_point_expression``), evaluated on
    PyTensor's Python linker: a graph run once needs no compiled kernel, which PyMC's own call
    (in the default mode) would build. Where a strategy draws random numbers
    (``initval="prior"``), each call draws again.
    """
    return _initial_point_and_whether_drawn(model)[0]


def _initial_point_and_whether_drawn(model) -> tuple[dict, bool]:
    """:func:`model_initial_point`, and whether a strategy drew it at random."""
    values = make_initial_point_expression(
        free_rvs=model.free_RVs, rvs_to_transforms=model.rvs_to_transforms,
        initval_strategies=dict(model.rvs_to_initial_values), return_transformed=True)
    names = [rv.name if model.rvs_to_transforms[rv] is None
             else get_transformed_name(rv.name, model.rvs_to_transforms[rv]) for rv in model.free_RVs]
    # random generators in the expression (``initval="prior"``, or an LKJCholeskyCov's sd_dist even
    # where the values drawn are not used) become inputs, each given a fresh generator per call, as
    # PyMC's unseeded call reseeds them
    rngs = find_rng_nodes(values)
    inputs = [rng.type() for rng in rngs]
    if rngs:
        values = graph_replace(values, dict(zip(rngs, inputs, strict=True)), strict=False)
    values = compile_python(inputs, values)(*[np.random.default_rng() for _ in rngs])
    return {name: np.asarray(value) for name, value in zip(names, values, strict=True)}, bool(rngs)


#: each model's last analysed TallModel, holding the model weakly (:func:`_analysed_template`)
_TEMPLATES = weakref.WeakKeyDictionary()


def forget_kept_analyses():
    """Drop every model's kept analysis and log-density terms, as a new process starts without them
    (``benchmarks/setup_scaling.py``'s set-up from disk).
    """
    _TEMPLATES.clear()
    _LOGP_TERMS.clear()


def _analysed_template(model, vars, lengths, key) -> TallModel:
    """The model's graph analysed into a TallModel that holds the model weakly, and kept for the
    next TallModel of the same model graph where that is safe.

    Why: a second set-up in a process (a notebook cell run again, a loop over data sets with
    ``pm.set_data``) would analyse the graph again: the rows' graphs, the regression view and its
    check, the independence check. The analysis is a function of the graph, the value variables, the
    initial values and the rows' count, which the key holds (:func:`_structure_key`); data values
    are read at each use (a leaf reads its shared variable), and checked for NaN again. Views found
    later by any use are built on the template and kept there (the ``_template`` of each use), so
    that the cache keeps no model alive. Random initial values are drawn again by each use. Not
    kept: stacked rows of different lengths (their padded copies of the data would go stale).
    """
    # measured: the analysis took 0.05-0.09 s, 3-6 of PyMC's gradient passes at 10⁶ rows on the zoo
    template = object.__new__(TallModel)
    template._model, template._model_ref = None, weakref.ref(model)
    template._analyse(model, vars, lengths)
    template._key = key
    if template.data_sets is None:
        _TEMPLATES[model] = template
    return template


def _structure_key(model, vars, lengths) -> tuple:
    """What a model's analysis depends on besides data values, compared by identity
    (:func:`_same`): the variables, their value variables, transforms and initial values,
    ``check_bounds``, the value variables asked for; and by value: each observed variable's rows,
    the shape of every ``pm.Data`` and the length of every dimension (``pm.set_data`` may change
    them, and with them the free variables' shapes).
    """
    variables = [*model.observed_RVs, *model.free_RVs, *model.potentials, *model.deterministics]
    shapes = tuple(_value_of(v, shape=True) for v in model.data_vars)
    dims = tuple((name, _value_of(length)) for name, length in model.dim_lengths.items())
    return (*variables, *[model.rvs_to_values.get(v) for v in variables],
            *[model.rvs_to_transforms.get(v) for v in variables],
            *[model.rvs_to_initial_values.get(v) for v in model.free_RVs], model.check_bounds,
            None if vars is None else tuple(map(id, vars)), tuple(sorted(lengths.items())), shapes, dims)


def _value_of(variable, shape=False):
    """A shared variable's value or a constant's (their shape, with ``shape``) as a tuple; any
    other variable's identity.
    """
    if hasattr(variable, "get_value"):
        value = variable.get_value(borrow=True)
    elif hasattr(variable, "data"):
        value = variable.data
    else:
        return id(variable)
    return np.shape(value) if shape else tuple(np.atleast_1d(value).tolist())


def _same(kept, key) -> bool:
    """Keys' entries the same object, or equal tuples of plain values (never ``==`` on a graph
    variable, which builds a graph).
    """
    return len(kept) == len(key) and all(
        a is b or (type(a) is tuple and type(b) is tuple and a == b) for a, b in zip(kept, key, strict=True))


#: each model's log-density terms with the objects they were derived from (:func:`model_logp_terms`)
_LOGP_TERMS = weakref.WeakKeyDictionary()


def model_logp_terms(model) -> list:
    """``model.logp(vars=[*observed, *free, *potentials], sum=False)``: each observed variable's,
    free variable's and potential's term, derived once per model graph in a process.

    Why: PyMC derives the terms again at each call (its logprob rewriting), a large part of a
    second set-up. The terms are a function of the variables, their value
    variables and transforms, and ``check_bounds`` alone, which the key holds and compares by
    identity: a model that gained a variable, or whose graph was rebuilt (``pm.do``,
    ``pm.observe``: a new model), derives them again; ``pm.set_data`` changes values, not graphs.
    PyTensor's graphs are immutable, and every use of them here clones or rebuilds.
    """
    variables = [*model.observed_RVs, *model.free_RVs, *model.potentials]
    key = (*variables, *[model.rvs_to_values.get(v) for v in variables],
           *[model.rvs_to_transforms.get(v) for v in variables], model.check_bounds)
    # measured: PyMC's logprob rewriting took ~30 ms, a quarter of a second set-up of the linear zoo model
    kept = _LOGP_TERMS.get(model)
    if kept is not None and len(kept[0]) == len(key) and all(a is b for a, b in zip(kept[0], key)):
        return list(kept[1])
    terms = model.logp(vars=variables, sum=False)
    _LOGP_TERMS[model] = (key, list(terms))
    return list(terms)


def count_missing(data) -> int:
    """The NaN, infinite and masked entries of an array.

    Masked ones count because ``pm.set_data`` turns NaN into a masked array, on which
    ``np.isfinite`` masks them too: ``np.all(np.isfinite(masked))`` is True, and NaN rows set after
    a first model reached the sums.
    """
    array = np.asarray(data)  # a masked array's data, NaN under the mask included
    missing = ~np.isfinite(array) if np.issubdtype(array.dtype, np.inexact) else np.zeros(array.shape, bool)
    if np.ma.isMaskedArray(data):
        missing |= np.ma.getmaskarray(data)
    return int(np.count_nonzero(missing))


def _check_finite(leaves):
    for leaf in leaves:
        if leaf.streamed:  # checked chunk by chunk as the passes read it
            continue
        bad = count_missing(leaf.data)
        if bad:
            raise ValueError(
                f"Data {leaf.name!r} contains {bad} NaN, infinite or masked values (pm.set_data masks "
                "NaN). Drop or impute those rows before building the model (subsampling needs "
                "finite row data)."
            )
