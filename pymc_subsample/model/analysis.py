"""A PyMC model's graph read as a prior part and N exchangeable rows.

:class:`GraphAnalysis` splits the model's log-density terms into the prior part and the rows' part,
finds the row leaves, reads the free variables from one flat vector θ (the raveling PyMC's step
methods use) and writes the m-row batch graph ℓ_batch(θ). All of it is a function of the model's
graph: every TallModel of one graph shares one analysis (:mod:`~pymc_subsample.model.kept`).
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection
from pymc.initial_point import make_initial_point_expression
from pymc.pytensorf import find_rng_nodes
from pymc.util import get_transformed_name
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.math import variadic_add

from pymc_subsample.model.compile import compile_python
from pymc_subsample.model.functions import CompiledFunctions
from pymc_subsample.model.observation import (
    axis_length,
    check_finite,
    check_no_row_sized_free_variables,
    check_value_vars,
)
from pymc_subsample.model.rows import find_row_leaves, find_size_constants, substitute_rows
from pymc_subsample.model.stacked import stacked_rows
from pymc_subsample.model.triangular import (
    diagonals_by_indexing,
    factors_from_triangular_products,
    small_triangular_solves,
)

__all__ = [
    "GraphAnalysis",
    "directional_derivative",
    "initial_point_and_whether_drawn",
    "joined_inputs",
    "model_initial_point",
]


class GraphAnalysis:
    """A model's graph as prior + rows, with the functions compiled from it.

    Parameters
    ----------
    model : pm.Model
    vars : list of value variables or None
        The value variables a step method asked for (every one of them: checked).
    lengths : dict
        Each observed variable's number of rows
        (:func:`~pymc_subsample.model.observation.observation_lengths`).
    terms : list
        The observed variables', free variables' and potentials' log-density terms, in that order
        (``model.logp(sum=False)``, :meth:`~pymc_subsample.model.kept.KeptAnalyses.logp_terms`).

    Attributes
    ----------
    n_rows, ndim, value_vars, leaves, data_sets
        As :class:`~pymc_subsample.model.tall.TallModel`'s.
    initial_point : dict
        The model's initial point; ``random_initial_point`` says whether a strategy drew it.
    theta : TensorVariable
        The flat unconstrained parameter vector every graph reads.
    prior_graph, loglik_rows : TensorVariable
        log p(θ) (with the transforms' Jacobians) and ℓ_k(θ) over the N rows.
    batch_inputs : list of TensorVariable
        One variable per row leaf, holding the rows of a batch.
    batch_loglik : TensorVariable
        ℓ_k(θ) for the rows of a batch.
    direction, direction2 : TensorVariable
        Directions in θ for the forward-mode derivatives.
    functions : CompiledFunctions
        The functions compiled from these graphs, by key.
    views : ModelViews or None
        The model's views (:mod:`~pymc_subsample.model.views`), set by the TallModel that made it.
    """

    def __init__(self, model, vars, lengths, terms):
        self.n_rows = axis_length(lengths)
        self.value_vars = check_value_vars(model, vars)
        self.initial_point, self.random_initial_point = initial_point_and_whether_drawn(model)
        for n_rows in set(lengths.values()):
            check_no_row_sized_free_variables(model, self.initial_point, n_rows)
        n_observed = len(model.observed_RVs)
        loglik_rows, self.data_sets = _loglik_rows_graph(model, lengths, terms[:n_observed])
        prior = _dim_lengths_as_constants(model, variadic_add(*(term.sum() for term in terms[n_observed:])))
        potentials = terms[n_observed + len(model.free_RVs):]
        potential = (_dim_lengths_as_constants(model, variadic_add(*(term.sum() for term in potentials)))
                     if potentials else None)
        self.leaves = find_row_leaves([loglik_rows], self.n_rows)
        if find_row_leaves([prior], self.n_rows):
            raise ValueError(
                "A prior, potential or hyper-parameter depends on the row data; subsampling "
                "needs every term that touches the N rows to be an observed variable's "
                "log-likelihood. Move the term into an observed variable or a pm.CustomDist."
            )
        check_finite(self.leaves)
        self.size_constants = find_size_constants([loglik_rows], self.n_rows)
        point = {k: v for k, v in self.initial_point.items() if k in {v_.name for v_ in self.value_vars}}
        outputs = [prior, loglik_rows] + ([potential] if potential is not None else [])
        (prior, loglik_rows, *potential), self.theta = joined_inputs(point, outputs, self.value_vars)
        #: the potentials' sum in θ (part of ``prior_graph``), or None
        self.potential_graph = potential[0] if potential else None
        self.theta.name = "theta"
        self.point_map_info = DictToArrayBijection.map(point).point_map_info
        self.ndim = int(sum(np.prod(shape, dtype=int) for _, shape, *_ in self.point_map_info))
        self.prior_graph = prior
        self.loglik_rows = loglik_rows
        self.functions = CompiledFunctions()
        self.views = None
        self._build_row_graphs()

    def _build_row_graphs(self):
        """The m-row batch graph ℓ_batch(θ) and the directions of its forward-mode derivatives.

        Every derivative the package needs comes from ordinary autodiff passes over this
        one graph (docs/design.md, "The model"): reverse mode for sums and weighted sums, forward mode
        (``Rop``) for directional derivatives. Nothing is vectorised over rows, so no
        ``Blockwise`` node (a Python loop over rows in PyTensor) can appear.
        """
        self.batch_inputs = [leaf.batch_variable() for leaf in self.leaves]
        (self.batch_loglik,) = self.batch_rows([self.loglik_rows])
        self.direction = pt.vector("direction", dtype=self.theta.dtype)
        self.direction2 = pt.vector("direction2", dtype=self.theta.dtype)

    def batch_rows(self, outputs) -> list:
        """Graphs over the N rows (in θ) rewritten to the batch: row leaves become the batch inputs."""
        m = self.batch_inputs[0].shape[0] if self.batch_inputs else pt.constant(1)
        return substitute_rows(outputs, self.leaves, self.batch_inputs, self.size_constants, m)

    @functools.cached_property
    def prior_grad_graph(self):
        """∇ log p(θ) as a graph, built once for the functions that need it (compiling clones it)."""
        return pytensor.grad(self.prior_graph, self.theta)

    @functools.cached_property
    def rows_directional_graphs(self):
        """(J v)_k = ∇ℓ_k(θ)ᵀv and (uᵀH_k v) for every row k, each O(m), built on first use: a
        distributional regression never asks for them, and building both forward-mode graphs is a
        cost every construction would otherwise pay.
        """
        # measured: building both graphs took 0.08 s of every construction (Bambi form, warm)
        jvp = directional_derivative(self.batch_loglik, self.theta, self.direction)
        return jvp, directional_derivative(jvp, self.theta, self.direction2)


def directional_derivative(output, wrt, direction):
    """Forward-mode derivative of ``output`` at ``wrt`` along ``direction`` (same shape as output).

    PyTensor's ``Rop`` by the double-``Lop`` rule: two reverse passes, valid for every op
    that has a gradient, so it works on any model graph.
    """
    return pytensor.gradient.Rop(output, wrt, direction, use_op_rop_implementation=False)


def _dim_lengths_as_constants(model, graph):
    """``graph`` with the model's dimension lengths held in shared variables (``pm.Model(coords=...)``)
    read as constants of their values.

    Why: a shared variable is an input of every function compiled from the graph, even where PyTensor's
    rewrites leave it unused (θ is of static length), and a function with such an input cannot be
    called as its Numba function alone (:func:`~pymc_subsample.model.compile.direct_call`): a centred
    hierarchical model's prior, whose ``dims="group"`` kept its HMC-ECS iterations off the compiled
    path. The analysis is kept by the dimension lengths' values (:mod:`~pymc_subsample.model.kept`),
    so a model whose dimensions change gets another analysis.
    """
    inputs = set(graph_inputs([graph]))
    shared = [v for v in model.dim_lengths.values() if isinstance(v, SharedVariable) and v in inputs]
    lengths = {length: pt.constant(length.get_value(), dtype=length.dtype) for length in shared}
    return graph_replace(graph, lengths) if lengths else graph


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


def joined_inputs(point, outputs, inputs, joined=None):
    """``outputs`` with ``inputs`` read from slices of one flat vector ``joined`` (made here by
    default), in the order of ``inputs``, each of the shape it has in ``point``: PyMC's
    ``join_nonshared_inputs``, with the graphs copied once by ``graph_replace`` instead of rebuilt
    node by node by ``clone_replace`` for each output.
    """
    # kept, not PyMC's join_nonshared_inputs: measured on the zoo's prior and rows, PyMC's took 12-30 ms
    # against 6-10 ms here (logistic, centred hierarchical, crossed effects) and had 4-12 more nodes
    if joined is None:
        # of static length: each slice then has its static shape, and a slice read as a vector needs no
        # reshape, which PyTensor's rewrites would make a SpecifyShape, whose Numba kernel took 1.9 s to
        # compile on a cold cache (the non-centred zoo model's prior)
        size = sum(int(np.prod(point[var.name].shape, dtype=int)) for var in inputs)
        joined = pt.tensor(dtype=pt.concatenate([var.ravel() for var in inputs]).dtype, shape=(size,))
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
    return initial_point_and_whether_drawn(model)[0]


def initial_point_and_whether_drawn(model) -> tuple[dict, bool]:
    """:func:`model_initial_point`, and whether a strategy drew it at random."""
    values = make_initial_point_expression(
        free_rvs=model.free_RVs, rvs_to_transforms=model.rvs_to_transforms,
        initval_strategies=dict(model.rvs_to_initial_values), return_transformed=True)
    names = [rv.name if model.rvs_to_transforms[rv] is None
             else get_transformed_name(rv.name, model.rvs_to_transforms[rv]) for rv in model.free_RVs]
    # kept, not PyMC's make_initial_point_fn (FAST_COMPILE): measured 74-136 ms against 8-13 ms here
    # for the logistic zoo model's first call, 53 against 13 ms for the centred hierarchical one
    # random generators in the expression (``initval="prior"``, or an LKJCholeskyCov's sd_dist even
    # where the values drawn are not used) become inputs, each given a fresh generator per call, as
    # PyMC's unseeded call reseeds them
    rngs = find_rng_nodes(values)
    inputs = [rng.type() for rng in rngs]
    if rngs:
        values = graph_replace(values, dict(zip(rngs, inputs, strict=True)), strict=False)
    values = compile_python(inputs, values)(*[np.random.default_rng() for _ in rngs])
    return {name: np.asarray(value) for name, value in zip(names, values, strict=True)}, bool(rngs)


