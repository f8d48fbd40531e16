"""Group effects in η: coordinates each row reads one of, chosen by its data (``a[g_k]``).

The set-up's sums of a distributional regression take η's Jacobian J from η at 0 and at the unit
vectors of its d coordinates (:func:`jacobian_products`): d + 1 evaluations of η per row
and a (d, m)·(m, d) product per chunk. A hierarchical model's ``a[g_k]`` makes d grow with the
number of groups while each row reads one of them, O(N d²) per pass. Here such a range of
coordinates (a *block*) is found in η's graph, ``x[index]`` with x a slice of θ (or a piece of φ)
that η reads nowhere else and ``index`` a function of the rows' data alone. Row k's derivative along
the block is then one number, ∂η_k/∂x at entry ``index_k``: η at the block's indicator vector minus
η at 0 gives it for every row at once. The sums over a block are ``bincount``s by that index, so a
pass costs O(N (d_dense + blocks)) evaluations of η and O(N) per block in the products.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.ops import ViewOp
from pytensor.graph.traversal import ancestors, applys_between
from pytensor.tensor.shape import Reshape, SpecifyShape
from pytensor.tensor.subtensor import Subtensor

from pymc_subsample.model.compile import compile_python
from pymc_subsample.model.op_patterns import is_row_gather, row_gather_index, subtensor_indices

__all__ = ["OneHotBlock", "PointLayout", "coordinates_read", "find_one_hot_blocks", "jacobian_products",
           "kept_jacobian_products"]

_PASS_THROUGH = (Reshape, SpecifyShape, ViewOp)


@dataclass(frozen=True)
class OneHotBlock:
    """Coordinates of θ (or φ) that each row reads one of, entry ``index`` (a graph of the batch
    inputs) of the block: ``start + offset``, then every ``stride``-th, up to ``stop``. A vector
    a[g] is one block (stride 1); a matrix β[g] of J columns (C order, ``(β[g] * X).sum(1)``) is J
    blocks, one per column (offset j, stride J), which share their index.
    """

    start: int
    stop: int
    index: object
    offset: int = 0
    stride: int = 1

    @property
    def coords(self) -> slice:
        return slice(self.start + self.offset, self.stop, self.stride)

    @property
    def size(self) -> int:
        return len(range(self.start + self.offset, self.stop, self.stride))

    def shares_owners(self, other) -> bool:
        """Whether every row reads the same entry of both (the same index, the same size)."""
        return other.index is self.index and other.size == self.size


# measured without the blocks: with 1,000 groups the centred zoo model's warm set-up took 44 s at
# 10⁵ rows (42,750 of its full gradients)
def find_one_hot_blocks(graphs, sources, batch_inputs) -> list[OneHotBlock]:
    """The blocks of ``graphs`` (η's, in ``sources`` and the batch): ``sources`` is a list of
    (vector variable, flat offset, size), θ itself or φ's pieces. A range of a source is a block when its
    only use in ``graphs`` is ``x[index]``, x that range (a constant slice of θ, or a whole piece
    of φ, through reshapes) and ``index`` a graph that reads no source. A source may give its shape
    as a fourth element (φ's pieces, whose graphs leave their number of columns unknown).
    """
    sources = [(*source, None)[:4] for source in sources]  # (var, offset, size, shape or None)
    source_vars = [var for var, *_ in sources]
    nodes = list(applys_between([*source_vars, *batch_inputs], graphs))
    clients = {}
    for node in nodes:
        for var in node.inputs:
            clients.setdefault(var, []).append(node)
    blocks = []
    for node in nodes:
        if not is_row_gather(node) or set(source_vars) & set(ancestors([row_gather_index(node)])):
            continue
        found = _coordinate_range(node.inputs[0], sources, clients)
        if found is not None and _read_only_there(*found[:-1], clients):
            columns = found[-1]
            blocks.extend(OneHotBlock(found[0], found[1], row_gather_index(node), offset=j, stride=columns)
                          for j in range(columns))
    return sorted(blocks, key=lambda block: (block.start, block.offset))


def _coordinate_range(x, sources, clients):
    """(start, stop, the source, its size, the slice node of θ or None, columns) of the flat
    coordinates the vector or matrix ``x`` is (a matrix of J columns in C order), or None: read
    through reshapes that have no other client, from a constant slice of θ or a whole piece of φ,
    each with no other client.
    """
    if x.ndim not in (1, 2) or len(clients.get(x, [])) != 1:
        return None
    shape = {var: shape for var, *_, shape in sources}.get(x) or (None, None)
    columns = 1 if x.ndim == 1 else _known_length(x.shape[1]) or shape[-1]
    if columns is None:
        return None
    while x.owner is not None and isinstance(x.owner.op, _PASS_THROUGH):
        x = x.owner.inputs[0]
        if len(clients.get(x, [])) != 1:
            return None
    for var, offset, size, _ in sources:
        if x is var and var.ndim in (1, 2) and size % columns == 0:  # φ's pieces are flat in C order
            return offset, offset + size, var, size, None, columns
        if x.owner is not None and isinstance(x.owner.op, Subtensor) and x.owner.inputs[0] is var:
            span = _constant_slice(x.owner, size)
            if span is not None and (span[1] - span[0]) % columns == 0:
                return offset + span[0], offset + span[1], var, size, x.owner, columns
    return None


def _known_length(length):
    """The value of a scalar graph of constants (a matrix's number of columns), or None."""
    try:
        return int(pt.get_underlying_scalar_constant_value(length))
    except Exception:  # not a constant: a length read from data or a shared variable
        return None


def _constant_slice(node, size):
    """(start, stop) of θ[start:stop] in a Subtensor node of θ (of ``size`` values), or None where a
    bound is not a constant (θ[i] reads one coordinate: (i, i + 1)).
    """
    (index,) = subtensor_indices(node)
    try:
        if not isinstance(index, slice):
            start = int(pt.get_underlying_scalar_constant_value(index))
            return (start, start + 1) if 0 <= start < size else None
        if index.step is not None:
            return None
        start = 0 if index.start is None else int(pt.get_underlying_scalar_constant_value(index.start))
        stop = size if index.stop is None else int(pt.get_underlying_scalar_constant_value(index.stop))
    except Exception:  # a bound that is not a constant
        return None
    return (start, stop) if 0 <= start < stop <= size else None


def _read_only_there(start, stop, var, size, slice_node, clients) -> bool:
    """Whether θ's coordinates [start, stop) are read by ``slice_node`` alone: every other use of θ
    is a constant slice that does not overlap them (a piece of φ: checked by its one client).
    """
    if slice_node is None:
        return True
    for node in clients.get(var, []):
        if node is slice_node:
            continue
        span = _constant_slice(node, size) if isinstance(node.op, Subtensor) else None
        if span is None or (span[0] < stop and start < span[1]):
            return False
    return True


def coordinates_read(graphs, sources, n) -> np.ndarray:
    """Which of the ``n`` coordinates each of ``graphs`` reads at all, (len(graphs), n) bool, from
    the graphs alone: a source (``sources`` as in :func:`find_one_hot_blocks`) read only through
    constant slices reads those; read any other way, all of it.

    Why: a distributional regression's η's read a few coordinates each (a Normal's scale η σ's
    alone), and the sums' weighted products over the others are zero (:func:`_weighted_products`).
    From the graph, once: asking the Jacobian of every chunk which rows are nonzero would cost a
    pass over it.
    """
    # measured: that pass took 61 µs over 5 rows by 20,000, a third of a product
    sources = [(*source, None)[:4] for source in sources]
    source_vars = [var for var, *_ in sources]
    read = np.zeros((len(graphs), n), dtype=bool)
    for j, graph in enumerate(graphs):
        for node in applys_between(source_vars, [graph]):
            for var, offset, size, _ in sources:
                if not any(x is var for x in node.inputs):
                    continue
                span = (_constant_slice(node, size)
                        if isinstance(node.op, Subtensor) and node.inputs[0] is var
                        and not any(x is var for x in node.inputs[1:]) else None)
                start, stop = (0, size) if span is None else span
                read[j, offset + start:offset + stop] = True
    return read


class PointLayout:
    """The points η is evaluated at for its Jacobian over ``n`` coordinates: 0, the unit vector of
    each coordinate outside the ``blocks`` that some η reads, and each block's indicator vector.
    ``reads``: which coordinates each η reads (:func:`coordinates_read`; None: all).

    A coordinate no η reads (a centred hierarchical model's μ and τ, read by the prior alone) has no
    point: η there equals η at 0, and its rows and columns of the sums are zero.
    """

    # measured on the centred zoo model: 4 points a chunk instead of 6
    def __init__(self, n, blocks, batch_inputs, reads=None):
        self.n, self.blocks = n, list(blocks)
        in_block = np.zeros(n, dtype=bool)
        for block in self.blocks:
            in_block[block.coords] = True
        read = np.ones(n, dtype=bool) if reads is None else np.asarray(reads, dtype=bool).any(axis=0)
        self.dense = np.flatnonzero(~in_block & read)
        self.reads = None if reads is None else np.asarray(reads, dtype=bool)
        points = np.zeros((1 + self.dense.size + len(self.blocks), n))
        points[1 + np.arange(self.dense.size), self.dense] = 1.0
        for i, block in enumerate(self.blocks):
            points[1 + self.dense.size + i, block.coords] = 1.0
        self.points = points
        self._batch_inputs = list(batch_inputs)
        self._owners = None

    def reads_block(self, j, i) -> bool:
        """Whether η ``j`` reads block ``i`` at all (from its graph; True where not known)."""
        return self.reads is None or bool(self.reads[j][self.blocks[i].coords].any())

    def owners(self, batch) -> list:
        """Each block's entry per row of ``batch`` (in 0..size − 1)."""
        if not self.blocks:
            return []
        if self._owners is None:
            # an index that is a batch input itself (a group column of the data) is read from the
            # batch; the others, once per distinct graph, from one function on the Python linker
            graphs = list(dict.fromkeys(block.index for block in self.blocks
                                        if not any(block.index is x for x in self._batch_inputs)))
            function = compile_python(self._batch_inputs, graphs) if graphs else None
            self._owners = (graphs, function)
        graphs, function = self._owners
        computed = dict(zip(graphs, function(*batch), strict=True)) if graphs else {}
        values = {**dict(zip(self._batch_inputs, batch, strict=True)), **computed}
        return [_entries(values[block.index], block.size) for block in self.blocks]


def _entries(index, size) -> np.ndarray:
    """A group index as int64 entries in 0..size − 1: a negative index counts from the end, as in
    ``a[g]``. Why not ``% size``: an integer division per row, where an index is rarely negative.
    """
    # measured: ``% size`` took 0.4 ms a 20,000-row chunk with the function's call, 20 ms a pass of
    # the centred zoo model
    index = np.asarray(index)
    if index.dtype != np.int64:
        index = index.astype(np.int64)
    if index.size and index.min() < 0:
        index = np.where(index < 0, index + size, index)
    return index


def _read_rows(reads):
    """The rows of an η's dense Jacobian it reads (``reads``: bool per row, :func:`coordinates_read`),
    as a slice where they are one run (a view: no copy), else their indices; None where there are none.

    Why: an η reads only some coordinates (a Normal's scale η reads σ's alone, its mean η none of
    it), and the product over the rows it does not read is zero.
    """
    # measured: with the linear zoo model's three pairs of η's over all five rows, the weighted
    # products took 0.6 ms a 20,000-row chunk, 40% of a full pass with the Hessian
    index = np.flatnonzero(reads)
    if index.size == 0:
        return None
    if index[-1] - index[0] + 1 == index.size:
        return slice(int(index[0]), int(index[-1]) + 1)
    return index


class _EtaJacobian(NamedTuple):
    """One η's Jacobian over a batch in a layout's form, and which parts of it η reads at all."""

    dense: np.ndarray  # (number of dense coordinates, m): ∂η_k/∂θ_c
    coefs: list  # per block, (m,): η at the block's indicator minus η at 0
    reads_dense: np.ndarray  # (number of dense coordinates,) bool: θ_c read by η (from its graph)
    reads_block: list  # per block, bool


def jacobian_products(layout, owners, points, terms, hessian):
    """(Σ_k J_kᵀ∇f_k, Σ_k J_kᵀ F''_k J_k or None) over a batch for η affine in ``layout.n``
    coordinates, from η at ``layout.points`` (one (k, m) array per η) and ``terms`` (``RowTerms``);
    ``owners``: :meth:`PointLayout.owners` of the batch.

    Coordinates outside the blocks: matrix products over the rows in the layout the points come
    in — the gradient with no difference formed (one matrix-vector product per η), the Hessian with
    at most one difference per η (none where η(0) = 0) and one (d, m)·(m, d) product per pair of η's,
    with no (m, p, d) Jacobian formed, which would cost more in copies than in arithmetic. Each
    block: ``bincount`` over its owners.
    """
    # measured: from an (m, p, d) Jacobian a 20,000-row chunk of the linear zoo model took 1.04 ms
    # for the gradient and 3.2 ms with the Hessian (PyMC's own gradient of the same rows: 0.16 ms)
    nd = layout.dense.size
    if hessian or layout.blocks:
        # η's values come in Fortran order (one row per point a stride of k values apart): every
        # product, difference and test below along a point's row ran 4-20× slower on that view than
        # on a C-order copy, whose making costs about one such product (20,000 rows, 6 points: 49 µs)
        points = [np.ascontiguousarray(values) for values in points]
    # each block's coefficients where η's graph reads the block; read where any is nonzero here
    coefs = [[values[1 + nd + i] - values[0] if layout.reads_block(j, i) else None
              for i in range(len(layout.blocks))] for j, values in enumerate(points)]
    reads_block = [[coef is not None and bool(coef.any()) for coef in coefs_j] for coefs_j in coefs]
    grad = np.zeros(layout.n)
    for values, first, coefs_j, reads in zip(points, terms.first, coefs, reads_block, strict=True):
        first = np.broadcast_to(first, values.shape[1:])
        products = values[:1 + nd] @ first
        grad[layout.dense] += products[1:] - products[0]
        _add_block_gradients(grad, layout, owners, coefs_j, reads, first)
    if not hessian:
        return grad, None
    jacobians = []
    for j, (values, coefs_j, reads) in enumerate(zip(points, coefs, reads_block, strict=True)):
        # η(0) is often 0 (no offset term): then Jᵀ is the points at the unit vectors, a view
        dense = values[1:1 + nd] - values[0] if values[0].any() else values[1:1 + nd]
        jacobians.append(_EtaJacobian(dense, coefs_j, _reads_dense(layout, j, dense), reads))
    return grad, _hessian(layout, owners, jacobians, terms)


def kept_jacobian_products(layout, affine, terms, hessian):
    """:func:`jacobian_products` with J read from kept rows (``affine``:
    :class:`~pymc_subsample.model.affine_rows.AffineRows` of the batch's rows, in ``layout``'s
    coordinates and blocks), not from η at the layout's points.
    """
    m, owners = affine.offset.shape[1], list(affine.owner)
    grad, jacobians = np.zeros(layout.n), []
    for j, (slot, first) in enumerate(zip(affine.slot, terms.first, strict=True)):
        first = np.broadcast_to(first, (m,))
        if slot >= 0:
            dense = np.ascontiguousarray(affine.jacobian[slot])  # (n_dense, m), C order as the points'
            coefs = [coef if layout.reads_block(j, i) else None for i, coef in enumerate(affine.coef[slot])]
        else:  # the same on every row, and reading no block
            dense = np.broadcast_to(affine.constant_jacobian[-1 - slot][:, None], (layout.dense.size, m))
            coefs = [None] * len(layout.blocks)
        reads = [coef is not None and bool(coef.any()) for coef in coefs]
        grad[layout.dense] += dense @ first
        _add_block_gradients(grad, layout, owners, coefs, reads, first)
        jacobians.append(_EtaJacobian(dense, coefs, _reads_dense(layout, j, dense), reads))
    return (grad, _hessian(layout, owners, jacobians, terms)) if hessian else (grad, None)


def _add_block_gradients(grad, layout, owners, coefs, reads, first):
    """Adds each group block's Σ_k coef_k ∂f_k by its rows' entries to ``grad``."""
    for block, owner, coef, read in zip(layout.blocks, owners, coefs, reads, strict=True):
        if read:  # an η that does not read the block adds nothing to its sums
            grad[block.coords] += np.bincount(owner, coef * first, minlength=block.size)


def _reads_dense(layout, j, dense):
    """The dense coordinates η ``j`` reads at all, from its graph (:func:`coordinates_read`)."""
    return dense.any(axis=1) if layout.reads is None else layout.reads[j][layout.dense]


def _hessian(layout, owners, jacobians, terms):
    """Σ_k J_kᵀ F''_k J_k from each η's :class:`_EtaJacobian`."""
    hess = np.zeros((layout.n, layout.n))
    m = jacobians[0].dense.shape[1]
    for (j, k), second in terms.second.items():
        w = np.broadcast_to(second, (m,))
        block = _weighted_products(layout, owners, jacobians[j], w, jacobians[k])
        hess += block if j == k else block + block.T
    return hess


def _weighted_products(layout, owners, a, w, b):
    """Σ_k a_k w_k b_kᵀ (n, n) for two η's Jacobians ``a`` and ``b`` (:class:`_EtaJacobian`).

    The block parts are ``bincount``s of m rows each; those whose factors are zero on every row of
    the batch (a coordinate or block the η does not read: the scale's η of a Normal reads no group
    effect) add nothing and are skipped.
    """
    # measured on the centred hierarchical zoo model: 4 bincounts per 20,000-row chunk instead of 27;
    # with the C-order points (jacobian_products) 0.23 ms a call instead of 1.1, and its warm set-up
    # at 10⁷ rows 1.8 s instead of 2.4
    out = np.zeros((layout.n, layout.n))
    cols = layout.dense
    rows_a, rows_b = _read_rows(a.reads_dense), _read_rows(b.reads_dense)
    if rows_a is not None and rows_b is not None:
        out[np.ix_(cols[rows_a], cols[rows_b])] = (a.dense[rows_a] * w) @ b.dense[rows_b].T
    if not layout.blocks:
        return out
    for i, (block, owner) in enumerate(zip(layout.blocks, owners, strict=True)):
        rows = block.coords
        weighted_a = a.coefs[i] * w if a.reads_block[i] else None
        weighted_b = b.coefs[i] * w if b.reads_block[i] else None
        for c, col in enumerate(cols):
            if weighted_a is not None and b.reads_dense[c]:
                out[rows, col] += np.bincount(owner, weighted_a * b.dense[c], minlength=block.size)
                if a is b:  # one η with itself: the other side is the same sums
                    out[col, rows] += out[rows, col]
                    continue
            if weighted_b is not None and a.reads_dense[c]:
                out[col, rows] += np.bincount(owner, weighted_b * a.dense[c], minlength=block.size)
        if weighted_a is None:
            continue
        for i2, (other, owner2) in enumerate(zip(layout.blocks, owners, strict=True)):
            if not b.reads_block[i2]:
                continue
            weights = weighted_a * b.coefs[i2]
            if block.shares_owners(other):  # itself, or another column of its matrix: diagonal
                out[rows, other.coords] += np.diag(np.bincount(owner, weights, minlength=block.size))
            else:
                pair = np.bincount(owner * other.size + owner2, weights, minlength=block.size * other.size)
                out[rows, other.coords] += pair.reshape(block.size, other.size)
    return out
