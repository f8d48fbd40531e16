"""Finding a tall model's distributional-regression view (:mod:`~pymc_subsample.model.distributional`).

:func:`affine_view` reads the observed variables' distributions and their parameters' graphs, finds
for each free parameter a link under which it is affine in θ (or in a row-free φ(θ),
:mod:`~pymc_subsample.model.row_free`), and builds the view; :func:`view_matching_rows` checks that
the view's f reproduces the model's own rows. Both run on a few rows with nothing compiled.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from pymc_subsample.families import LINKS, NUMPY, PYTENSOR, PointMassMixture
from pymc_subsample.model.compile import compile_python
from pymc_subsample.model.distributional import DistributionalRegression
from pymc_subsample.model.op_patterns import (
    elementwise_input,
    is_univariate_random_variable,
    point_mass_mixture,
)
from pymc_subsample.model.row_free import RowFreeParameters, lift_row_free_into_gathers, row_free_frontier

__all__ = ["affine_view", "could_be_distributional", "distributional_regression", "view_matching_rows"]

_CHECK_ROWS = 8


def could_be_distributional(model) -> bool:
    """A cheap look (no graph is built): every observed variable is a univariate random variable
    over the rows. :func:`distributional_regression` checks the rest.
    """
    return bool(model.observed_RVs) and all(_univariate_rows(rv) for rv in model.observed_RVs)


def _univariate_rows(rv) -> bool:
    univariate = is_univariate_random_variable(rv.owner.op) or point_mass_mixture(rv) is not None
    return univariate and rv.type.ndim == 1


def distributional_regression(tall) -> DistributionalRegression:
    """The distributional-regression view of ``tall`` (module docstring), or a ValueError saying why not."""
    model = tall.model
    free = set(model.free_RVs)
    terms, candidates = [], []  # candidates: (graph, links to try, written through) per free parameter
    masks = []  # where data sets of different lengths are stacked, each observed variable's rows
    for rv in model.observed_RVs:
        if not _univariate_rows(rv):
            raise ValueError(f"{rv.name!r} is not a univariate distribution over the rows")
        stacked = None if tall.data_sets is None else tall.data_sets[rv.name]
        own = (lambda graph: graph) if stacked is None else stacked.over_stacked_rows
        mixture = point_mass_mixture(rv)
        if mixture is None:
            op, dist_params = rv.owner.op, rv.owner.op.dist_params(rv.owner)
        else:  # the point's weight is 1 − w: w, then the component's parameters
            weight, point, component = mixture
            op = PointMassMixture(component.owner.op, point)
            dist_params = [weight, *component.owner.op.dist_params(component.owner)]
        params = []
        for param in dist_params:
            if free.isdisjoint(ancestors([param])):
                params.append(own(param))  # data or a constant: kept as it is
            else:
                params.append(len(candidates))
                candidates.append(_strip_link(own(model.replace_rvs_by_values([param])[0])))
        terms.append((op, params, own(model.rvs_to_values[rv])))
        if stacked is not None:
            masks.append(stacked.mask)
    constants = [p for _, params, _ in terms for p in params if not isinstance(p, int)]
    graphs = tall.batch_graph([g for g, *_ in candidates] + constants + masks + [y for *_, y in terms])
    n_free, n_const, n_masks = len(candidates), len(constants), len(masks)
    rows = graphs[-1].shape  # every observed variable has the rows' length
    raw = [pt.broadcast_to(g, rows) for g in graphs[:n_free]]
    constant_rows = iter(graphs[n_free: n_free + n_const])
    mask_rows = graphs[n_free + n_const: n_free + n_const + n_masks] or [None] * len(terms)
    terms = [(op, [p if isinstance(p, int) else next(constant_rows) for p in params], y, mask)
             for (op, params, _), y, mask in zip(terms, graphs[n_free + n_const + n_masks:], mask_rows,
                                                 strict=True)]
    # the link check runs on a few rows with PyTensor's Python linker: no kernel is compiled for a
    # model that turns out not to be affine (a non-centred μ + σz: 9 modules, 2-4 s of a first run)
    fn = compile_python([tall.theta, *tall.batch_inputs], raw)
    phi = None
    try:
        links = _affine_links(tall, lambda theta, batch: fn(theta, *batch), tall.ndim, candidates)
    except ValueError:
        phi, links, raw = _affine_in_row_free(tall, raw, candidates)
    forwards = [LINKS["identity" if written else link] for link, (_, _, written) in zip(links, candidates)]
    eta_rows = [forward.forward(PYTENSOR, g) for forward, g in zip(forwards, raw)]
    to_eta = [partial(forward.forward, NUMPY) for forward in forwards]
    return DistributionalRegression(tall, terms, eta_rows, links, raw, to_eta, phi)


def _affine_in_row_free(tall, raw, candidates):
    """(φ, links, the parameters' graphs) where the parameters are not affine in θ but in the row-free
    values φ(θ) they are computed from (:mod:`pymc_subsample.model.row_free`, e.g. a non-centred
    ``μ + τ z[g]``), or a ValueError. The graphs returned are ``raw`` with row-free ops moved before
    the gathers (:func:`~pymc_subsample.model.row_free.lift_row_free_into_gathers`), which φ's
    pieces are variables of.
    """
    raw = lift_row_free_into_gathers(raw, tall.batch_inputs)
    frontier = row_free_frontier(raw, tall.theta, tall.batch_inputs)
    if not frontier:
        raise ValueError("the parameters are not affine in θ and read no row-free value of θ")
    phi = RowFreeParameters(tall.theta, tall.ndim, frontier)
    phi.value(tall.initial_theta)  # the pieces' shapes
    raw_phi = graph_replace(raw, dict(zip(frontier, phi.inputs, strict=True)), strict=False)
    fn = compile_python([*phi.inputs, *tall.batch_inputs], raw_phi)
    links = _affine_links(tall, lambda flat, batch: fn(*phi.split(flat), *batch), phi.size, candidates)
    return phi, links, raw


def _strip_link(param):
    """(x, [link], True) when ``param`` is exp(x) or sigmoid(x) up to added axes (η = x exactly),
    else (param, every link, False).
    """
    for link in LINKS.values():
        x = None if link.written_as is None else elementwise_input(param, link.written_as,
                                                                   through_dimshuffles=True)
        if x is not None:
            return x, [link.name], True
    return param, list(LINKS), False


def _affine_links(tall, evaluate, d, candidates, n_random=2):
    """The first link of each candidate (its graph's values from ``evaluate(point, batch)``) under
    which it is affine in the point (θ, or φ of :mod:`~pymc_subsample.model.row_free`; of length
    ``d``), checked at ``n_random`` random points on a few rows; or a ValueError.
    """
    rng = np.random.default_rng(0)
    batch = tall.gather(rng.choice(tall.n_rows, size=min(_CHECK_ROWS, tall.n_rows), replace=False))
    thetas = np.vstack([np.zeros(d), np.eye(d), rng.normal(scale=2.0, size=(n_random, d))])
    values = [[np.asarray(v, dtype=float) for v in evaluate(t.astype(tall.theta.dtype), batch)]
              for t in thetas]
    links = []
    for j, (_, names, written) in enumerate(candidates):
        for name in names:
            forward = LINKS["identity" if written else name]  # written through: η is the graph
            with np.errstate(all="ignore"):
                eta = np.array([forward.forward(NUMPY, v[j]) for v in values])  # (d + 1 + n_random, m)
            if not np.all(np.isfinite(eta)):
                continue
            expected = eta[0] + thetas[d + 1:] @ (eta[1: d + 1] - eta[0])
            if np.allclose(eta[d + 1:], expected, rtol=1e-8, atol=1e-8):
                links.append(name)
                break
        else:
            raise ValueError(f"parameter {j} is not affine in θ under any of the links {names}")
    return links


def affine_view(tall) -> DistributionalRegression | None:
    """:func:`distributional_regression` of ``tall``, or None where the model is not one (no error).

    Cheap (one small compiled function of the parameters on a few rows), so a model such as a
    non-centred ``μ + σ z[g]`` is turned away before any set-up function is compiled for the view.
    """
    if not could_be_distributional(tall.model):
        return None
    try:
        return distributional_regression(tall)
    except (ValueError, TypeError, NotImplementedError):  # not affine, unsupported graph
        return None


def view_matching_rows(view, center, n_checks=3, rtol=1e-9) -> DistributionalRegression | None:
    """``view`` when its f gives the model's own rows, else None (no error): Σ_k f(y_k, η_k) at
    ``center`` and its change to ``n_checks`` points around it against the model's own Σ_k ℓ_k, on
    a few rows. Values too, not only changes: the set-up's Σℓ_k(θ*) comes from f, and with it the
    value of every estimate (HMC-ECS with all rows and an exact proxy is the model's own log
    posterior, to the last digits).
    """
    tall = view.tall
    rng = np.random.default_rng(0)
    batch = tall.gather(rng.choice(tall.n_rows, size=min(16, tall.n_rows), replace=False))

    form = view.closed_form
    written = form is not None and form.has_row_terms

    def sums(theta):
        # the view's f as the set-up's passes read it (row_terms) and, where those are written out for
        # the closed form's families (ClosedFormRows.row_terms), as its graph computes it too (the
        # pilot's values, the compiled estimates); elsewhere row_terms' f is the graph's
        f_sums = [np.sum(view.row_terms(theta, batch, setup=True).value)]
        if written:
            point = np.asarray(theta, dtype=tall.theta.dtype)[None]
            f_sums.append(np.sum(view.values_at_thetas(point, batch)[1]))
        return tall.model_loglik_sum(theta, batch), np.array(f_sums)

    try:
        model_center, f_center = sums(center)
        if not np.allclose(f_center, model_center, rtol=rtol, atol=rtol):
            return None
        for _ in range(n_checks):
            model_sum, f_sum = sums(center + rng.normal(scale=0.5, size=tall.ndim))
            if not np.allclose(f_sum - f_center, model_sum - model_center, rtol=rtol,
                               atol=rtol * (1.0 + abs(model_sum))):
                return None
    # e.g. f without a second derivative; or η computing a length-N array the model's rows had
    # folded into row data (``pt.arange(N)``): AssertionError of a SpecifyShape, a ValueError of shapes
    except (ValueError, TypeError, NotImplementedError, AssertionError, IndexError):
        return None
    return view
