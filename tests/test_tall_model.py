"""Rows on demand: subsampled per-row log-likelihoods equal the full-data ones indexed at idx."""

import numpy as np
import pymc as pm
import pytensor
import pytest
from conftest import logistic_data, logistic_model
from pytensor.graph.traversal import applys_between
from pytensor.tensor.basic import Join
from pytensor.tensor.subtensor import IncSubtensor

from pymc_subsample import TallModel


def _models():
    rng = np.random.default_rng(3)
    n = 500
    X, y = logistic_data(n, 3)
    yield "logistic_numpy", logistic_model(X, y, use_data=False)
    yield "logistic_data", logistic_model(X, y, use_data=True)
    with pm.Model() as linreg:
        b = pm.Normal("b", 0, 1, shape=3)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", mu=X @ b, sigma=s, observed=X @ [1, 2, 3] + rng.normal(size=n))
    yield "linear_unknown_sigma", linreg
    with pm.Model() as poisson:
        b = pm.Normal("b", 0, 0.3, shape=3)
        pm.Poisson("y", mu=pm.math.exp(pm.Data("Xp", X) @ b), observed=rng.poisson(1.0, size=n))
    yield "poisson", poisson
    group = rng.integers(0, 5, size=n)
    with pm.Model() as hier:
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        a = pm.Normal("a", mu, tau, shape=5)
        g = pm.Data("group", group)
        pm.Normal("y", mu=a[g] + X[:, 0], sigma=1.0, observed=rng.normal(size=n))
    yield "hierarchical", hier
    with pm.Model() as multi:
        b = pm.Normal("b", 0, 1, shape=(3, 2))
        pm.Normal("y", mu=X @ b, sigma=1.0, observed=rng.normal(size=(n, 2)))
    yield "observed_n_by_k", multi
    with pm.Model() as two:
        b = pm.Normal("b", 0, 1, shape=3)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y1", mu=X @ b, sigma=s, observed=rng.normal(size=n))
        pm.Bernoulli("y2", logit_p=X @ b, observed=y)
    yield "two_observed", two


@pytest.mark.parametrize("name,model", list(_models()), ids=lambda x: x if isinstance(x, str) else "")
def test_subsampled_rows_equal_full_rows(name, model):
    tall = TallModel(model)
    rng = np.random.default_rng(0)
    theta = tall.initial_theta + rng.normal(scale=0.3, size=tall.ndim)
    point = tall.theta_to_point(theta)
    full_fn = model.compile_fn(
        model.logp(vars=model.observed_RVs, sum=False),
        inputs=model.value_vars,
        point_fn=False,
        on_unused_input="ignore",
    )
    terms = full_fn(*[point[v.name] for v in model.value_vars])
    full = sum(t.reshape(t.shape[0], -1).sum(axis=1) for t in terms)
    idx = rng.integers(0, tall.n_rows, size=50)
    sub = tall.loglik_rows(theta, tall.gather(idx))
    assert sub.shape == (50,)
    assert np.max(np.abs(sub - full[idx])) <= 1e-10


def test_per_row_gradients_and_hessians_match_logistic_formulas():
    X, y = logistic_data(300, 4)
    tall = TallModel(logistic_model(X, y))
    rng = np.random.default_rng(1)
    theta = rng.normal(size=4)
    idx = rng.integers(0, 300, size=40)
    batch = tall.gather(idx)
    loglik, grads = tall.loglik_rows_and_grads(theta, batch)
    p = 1 / (1 + np.exp(-X[idx] @ theta))
    np.testing.assert_allclose(grads, (y[idx] - p)[:, None] * X[idx], atol=1e-12)
    hess = tall.rows_hessians(theta, batch)
    expected = -(p * (1 - p))[:, None, None] * X[idx][:, :, None] * X[idx][:, None, :]
    np.testing.assert_allclose(hess, expected, atol=1e-12)
    v = rng.normal(size=4)
    np.testing.assert_allclose(tall.rows_hessian_vector(theta, v, batch), expected @ v, atol=1e-12)
    u = rng.normal(size=4)
    value, slope, curvature = tall.rows_directional(theta, u, v, batch)
    np.testing.assert_allclose(slope, grads @ u, atol=1e-12)
    np.testing.assert_allclose(curvature, np.einsum("i,kij,j->k", u, expected, v), atol=1e-12)
    # finite differences of the per-row log-likelihoods
    eps = 1e-6
    for j in range(4):
        e = np.zeros(4)
        e[j] = eps
        fd = (tall.loglik_rows(theta + e, batch) - tall.loglik_rows(theta - e, batch)) / (2 * eps)
        np.testing.assert_allclose(grads[:, j], fd, atol=1e-7)


