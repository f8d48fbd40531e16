"""The perturbed estimate of a regression affine in θ, with only f compiled from the model
(:mod:`pymc_subsample.estimators.eta_estimate`), equals the estimator's formulas and the target's
graph of the whole estimate."""

import numpy as np
import pymc as pm
import pytest
from test_glm_differences import block_updates, effects_written_in_the_likelihood, gaussian_mean
from zoo import build

from pymc_subsample.control_variates.taylor import eta_differences_at_thetas
from pymc_subsample.estimators.eta_kernels import affine_eta, perturbed_sums
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.model import affine_rows as kept_rows
from pymc_subsample.model.affine_rows import affine_rows
from pymc_subsample.model.closed_form import (
    BERNOULLI_LOGIT,
    NEGATIVE_BINOMIAL,
    NORMAL,
    NORMAL_KNOWN_SIGMA,
    POISSON_LOG,
    STUDENT_T,
)
from pymc_subsample.model.distributional import RowTerms
from pymc_subsample.model.tall import TallModel
from pymc_subsample.subsample.batch import Batch, RecentBatches, Subsample

#: identities of graphs: full rewriting on PyTensor's Python linker (conftest.python_linker)
pytestmark = pytest.mark.usefixtures("python_linker")


def _reference(eta, jacobian, f, df, centre, pairs, order, subsampled, n_rest):
    """Dang et al. 2019 eqs. 4.1-4.5 written out in NumPy, the gradient by central differences in η
    of the value as a function of every row's η (then through J)."""
    p = eta.shape[0]
    eta_c, f_c, df_c, d2f_c = centre[:p], centre[p], centre[p + 1:2 * p + 1], centre[2 * p + 1:]

    def value_and_d(eta_at, f_at):
        u = eta_at - eta_c
        q = f_c.copy()
        if order >= 1:
            q += (df_c * u).sum(axis=0)
        if order == 2:
            for (j, i), h in zip(pairs, d2f_c):
                q += (0.5 if j == i else 1.0) * h * u[j] * u[i]
        d = f_at - q
        r = subsampled.astype(bool)
        m = r.sum()
        sigma2 = (n_rest / m) ** 2 * ((d[r] - d[r].mean()) ** 2).sum()
        return d[~r].sum() + n_rest / m * d[r].sum() - 0.5 * sigma2, sigma2

    value, sigma2 = value_and_d(eta, f)
    # f is linear in η here (f + df·δ): its derivative is df, so the value's η-derivative is exact
    step, grad = 1e-6, np.zeros(jacobian.shape[-1])
    for j in range(p):
        for k in range(eta.shape[1]):
            e = np.zeros_like(eta)
            e[j, k] = step
            up = value_and_d(eta + e, f + df[j, k] * e[j])[0]
            down = value_and_d(eta - e, f - df[j, k] * e[j])[0]
            grad += (up - down) / (2 * step) * jacobian[j, k]
    return value, grad, sigma2


def _dense_jacobian(affine, n_coords):
    """J (p, n, n_coords) of every η of :class:`AffineRows`, its blocks written out densely."""
    n = affine.offset.shape[1]
    jacobian = np.zeros((len(affine.slot), n, n_coords))
    for j, v in enumerate(affine.slot):
        if v >= 0:
            jacobian[j][:, affine.dense] = affine.jacobian[v].T
            for b, (first, stride) in enumerate(zip(affine.first, affine.stride, strict=True)):
                jacobian[j, np.arange(n), first + stride * affine.owner[b]] += affine.coef[v, b]
        else:
            jacobian[j][:, affine.dense] = affine.constant_jacobian[-1 - v]
    return jacobian


