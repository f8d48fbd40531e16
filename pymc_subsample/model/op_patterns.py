"""The PyTensor op patterns the graph analysis recognises, in one place.

Op classes and their properties change between PyTensor releases (PyTensor 3 folded
``AdvancedSubtensor1`` into ``AdvancedSubtensor`` with an ``idx_list``, made ``Join``'s axis a
property, moved the linear-algebra rewrites). Every match of an op type made by the analysis is a
function here, each tested in ``tests/test_op_patterns.py``; a pattern that is not recognised
answers False (or None), and the caller then takes its generic path: the model is still sampled,
without the shortcut.
"""

from __future__ import annotations

from pytensor.compile.builders import SymbolicOp
from pytensor.compile.rewriting import inline_ofg_node
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.tensor.basic import MakeVector, get_underlying_scalar_constant_value
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.math import Dot
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor, get_idx_list

__all__ = [
    "constant_slice",
    "elementwise_input",
    "inline_symbolic_ops",
    "is_advanced_indexing",
    "is_matrix_transpose",
    "is_row_gather",
    "is_univariate_random_variable",
    "matrix_vector_products_as_sums",
    "point_mass_mixture",
    "subtensor_indices",
]


def is_univariate_random_variable(op) -> bool:
    """Whether ``op`` is a ``RandomVariable`` of scalar support with scalar parameters."""
    return isinstance(op, RandomVariable) and op.ndim_supp == 0 and all(n == 0 for n in op.ndims_params)


def elementwise_input(graph, scalar_op, *, through_dimshuffles=False):
    """The input x where ``graph`` is the elementwise op of ``scalar_op`` (a ``pytensor.scalar``
    class such as ``Exp``) applied to x, else None; with ``through_dimshuffles``, also under
    ``DimShuffle`` nodes (a parameter broadcast with added axes). How a model writes a parameter
    through its link's inverse (``pm.math.exp(x)``: :attr:`pymc_subsample.families.Link.written_as`).
    """
    while through_dimshuffles and graph.owner is not None and isinstance(graph.owner.op, DimShuffle):
        graph = graph.owner.inputs[0]
    owner = graph.owner
    if owner is not None and isinstance(owner.op, Elemwise) and isinstance(owner.op.scalar_op, scalar_op):
        return owner.inputs[0]
    return None


def point_mass_mixture(rv):
    """(the other component's weight w, the point c, the other component) where ``rv`` is PyMC's
    two-component mixture of a point mass at a constant c and a univariate random variable
    (``ZeroInflatedPoisson``, ``ZeroInflatedNegativeBinomial``, ``ZeroInflatedBinomial``), the point
    mass weighted 1 − w; else None. w is the weights' input itself where they are written as a
    vector of two (PyMC writes ψ's weights as ``[1 − ψ, ψ]``), else ``weights[..., k]``.
    """
    try:
        from pymc.distributions.distribution import DiracDeltaRV
        from pymc.distributions.mixture import MixtureRV
    except ImportError:  # another PyMC: not recognised
        return None
    node = getattr(rv, "owner", None)
    if node is None or not isinstance(node.op, MixtureRV):
        return None
    try:
        weights, *components = node.op.dist_params(node)
    except (ValueError, TypeError):  # another signature
        return None
    if len(components) != 2:
        return None
    kinds = [getattr(c.owner, "op", None) for c in components]
    points = [k for k, op in enumerate(kinds) if isinstance(op, DiracDeltaRV)]
    if len(points) != 1:
        return None
    other = 1 - points[0]
    component = components[other]
    op = kinds[other]
    if not is_univariate_random_variable(op):
        return None
    try:
        (point,) = kinds[points[0]].dist_params(components[points[0]].owner)
        point = float(get_underlying_scalar_constant_value(point))
    except (ValueError, TypeError, NotScalarConstantError):  # a point that is not a constant
        return None
    owner = weights.owner
    if owner is not None and isinstance(owner.op, MakeVector) and len(owner.inputs) == 2:
        weight = owner.inputs[other]
    else:
        weight = weights[..., other]
    return weight, point, component


def _index_entries(node):
    """The entries of an ``AdvancedSubtensor``'s index (slices and index variables), or None."""
    idx_list = getattr(node.op, "idx_list", None)
    if idx_list is None:
        return list(node.inputs[1:])
    try:
        return list(get_idx_list(node.inputs, idx_list))
    except Exception:  # another signature: not recognised
        return None


def is_advanced_indexing(node) -> bool:
    """Whether ``node`` indexes an array by integer or boolean arrays (x[index], x[:, index])."""
    return isinstance(node.op, AdvancedSubtensor)