def test_prior_includes_transform_jacobian():
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        pm.Normal("y", 0, s, observed=np.linspace(-1, 1, 20))
    tall = TallModel(model)
    value, grad = tall.prior_value_and_grad(np.array([0.3]))
    sigma = np.exp(0.3)
    expected = np.log(2) - 0.5 * np.log(2 * np.pi) - 0.5 * sigma**2 + 0.3  # + log|dσ/dx|
    assert value == pytest.approx(expected, abs=1e-12)
    assert grad[0] == pytest.approx(-(sigma**2) + 1.0, abs=1e-12)


def test_prior_hessian_matches_the_analytic_one():
    # central differences of the compiled prior gradient (no separately compiled Hessian graph)
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        mu = pm.Normal("mu", 0.5, 2.0, shape=2)
        rho = pm.Normal("rho", mu[0] * s, 1.0)  # a prior that couples the coordinates
        pm.Normal("y", mu[1] + rho, s, observed=np.linspace(-1, 1, 20))
    tall = TallModel(model)
    where = {k: np.atleast_1d(v).astype(int) for k, v in tall.theta_to_point(np.arange(4.0)).items()}
    i_s, (i_m0, i_m1), i_r = where["s_log__"][0], where["mu"], where["rho"][0]
    theta = np.array([0.3, -0.4, 1.2, 0.7])
    point = tall.theta_to_point(theta)
    sd, m0, r = np.exp(point["s_log__"]), point["mu"][0], point["rho"]
    # log p = −σ²/2 + x (HalfNormal on x = log σ) − (μ − 0.5)²/8 − (ρ − μ₀σ)²/2
    expected = np.zeros((4, 4))
    for (a, b), value in {
        (i_s, i_s): -2 * sd**2 + m0 * sd * (r - m0 * sd) - m0**2 * sd**2,
        (i_s, i_m0): sd * (r - 2 * m0 * sd), (i_s, i_r): m0 * sd,
        (i_m0, i_m0): -1 / 4 - sd**2, (i_m0, i_r): sd, (i_m1, i_m1): -1 / 4, (i_r, i_r): -1.0,
    }.items():
        expected[a, b] = expected[b, a] = value
    np.testing.assert_allclose(tall.prior_hessian(theta), expected, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("form", ["ones_column", "specify_shape"])
def test_parameters_reading_n_row_literals_are_subsampled(form):
    """Bambi writes an intercept as a column of N ones (a constant the likelihood's graph folds away,
    so no row leaf) and wraps group terms in specify_shape(x, N): both must follow the batch."""
    import pytensor.tensor as pt

    rng = np.random.default_rng(0)
    n = 5000
    X, y = rng.normal(size=(n, 2)), (rng.random(n) < 0.5).astype(float)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        a, b = pm.Normal("a", 0, 1), pm.Normal("b", 0, 1, shape=2)
        eta = a * np.ones(n) + X_ @ b if form == "ones_column" else pt.specify_shape(a + X_ @ b, (n,))
        pm.Bernoulli("obs", p=pm.math.invlogit(eta), observed=pm.Data("y", y))
    tall = TallModel(model)
    assert tall.regression_view is not None
    theta = rng.normal(size=tall.ndim)
    full = model.compile_fn(model.logp(vars=model.observed_RVs, sum=False)[0], inputs=model.value_vars,
                            point_fn=False)(*[tall.theta_to_point(theta)[v.name] for v in model.value_vars])
    idx = rng.integers(0, n, size=50)
    np.testing.assert_allclose(tall.loglik_rows(theta, tall.gather(idx)), full[idx], rtol=0, atol=1e-10)


def test_an_n_row_constant_outside_the_likelihood_is_refused():
    import pytensor.tensor as pt

    from pymc_subsample.model.rows import _repeated_rows

    n = 30
    varying = pt.constant(np.arange(n, dtype=float))
    with pytest.raises(ValueError, match="one entry per row.*Pass it as pm.Data"):
        _repeated_rows([pt.vector("x") * varying], {}, n, pt.constant(5), single_row=False)
    repeated = _repeated_rows([pt.vector("x") * pt.constant(np.ones(n))], {}, n, pt.constant(5), False)
    assert [v.eval().shape for v in repeated.values()] == [(5,)]


def test_the_initial_point_is_pymcs():
    """TallModel's initial point is ``model.initial_point()`` (transformed names, values, dtypes),
    by each variable's own strategy (a user's initval included); a strategy that draws random
    numbers draws again at each call."""
    from pymc_subsample.model.analysis import model_initial_point

    rng = np.random.default_rng(0)
    with pm.Model(coords={"group": range(4)}) as model:
        b = pm.Normal("b", 0, 1, shape=2, initval=np.array([0.5, -1.5]))
        s = pm.HalfNormal("s", 2.0)
        a = pm.Normal("a", 0, s, dims="group")
        g = pm.Data("g", rng.integers(0, 4, size=50))
        pm.Normal("y", a[g] + b[0] + b[1] * rng.normal(size=50), s, observed=rng.normal(size=50))
    expected = model.initial_point()
    got = model_initial_point(model)
    assert got.keys() == expected.keys() == {"b", "s_log__", "a"}
    for name, value in expected.items():
        assert got[name].dtype == value.dtype
        np.testing.assert_array_equal(got[name], value)
    np.testing.assert_array_equal(got["b"], [0.5, -1.5])
    with pm.Model() as drawn:
        pm.Normal("c", 0, 1, initval="prior")
        pm.Normal("y", 0, 1, observed=np.zeros(3))
    first, second = model_initial_point(drawn), model_initial_point(drawn)
    assert first["c"] != second["c"], "a prior draw as initial value was not drawn again"


def test_the_log_density_terms_are_derived_once_per_model_graph(monkeypatch):
    """A second TallModel of an unchanged model takes the terms PyMC derived for the first; a
    variable added, or ``check_bounds`` changed, derives them again, and the new tall model has
    them (its d and its prior's value)."""
    calls = []
    logp = pm.Model.logp
    monkeypatch.setattr(pm.Model, "logp", lambda self, *a, **k: calls.append(1) or logp(self, *a, **k))
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Normal("y", pm.Data("x", rng.normal(size=(40, 2))) @ b, 1.0, observed=rng.normal(size=40))
    first = TallModel(model)
    second = TallModel(model)
    assert len(calls) == 1
    prior = first.prior_value_and_grad(np.ones(2))[0]
    assert second.prior_value_and_grad(np.ones(2))[0] == pytest.approx(prior)
    with model:
        pm.Normal("c", 0, 1)
    third = TallModel(model)
    assert len(calls) == 2 and third.ndim == 3
    assert third.prior_value_and_grad(np.ones(3))[0] == pytest.approx(3 * -0.5 - 3 * 0.5 * np.log(2 * np.pi))
    model.check_bounds = False
    TallModel(model)
    assert len(calls) == 3


def _small_regression(n, rng):
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        x = pm.Data("x", rng.normal(size=(n, 2)))
        pm.Normal("y", x @ b, 1.0, observed=pm.Data("y_data", rng.normal(size=n)))
    return model


def test_a_second_tall_model_takes_the_analysis_and_reads_the_data_again():
    """A second TallModel of an unchanged model graph takes the first's analysis (its row graph,
    its regression view), with its own use state; it reads data set since (same length: new sums,
    NaN: the error), and analyses again where the rows' count or the graph changed."""
    rng = np.random.default_rng(1)
    model = _small_regression(60, rng)
    first = TallModel(model)
    view = first.regression_view
    first.full_passes = 3
    second = TallModel(model)
    assert second.batch_loglik is first.batch_loglik and second.regression_view is view
    assert second.model is model and second.full_passes == 0
    theta = np.array([0.3, -0.2])
    rows = np.arange(60)
    before = second.loglik_sum_value_and_grad(theta, second.gather(rows))[0]
    with model:
        pm.set_data({"y_data": rng.normal(size=60) + 5.0})
    third = TallModel(model)
    assert third.batch_loglik is first.batch_loglik
    after = third.loglik_sum_value_and_grad(theta, third.gather(rows))[0]
    y, x = model["y_data"].get_value(), model["x"].get_value()
    expected = np.sum(-0.5 * (y - x @ theta) ** 2 - 0.5 * np.log(2 * np.pi))
    assert after == pytest.approx(expected) and after != pytest.approx(before)
    model["x"].set_value(np.r_[[[np.nan, 0.0]], x[1:]])  # pm.set_data masks NaN; the variable's own
    with pytest.raises(ValueError, match="'x' contains 1 NaN"):
        TallModel(model)
    with model:
        pm.set_data({"x": rng.normal(size=(80, 2)), "y_data": rng.normal(size=80)})
    longer = TallModel(model)
    assert longer.n_rows == 80 and longer.batch_loglik is not first.batch_loglik
    with model:
        pm.Normal("c", 0, 1)
    assert TallModel(model).ndim == 3


def test_a_dimension_set_to_another_length_is_analysed_again():
    """``model.set_dim`` changes a free variable's length (the kept analysis would have the old
    d): the second TallModel has the new one, and its prior reads it."""
    rng = np.random.default_rng(3)
    with pm.Model(coords={"group": range(3)}) as model:
        a = pm.Normal("a", 0, 1, dims="group")
        g = pm.Data("g", rng.integers(0, 3, size=30))
        pm.Normal("y", a[g], 1.0, observed=pm.Data("y_data", rng.normal(size=30)))
    assert TallModel(model).ndim == 3
    model.set_dim("group", 5, coord_values=range(5))
    with model:
        pm.set_data({"g": rng.integers(0, 5, size=30)})
    tall = TallModel(model)
    assert tall.ndim == 5
    assert tall.prior_value_and_grad(np.zeros(5))[0] == pytest.approx(5 * -0.5 * np.log(2 * np.pi))


def test_a_drawn_initial_point_is_drawn_again_with_the_kept_analysis():
    """A model whose initial value is drawn (``initval="prior"``) keeps its analysis too, and each
    TallModel draws its own initial point, as PyMC's ``initial_point()`` does."""
    rng = np.random.default_rng(4)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, initval="prior")
        pm.Normal("y", b * pm.Data("x", rng.normal(size=30)), 1.0, observed=rng.normal(size=30))
    first, second = TallModel(model), TallModel(model)
    assert second.batch_loglik is first.batch_loglik
    assert first.initial_point["b"] != second.initial_point["b"]


