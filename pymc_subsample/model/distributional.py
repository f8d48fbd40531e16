"""A tall model as a distributional regression: each row's likelihood is univariate distributions
whose parameters are, through a link, affine in θ.

    ℓ_k(θ) = f(y_k, η_k(θ)),    η_k(θ) = η_k(0) + J_k θ  exactly,  η_k ∈ R^p,

where f is the observed variables' own log-density (PyMC's ``logp``) with each free parameter
written as link⁻¹(η). A GLM is p = 1 (η the linear predictor through its canonical link); a
Normal with unknown σ has η = (μ, log σ), a StudentT with unknown ν has (log ν, μ, log σ), and
PyMC's NegativeBinomial(μ = exp(x·β), α), stored as (n, p) = (α, α/(μ + α)), has
(log n, logit p) = (log α, log α − x·β): all affine in the unconstrained θ. Several observed
variables on the same rows add their η's and their f's. f is the family table's closed form where
it has the distribution under these links (:mod:`pymc_subsample.families`), else PyMC's ``logp``.

Every derivative of ℓ_k in θ then follows from elementwise derivatives of f in η and η's affine
map, with u_k = η_k(θ* + v) − η_k(θ*) = J_k v:

    ∇ℓ_k(θ*)·v = Σ_j ∂_j f(η_k*) u_kj,    vᵀH_k(θ*)v = Σ_jl ∂_jl f(η_k*) u_kj u_kl,
    H_k(θ) = J_kᵀ F''_k(θ) J_k.

The generic path gets the same numbers by forward mode through the whole model graph (Rop of
Rop), whose graphs are slow for PyTensor to rewrite and compile on a first run, most of all
for special functions (gammaln, digamma); here they are a few elementwise derivatives.
A link is found for each free parameter: where the graph writes it as exp(x) or sigmoid(x), x
itself; else the first of identity, log and logit under which it is numerically affine in θ.
Where none is, η may still be affine in the few row-free values φ(θ) that its graph reads
(:mod:`pymc_subsample.model.row_free`; a non-centred ``a = μ + τ z`` read as ``a[g]``):
η_k = η_k(0) + J_k φ(θ), the view's :attr:`~DistributionalRegression.phi`, and the Taylor proxy
is then taken in η (:class:`~pymc_subsample.control_variates.taylor.RowFreeTaylorProxy`).
:func:`~pymc_subsample.model.regression_view.view_matching_rows` then checks that f reproduces
the model's own rows, and any model it does not fit keeps the generic graph.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.logprob.utils import CheckParameterValue
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import applys_between, explicit_graph_inputs

from pymc_subsample.families import LINKS, PYTENSOR, PointMassMixture, closed_form
from pymc_subsample.model.closed_form import closed_form_rows
from pymc_subsample.model.compile import SLOW_REWRITES, compile_function, compile_numpy
from pymc_subsample.model.one_hot import (
    PointLayout,
    coordinates_read,
    find_one_hot_blocks,
    jacobian_products,
    kept_jacobian_products,
)
from pymc_subsample.model.points import PointsFunction, affine_offset_and_jacobian

__all__ = ["JACOBIAN_GRADIENT_MAX_D", "NUMPY_TERMS_MIN_ROWS", "DistributionalRegression", "RowTerms"]

# measured: compiling `eta_vjp` was 0.74 s of a first run's 7.3 s on the d = 2 zoo model; on the
# centred hierarchical model (d = 24 but 3 points) a Numba kernel of 4-5 s on a cold cache
#: up to this many points besides 0 (unit vectors of the coordinates η reads densely, one indicator
#: per group block: :class:`~pymc_subsample.model.one_hot.PointLayout`) the set-up's gradient passes
#: take Σ_k J_kᵀ∇f_k with J from the vectorised η, which the Hessian pass needs anyway, instead of a
#: reverse pass of their own (`eta_vjp`), which would be a compiled kernel of its own; above, the
#: reverse pass, O(m d) per chunk against J's O(m k)
JACOBIAN_GRADIENT_MAX_D = 8
# measured on 10⁶ rows of the zoo: NumPy's terms cost 0.2-2 ms a call of overhead and 1.5-5x a
# compiled pass's time per row, less than compiling a kernel for the set-up's few large batches
#: a batch of at least this many rows (the set-up's chunks and its 2,000-row pilots) has its rows'
#: terms computed in NumPy (:meth:`DistributionalRegression.row_terms`): no kernel to compile, at a
#: higher cost per row than compiled code
NUMPY_TERMS_MIN_ROWS = 2000

@dataclass(frozen=True)
class RowTerms:
    """η_k, f(y_k, η_k), ∂_j f and ∂_jl f (j ≤ l) of every row at one θ, as arrays (m,) or as the
    symbolic vectors a compiled graph takes them by.

    At θ* these are all the Taylor proxy of a row needs (Dang et al. 2019 eq. 4.4 written in η:
    q_k = f_k + Σ_j ∂_j f_k u_kj + ½ Σ_jl ∂_jl f_k u_kj u_kl, u_k = η_k(θ) − η_k). They depend on
    θ* and the row only, so a sampler computes them once when a row enters the subsample instead of
    at every leapfrog step, and the estimator's graph holds no derivative of f in η at all.
    """

    eta: list
    value: object
    first: list
    second: dict  # (j, l) with j ≤ l → ∂_jl f

    def flat(self) -> list:
        return [*self.eta, self.value, *self.first, *self.second.values()]

    @classmethod
    def from_flat(cls, values, n_eta, pairs) -> RowTerms:
        values = list(values)
        eta, value = values[:n_eta], values[n_eta]
        first = values[n_eta + 1: 2 * n_eta + 1]
        return cls(eta, value, first, dict(zip(pairs, values[2 * n_eta + 1:], strict=True)))


class DistributionalRegression:
    """The model's rows as f(y_k, η_k) with η affine in θ (module docstring); build it with
    :func:`~pymc_subsample.model.regression_view.distributional_regression`.

    Attributes
    ----------
    tall : TallModel
    eta_rows : list of TensorVariable
        η_1..η_p of the batch as graphs in (θ, batch), one value per row each.
    links : list of str
        The link of each η (a key of :data:`~pymc_subsample.families.LINKS`).
    """

    def __init__(self, tall, terms, eta_rows, links, raw_graphs, raw_to_eta, phi=None):
        self.tall = tall
        # η affine in θ (None), or in the row-free values φ(θ) its graph reads (RowFreeParameters)
        self.phi = phi
        # (random variable op, parameters: η index or constant graph, y, the rows it holds on: a
        # mask where data sets of different lengths are stacked, else None)
        self._terms = terms
        self.eta_rows = eta_rows
        self.links = links
        # η in NumPy from the parameters' graphs of the link check, compiled with C on first use
        self._raw_graphs, self._raw_to_eta = raw_graphs, raw_to_eta
        # η at k points at once, compiled on first use (the link check ran without C)
        self._theta_points = self._phi_points = self._value_points = None
        self._layouts = {}  # in θ (False) and in φ (True): PointLayout, on first use
        self._eta_phi = None
        self._terms_functions = {}  # "numpy" (None where some op has no array function), "compiled"
        self._vjp_function = None
        self.pairs = [(j, k) for j in range(len(eta_rows)) for k in range(j, len(eta_rows))]

    @property
    def n_eta(self) -> int:
        return len(self.eta_rows)

    def loglik_graph(self, etas):
        """Σ_o f_o(y_ok, η_k) per row: the observed variables' own logp in link⁻¹(``etas``)."""
        total = 0
        for op, params, observed, own_rows in self._terms:
            links = tuple(self.links[p] if isinstance(p, int) else None for p in params)
            args = [etas[p] if isinstance(p, int) else p for p in params]
            if isinstance(op, PointMassMixture):
                component = _row_logp(op.component, params[1:], args[1:], links[1:], observed)
                term = op.logp(PYTENSOR, observed, args[0], links[0], component)
            else:
                term = _row_logp(op, params, args, links, observed)
            # stacked data sets: a row holds one observed variable's density, as in the model's rows
            total = total + (term if own_rows is None else pt.switch(own_rows, term, 0.0))
        return total

    @functools.cached_property
    def closed_form(self):
        """The rows as the package's closed-form kernel reads them
        (:class:`~pymc_subsample.model.closed_form.ClosedFormRows`), or None.
        """
        return closed_form_rows(self)

    def observed_terms(self):
        """[(random variable op, its parameters (η index or constant graph), y's graph)] of the
        observed variables, where each is on every row and none is a mixture; else None.
        """
        if any(own is not None or isinstance(op, PointMassMixture) for op, _, _, own in self._terms):
            return None
        return [(op, params, observed) for op, params, observed, _ in self._terms]

    def derivative_graphs(self, etas, value):
        """f, ∂_j f and ∂_jl f (j ≤ l) at ``etas``, elementwise (rows are independent, so the
        gradient of a sum over rows is the per-row derivative); ``value``: f at ``etas``
        (:meth:`loglik_graph`).
        """
        first = pytensor.grad(value.sum(), etas, disconnected_inputs="ignore")
        second = {}
        for j in range(self.n_eta):
            row = pytensor.grad(first[j].sum(), etas[j:], disconnected_inputs="ignore")
            second.update({(j, j + i): g for i, g in enumerate(row)})
        return value, first, second

    # ------------------------------------------------------------- numerics
    def eta(self, theta, batch) -> np.ndarray:
        """η_k(θ), shape (m, p)."""
        return self.eta_at_thetas(np.asarray(theta)[None], batch)[0]

    def eta_at_thetas(self, thetas, batch) -> np.ndarray:
        """η_k at each row of ``thetas`` (k, d), shape (k, m, p), in one call where PyTensor can
        vectorise η's graph over the points (:class:`~pymc_subsample.model.points.PointsFunction`).
        """
        return np.stack(self.eta_components_at_thetas(thetas, batch), axis=-1)

    def eta_components_at_thetas(self, thetas, batch) -> list:
        """η_j at each row of ``thetas`` (k, d): one (k, m) array per η, from one vectorised call."""
        if self._theta_points is None:
            self._theta_points = self._points_in_theta(self._raw_graphs)
        raw = self._theta_points(thetas, batch)
        return [forward(v) for forward, v in zip(self._raw_to_eta, raw, strict=True)]

    def values_at_thetas(self, thetas, batch):
        """(η_j, one (k, m) array per η; f(y_k, η_k) (k, m)) at each row of ``thetas`` (k, d): the
        rows' values alone, without f's derivatives, from one call vectorised over the points
        (:class:`~pymc_subsample.model.points.PointsFunction`). For the set-up's passes that need ℓ_k
        at many points: the rows' terms at one point at a time computed ∂f and ∂²f too, and read each
        chunk once per point.
        """
        if self._value_points is None:
            self._value_points = self._points_in_theta([*self.eta_rows, self.loglik_graph(self.eta_rows)])
        *etas, value = self._value_points(thetas, batch)
        return etas, value

    def _points_in_theta(self, graphs):
        """:class:`~pymc_subsample.model.points.PointsFunction` of per-row ``graphs`` of (θ, batch)
        at k points θ.
        """
        dtype = self.tall.theta.dtype
        return PointsFunction([self.tall.theta], graphs, self.tall.batch_inputs,
                              lambda points: [np.asarray(points, dtype=dtype)])

    def eta_offset_and_jacobian(self, batch):
        """(η_k(0) (m, p), J_k (m, p, d)) from η at 0 and the d unit vectors, exact because η is
        affine: one vectorised call (:meth:`eta_at_thetas`).
        """
        return affine_offset_and_jacobian(lambda points: self.eta_at_thetas(points, batch), self.tall.ndim)

    def eta_at_phi(self, phi, batch) -> np.ndarray:
        """η_k as a function of a flat φ (:attr:`phi`), shape (m, p): affine in φ."""
        return self.eta_at_phis(np.asarray(phi)[None], batch)[0]

    def eta_at_phis(self, phis, batch) -> np.ndarray:
        """η_k at each row of ``phis`` (k, r), shape (k, m, p), as :meth:`eta_at_thetas`."""
        return np.stack(self.eta_components_at_phis(phis, batch), axis=-1)

    def eta_components_at_phis(self, phis, batch) -> list:
        """η_j at each row of ``phis`` (k, r): one (k, m) array per η, as :meth:`eta_components_at_thetas`."""
        if self._phi_points is None:
            self._phi_points = PointsFunction(self.phi.inputs, self._eta_in_phi(), self.tall.batch_inputs,
                                              self.phi.split_points)
        return self._phi_points(phis, batch)

    def _eta_in_phi(self):
        """η's graphs with φ's pieces as inputs (built once: the points function and the layout)."""
        if self._eta_phi is None:
            replace = dict(zip(self.phi.graphs, self.phi.inputs))
            self._eta_phi = graph_replace(self.eta_rows, replace, strict=False)
        return self._eta_phi

    def layout(self, phi=False) -> PointLayout:
        """The points η's Jacobian is read at, in θ or in φ: 0, the unit vectors, and one indicator
        per group block (:mod:`~pymc_subsample.model.one_hot`), found in η's graph on first use.
        """
        if phi not in self._layouts:
            if phi:
                sources = [(v, int(start), n, shape) for v, start, n, shape in
                           zip(self.phi.inputs, self.phi.piece_bounds[:-1], self.phi.piece_sizes,
                               self.phi.piece_shapes, strict=True)]
                graphs, n = self._eta_in_phi(), self.phi.size
            else:
                sources, graphs, n = [(self.tall.theta, 0, self.tall.ndim)], self.eta_rows, self.tall.ndim
            blocks = find_one_hot_blocks(graphs, sources, self.tall.batch_inputs)
            self._layouts[phi] = PointLayout(n, blocks, self.tall.batch_inputs,
                                             reads=coordinates_read(graphs, sources, n))
        return self._layouts[phi]

    def sparse_affine(self, batch, phi=False):
        """η's exact affine map over ``batch`` in θ (or in φ) in :meth:`layout`'s form, from η at its
        points (one vectorised call): (η_k(0) (p, m), ∂η_k along the layout's dense coordinates
        (p, n_dense, m), each block's coefficient (p, n_blocks, m), each block's entry per row
        (n_blocks, m)). Row k's η_j is η_jk(0) + Σ_c J_jck x_dense[c] + Σ_b coef_jbk x_b[owner_bk], x
        θ (or φ).
        """
        layout = self.layout(phi=phi)
        at_points = self.eta_components_at_phis if phi else self.eta_components_at_thetas
        values = at_points(layout.points, batch)  # one (k, m) array per η
        n_dense, m = layout.dense.size, values[0].shape[1]
        offset = np.stack([v[0] for v in values])
        jacobian = np.stack([v[1:1 + n_dense] - v[0] for v in values])
        coef = np.stack([v[1 + n_dense:] - v[0] for v in values])
        owner = np.array(layout.owners(batch), dtype=np.int64).reshape(len(layout.blocks), m)
        return offset, jacobian, coef, owner

    def group_block_sizes(self, phi=False) -> list[int]:
        """The sizes of the group blocks found in η's graph, in θ or in φ
        (:mod:`~pymc_subsample.model.one_hot`).
        """
        return [block.size for block in self.layout(phi=phi).blocks]

    def phi_offset_and_jacobian(self, batch):
        """(η_k at φ = 0 (m, p), ∂η_k/∂φ (m, p, r)) from η at 0 and the r unit vectors, exact because
        η is affine in φ: one vectorised call (:meth:`eta_at_phis`).
        """
        return affine_offset_and_jacobian(lambda points: self.eta_at_phis(points, batch), self.phi.size)

    def row_terms(self, theta, batch, *, setup=False) -> RowTerms:
        """:class:`RowTerms` of the rows of ``batch`` at θ: f and its first and second derivatives in η.

        A batch of :data:`NUMPY_TERMS_MIN_ROWS` rows or more (a set-up's chunks and pilots), or any
        batch with ``setup`` (a check on a few rows), goes through NumPy and SciPy over whole arrays:
        the closed form's terms written out where its families have them
        (:meth:`~pymc_subsample.model.closed_form.ClosedFormRows.row_terms`, η from the points
        function), else the graph of f and its derivatives
        (:func:`~pymc_subsample.model.compile.compile_numpy`); neither compiles anything. A smaller one
        (a sampler's per-iteration rows) through one compiled function, whose per-call cost is
        microseconds where NumPy's is a fraction of a millisecond.
        """
        n = np.shape(batch[0])[0] if batch and np.ndim(batch[0]) else 0
        theta = np.asarray(theta, dtype=self.tall.theta.dtype)
        whole_arrays = setup or n >= NUMPY_TERMS_MIN_ROWS
        form = self.closed_form
        if whole_arrays and form is not None and form.has_row_terms:  # nothing rewritten or compiled
            etas = [np.asarray(e[0], dtype=np.float64)
                    for e in self.eta_components_at_thetas(theta[None], batch)]
            return RowTerms(etas, *form.row_terms(batch, etas, self.pairs))
        function = self._terms_function("numpy") if whole_arrays else None
        if function is None:
            function = self._terms_function("compiled")
        values = function(theta, *batch)
        return RowTerms.from_flat(values, self.n_eta, self.pairs)

    def _terms_function(self, kind):
        """The rows' terms as a function of (θ, batch): ``"numpy"`` (None where some op has no array
        function) or ``"compiled"``, each built on first use.
        """
        if kind not in self._terms_functions:
            inputs, graphs = [self.tall.theta, *self.tall.batch_inputs], self._terms_graphs()
            self._terms_functions[kind] = (compile_numpy(inputs, graphs) if kind == "numpy" else
                                           compile_function(inputs, graphs, exclude=SLOW_REWRITES))
        return self._terms_functions[kind]

    def _terms_graphs(self):
        """f, ∂f and ∂²f in η as graphs, each as long as the rows."""
        value = self.loglik_graph(self.eta_rows)
        terms = RowTerms(self.eta_rows, *self.derivative_graphs(self.eta_rows, value)).flat()
        # each term as long as the rows: ``second`` (elementwise), not ``broadcast_to``, whose Alloc
        # folds ``value.shape`` symbolically while the graph is built (10 ms a term, 86 ms of a 0.4 s
        # warm set-up of the linear zoo model); the rewrites make it an Alloc anyway
        return [pt.second(value, t) for t in terms]

    def row_terms_variables(self) -> RowTerms:
        """Symbolic vectors standing for :meth:`row_terms` at θ* in a graph (one value per row)."""
        def vector(name):
            return pt.vector(name, dtype="float64")

        return RowTerms([vector(f"eta_center_{j}") for j in range(self.n_eta)], vector("f_center"),
                        [vector(f"df_center_{j}") for j in range(self.n_eta)],
                        {(j, k): vector(f"d2f_center_{j}{k}") for j, k in self.pairs})

    def sums(self, theta, batch, hessian=True):
        """Σ_k f(y_k, η_k), Σ_k ∇ℓ_k and (with ``hessian``) Σ_k H_k in θ over ``batch`` at θ, from one
        call of the elementwise function and η at 0 and the d unit vectors (one vectorised call; one
        indicator per group block), whose differences are η's exact Jacobian J: Σ_k J_kᵀ∇f_k and
        Σ_k J_kᵀ F''_k J_k (:func:`~pymc_subsample.model.one_hot.jacobian_products`). The gradient
        alone, where J takes more than :data:`JACOBIAN_GRADIENT_MAX_D` points besides 0, by one
        reverse pass through η instead (:meth:`eta_vjp`, O(m d) against J's O(m k) for k points).
        Where η is affine in φ(θ), the gradient is Dφᵀ A with A from η at the r + 1 points in φ
        (:meth:`phi_sums`), and the Hessian by the chain rule: Dφᵀ B Dφ + Σ_i A_i ∇²φ_i. Such a
        model's centre is found in φ (:func:`~pymc_subsample.control_variates.center.find_center`),
        only the subset MAP asks for gradients in θ, and a first run compiles no reverse pass
        through η (a compiled kernel).
        """
        # measured on the non-centred zoo model at 10⁶ rows: a gradient pass through `eta_vjp` took
        # 31 ms against ~80 ms from the points, but compiling it costs more than the few passes in θ
        if self.phi is not None and hessian:
            total, a, b = self.phi_sums(theta, batch)
            dphi = self.phi.jacobian(theta)
            return total, dphi.T @ a, dphi.T @ b @ dphi + self.phi.contracted_hessian(theta, a)
        if self.phi is not None:
            total, a = self.phi_gradient_sums(theta, batch)
            return total, self.phi.vjp(theta, a)
        terms = self.row_terms(theta, batch)
        total = float(np.sum(terms.value))
        layout = self.layout()
        if not hessian and len(layout.points) - 1 > JACOBIAN_GRADIENT_MAX_D:
            return total, self.eta_vjp(terms.first, batch, theta)
        points = self.eta_components_at_thetas(layout.points, batch)
        grad, hess = jacobian_products(layout, layout.owners(batch), points, terms, hessian)
        return (total, grad, hess) if hessian else (total, grad)

    def phi_sums(self, theta, batch, hessian=True, affine=None):
        """(Σ_k f_k, A = Σ_k J_kᵀ ∇f_k, B = Σ_k J_kᵀ F''_k J_k) at θ over ``batch``, with J_k = ∂η_k/∂φ:
        the sums of the Taylor proxies in η of a model affine in φ(θ)
        (:class:`~pymc_subsample.control_variates.taylor.RowFreeTaylorProxy`); without B, a cheaper
        pass, where ``hessian`` is False. J from η at the layout's points, or from the batch's rows'
        ``affine`` (:class:`~pymc_subsample.model.affine_rows.AffineRows`) where they are kept.
        """
        # measured on the non-centred zoo model at 10⁶ rows, r = 21: a pass without B 78 ms, with B 200 ms
        terms = self.row_terms(theta, batch)
        layout = self.layout(phi=True)
        if affine is not None:
            a, b = kept_jacobian_products(layout, affine, terms, hessian)
        else:
            points = self.eta_components_at_phis(layout.points, batch)
            a, b = jacobian_products(layout, layout.owners(batch), points, terms, hessian)
        return (float(np.sum(terms.value)), a, b) if hessian else (float(np.sum(terms.value)), a)

    def phi_gradient_sums(self, theta, batch):
        """(Σ_k f_k, A) of :meth:`phi_sums`, without B."""
        return self.phi_sums(theta, batch, hessian=False)

    def eta_vjp(self, cotangents, batch, theta) -> np.ndarray:
        """Σ_k (∂η_k/∂θ)ᵀ c_k at θ for per-row cotangents ``cotangents`` (p arrays (m,)): reverse mode
        through η (through φ(θ) too, where η is affine in a row-free φ).
        """
        if self._vjp_function is None:
            tall = self.tall
            covectors = [pt.vector(f"cotangent_{j}", dtype="float64") for j in range(self.n_eta)]
            inner = sum(pt.sum(c * eta) for c, eta in zip(covectors, self.eta_rows, strict=True))
            inputs = [tall.theta, *covectors, *tall.batch_inputs]
            grad = pytensor.grad(inner, tall.theta)
            # in NumPy where it can be (the centre's passes call it on chunks of rows): compiled, it
            # is a Numba function of its own, 4-5 s of a cold first run on the centred hierarchical
            # model (its a[g] read back as a scatter-add)
            self._vjp_function = compile_numpy(inputs, [grad]) or compile_function(inputs, [grad])
        theta = np.asarray(theta, dtype=self.tall.theta.dtype)
        cotangents = [np.asarray(c, dtype="float64") for c in cotangents]
        return np.asarray(self._vjp_function(theta, *cotangents, *batch)[0], dtype=float)