def is_row_gather(node) -> bool:
    """Whether ``node`` is x[index] along x's first axis by one integer vector (a group index)."""
    if not isinstance(node.op, AdvancedSubtensor):
        return False
    entries = _index_entries(node)
    if entries is None or len(entries) != 1:
        return False
    (index,) = entries
    return (not isinstance(index, slice) and getattr(index, "ndim", None) == 1
            and index.dtype.startswith(("int", "uint")))


def row_gather_index(node):
    """The integer vector of a node :func:`is_row_gather` accepts."""
    (index,) = _index_entries(node)
    return index


def subtensor_indices(node):
    """The entries (slices, scalar indices) of a basic ``Subtensor`` node's index."""
    return get_idx_list(node.inputs, node.op.idx_list)


def constant_slice(node):
    """(start, stop) of a node that is ``x[start:stop]`` of a vector x with constant bounds and step 1
    (a free variable's slice of the flat θ), or None.
    """
    if not isinstance(node.op, Subtensor) or node.inputs[0].ndim != 1:
        return None
    try:
        (entry,) = get_idx_list(node.inputs, node.op.idx_list)
        if not isinstance(entry, slice) or entry.step not in (None, 1):
            return None
        start = 0 if entry.start is None else int(get_underlying_scalar_constant_value(entry.start))
        stop = None if entry.stop is None else int(get_underlying_scalar_constant_value(entry.stop))
    except (ValueError, TypeError, NotScalarConstantError):  # another signature, or a bound not constant
        return None
    return start, stop


def is_matrix_transpose(x) -> bool:
    """Whether ``x`` is the transpose of its input's last two axes (a ``DimShuffle`` that swaps them,
    leading axes expanded or kept in place).
    """
    node = x.owner
    if node is None or not isinstance(node.op, DimShuffle):
        return False
    order = list(node.op.new_order)
    ndim = node.inputs[0].ndim
    added = len(order) - ndim  # expanded axes, all before the input's axes
    return (ndim >= 2 and added >= 0 and all(i == "x" for i in order[:added])
            and order[added:] == [*range(ndim - 2), ndim - 1, ndim - 2])


def inline_symbolic_ops(outputs):
    """``outputs`` with every ``SymbolicOp`` node (PyTensor 3 writes ``logsumexp`` so) replaced by
    its inner graph: the same values. Why: such an op is built for its inputs' static shapes, and
    rebuilt on inputs of another length (a batch of m rows instead of N) it asserts the old shape
    with a ``SpecifyShape`` of N rows, which every batch then fails.
    """
    outputs = list(outputs)
    for _ in range(8):  # inner graphs may hold symbolic ops of their own
        nodes = [node for node in applys_between(graph_inputs(outputs), outputs)
                 if isinstance(node.op, SymbolicOp)]
        if not nodes:
            return outputs
        replace = {}
        for node in nodes:
            replace.update(zip(node.outputs, inline_ofg_node(node), strict=True))
        outputs = clone_replace(outputs, replace)
    return outputs


def _matrix_vector_product(node):
    """(A, b, axis) where ``node`` is a product of a matrix and a vector held as a column or a row of
    static size 1 (a ``Dot``, or the ``Blockwise`` of one that ``A @ b`` builds): A @ b with b of
    shape (k, 1) (axis 1), or b @ A with b of shape (1, k) (axis 0); else None.
    """
    op = node.op.core_op if isinstance(node.op, Blockwise) else node.op
    if not isinstance(op, Dot) or len(node.inputs) != 2:
        return None
    left, right = node.inputs
    if left.type.ndim != 2 or right.type.ndim != 2:
        return None
    if right.type.shape[1] == 1:
        return left, right[:, 0][None, :], 1
    if left.type.shape[0] == 1:
        return right, left[0][:, None], 0
    return None


def matrix_vector_products_as_sums(outputs):
    """``outputs`` with every product of a matrix and a vector, A @ b (``X @ beta`` of a regression,
    and the products with Xᵀ of its gradient), written as an elementwise product summed over the
    shared axis, e.g. (A * bᵀ).sum(axis=1): the same values. Why: PyTensor's Numba backend compiles
    a ``Dot`` into a kernel of its own, each a compilation on a cold cache, while the sum joins the
    fused elementwise kernels of its neighbours (a subsample's m rows by a few columns: no time lost
    per call).
    """
    # measured: a Dot's own Numba kernel took 1.5-2 s each on a cold cache
    outputs = list(outputs)
    for _ in range(8):  # a replacement's own inputs may hold products (the gradient's X @ β inside Xᵀ @ w)
        replace = {}
        for node in applys_between(graph_inputs(outputs), outputs):
            found = _matrix_vector_product(node)
            if found is not None:
                matrix, vector, axis = found
                replace[node.outputs[0]] = (matrix * vector).sum(axis=axis, keepdims=True)
        if not replace:
            break
        outputs = clone_replace(outputs, replace)
    return outputs
