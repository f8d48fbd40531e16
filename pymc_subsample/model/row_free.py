"""φ(θ): the few row-free values that the rows' parameters are affine in.

A non-centred hierarchical model writes a group effect as ``a = μ + τ z`` and each row's parameter
as ``a[g_k] + x_k β``: not affine in θ = (μ, log τ, z, β), but affine in φ = (a, β), a small
deterministic function of θ that reads no row. :func:`row_free_frontier` finds such values in any
graph of the rows: the values computed from θ alone that enter a computation over the rows.
Taken as inputs, they make the rows' graph a function of (φ, rows), which the distributional
regression (:mod:`pymc_subsample.model.distributional`) then checks for affinity in φ.

Only φ's value, its Jacobian Dφ (r × d) and contracted Hessians Σ_i c_i ∇²φ_i (d × d) are needed, at
a few θ during set-up; they read no row, so both come from one small function, Dφ(θ)ᵀc, on
PyTensor's Python linker (nothing compiled): r calls give Dφ exactly, 2d calls give the
contracted Hessian by central differences (:func:`~pymc_subsample.model.differences.central_hessian`,
as for the prior; relative error ~1e-10). Separate graphs for the r rows of Dφ and the d rows of
the Hessian would cost a first run more rewriting than these calls.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.gradient import disconnected_grad
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.graph.traversal import toposort
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.model.compile import compile_function, compile_python
from pymc_subsample.model.differences import VECTORISED_MIN_D, central_hessian, vectorised_gradient
from pymc_subsample.model.op_patterns import is_row_gather

__all__ = ["RowFreeParameters", "lift_row_free_into_gathers", "row_free_frontier"]


def lift_row_free_into_gathers(graphs, row_inputs) -> list:
    """``graphs`` with each elementwise op of a gathered row-free value and row-free scalars applied
    before the gather: ``s · z[g_k]`` → ``(s · z)[g_k]``, to a fixed point (``μ + σ z[g_k]`` →
    ``(μ + σ z)[g_k]``).

    The same values, but written so that the row-free frontier is the group effect ``σ z`` itself,
    which the rows' parameters are affine in, rather than ``σ`` and ``z``, whose product they are not.
    PyMC users write a non-centred effect either way (``a = μ + σ z`` then ``a[g]``, or
    ``μ + σ z[g]`` in the likelihood); without the lift the second one has no regression view and
    takes the slower generic set-up. A gather is ``x[index]`` by an integer vector
    (:func:`~pymc_subsample.model.op_patterns.is_row_gather`) with ``x`` reading no row; the other
    operands must read no row and be broadcastable along every axis, so the op gives x's shape
    before the gather and the gather's after it.
    """
    # measured without the lift (200 groups, 10⁵ rows): the generic set-up took 2.6 s warm
    rows = set(row_inputs)
    reads_rows = {}

    def on_rows(var) -> bool:
        if var not in reads_rows:
            owner = var.owner
            reads_rows[var] = var in rows or (owner is not None and any(on_rows(v) for v in owner.inputs))
        return reads_rows[var]

    @node_rewriter([Elemwise])
    def lift(fgraph, node):
        gathered = [i for i, var in enumerate(node.inputs) if var.owner is not None
                    and is_row_gather(var.owner) and not on_rows(var.owner.inputs[0])]
        if len(gathered) != 1 or len(node.outputs) != 1:
            return None
        (i,) = gathered
        others = [var for j, var in enumerate(node.inputs) if j != i]
        if any(on_rows(var) or not all(var.type.broadcastable) for var in others):
            return None
        gather = node.inputs[i].owner
        x, index = gather.inputs
        inputs = list(node.inputs)
        inputs[i] = x
        lifted = node.op(*inputs)
        if lifted.type.ndim != x.type.ndim:
            return None
        return [gather.op(lifted, index)]

    # on a copy of the graphs (their inputs, θ and the rows, kept): the rewrite replaces nodes in place
    fgraph = FunctionGraph(outputs=list(graphs), clone=True, copy_inputs=False, copy_orphans=False)
    in2out(lift).rewrite(fgraph)
    return list(fgraph.outputs)


def row_free_frontier(graphs, theta, row_inputs) -> list:
    """The variables of ``graphs`` that depend on ``theta`` and on no variable of ``row_inputs``
    and are inputs of a computation that does (e.g. ``a`` in ``a[g] + x·β``), in graph order.
    """
    rows = set(row_inputs)
    depends = {}  # variable → (depends on θ, depends on a row input)

    def of(var):
        if var not in depends:
            depends[var] = (var is theta, var in rows)
        return depends[var]

    frontier = []
    for node in toposort(graphs):
        on_theta = any(of(v)[0] for v in node.inputs)
        on_rows = any(of(v)[1] for v in node.inputs)
        for out in node.outputs:
            depends[out] = (on_theta, on_rows)
        if on_rows:
            frontier.extend(v for v in node.inputs if of(v) == (True, False) and v not in frontier)
    return frontier


class RowFreeParameters:
    """φ(θ) ∈ R^r, the concatenation of the flattened ``graphs`` (row-free graphs in ``theta``).

    Parameters
    ----------
    theta : TensorVariable
        The raveled free variables.
    ndim : int
        d, the length of θ.
    graphs : list of TensorVariable
        φ's pieces as graphs in θ (:func:`row_free_frontier`).

    Attributes
    ----------
    inputs : list of TensorVariable
        One fresh variable of each piece's type, to stand for it in the rows' graph.
    """

    def __init__(self, theta, ndim, graphs):
        self.theta, self.ndim = theta, ndim
        self.graphs = list(graphs)
        self.inputs = [g.type(name=f"phi_{i}") for i, g in enumerate(self.graphs)]
        self._flat = pt.concatenate([pt.cast(g, "float64").ravel() for g in self.graphs])
        self._value_fn = self._vjp_fn = None
        self._shapes = self._bounds = None
        self._sum_fn = None
        self._last_jacobian = None
        self._vectorised_fns = {}
        self._vjp = None
        self._weighted = None

    def _theta_arg(self, theta):
        return np.asarray(theta, dtype=self.theta.dtype)

    def value(self, theta) -> np.ndarray:
        """φ(θ), shape (r,)."""
        if self._value_fn is None:
            self._value_fn = compile_python([self.theta], [self._flat, *self.graphs])
        flat, *pieces = self._value_fn(self._theta_arg(theta))
        if self._shapes is None:
            self._shapes = [np.shape(p) for p in pieces]
            # kept: asked for at every expansion's evaluation (crossed effects' set-up, 10⁶ rows:
            # 1,066 times, 35 ms, computed afresh)
            self._bounds = np.cumsum([0, *(int(np.prod(shape)) for shape in self._shapes)])
        return np.asarray(flat, dtype=float)

    @property
    def size(self) -> int:
        if self._shapes is None:
            raise RuntimeError("RowFreeParameters.value must be called once before its size is known.")
        return int(self._bounds[-1])

    @property
    def piece_shapes(self) -> list[tuple]:
        """Each piece's shape, in order (:meth:`value` called once before)."""
        return [tuple(shape) for shape in self._shapes]

    @property
    def piece_sizes(self) -> list[int]:
        """The number of values of each piece, in order (:meth:`value` called once before)."""
        return [int(np.prod(shape)) for shape in self._shapes]

    @property
    def piece_bounds(self) -> np.ndarray:
        """Where each piece starts in the flat φ, then r: piece i is ``flat[bounds[i]:bounds[i + 1]]``."""
        return self._bounds

    def split(self, flat) -> list:
        """The pieces of a flat φ (r,), each in its graph's shape and dtype, as inputs of η(φ)."""
        return [piece[0] for piece in self.split_points(np.asarray(flat)[None])]

    def split_points(self, flats) -> list:
        """:meth:`split` of k flat φ's (k, r) at once: each piece (k, *shape), for η at k points."""
        flats = np.asarray(flats)
        bounds = self.piece_bounds
        pieces = zip(self.inputs, self._shapes, bounds[:-1], bounds[1:], strict=True)
        return [np.asarray(flats[:, start:stop], dtype=var.dtype).reshape((flats.shape[0], *shape))
                for var, shape, start, stop in pieces]

    def vjp(self, theta, weights) -> np.ndarray:
        """Dφ(θ)ᵀc for weights c (r,), shape (d,): one reverse pass through φ's graph."""
        if self._vjp_fn is None:
            c, _ = self.weighted_graph()
            self._vjp_fn = compile_python([self.theta, c], self._vjp_graph()[1])
        weights = np.asarray(weights, dtype=float)
        return np.asarray(self._vjp_fn(self._theta_arg(theta), weights), dtype=float)

    def _vjp_graph(self):
        """(c, Dφ(θ)ᵀc): the graph of :meth:`vjp` and of its vectorised forms, built once."""
        # measured: separate graphs for the r rows of Dφ and the d rows of the Hessian took 1 s of a
        # first run to rewrite
        if self._vjp is None:
            c, weighted = self.weighted_graph()
            self._vjp = (c, pytensor.grad(weighted, self.theta))
        return self._vjp

    @property
    def flat_graph(self):
        """φ(θ) flat (r,) as a graph in θ."""
        return self._flat

    def weighted_graph(self):
        """(c, c·φ(θ)): the graph :meth:`_vjp_graph` differentiates, built once."""
        if self._weighted is None:
            # c·φ as Σ_i c[piece i]·φ_i rather than c·concatenate(φ_i): the gradient of a concatenation
            # splits c, and the vectorised forms then hold a Blockwise(Split), whose Python
            # implementation cannot be pickled — both were compiled again in every construction
            # (1,000 groups: 2.5 s of a 5.5 s warm set-up)
            c = pt.vector("phi_weights", dtype="float64", shape=(self.size,))
            bounds = self.piece_bounds
            weighted = sum(pt.dot(c[start:stop], pt.cast(g, "float64").ravel())
                           for start, stop, g in zip(bounds[:-1], bounds[1:], self.graphs, strict=True))
            self._weighted = (c, weighted)
        return self._weighted

    def prior_and_pullback(self, tall):
        """(θ, c) ↦ (φ(θ) flat, log p(θ), ∇log p(θ) + Dφ(θ)ᵀc): one small compiled function of θ,
        kept with ``tall``'s functions, for what a log posterior in φ needs at each θ (the set-up's
        expansions, the perturbed estimate in φ): called with c = 0 for φ, then with the gradient in φ.
        """
        # measured on crossed effects at 10⁶ rows: the prior, φ and Dφᵀc on PyTensor's Python
        # linker took 0.33 s of a 1.4 s warm set-up (493 calls); this function, ~5 µs a call
        if self._shapes is None:  # φ's pieces' sizes, for c's length
            self.value(tall.initial_theta)

        def make():
            weights, weighted = self.weighted_graph()
            log_prior = tall.prior_graph
            outputs = [self._flat, log_prior, tall.gradient(log_prior + weighted)]
            return compile_function([tall.theta, weights], outputs)

        return tall.kept_function(("RowFreeParameters", "φ, prior and ∇prior + Dφᵀc"), make)

    def jacobian(self, theta) -> np.ndarray:
        """Dφ(θ), shape (r, d): :meth:`vjp` along each unit vector, exact.

        The last θ's Jacobian is kept: a full pass asks for it once per chunk of rows, r reverse
        passes each time.
        """
        # measured: 50 chunks of 10⁶ rows, r = 21 reverse passes each, were most of the non-centred
        # model's set-up
        key = self._theta_arg(theta).tobytes()
        if self._last_jacobian is None or self._last_jacobian[0] != key:
            rows = self._vectorised("jacobian") if self.size >= VECTORISED_MIN_D else None
            if rows is not None:  # many groups: the r reverse passes in one call
                jac = np.asarray(rows(np.eye(self.size), self._theta_arg(theta)), dtype=float)
            else:
                jac = np.stack([self.vjp(theta, e) for e in np.eye(self.size)])
            jac.setflags(write=False)  # shared by every caller with this θ
            self._last_jacobian = (key, jac)
        return self._last_jacobian[1]

    def contracted_hessian(self, theta, weights) -> np.ndarray:
        """Σ_i c_i ∇²φ_i(θ), shape (d, d), for weights c (r,): central differences of the exact
        Dφᵀc with h = 1e-5·max(1, |θ_j|), symmetrised.
        """
        gradients = None
        if self.ndim >= VECTORISED_MIN_D:
            at_points = self._vectorised("hessian")
            weights = np.asarray(weights, dtype=float)
            gradients = None if at_points is None else (lambda points: at_points(points, weights))
        return central_hessian(lambda t: self.vjp(t, weights), np.asarray(theta, dtype=float), gradients)

    def _vectorised(self, over):
        """Dφᵀc at many c (``over="jacobian"``: a function of (c's (k, r), θ)) or at many θ
        (``"hessian"``: of (θ's (k, d), c)) in one call (:func:`vectorised_gradient`), or None.
        """
        if over not in self._vectorised_fns:
            c, vjp = self._vjp_graph()
            self._vectorised_fns[over] = (vectorised_gradient(c, vjp, [self.theta]) if over == "jacobian"
                                          else vectorised_gradient(self.theta, vjp, [c]))
        return self._vectorised_fns[over]

    def quadratic_graph(self, center_phi, linear, quadratic, order):
        """Aᵀ Δφ + ½ Δφᵀ B Δφ for a symmetric B, truncated at ``order``, with Δφ = φ(θ) − φ*: a graph in
        θ (the arguments are arrays or symbolic tensors) whose θ-gradient is Dφᵀ(A + B Δφ).

        Written piece by piece, with w = B Δφ held constant under differentiation,

            Σ_p (A + w)_pᵀ Δφ_p − ½ Σ_p Δφ_pᵀ w_p,

        which has the value above and, B being symmetric, the gradient (A + w)ᵀ dΔφ: no ``Join`` of
        the pieces, no ``Split`` of their gradient and no Bᵀ product, each a kernel of its own for
        Numba to compile (:meth:`value` called once before, for the pieces' sizes).
        """
        bounds = self.piece_bounds
        spans = list(zip(bounds[:-1], bounds[1:], strict=True))
        deltas = [pt.cast(g, "float64").ravel() - center_phi[a:b]
                  for g, (a, b) in zip(self.graphs, spans, strict=True)]
        if order == 0:
            return pt.zeros(())

        def along_pieces(coefficients):
            return sum((coefficients[a:b] * delta).sum() for (a, b), delta in zip(spans, deltas, strict=True))

        if order == 1:
            return along_pieces(linear)
        held = disconnected_grad(pt.concatenate(deltas))
        w = disconnected_grad(pt.dot(quadratic, held))
        return along_pieces(linear + w) - 0.5 * (w * held).sum()

    def quadratic(self, theta, center_phi, linear, quadratic, order):
        """:meth:`quadratic_graph` and its gradient in θ at ``theta``, from one compiled call."""
        if order == 0:
            return 0.0, np.zeros(np.shape(theta))
        if self._sum_fn is None:
            phi0, a = pt.vector("phi_center", dtype="float64"), pt.vector("linear", dtype="float64")
            b = pt.matrix("quadratic", dtype="float64")
            value = self.quadratic_graph(phi0, a, b, 2)
            outputs = [value, pytensor.grad(value, self.theta)]
            self._sum_fn = compile_function([self.theta, phi0, a, b], outputs)
        if order == 1:
            quadratic = np.zeros_like(quadratic)
        value, grad = self._sum_fn(self._theta_arg(theta), center_phi, linear, quadratic)
        return float(value), np.asarray(grad, dtype=float)