@pytest.mark.parametrize("order", [0, 1, 2])
def test_kernel_gives_the_estimators_formulas(order):
    """Three η a row, the second the same on every row (a scale), two rows computed exactly; the
    first and third read four dense coordinates and a group block of three entries (coordinates 4,
    6, 8: the second column of a matrix of two), the third a second block (9..10) too."""
    rng = np.random.default_rng(0)
    p, m, d = 3, 40, 11
    offset, jacobian = rng.normal(size=(p, m)), np.zeros((p, m, d))
    jacobian[:, :, :4] = rng.normal(size=(p, m, 4))
    offset[1], jacobian[1] = 0.3, np.r_[rng.normal(size=4), np.zeros(d - 4)]
    owner = np.stack([rng.integers(0, 3, m), rng.integers(0, 2, m)])
    coef = rng.normal(size=(p, 2, m))
    coef[1], coef[0, 1] = 0.0, 0.0
    affine = affine_rows(offset, jacobian, coef, owner, first=(4, 9), stride=(2, 1))
    assert affine.constant == (False, True, False)
    full = _dense_jacobian(affine, d)
    np.testing.assert_array_equal(full[:, :, :4], jacobian[:, :, :4])
    theta = rng.normal(size=d)
    eta = affine_eta(*affine, theta)
    np.testing.assert_allclose(eta, offset + full @ theta, rtol=1e-12)
    pairs = np.array([(j, i) for j in range(p) for i in range(j, p)], dtype=np.int64)
    centre = rng.normal(size=(2 * p + 1 + len(pairs), m))
    f, df = rng.normal(size=m), rng.normal(size=(p, m))
    subsampled = np.ones(m)
    subsampled[:2] = 0.0
    sparse_jacobian = (affine.jacobian, affine.coef, affine.owner, affine.constant_jacobian, affine.slot,
                       affine.dense, affine.first, affine.stride)
    value, grad, sigma2 = perturbed_sums(eta, *sparse_jacobian, d, np.vstack([f, df]), centre, pairs, order,
                                         subsampled, 500.0, m - 2.0)
    expected = _reference(eta, full, f, df, centre, pairs, order, subsampled, 500.0)
    np.testing.assert_allclose(value, expected[0], rtol=1e-12)
    np.testing.assert_allclose(grad, expected[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sigma2, expected[2], rtol=1e-12)


def known_sigma(n, seed=0):
    """A regression with σ = 1.5 known: a float32 constant in PyMC's graph, whose log σ f takes in float32."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    with pm.Model() as model:
        x_ = pm.Data("x", x)
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", beta[0] + beta[1] * x_, 1.5, observed=rng.normal(0.3 + 0.8 * x, 1.5))
    return model


def counts(n, seed=0, known_alpha=True):
    """A negative binomial with counts up to about 2,000: rows beyond the kernel's tables of small
    counts (COUNT_TABLE) as well as in them; α known (2) or free."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    mu = np.exp(3.0 + 1.5 * x)
    y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu))
    with pm.Model() as model:
        x_ = pm.Data("x", x)
        beta = pm.Normal("beta", 0, 1, shape=2)
        alpha = 2.0 if known_alpha else pm.Gamma("alpha", 4.0, 2.0)
        pm.NegativeBinomial("y", mu=pm.math.exp(3.0 + beta[0] + beta[1] * x_), alpha=alpha, observed=y)
    return model


MODELS = {"gaussian_mean": gaussian_mean, "known_sigma": known_sigma, "counts": counts,
          "counts_free_alpha": lambda n: counts(n, known_alpha=False)}


@pytest.mark.parametrize("name, constant, code", [
    ("student_t", (True, False, True), STUDENT_T), ("negative_binomial", (True, False), NEGATIVE_BINOMIAL),
    ("heteroscedastic", (False, False), NORMAL), ("heavy_tails_by_row", (False, False, False), STUDENT_T),
    ("counts", (False,), NEGATIVE_BINOMIAL), ("counts_free_alpha", (True, False), NEGATIVE_BINOMIAL),
    ("zero_inflated_poisson", (True, False), None),
    ("two_observed", (False, True, False), [NORMAL, BERNOULLI_LOGIT]), ("linear", (False, True), NORMAL),
    ("gaussian_mean", (True,), NORMAL_KNOWN_SIGMA), ("known_sigma", (False,), NORMAL_KNOWN_SIGMA),
    ("deterministic_potential", (False,), NORMAL_KNOWN_SIGMA), ("logistic", (False,), BERNOULLI_LOGIT),
    ("poisson_offset", (False,), POISSON_LOG), ("hierarchical_centred", (False, True), NORMAL),
    ("hierarchical_noncentred", (False,), BERNOULLI_LOGIT), ("crossed_effects", (False,), BERNOULLI_LOGIT)])
