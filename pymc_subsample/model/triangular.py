"""Linear algebra of the rows' graph written for differentiation: cholesky(L Lᵀ) read as
L·diag(sign(diag L)) (the factor the model already holds), diagonals taken by indexing
(:func:`diagonals_by_indexing`), and triangular solves with small factors written out
(:func:`small_triangular_solves`).

PyMC's ``MvNormal(chol=L)`` builds cov = L Lᵀ and its log-density factors it again,
``cholesky(cov)``. PyTensor rewrites that to L when L carries the tag ``lower_triangular`` (PyMC
tags its ``chol``), but the model's log-density graph is a clone on the value variables without the
tag, and our graphs are differentiated before any rewriting: the estimator's second directional
derivative would go twice through the Cholesky's forward mode, a graph many times larger and
slower to build and rewrite than the one read from L.

For a non-singular lower-triangular L, cholesky(L Lᵀ) = L D with D = diag(sign(diag L)), the one
factor with a positive diagonal: the replacement is exact at every such point, whatever the signs.
At a singular L PyTensor's Cholesky fails (NaN); the replacement has a zero on its diagonal, and the
MvNormal's log-density is −inf at both (its positive-definiteness check reads diag > 0).

L is taken as lower triangular when it is tagged so, or when it is built by setting (or adding)
values into a zero matrix at constant row and column indices with row ≥ column, as PyMC's
``LKJCholeskyCov`` and ``expand_packed_triangular`` build it. Anything else is left as it is.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import applys_between
from pytensor.tensor.basic import Alloc, ExtractDiag
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.linalg import Cholesky, SolveTriangular
from pytensor.tensor.math import Dot
from pytensor.tensor.subtensor import AdvancedIncSubtensor

from pymc_subsample.model.op_patterns import is_matrix_transpose

__all__ = ["diagonals_by_indexing", "factors_from_triangular_products", "small_triangular_solves"]


# measured on the MvNormal + LKJCholeskyCov zoo model (one 1,000-row graph of q's difference and its
# gradient): through cholesky(L Lᵀ) 1,159 nodes after rewriting, 16 s to build and 35 s to rewrite;
# read from L, 149 nodes, 3 s and 3 s
def factors_from_triangular_products(output, inputs):
    """``output`` with every lower Cholesky factor of L Lᵀ (L lower triangular, 2-D) replaced by
    L·diag(sign(diag L)), searching the graph between ``inputs`` and ``output``.
    """
    return _replace_nodes(output, inputs, _factor_of_triangular_product)


def _replace_nodes(output, inputs, replacement_of):
    """``output`` with the first output of every node between ``inputs`` and ``output`` for which
    ``replacement_of(node)`` gives a variable replaced by it (cast to the old output's type).
    """
    replacements = {}
    for node in applys_between(inputs, [output]):
        new = replacement_of(node)
        if new is not None:
            old = node.outputs[0]
            replacements[old] = old.type.filter_variable(new, allow_convert=True)
    if not replacements:
        return output
    return graph_replace(output, replacements, strict=False)


def _factor_of_triangular_product(node):
    """L·diag(sign(diag L)) (with the input's added leading axes) if ``node`` is a lower Cholesky
    of L Lᵀ with L known to be lower triangular, else None.
    """
    op = node.op.core_op if isinstance(node.op, Blockwise) else node.op
    if not isinstance(op, Cholesky) or not op.lower:
        return None
    product, expand = node.inputs[0], None
    if _adds_leading_axes(product):  # MvNormal's logp adds a batch axis before factoring
        expand, product = product.owner.op, product.owner.inputs[0]
    if product.owner is None or not _is_matrix_product(product.owner.op):
        return None
    left, right = product.owner.inputs
    if left.ndim != 2 or not is_matrix_transpose(right) or right.owner.inputs[0] is not left:
        return None
    if not _is_lower_triangular(left):
        return None
    factor = left * pt.sgn(_diagonal(left))[None, :]
    return factor if expand is None else expand(factor)


def _adds_leading_axes(x):
    if x.owner is None or not isinstance(x.owner.op, DimShuffle):
        return False
    order = x.owner.op.new_order
    kept = [i for i in order if i != "x"]
    return not x.owner.op.drop and kept == list(range(x.owner.inputs[0].ndim)) and \
        list(order[len(order) - len(kept):]) == kept


def _is_matrix_product(op):
    if isinstance(op, Dot):
        return True
    return isinstance(op, Blockwise) and isinstance(op.core_op, Dot)


def _is_lower_triangular(x):
    """Tagged lower triangular, or zeros with values set or added at constant (row ≥ column) places."""
    if getattr(x.tag, "lower_triangular", False):
        return True
    node = x.owner
    if node is None or not isinstance(node.op, AdvancedIncSubtensor) or len(node.inputs) != 4:
        return False
    base, _, rows, cols = node.inputs
    if not (isinstance(rows, Constant) and isinstance(cols, Constant)):
        return False
    rows, cols = np.asarray(rows.data), np.asarray(cols.data)
    # non-negative: a column -1 is the last one, above the diagonal, though -1 < every row
    if np.any(rows < 0) or np.any(cols < 0) or not np.all(rows >= cols):
        return False
    return _is_zeros(base)


def _is_zeros(x):
    if isinstance(x, Constant):
        return not np.any(np.asarray(x.data))
    node = x.owner
    return (node is not None and isinstance(node.op, Alloc) and isinstance(node.inputs[0], Constant)
            and not np.any(np.asarray(node.inputs[0].data)))


def diagonals_by_indexing(output, inputs):
    """``output`` with every main diagonal of the last two axes (``pt.diagonal``, ``ExtractDiag``)
    taken by indexing, x[..., i, i]: the same values.

    Why: the gradient of ``ExtractDiag`` is ``AllocDiag``, an ``OpFromGraph``, and the forward-mode
    derivative by the double-``Lop`` rule takes the gradient of that gradient, an ``OpFromGraph`` of
    its own that PyTensor never inlines, run through Python at every call (the MvNormal + LKJ zoo
    model's estimator held 7, from the log-determinant's diagonal). Indexing's gradients are
    ``AdvancedIncSubtensor``, compiled like the rest.
    """
    return _replace_nodes(output, inputs, _diagonal_by_indexing)


def _diagonal_by_indexing(node):
    if not isinstance(node.op, ExtractDiag):
        return None
    x = node.inputs[0]
    axes = sorted(a % x.ndim for a in (node.op.axis1, node.op.axis2))
    if node.op.offset != 0 or axes != [x.ndim - 2, x.ndim - 1]:
        return None
    return _diagonal(x)


def _diagonal(x):
    """The main diagonal of the last two axes, by indexing (see :func:`diagonals_by_indexing`)."""
    i = pt.arange(pt.minimum(x.shape[-2], x.shape[-1]))
    return x[(slice(None),) * (x.ndim - 2) + (i, i)]


#: triangular systems up to this size (MvNormal rows of up to 4 dimensions) are written out
SMALL_SOLVE = 4


def small_triangular_solves(output, inputs):
    """``output`` with every triangular solve A x = b whose A has a static size n ≤ :data:`SMALL_SOLVE`
    written as its substitution, x_i = (b_i − Σ_j A_ij x_j) / A_ii, in elementwise ops.

    Why: PyTensor's ``SolveTriangular`` runs SciPy in Python (with its checks and a copy to Fortran
    order), and the estimator of the MvNormal + LKJ model makes several of them a call (its value
    and its derivatives). Written out, they fuse with the rest of the rows' arithmetic. The same
    operations as the LAPACK routine, so equal to rounding.
    """
    # measured: 79 µs a SolveTriangular for a 2×2 factor and 1,000 right-hand sides; the MvNormal +
    # LKJ estimator made 8 of them a call, 75% of its 0.56 ms
    return _replace_nodes(output, inputs, _substitution)


def _substitution(node):
    """The solution x of factor · x = rhs of a small triangular solve ``node`` by forward (lower) or
    back (upper) substitution, batch axes leading; None for any other node.
    """
    op = node.op.core_op if isinstance(node.op, Blockwise) else node.op
    if not isinstance(op, SolveTriangular):
        return None
    factor, rhs = node.inputs
    size = factor.type.shape[-1]
    if size is None or size > SMALL_SOLVE or factor.type.shape[-2] != size:
        return None
    lead_a = (slice(None),) * (factor.ndim - 2)
    lead_b = (slice(None),) * (rhs.ndim - op.b_ndim)

    def a(i, j):
        entry = factor[(*lead_a, i, j)]
        return entry if op.b_ndim == 1 else entry[..., None]

    def b(i):
        return rhs[(*lead_b, i)]

    solved = {}
    for i in (range(size) if op.lower else reversed(range(size))):
        value = b(i)
        for j, x_j in solved.items():
            value = value - a(i, j) * x_j
        solved[i] = value if op.unit_diagonal else value / a(i, i)
    return pt.stack([solved[i] for i in range(size)], axis=-1 if op.b_ndim == 1 else -2)