def test_the_kept_analysis_keeps_no_model_alive():
    """The analysis kept per model graph holds the model weakly: a model and its tall models that
    are dropped are collected (tall data would otherwise stay in memory)."""
    import gc
    import weakref

    from pymc_subsample.model.kept import KEPT

    model = _small_regression(40, np.random.default_rng(2))
    tall = TallModel(model)
    assert tall.regression_view is not None  # a view, kept with the analysis
    alive = weakref.ref(model)
    assert model in KEPT
    del model, tall
    gc.collect()
    assert alive() is None, "a model was kept alive by the kept analysis"


def test_a_tall_model_unpickled_in_another_process_finds_its_views():
    """A TallModel shipped to another process (cloudpickled, as PyMC and Dask do: the weak
    reference to the model of the TallModel its views are built on stays behind) finds the views
    it had not found yet, and gives the same sums."""
    import cloudpickle

    rng = np.random.default_rng(6)
    model = _small_regression(50, rng)
    tall = TallModel(model)
    clone = cloudpickle.loads(cloudpickle.dumps(tall))
    assert clone._analysis.views.base.model is None and clone.model is not None
    theta = np.array([0.2, -0.4])
    rows = np.arange(50)
    got = clone.loglik_sum_value_and_grad(theta, clone.gather(rows))
    assert clone.regression_view is not None
    want = tall.loglik_sum_value_and_grad(theta, tall.gather(rows))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