def test_target_estimate_equals_the_whole_graph(name, constant, code):
    """ν and σ, the same on every row, enter f as scalars (the Gaussian mean's μ too: no η differs
    between rows); group effects a[g] (centred: in θ; non-centred and crossed: in φ(θ), with Σq in
    φ) are read as blocks; rows of the families of ``model.closed_form`` (``code``) are computed in
    the package's kernel, the others by a compiled function of f; the estimate, its gradient and σ̂²
    equal the target's compiled graph of the whole estimate, with exact rows, after block updates
    (their arguments made from the last batch's), and on a batch that does not know its rows."""
    tall = TallModel(MODELS[name](4_000) if name in MODELS else build(name, 4_000))
    rng = np.random.default_rng(1)
    center = tall.initial_theta + rng.normal(scale=0.05, size=tall.ndim)
    target, graph = SubsampledTarget(tall, center), SubsampledTarget(tall, center)
    graph.__dict__["_eta_perturbed"] = None  # the compiled graph of the whole estimate
    assert target._eta_perturbed is not None and target._eta_perturbed.constant == constant
    closed_form = target._eta_perturbed.closed_form
    assert (closed_form is None) == (code is None)
    assert code is None or closed_form.code.tolist() == (code if isinstance(code, list) else [code])
    for sub in block_updates(tall, Subsample.gather(tall, rng.integers(0, tall.n_rows, 300)), rng, 3, 100):
        theta = center + rng.normal(scale=0.2, size=tall.ndim)
        for batch in (sub.batch, tuple(np.copy(a) for a in sub.batch)):
            for a, b in zip(target.perturbed_with_exact(theta, batch, 30, 3_000),
                            graph.perturbed_with_exact(theta, batch, 30, 3_000), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("name, order", [
    ("negative_binomial", 2), ("student_t", 2), ("heteroscedastic", 2), ("heavy_tails_by_row", 2),
    ("linear", 1), ("logistic", 0), ("poisson_offset", 2),
    ("hierarchical_centred", 2), ("counts_free_alpha", 2)])
def test_the_closed_forms_differences_at_points_equal_numpys(name, order):
    """The warm-up's differences d_k(θ) = f − q_k over kept rows at several points, from the closed
    form's kernel, equal those in NumPy from η and f of the model's graph."""
    tall = TallModel(MODELS[name](4_000) if name in MODELS else build(name, 4_000))
    rng = np.random.default_rng(2)
    center = tall.initial_theta + rng.normal(scale=0.05, size=tall.ndim)
    target = SubsampledTarget(tall, center, order)
    assert target.eta_kept_rows() is not None  # the estimate and the rows' terms made, as in sampling
    rows = np.sort(rng.choice(tall.n_rows, 700, replace=False))
    batch = Batch(tuple(a[rows] for a in tall.row_slice(0, tall.n_rows)), rows=rows)
    thetas = center + rng.normal(scale=0.3, size=(5, tall.ndim))
    at_center = RowTerms.from_flat(target.center_args(batch), target.glm.n_eta, target.glm.pairs)
    expected = eta_differences_at_thetas(target.glm, order, thetas, batch, at_center)
    assert target._closed_form_differences(thetas, batch) is not None
    np.testing.assert_allclose(target.differences_at_thetas(thetas, batch), expected, rtol=1e-9, atol=1e-9)


def test_a_block_update_reads_only_its_new_rows(monkeypatch):
    """A proposal's arguments, made from its parent batch's with the new block's rows read from the
    kept ones, equal those read for all its rows by a target that has not seen the parent."""
    tall = TallModel(effects_written_in_the_likelihood(4_000))  # blocks of J: a slope's coef x_k, owner g_k
    rng = np.random.default_rng(2)
    target, fresh = SubsampledTarget(tall, tall.initial_theta), SubsampledTarget(tall, tall.initial_theta)
    sub = Subsample.gather(tall, rng.integers(0, tall.n_rows, 300))
    target.perturbed_arguments(sub.batch, 30, 3_000)
    proposal = next(block_updates(tall, sub, rng, 2, 100))

    def unexpected(batch):
        raise AssertionError("the proposal's rows were all read again")

    monkeypatch.setattr(target, "_affine_rows", unexpected)
    made = target.perturbed_arguments(proposal.batch, 30, 3_000)
    read = fresh.perturbed_arguments(proposal.batch, 30, 3_000)
    assert np.ptp(read[3].coef) > 0 and np.ptp(read[3].owner) > 0
    def flat(arguments):
        return (*arguments[:3], *arguments[3], *arguments[4:])

    for a, b in zip(flat(made), flat(read), strict=True):
        np.testing.assert_array_equal(a, b)


def test_proposals_from_one_subsample_keep_finding_its_arguments(monkeypatch):
    """Many proposals from the same current subsample (each rejected) find its arguments: the one
    every proposal reads is the one used last, never the one dropped."""
    tall = TallModel(build("logistic", 3_000))
    rng = np.random.default_rng(3)
    target = SubsampledTarget(tall, tall.initial_theta)
    sub = Subsample.gather(tall, rng.integers(0, tall.n_rows, 200))
    target.perturbed_arguments(sub.batch, 0, 3_000)

    def unexpected(batch):
        raise AssertionError("a proposal's rows were all read again")

    monkeypatch.setattr(target, "_affine_rows", unexpected)
    for _ in range(3 * RecentBatches.size):
        proposal = next(block_updates(tall, sub, rng, 1, 20))
        target.perturbed_arguments(proposal.batch, 0, 3_000)


def test_the_kernels_arguments_are_c_ordered():
    """The rows' terms at θ* and J reach the closed-form kernel C-ordered, read afresh and made from a
    parent's by a block update: its loops read one term of every row at a time, and one layout is one
    Numba compilation of the kernel."""
    tall = TallModel(build("logistic", 3_000))
    rng = np.random.default_rng(4)
    target = SubsampledTarget(tall, tall.initial_theta)
    sub = Subsample.gather(tall, rng.integers(0, tall.n_rows, 200))
    fresh = target.perturbed_arguments(sub.batch, 0, 3_000)
    proposed = target.perturbed_arguments(next(block_updates(tall, sub, rng, 1, 20)).batch, 0, 3_000)
    for arguments in (fresh, proposed):
        *_, affine, y, centre = arguments
        assert centre.flags.c_contiguous and affine.jacobian.flags.c_contiguous and y.flags.c_contiguous


def test_rows_beyond_the_kept_limit_keep_the_whole_graph(monkeypatch):
    monkeypatch.setattr(kept_rows, "KEPT_AFFINE_MAX_VALUES", 1_000)
    tall = TallModel(build("logistic", 2_000))
    target = SubsampledTarget(tall, tall.initial_theta)
    assert target.glm is not None and target._eta_perturbed is None
    assert target.perturbed_function() is target.perturbed_function()  # PyTensor's, kept


@pytest.mark.parametrize("name, in_phi", [("hierarchical_centred", False), ("crossed_effects", True)])
def test_kept_rows_are_etas_jacobian(name, in_phi):
    """The kept rows' sparse J, written out, is η's Jacobian in θ (centred) or in φ (crossed effects:
    two blocks, X's columns and the intercept dense), chunk by chunk as at once."""
    tall = TallModel(build(name, 3_000))
    target = SubsampledTarget(tall, tall.initial_theta)
    view = tall.regression_view if not in_phi else target.glm
    kept = kept_rows.kept_affine_rows(view, tall.n_rows, tall.row_slice, chunk_size=700, phi=in_phi)
    assert len(kept.first) == (2 if in_phi else 1)
    rows = tall.row_slice(0, tall.n_rows)
    offset, jacobian = view.phi_offset_and_jacobian(rows) if in_phi else view.eta_offset_and_jacobian(rows)
    full = _dense_jacobian(kept.rows(slice(None)), jacobian.shape[-1])
    for j, v in enumerate(kept.slot):
        if v >= 0:
            np.testing.assert_allclose(kept.offset[v], offset[:, j], atol=1e-12)
            np.testing.assert_allclose(full[j], jacobian[:, j], atol=1e-12)


@pytest.mark.parametrize("name", ["hierarchical_noncentred", "crossed_effects"])
def test_sums_in_phi_from_kept_rows_equal_those_from_eta_at_the_points(name):
    """The set-up's sums in φ over a chunk of consecutive rows read J from the kept rows; Σf, A and
    B equal those from η at the layout's points, in a full pass as on one chunk; a TallModel's pickled
    state leaves the kept rows behind."""
    from pymc_subsample.model.chunks import chunked_sum

    tall = TallModel(build(name, 5_000))
    view = tall.regression_view
    theta = tall.initial_theta + np.random.default_rng(3).normal(scale=0.2, size=tall.ndim)
    view.phi.value(theta)
    assert tall.kept_affine(phi=True) is not None and tall.kept_affine(phi=False) is None
    chunk = tall.row_slice(1_000, 2_500)
    for hessian in (True, False):
        sums = tall.loglik_sums_in_phi if hessian else tall.loglik_gradient_sums_in_phi
        kept = sums(theta, chunk)
        points = view.phi_sums(theta, tuple(chunk), hessian=hessian)
        for a, b in zip(kept, points, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-8)
    full = chunked_sum(tall, tall.loglik_sums_in_phi, theta, chunk_size=1_500)
    expected = chunked_sum(tall, view.phi_sums, theta, chunk_size=1_500)
    for a, b in zip(full, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-8)
    assert tall.__getstate__()["_kept_affine"] == {}


def test_an_eta_the_same_on_the_first_rows_only_is_kept_per_row():
    """x = 0 on the first chunk's rows: η = a + b·x looks constant there, differs on later chunks,
    and is read again as varying; the kept offsets and Jacobians equal those of all rows at once."""
    import pymc as pm

    rng = np.random.default_rng(4)
    x = rng.normal(size=500)
    x[:150] = 0.0
    with pm.Model() as model:
        a, b = pm.Normal("a", 0, 1), pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=a + b * pm.Data("x", x), observed=rng.random(500) < 0.5)
    tall = TallModel(model)
    view = tall.regression_view
    kept = kept_rows.kept_affine_rows(view, tall.n_rows, tall.row_slice, chunk_size=100)
    offset, jacobian = view.eta_offset_and_jacobian(tall.row_slice(0, tall.n_rows))
    assert kept.constant == (False,)
    np.testing.assert_array_equal(kept.offset, offset.T)
    np.testing.assert_array_equal(kept.jacobian, np.moveaxis(jacobian, 1, 0))


