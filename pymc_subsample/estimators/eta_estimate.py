"""The perturbed HMC-ECS estimate of a regression affine in θ, with only f compiled from the model.

For rows ℓ_k(θ) = f(y_k, η_k(θ)) with η_k = η_k(0) + J_k θ exactly (η_k ∈ R^p;
:mod:`~pymc_subsample.model.distributional`), the estimate of
:meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_with_exact` (Dang et al. 2019
eqs. 4.1-4.5) needs from the model only f(y_k, ·) and ∂f/∂η_j at the batch's η_k, elementwise, and
log p(θ) with its gradient. Everything else is the same arithmetic for every such model:

    η_k = η_k(0) + J_k θ,   u_k = η_k − η_k*,   d_k = f(y_k, η_k) − q_k(u_k)   (q_k: eq. 4.3 in η),
    ℓ̂ − Σq = Σ_{k∈E} d_k + (n_R/m) Σ_{k∈R} d_k,   σ̂² = (n_R²/m²) Σ_{k∈R} (d_k − d̄_R)²,
    ∇_θ (ℓ̂ − σ̂²/2) = Σ_k c_k J_kᵀ (∂f/∂η(η_k) − ∂q_k/∂u),
    c_k = 1 (k ∈ E),   c_k = n_R/m − (n_R²/m²)(d_k − d̄_R) (k ∈ R).

So :class:`EtaPerturbedFunction` compiles one PyTensor function of (θ, η, batch) with outputs log
p(θ), its gradient, f and ∂f/∂η, all elementwise or in θ (one fused loop over the rows), and runs
the rest in :func:`~.eta_kernels.perturbed_sums`, a Numba kernel of this package cached on disk. Why: compiled
as one graph with η = Xθ and its reverse pass, the estimate was the largest Numba compilation of a
first run, larger than PyMC's own ``logp_dlogp``; measured on a cold PyTensor cache (CPU s, m =
1000): logistic 10.4 against 1.9 s for the function here, StudentT 16.7 against 3.3 s. A call
costs 0-15 µs more (three calls from Python where the graph was one; m = 1000, 2026-11-30).

Rows of families whose f the package writes in Numba itself (observed variables on every row with y a
column of the data, their other parameters η or constants: :mod:`~pymc_subsample.model.closed_form`)
need no function of f at all: :func:`~.eta_kernels.closed_form_sums` computes η, f, ∂f, the sums
and the proxy's Σq in one call, and log p(θ) comes from the prior's own compiled function.
Measured at m = 1000 (logistic, N = 200,000, 2026-11-30): an estimate 42.6 → 26 µs at d = 4 and
58 → 32 µs at d = 31 against the function of f. The kernels, their closed forms and the measures
of their loops are :mod:`~.eta_kernels`'s.

J_k and η_k(0) of every row are read once, in one pass through NumPy, and kept
(:func:`~pymc_subsample.model.affine_rows.kept_affine_rows`, by the tall model): a batch reads its
rows' by index, where computing them per batch would cost 80-250 µs (η at d + 1 points on
PyTensor's Python linker), about an iteration. J is kept in the view's sparse form
(:meth:`~pymc_subsample.model.distributional.DistributionalRegression.sparse_affine`): the
columns of the coordinates read densely, and for each group effect read by index (a[g_k]) one
coefficient and one entry a row.

Rows affine in a row-free φ(θ) (a non-centred a = μ + τz read as a[g_k]) run the same kernels in φ,
with φ(θ) and Dφ(θ)ᵀg from a small compiled function of θ (:class:`EtaPerturbedFunction`).
Measured on a cold PyTensor cache, 10⁵ rows, the whole first draw of ``pm.sample`` (wall s, one
core, 2026-11-30): non-centred 11.8 → 8.1, centred 9.9 → 7.3, crossed effects 17.3 → 11.4, against
the estimate as one graph (5.4, 5.8 and 8.0 with θ of static length, which leaves PyTensor's
rewrites no reshape to make a ``SpecifyShape`` of; PyMC's NUTS 7.2, 7.4 and 11.0 s).
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

from pymc_subsample.control_variates.taylor import taylor_sum
from pymc_subsample.estimators.eta_kernels import affine_eta, closed_form_sums, perturbed_sums, replace_rows
from pymc_subsample.model.compile import compile_function, direct_call

__all__ = ["EtaPerturbedFunction"]


class EtaPerturbedFunction:
    """The perturbed estimate (θ, n_R, m, r, batch pieces) ↦ (log p(θ) + ℓ̂ − Σq − σ̂²/2, gradient, σ̂²)
    of a target whose rows are affine in θ, called as the target's compiled
    :meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_function` is; its arguments
    after θ from :meth:`arguments`.

    Rows affine in a row-free φ(θ) (:mod:`~pymc_subsample.model.row_free`) take η from φ and the
    gradient in φ, g, back to θ as Dφ(θ)ᵀg; their proxy's sum Σq = Σf* + AᵀΔφ + ½ΔφᵀBΔφ
    (:class:`~pymc_subsample.control_variates.taylor.RowFreeTaylorProxy`) is added here, in φ, to
    the value and to g, as the target's graph of the whole estimate holds it. A second compiled
    function of θ alone gives φ(θ), log p(θ) and ∇log p(θ) + Dφ(θ)ᵀc: called with c = 0 for φ,
    then with c = g.

    Rows of a family of :mod:`~pymc_subsample.model.closed_form` (``closed_form``) need no
    function of f: η, f and the sums are one call of :func:`closed_form_sums`, and in θ log p(θ)
    comes from the closed-form prior where there is one
    (:attr:`~pymc_subsample.model.tall.TallModel.closed_form_prior`), else from the tall model's
    function of the prior (:meth:`~pymc_subsample.model.tall.TallModel.prior_function`).
    """

    def __init__(self, target, affine):
        view, tall = target.glm, target.tall
        self.order, self.n_eta = target.order, view.n_eta
        self.pairs = np.array(view.pairs, dtype=np.int64).reshape(-1, 2)
        self.constant = affine.constant
        self.in_phi = view.phi is not None
        self.closed_form = view.closed_form
        self.rows_function = self.phi_function = self.prior_function = None
        prior = not self.in_phi
        if self.closed_form is not None and prior:
            closed_form_prior = tall.closed_form_prior
            self.prior_function = (closed_form_prior if closed_form_prior is not None else
                                   direct_call(tall.prior_function()))
        if self.closed_form is None:
            key = ("EtaPerturbedFunction", "prior, f and ∂f/∂η" if prior else "f and ∂f/∂η", self.constant)
            self.rows_function = tall.kept_function(
                key, lambda: _rows_function(tall, view, self.constant, prior))
        proxy = target.proxy
        if self.in_phi:
            self.n_coords = view.phi.size
            sums = (proxy.phi_center, proxy.phi_grad_sum, proxy.phi_hess_sum)
            self.phi_function = view.phi.prior_and_pullback(tall)
            self._no_weights = np.zeros(self.n_coords)
        else:
            self.n_coords = tall.ndim
            sums = (proxy.center, proxy.grad_sum, proxy.hess_sum)
        # Σq as a Taylor polynomial in the coordinates η is affine in (θ, or φ): the value and gradient
        # hold it (SubsampledTarget.perturbed_adds_sum_q)
        self.sum_q = (float(proxy.loglik_sum), *(np.ascontiguousarray(v, dtype=float) for v in sums))

    def arguments(self, batch, terms, affine, subsampled, n_rest) -> tuple:
        """The arguments after θ on ``batch`` with the rows' ``terms`` at θ* (flat, as
        :class:`~pymc_subsample.model.distributional.RowTerms`) and their
        :class:`~pymc_subsample.model.affine_rows.AffineRows` ``affine``: the rows marked 1 in
        ``subsampled`` a subsample of ``n_rest`` rows, the others computed exactly. In place of the
        batch, the closed form's y where there is one.
        """
        centre = np.array(terms, dtype=float, order="C")  # a copy: with_rows changes its own copy only
        return (float(n_rest), float(subsampled.sum()), subsampled, affine, self._rows(batch), centre)

    def with_rows(self, arguments, changed, batch, terms, kept, rows) -> tuple:
        """:meth:`arguments` of ``batch``, made from another batch's ``arguments`` by replacing the
        positions ``changed`` (a slice) with the rows ``rows``: their terms at θ* ``terms`` (n_terms,
        c), their η(0) and J read from ``kept`` (the
        :class:`~pymc_subsample.model.affine_rows.KeptAffineRows` of all N rows).
        """
        n_rest, m_rest, subsampled, parent, parent_y, parent_centre = arguments
        offset, jacobian, coef, owner, centre = replace_rows(
            parent.offset, parent.jacobian, parent.coef, parent.owner, parent_centre, kept.offset,
            kept.jacobian, kept.coef, kept.owner, terms, np.asarray(rows, dtype=np.int64), changed.start)
        affine = parent._replace(offset=offset, jacobian=jacobian, coef=coef, owner=owner)
        if self.closed_form is None:
            return (n_rest, m_rest, subsampled, affine, self._rows(batch), centre)
        y = parent_y.copy()  # the changed rows' y only, cast as the model casts them
        y[:, changed] = self.closed_form.y(tuple(column[changed] for column in batch))
        return (n_rest, m_rest, subsampled, affine, y, centre)

    def fused_fixed(self):
        """(the prior's Numba function, compiled for θ, and the arguments of
        :func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_iteration` the same for every subsample), or
        None where the estimate is not one call of :func:`~.eta_kernels.closed_form_sums` and of the
        prior (rows in φ, f compiled from the model).
        """
        if self.closed_form is None or self.in_phi or self.prior_function is None:
            return None
        self.prior_function(self.sum_q[1])  # compiled for θ from Python, at θ*
        form = self.closed_form
        fixed = (np.ascontiguousarray(form.code, dtype=np.int64),
                 np.ascontiguousarray(form.eta_index, dtype=np.int64),
                 np.ascontiguousarray(form.constants, dtype=float), np.ascontiguousarray(self.pairs),
                 int(self.order), *self.sum_q)
        return self.prior_function, fixed

    @staticmethod
    def fused_rows(arguments) -> tuple:
        """:meth:`arguments` as :func:`~pymc_subsample.kernels.eta_nuts.eta_nuts_iteration` takes a
        subsample's (y as float64).
        """
        n_rest, m_rest, subsampled, affine, y, centre = arguments
        return (np.ascontiguousarray(y, dtype=float), *affine, centre,
                np.ascontiguousarray(subsampled, dtype=float), float(n_rest), float(m_rest))

    def _rows(self, batch):
        """What the estimate reads of ``batch``'s rows: the closed form's y, or every row leaf for f."""
        return tuple(batch) if self.closed_form is None else self.closed_form.y(batch)

    def __call__(self, theta, n_rest, m_rest, subsampled, affine, batch, centre):
        x = self.phi_function(theta, self._no_weights)[0] if self.in_phi else theta
        if self.closed_form is not None:  # Σq included
            form = self.closed_form
            value, grad, sigma2 = closed_form_sums(form.code, form.eta_index, form.constants, batch, *affine,
                                                   x, centre, self.pairs, self.order, subsampled, n_rest,
                                                   m_rest, *self.sum_q)
            prior = None if self.in_phi else self.prior_function(theta)
        else:
            value, grad, sigma2, prior = self._sums_from_f(theta, x, affine, batch, centre, subsampled,
                                                           n_rest, m_rest)
            # in NumPy: B(x − x*) is BLAS's product here, measured faster than a loop of its own
            # kernel at r = 119 (crossed effects)
            sum_q, sum_q_grad = taylor_sum(self.order, x, *self.sum_q)
            value, grad = value + sum_q, grad + sum_q_grad
        if self.in_phi:
            _, prior, grad = self.phi_function(theta, grad)
            return float(prior) + value, grad, sigma2
        return float(prior[0]) + value, prior[1] + grad, sigma2

    def _sums_from_f(self, theta, x, affine, batch, centre, subsampled, n_rest, m_rest):
        """(value, gradient, σ̂², (log p, ∇log p) or None in φ) with f from the compiled rows function."""
        eta = affine_eta(*affine, x)
        etas = [np.array(e[0]) if c else e for e, c in zip(eta, self.constant, strict=True)]
        prior = None
        if self.in_phi:
            at_eta = self.rows_function(*etas, *batch)
        else:
            log_prior, prior_grad, *at_eta = self.rows_function(theta, *etas, *batch)
            prior = (log_prior, prior_grad)
        sparse_jacobian = (affine.jacobian, affine.coef, affine.owner, affine.constant_jacobian, affine.slot,
                           affine.dense, affine.first, affine.stride)
        return (*perturbed_sums(eta, *sparse_jacobian, self.n_coords, np.array(at_eta), centre, self.pairs,
                                self.order, subsampled, n_rest, m_rest), prior)


def _rows_function(tall, view, constant, prior):
    """f(y_k, η_k) and ∂f/∂η_j (one value a row each) as a function of (η_1..η_p, batch), with the
    η_j that are the same on every row (``constant``) scalars; with ``prior``, log p(θ) and its
    gradient before them, and θ the first input.

    Why scalars: f's special functions of such an η (a StudentT's ν and σ, a negative binomial's α)
    are then computed once a call, not once a row; their rows' ∂f/∂η_j come by forward mode.
    """
    # measured at m = 1000 (StudentT): 83 µs a call with η_ν and η_σ as vectors
    etas = [pt.dscalar(f"eta_{j}") if c else pt.dvector(f"eta_{j}") for j, c in enumerate(constant)]
    value = view.loglik_graph(etas)
    one = pt.constant(1.0, dtype="float64")
    slopes = [pytensor.pushforward(value, eta, one, disconnected_outputs="ignore") if c else
              pytensor.grad(value.sum(), eta, disconnected_inputs="ignore")
              for eta, c in zip(etas, constant, strict=True)]
    # every output one value a row: a slope that does not depend on the row is broadcast
    slopes = [pt.second(value, slope) for slope in slopes]
    if not prior:
        return compile_function([*etas, *tall.batch_inputs], [value, *slopes])
    log_prior = tall.prior_graph
    return compile_function([tall.theta, *etas, *tall.batch_inputs],
                            [log_prior, tall.gradient(log_prior), value, *slopes])
