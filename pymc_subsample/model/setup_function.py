"""ONE compiled function for every set-up quantity of the generic graph (docs/design.md, "One target"):

    (θ, V (k, d), batch) -> [log p(θ), ∇log p(θ), Σ_k ℓ_k, Σ_k ∇ℓ_k, (Σ_k H_k) Vᵀ (k, d)].

The prior at set-up, the chunked sums of the centre's optimiser and the Hessian of the proxy sums
call it: one compiled graph for every need, at the cost of unused outputs in each call, a fraction
of a gradient pass. With k = 0 the Hessian-vector products cost nothing when they are vectorised
over the rows of V. When PyTensor cannot vectorise them (``a[group]`` indexing stalls its rewrites,
MvNormal rows give a Blockwise), k must be 0 or 1 and a lazy ``ifelse`` skips the product for k = 0:
:func:`setup_function` tries the vectorised graph first and falls back to that one. A distributional
regression, whose sums come from η (:meth:`~pymc_subsample.model.tall.TallModel.uses_eta_sums`),
never compiles it.
"""

from __future__ import annotations

import pytensor
import pytensor.tensor as pt
from pytensor.conditional.op import ifelse
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import applys_between
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import Dot

from pymc_subsample.model.compile import has_blockwise
from pymc_subsample.model.op_patterns import is_advanced_indexing

__all__ = ["setup_function"]


class _BlockwiseInGraph(Exception):
    """A graph PyTensor could vectorise only with a Blockwise (:func:`_vectorised_setup_graph`)."""


def setup_function(graphs) -> tuple:
    """(the set-up function of ``graphs``, a :class:`~pymc_subsample.model.analysis.GraphAnalysis`;
    whether it takes any number k of directions, else 0 or 1), compiled once and kept with the
    analysis's functions, which TallModels of one model graph share.
    """
    # measured: unused outputs cost ~15% of a gradient pass; a[group] indexing stalled
    # PyTensor's vectorising rewrites for minutes
    functions = graphs.functions.current
    if "setup" not in functions:
        vectorised = not _has_advanced_indexing(graphs)
        if vectorised:
            try:
                function = graphs.functions.compile("setup", lambda: _vectorised_setup_graph(graphs))
            except (NotImplementedError, TypeError, ValueError, _BlockwiseInGraph):
                function = None
            if function is None or has_blockwise(function):
                functions.pop("setup", None)
                vectorised = False
        if not vectorised:
            graphs.functions.compile("setup", lambda: _setup_graph(graphs, vectorise=False))
        # kept beside the function: a TallModel that takes the function calls it as it must be called
        functions["setup_vectorised"] = vectorised
    return functions["setup"], functions["setup_vectorised"]


def _has_advanced_indexing(graphs) -> bool:
    return any(
        is_advanced_indexing(node)
        for node in applys_between([graphs.theta, *graphs.batch_inputs], [graphs.batch_loglik])
    )


def _vectorised_setup_graph(graphs):
    """The set-up graph with its Hessian-vector products vectorised over the directions, unless
    PyTensor writes that with a ``Blockwise`` (other than a batched product, which it rewrites
    to a ``Dot``): an op it vectorises only so (a mixture's ``Join`` of its components' log
    densities) would loop over the directions in Python and fail on none (k = 0, every call but
    the Hessian's: "vectorize with zero size not implemented"). Found before compiling, since
    compiling such a graph only to drop it is a first run's largest compile.
    """
    inputs, outputs = _setup_graph(graphs, vectorise=True)
    # measured: compiling it only to drop it made a zero-inflated Poisson's first run 23 s
    # longer (cold first draw 57 s against NUTS's 31 s; 34 s without)
    if any(isinstance(node.op, Blockwise) and not isinstance(node.op.core_op, Dot)
           for node in applys_between(inputs, outputs)):
        raise _BlockwiseInGraph
    return inputs, outputs


def _setup_graph(graphs, vectorise):
    """(inputs, outputs) of the set-up function, its products vectorised over the directions or not."""
    theta = graphs.theta
    total = pt.sum(graphs.batch_loglik)
    grad = pytensor.grad(total, theta)
    directions = pt.matrix("directions", dtype=theta.dtype)
    hvp = pytensor.grad(pt.dot(grad, graphs.direction), theta)
    if vectorise:
        hvps = vectorize_graph(hvp, replace={graphs.direction: directions})
    else:
        # k is 0 or 1: the sum of the rows is that row, and safe to index when k = 0
        one = graph_replace(hvp, {graphs.direction: directions.sum(axis=0)}, strict=False)
        none = pt.zeros((0, graphs.ndim), dtype=theta.dtype)
        hvps = ifelse(directions.shape[0] > 0, pt.shape_padleft(one), none)
    inputs = [theta, directions, *graphs.batch_inputs]
    return inputs, [graphs.prior_graph, graphs.prior_grad_graph, total, grad, hvps]