@pytest.mark.heavy  # the MvNormal rows' generic set-up graphs: a minute of compilation on a cold cache
def test_a_second_tall_model_reads_the_set_up_functions_kind_with_it():
    """Where the set-up's Hessian-vector products cannot be vectorised (MvNormal rows: PyTensor 3
    writes them with a Blockwise), the one-direction function is compiled; a second TallModel of
    the same graph shares it and must call it one direction at a time too (it got a (1, d)
    Hessian when the choice was kept on the first TallModel alone)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from zoo import build

    model = build("mvnormal_lkj", 400)
    first = TallModel(model)
    theta = first.initial_theta + 0.05
    batch = first.row_slice(0, 400)
    expected = first.loglik_sum_value_grad_hessian(theta, batch)
    assert first._functions.get("setup_vectorised", False) is False  # the case this test is about
    second = TallModel(model)
    got = second.loglik_sum_value_grad_hessian(theta, batch)
    assert got[2].shape == (first.ndim, first.ndim)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)



def test_the_gradient_joins_the_free_variables_slices():
    """θ read only through the free variables' slices: the gradient is one Join of theirs (no
    IncSubtensor) and equals PyTensor's gradient in θ; a graph reading θ otherwise gets the latter."""
    with pm.Model() as model:
        mu, b = pm.Normal("mu"), pm.Normal("b")
        sigma = pm.HalfNormal("sigma")
        pm.Normal("y", mu + 2 * b, sigma, observed=np.arange(5.0))
    tall = TallModel(model)
    inputs = [tall.theta, *tall.batch_inputs]
    theta, batch = np.array([0.3, -0.2, 0.1]), tall.row_slice(0, 5)
    cost = tall.prior_graph + tall.batch_loglik.sum()
    for graph, joined in ((cost, True), (cost + (tall.theta ** 2).sum(), False)):
        grad = tall.gradient(graph)
        ops = {type(node.op) for node in applys_between(inputs, [grad])}
        assert (Join in ops and IncSubtensor not in ops) == joined, ops
        reference = pytensor.grad(graph, tall.theta)
        np.testing.assert_allclose(pytensor.function(inputs, grad)(theta, *batch),
                                   pytensor.function(inputs, reference)(theta, *batch), rtol=1e-12)
