"""Bad input gets a clear error that says what to change."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from conftest import logistic_data, logistic_model

from pymc_subsample import TallModel, TaylorProxy
from pymc_subsample.control_variates import check_proxy_order


def test_no_observed_variables():
    with pm.Model() as model:
        pm.Normal("x", 0, 1)
    with pytest.raises(ValueError, match="no observed variables"):
        TallModel(model)


def test_observed_variables_with_different_lengths_are_stacked_not_refused():
    """(They were refused until 2026-11-27; tests/test_stacked.py checks their rows.)"""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("a", mu, 1, observed=np.zeros(10))
        pm.Normal("b", mu, 1, observed=np.zeros(12))
    assert TallModel(model).data_set_rows == {"a": (0, 10), "b": (10, 22)}


@pytest.mark.parametrize("as_data", [False, True])
def test_observed_value_reducing_over_rows(as_data):
    """As a constant, and as pm.Data (a distributional regression's candidate: the rows' values
    compared one by one)."""
    x = np.random.default_rng(0).normal(size=50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        x_ = pm.Data("x", x) if as_data else pt.as_tensor(x)
        pm.Normal("y", mu + pt.mean(x_ * mu), 1, observed=x)
    with pytest.raises(ValueError, match="depends on other rows"):
        TallModel(model)


def test_free_variable_of_length_n():
    with pm.Model() as model:
        z = pm.Normal("z", 0, 1, shape=30)
        pm.Normal("y", z, 1, observed=np.zeros(30))
    with pytest.raises(ValueError, match="length N = 30"):
        TallModel(model)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_infinite_data(bad):
    X, y = logistic_data(100, 2)
    X[5, 1] = bad  # pm.Data refuses NaN itself; a plain array reaches our check
    with pytest.raises(ValueError, match="NaN, infinite or masked"):
        TallModel(logistic_model(X, y, use_data=False))


@pytest.mark.parametrize("name", ["X", "y"])
@pytest.mark.parametrize("analysed_before", [False, True])
@pytest.mark.parametrize("masked_by", ["nan", "user"])
def test_nan_set_through_pm_set_data(name, analysed_before, masked_by):
    """pm.set_data turns NaN into a masked array, where np.isfinite masks them too, and keeps a
    user's masked array (finite values under the mask): the check must count masked entries, on a
    first analysis and on a kept one (a model already sampled)."""
    X, y = logistic_data(100, 2)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Bernoulli("obs", logit_p=pm.Data("X", X) @ beta, observed=pm.Data("y", y.astype(float)))
    if analysed_before:
        TallModel(model)
    bad = {"X": X.copy(), "y": y.astype(float)}
    if masked_by == "nan":
        bad[name].flat[[4, 9]] = np.nan
    else:
        mask = np.zeros(bad[name].shape, bool)
        mask.flat[[4, 9]] = True
        bad[name] = np.ma.masked_array(bad[name], mask)
    with model:
        pm.set_data({name: bad[name]})
    assert np.ma.isMaskedArray(model[name].get_value())  # PyMC's behaviour this test is about
    with pytest.raises(ValueError, match=rf"'{name}' contains 2 NaN, infinite or masked values.*"
                                         r"Drop or impute"):
        TallModel(model)


@pytest.mark.parametrize("m", [0, -3, 101, 2.5, True])
def test_subsample_size_outside_range(m):
    X, y = logistic_data(100, 2)
    tall = TallModel(logistic_model(X, y))
    with pytest.raises(ValueError, match="between 1 and the number of rows N = 100"):
        tall.check_subsample_size(m)


def test_proxy_order_three():
    with pytest.raises(ValueError, match="proxy_order must be 0, 1 or 2"):
        check_proxy_order(3)
    X, y = logistic_data(100, 2)
    with pytest.raises(ValueError, match="proxy_order must be 0, 1 or 2"):
        TaylorProxy(TallModel(logistic_model(X, y)), np.zeros(2), order=3)


def test_discrete_free_variable():
    with pm.Model() as model:
        k = pm.Poisson("k", 3)
        pm.Normal("y", k, 1, observed=np.zeros(20))
    with pytest.raises(ValueError, match="discrete"):
        TallModel(model)


def test_prior_depending_on_rows():
    x = np.arange(40.0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Potential("pen", -pt.sum((pt.as_tensor(x) - mu) ** 2))
        pm.Normal("y", mu, 1, observed=x)
    with pytest.raises(ValueError, match="depends on the row data"):
        TallModel(model)


def test_missing_observed_values_get_our_error_not_a_shape_dump():
    # PyMC turns NaN in an observed numpy array into imputed free variables; without our check the
    # step would fail with a PyTensor shape-mismatch dump after a misleading O(m²) warning
    X, y = logistic_data(200, 2)
    y = y.astype(float)
    y[[3, 17]] = np.nan
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        with pytest.warns(Warning):  # PyMC's own ImputationWarning
            pm.Normal("y", pt.dot(X, beta), 1, observed=y)
    with pytest.raises(ValueError, match=r"Observed variable 'y' contains missing \(NaN\) values.*"
                                         r"Drop or impute those rows"):
        TallModel(model)
    import pymc_subsample as pms

    with model, pytest.raises(ValueError, match="missing"):
        pms.HMCECS()


def test_bad_subsample_size_is_reported_before_any_set_up(monkeypatch):
    # the argument check must not cost the user the set-up (35 s on a model of this size)
    import pymc_subsample as pms
    from pymc_subsample.model import tall as tall_module

    def no_set_up(*args, **kwargs):
        raise AssertionError("set-up started before the arguments were checked")

    monkeypatch.setattr(tall_module.TallModel, "__init__", no_set_up)
    X, y = logistic_data(100, 2)
    with logistic_model(X, y):
        for step in (pms.HMCECS, pms.SubsampleMH):
            with pytest.raises(ValueError, match="subsample_size must be an integer between 1 and the "
                                                 "number of rows N = 100"):
                step(subsample_size=0)
        for step in (pms.SGLD, pms.SGHMC, pms.SGFS):
            with pytest.raises(ValueError, match="batch_size must be an integer between 1 and the "
                                                 "number of rows N = 100"):
                step(batch_size=101)
        # the inner sampler's start is the step's own: an initial_point would be dropped silently
        for step in (pms.HMCECS, pms.FireflyMC):
            with pytest.raises(TypeError, match="takes no initial_point: each chain starts at a draw of "
                                                "the Laplace approximation"):
                step(initial_point={"beta": np.zeros(2)})


def test_time_series_likelihood_over_all_rows():
    # a random walk's log-likelihood couples the rows: PyMC returns one scalar for the series
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1)
        pm.GaussianRandomWalk("y", sigma=sigma, init_dist=pm.Normal.dist(0, 10), observed=np.zeros(50))
    with pytest.raises(ValueError, match="'y' has a scalar log-likelihood that reduces over the rows"):
        TallModel(model)


def test_rows_along_a_later_axis_are_named():
    # a design matrix stored (features, N): a gather of rows cannot subsample it (was a PyTensor
    # broadcasting dump)
    x = np.random.default_rng(0).normal(size=40)
    with pm.Model() as model:
        XT = pm.Data("XT", np.stack([x, x**2]))
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", beta @ XT, 1, observed=x)
    with pytest.raises(ValueError, match=r"not along its first axis \(XT \(2, 40\)\).*shape \(N, features\)"):
        TallModel(model)


def test_length_n_array_computed_in_the_model_is_row_data():
    # PyMC folds `pt.arange(N)` into a constant of N rows, which is row data; the regression view,
    # built from the unfolded graph, computes it at length N and must be turned away, not raise
    # (it raised a SpecifyShape AssertionError at set-up)
    n = 60
    rng = np.random.default_rng(1)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", b * pt.arange(n) / n, s, observed=0.5 * np.arange(n) / n + rng.normal(size=n))
    tall = TallModel(model)
    assert tall.regression_view is None
    theta = tall.initial_theta + 0.3
    idx = np.array([59, 3, 31])
    expected = model.compile_logp(vars=model.observed_RVs, sum=False)(tall.theta_to_point(theta))[0]
    np.testing.assert_allclose(tall.loglik_rows(theta, tall.gather(idx)), expected[idx], rtol=1e-12)
