"""Row data of a tall model: which graph leaves are indexed by the observation axis.

A *row leaf* is a constant or ``pm.Data`` container whose leading axis is the
observation axis of length N. Rewriting a graph so that every row leaf is
replaced by a batch of its rows makes any per-observation quantity cost O(m)
for m rows instead of O(N) (docs/design.md, "Rows on demand").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import ancestors, applys_between, graph_inputs
from pytensor.tensor.shape import SpecifyShape, specify_shape

from pymc_subsample.model.op_patterns import inline_symbolic_ops
from pymc_subsample.model.streamed import StreamedRows, streamed_variables

__all__ = [
    "RowBatch", "RowLeaf", "deterministics_over_rows", "find_row_leaves", "find_size_constants",
    "leaves_with_rows_off_axis", "substitute_rows",
]


class RowBatch(tuple):
    """A chunk of consecutive rows (one array per row leaf, a tuple) that knows them: ``row_range``,
    a slice of the N, for what is kept per row (η's Jacobians) to be read by it as a view.
    """

    def __new__(cls, arrays, row_range=None):
        batch = super().__new__(cls, arrays)
        batch.row_range = row_range
        return batch


@dataclass(frozen=True)
class RowLeaf:
    """One data array of the model indexed by the observation axis.

    Attributes
    ----------
    name : str
        Name used in messages and as the key of user summaries.
    variable : Variable
        The constant or shared variable in the model's graph.
    """

    name: str
    variable: Variable

    @property
    def streamed(self) -> bool:
        """True for a ``pms.Data`` whose rows stay in their source (read on demand)."""
        return _source(self.variable) is not None

    @property
    def data(self) -> np.ndarray:
        """The full array (shared variables are read now, so ``pm.set_data`` is seen).

        For a ``pms.Data`` this is its :class:`RowSource`, which reads rows on demand.
        """
        if self.streamed:
            return _source(self.variable)
        if isinstance(self.variable, SharedVariable):
            return self.variable.get_value(borrow=True)
        return self.variable.data

    def batch_variable(self) -> Variable:
        """A fresh symbolic input holding a batch of rows of this leaf."""
        t = self.variable.type
        return pt.tensor(dtype=t.dtype, shape=(None, *t.shape[1:]), name=f"{self.name}_rows")

    def row_variable(self) -> Variable:
        """A fresh symbolic input holding ONE row of this leaf (leading axis dropped)."""
        t = self.variable.type
        return pt.tensor(dtype=t.dtype, shape=t.shape[1:], name=f"{self.name}_row")


def _source(var):
    owner = var.owner
    return owner.op.source if owner is not None and isinstance(owner.op, StreamedRows) else None


def _leaf_value(var) -> np.ndarray | None:
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    if isinstance(var, Constant):
        return np.asarray(var.data)
    return None


def find_row_leaves(outputs, n_rows: int) -> list[RowLeaf]:
    """Constants, shared variables and ``pms.Data`` in ``outputs``' graph with leading length N."""
    leaves = []
    for var in streamed_variables(outputs):
        if var.type.shape[0] != n_rows:
            raise ValueError(
                f"pms.Data {var.name!r} has {var.type.shape[0]} rows but the observed variables have "
                f"N = {n_rows}; every row source of a model must have the same rows, in the same order."
            )
        leaves.append(RowLeaf(name=var.name, variable=var))
    for var in graph_inputs(outputs):
        if getattr(var.type, "ndim", 0) < 1:
            continue
        value = _leaf_value(var)
        if value is None or value.ndim < 1 or value.shape[0] != n_rows:
            continue
        name = var.name or f"constant_{len(leaves)}"
        leaves.append(RowLeaf(name=name, variable=var))
    return leaves


def leaves_with_rows_off_axis(outputs, n_rows: int) -> list[str]:
    """Names (with shapes) of data in ``outputs``' graph with an axis of length N that is not the first:
    rows stored as columns, such as a design matrix of shape (features, N), which a gather of
    rows cannot subsample.
    """
    found = []
    for var in graph_inputs(outputs):
        value = _leaf_value(var) if getattr(var.type, "ndim", 0) >= 2 else None
        if value is not None and value.shape[0] != n_rows and n_rows in value.shape[1:]:
            found.append(f"{var.name or 'a constant'} {tuple(value.shape)}")
    return found


def find_size_constants(outputs, n_rows: int) -> list[Variable]:
    """Integer shapes equal to N that must become m when rows are subsampled.

    Two kinds: a literal ``size`` such as ``[N]`` (PyMC writes one for ``observed=`` numpy
    data), and the scalar shared length of a mutable dim such as ``dims="obs"`` on
    ``pm.Data`` (what Bambi writes), which the observed variable's shape reads.
    """
    found = []
    for var in graph_inputs(outputs):
        if not str(getattr(var.type, "dtype", "")).startswith(("int", "uint")) or n_rows <= 1:
            continue
        if isinstance(var, SharedVariable) and var.type.ndim == 0:
            if int(var.get_value(borrow=True)) == n_rows:
                found.append(var)
            continue
        if not isinstance(var, Constant) or var.type.ndim != 1:
            continue
        value = np.asarray(var.data)
        if 1 <= value.shape[0] <= 8 and value[0] == n_rows:
            found.append(var)
    return found


def substitute_rows(outputs, leaves, row_inputs, size_constants, n_rows_symbolic, *, single_row=False):
    """Rewrite ``outputs`` to depend on ``row_inputs`` instead of the full row leaves.

    Parameters
    ----------
    outputs : list of Variable
    leaves : list of RowLeaf
    row_inputs : list of Variable
        Batch variables (leading axis m), or single rows when ``single_row``.
    size_constants : list of Variable
        Shape constants ``[N, ...]`` to rewrite to ``[m, ...]``.
    n_rows_symbolic : Variable
        Scalar number of rows m of the batch.
    single_row : bool
        Insert a leading axis of length 1 so the graph sees a batch of one row.
    """
    outputs = inline_symbolic_ops(outputs)
    replace = {}
    streamed = {}
    for leaf, new in zip(leaves, row_inputs):
        new = pt.expand_dims(new, 0) if single_row else new
        replace[leaf.variable] = new
        if leaf.streamed:
            streamed[leaf.variable.owner.op] = new
    # graph rewrites (join_nonshared_inputs, clone_replace) clone a pms.Data node but keep its op
    for var in streamed_variables(outputs):
        if var.owner.op in streamed:
            replace[var] = streamed[var.owner.op]
    n_rows = int(leaves[0].data.shape[0]) if leaves else -1
    replace.update(_repeated_rows(outputs, replace, n_rows, n_rows_symbolic, single_row))
    for const in size_constants:
        if const.type.ndim == 0:  # a dim length
            replace[const] = pt.cast(n_rows_symbolic, const.dtype)
            continue
        rest = pt.as_tensor_variable(np.asarray(const.data)[1:].astype(const.dtype))
        head = pt.cast(pt.atleast_1d(n_rows_symbolic), const.dtype)
        replace[const] = pt.concatenate([head, rest]) if rest.type.shape[0] else head
    new_outputs = clone_replace(list(outputs), replace, rebuild_strict=False)
    return _relax_row_shape_checks(new_outputs, n_rows)


def _repeated_rows(outputs, replaced, n_rows, n_rows_symbolic, single_row):
    """Constants of N equal rows (Bambi's column of ones for an intercept, ``np.ones(N)``) that the
    likelihood's graph folded away, so they are no row leaf, but a parameter's graph still reads:
    each becomes its first row repeated m times. Any other N-row constant is an error.
    """
    out = {}
    if n_rows <= 1:
        return out
    for var in graph_inputs(outputs):
        # getattr: index constants (slices, None) have no ndim
        if var in replaced or not isinstance(var, Constant) or getattr(var.type, "ndim", 0) < 1:
            continue
        value = np.asarray(var.data)
        if value.shape[0] != n_rows:
            continue
        if not np.all(value == value[:1]):
            raise ValueError(
                f"A graph of the model reads a {value.shape} constant with one entry per row that the "
                "observed variables' log-likelihood does not; rows cannot be subsampled consistently. "
                "Pass it as pm.Data, or use it in the observed variables' parameters."
            )
        rows = 1 if single_row else n_rows_symbolic
        out[var] = pt.alloc(pt.as_tensor_variable(value[0]), rows, *value.shape[1:])
    return out


def _constant_int(var):
    if isinstance(var, Constant) and var.type.ndim == 0 and str(var.type.dtype).startswith(("int", "uint")):
        return int(var.data)
    return None


def _relax_row_shape_checks(outputs, n_rows):
    """Drop the row axis from ``SpecifyShape`` checks that assert N rows.

    A model may assert its rows with ``pt.specify_shape(x, (N,))``, and PyTensor inserts such a
    check itself where a graph rewrite replaces a variable of static length N; once the rows of
    ``x`` are a batch, the check must say "any length" instead. The literal is rewritten only
    inside the check, so other uses of the number N keep it.
    """
    replace = {}
    for node in applys_between(graph_inputs(outputs), outputs):
        if not isinstance(node.op, SpecifyShape):
            continue
        shape = [_constant_int(s) for s in node.inputs[1:]]
        if n_rows not in shape:
            continue
        relaxed = [None if s == n_rows else dim for s, dim in zip(shape, node.inputs[1:])]
        replace[node.outputs[0]] = specify_shape(node.inputs[0], relaxed)
    if not replace:
        return outputs
    return clone_replace(list(outputs), replace, rebuild_strict=False)


def deterministics_over_rows(model, leaves) -> list[str]:
    """The names of ``model``'s Deterministics computed from the in-memory row data of ``leaves``.

    PyMC evaluates every Deterministic of the trace on all its inputs at every draw, whatever the
    step method: one over the rows is a full pass per draw (a ``pms.Data`` one cannot be evaluated
    at all, and says so itself).
    """
    rows = {leaf.variable for leaf in leaves if not leaf.streamed}
    return [det.name for det in model.deterministics if any(var in rows for var in ancestors([det]))]