def test_the_kernels_elementary_functions_agree_with_numpy():
    """The row loops' e^a, e^a − 1 and log(1 + v) (arithmetic on the double's bits, which LLVM
    vectorises) relative to NumPy's, from the underflow of e^a to its overflow and across log1p's
    switch at √2 − 1, compiled as the kernels compile them (fastmath, which may reassociate e^a's
    reduction a − n ln 2: 4e-17·|a| more): within 4.5e-16 + 4e-17·|a| (e^a, e^a − 1) and 1e-15
    (log1p: ln 2 + 2 atanh(s) cancels just above √2 − 1)."""
    import numba

    from pymc_subsample.elementary import exp as _exp
    from pymc_subsample.elementary import expm1 as _expm1
    from pymc_subsample.elementary import log1p as _log1p
    from pymc_subsample.elementary import log1p_unit as _log1p_unit

    @numba.njit(fastmath=True)
    def each(function, x):
        out = np.empty_like(x)
        for k in range(x.shape[0]):
            out[k] = function(x[k])
        return out

    rng = np.random.default_rng(0)
    a = np.concatenate([np.linspace(-708.0, 709.7, 20001), rng.normal(scale=3.0, size=20000),
                        rng.normal(scale=1e-6, size=2000), [0.0, -0.0]])
    bound = 4.5e-16 + 4e-17 * np.abs(a)
    assert np.all(np.abs(each(_exp, a) / np.exp(a) - 1.0) <= bound)
    small = np.abs(a) < 1.0  # e^a − 1 to its own precision where it is small
    assert np.all(np.abs(each(_expm1, a[small]) - np.expm1(a[small])) <= 4.5e-16 * np.abs(np.expm1(a[small])))
    big = ~small
    assert np.all(np.abs(each(_expm1, a[big]) / np.expm1(a[big]) - 1.0) <= bound[big])
    assert each(_exp, np.array([710.0]))[0] == np.inf
    v = np.concatenate([np.geomspace(1e-300, 1e300, 20001), np.linspace(0.4, 0.43, 2001), [0.0]])
    exact = np.log1p(v)
    assert np.all(np.abs(each(_log1p, v) - exact) <= 1e-15 * exact)
    unit = np.concatenate([np.geomspace(1e-300, 1.0, 20001), np.linspace(0.4, 0.43, 2001), [0.0, 1.0]])
    assert np.all(np.abs(each(_log1p_unit, unit) - np.log1p(unit)) <= 1e-15 * np.log1p(unit))
