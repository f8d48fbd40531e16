"""Per-row graphs evaluated at many points of their inputs at once.

The set-up of a distributional regression (:mod:`~pymc_subsample.model.distributional`) reads η's
exact Jacobian from η at 0 and the unit vectors: :class:`PointsFunction` evaluates per-row graphs at
k points in one call where PyTensor can vectorise them, and :func:`affine_offset_and_jacobian`
turns those values into the offset and the Jacobian of an affine map.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.ops import ViewOp
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import applys_between

from pymc_subsample.model.compile import compile_function, compile_numpy, has_blockwise

__all__ = ["PointsFunction", "affine_offset_and_jacobian", "zero_and_unit_vectors"]


def affine_offset_and_jacobian(evaluate_points, d):
    """(f(0), ∂f) of an affine f from R^d to (m, p) arrays: (m, p) and (m, p, d), from
    ``evaluate_points`` at 0 and the d unit vectors ((d + 1, d) → (d + 1, m, p)).
    """
    values = evaluate_points(zero_and_unit_vectors(d))
    offset = values[0]
    return offset, np.moveaxis(values[1:] - offset, 0, -1)


def zero_and_unit_vectors(d):
    """0 and the d unit vectors of R^d, as rows (d + 1, d): the points η's Jacobian is read at."""
    return np.vstack([np.zeros(d), np.eye(d)])


class PointsFunction:
    """Per-row ``graphs`` of ``inputs`` and the batch, evaluated at k points at once: one call of the
    graphs vectorised over the points where PyTensor writes that without a Blockwise node
    (:func:`_vectorised_function`), else one call per point (compiled on first need).

    ``split_points`` maps k flat points (k, n) to one array per input, each (k, *shape).
    """

    def __init__(self, inputs, graphs, batch_inputs, split_points):
        self._inputs, self._graphs, self._batch_inputs = list(inputs), list(graphs), list(batch_inputs)
        self._split_points = split_points
        self.vectorised = None  # the compiled function, or False where refused
        self._single = None

    def __call__(self, points, batch) -> list:
        """One (k, m) array per graph."""
        points = np.asarray(points, dtype=float)
        shape = (points.shape[0], np.shape(batch[0])[0])
        if self.vectorised is None:
            self.vectorised = _vectorised_function(self._inputs, self._graphs, self._batch_inputs) or False
        if self.vectorised is not False:
            values = self.vectorised(*self._split_points(points), *batch)
            if all(np.shape(v) == shape for v in values):
                return [np.asarray(v, dtype=float) for v in values]
            self.vectorised = False  # a graph not given per row: one call per point
        if self._single is None:
            self._single = compile_function([*self._inputs, *self._batch_inputs], self._graphs)
        per_point = [self._single(*[a[0] for a in self._split_points(point[None])], *batch)
                     for point in points]
        return [np.stack([np.asarray(values[j], dtype=float) for values in per_point])
                for j in range(len(self._graphs))]


def _vectorised_function(inputs, graphs, batch_inputs):
    """``graphs`` with a leading axis of k points on each of ``inputs``, compiled (inputs: the
    batched ``inputs``, then ``batch_inputs``); None where PyTensor cannot vectorise them, or only
    with a Blockwise node (a Python loop over the points).

    Why: the set-up's Jacobian of an affine η takes η at d + 1 points per chunk of rows. One call
    at all of them reads the chunk once and is one matrix product; d + 1 calls read it d + 1 times.

    The function runs on PyTensor's Python linker wherever each of its elementwise ops has a NumPy
    or SciPy array function (:func:`~pymc_subsample.model.compile.compile_numpy`; η is mostly
    products with the data and sums, and f of the set-up's passes special functions with SciPy's
    ufuncs): NumPy's matrix product and ufuncs over the (k, m) arrays take about what compiled code
    takes, and nothing is compiled, where compiling a strided matrix product's kernel is a large
    part of a first run's set-up.
    """
    # measured: at 10⁶ rows and d = 30, d + 1 calls made the Hessian pass 2.2 s (22 gradient
    # passes); compiled, the product of the points with the transposed data was 9 of 34 s of Numba
    # compilation in a first run's set-up of the linear zoo model
    points = [pt.tensor(dtype=x.type.dtype, shape=(None, *x.type.shape), name=f"{x.name}_points")
              for x in inputs]
    # a pm.Deterministic on the way is a ViewOp, which PyTensor vectorises as a Blockwise: the value
    # itself is what η needs
    views = [node for node in applys_between(inputs, graphs) if isinstance(node.op, ViewOp)]
    plain = graph_replace(list(graphs), {node.outputs[0]: node.inputs[0] for node in views}, strict=False)
    try:
        vectorised = vectorize_graph(plain, dict(zip(inputs, points, strict=True)))
        function = compile_numpy([*points, *batch_inputs], vectorised)
        if function is None:
            function = compile_function([*points, *batch_inputs], vectorised)
    except (NotImplementedError, TypeError, ValueError):
        return None
    return None if has_blockwise(function) else function