def _row_logp(op, params, args, links, observed):
    """A univariate random variable's log-density at ``observed`` with its parameters ``args`` (η
    under ``links``, or constants): the family table's f where it has the op under these links
    (:data:`~pymc_subsample.families.CLOSED_FORMS`), else PyMC's ``logp`` of the op at link⁻¹(η),
    without its parameter checks.
    """
    family = closed_form(op, links)
    if family is not None:
        # η and y in float64; constants as the model has them (a known σ: _normal_known_sigma)
        args = [pt.cast(a, "float64") if isinstance(p, int) else a for p, a in zip(params, args, strict=True)]
        return family.logp(PYTENSOR, pt.cast(observed, "float64"), *args)
    values = [LINKS[link].inverse(PYTENSOR, arg) if link else arg
              for link, arg in zip(links, args, strict=True)]
    return _without_parameter_checks(pm.logp(op(*values), observed))


def _without_parameter_checks(graph):
    """``graph`` without PyMC's parameter checks (e.g. 0 ≤ p ≤ 1): link⁻¹(η) is in the parameter's
    domain by construction, and the checks cost a quarter of a logistic estimator call.
    """
    checks = [node for node in applys_between(explicit_graph_inputs([graph]), [graph])
              if isinstance(node.op, CheckParameterValue)]
    if not checks:
        return graph
    return graph_replace(graph, {node.outputs[0]: node.inputs[0] for node in checks}, strict=False)
