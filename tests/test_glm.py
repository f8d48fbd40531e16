"""The GLM view of a tall model: η, y and J = ∂η/∂θ found in the model's own graph."""

import numpy as np
import pymc as pm
import pytest

from pymc_subsample.model.glm import linear_predictor_model
from pymc_subsample.model.tall import TallModel

N = 400


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, 3))
    return X, (rng.random(N) < 0.4).astype(float), rng.normal(size=N)


def _view(model):
    tall = TallModel(model)
    return tall, linear_predictor_model(tall)


def test_logistic_with_pm_data_and_intercept(data):
    X, y, _ = data
    with pm.Model() as model:
        X_, y_ = pm.Data("X", X), pm.Data("y", y)
        beta = pm.Normal("beta", 0, 1, shape=3)
        a = pm.Normal("a")
        pm.Bernoulli("obs", logit_p=a + X_ @ beta, observed=y_)
    tall, glm = _view(model)
    assert glm.family == "bernoulli_logit" and glm.max_curvature == 0.25
    theta = np.array([0.3, -1.0, 2.0, 0.7])  # beta, then a
    idx = np.array([5, 0, 399, 17])
    batch = tall.gather(idx)
    np.testing.assert_allclose(glm.eta(theta, batch), X[idx] @ theta[:3] + theta[3], rtol=1e-12)
    np.testing.assert_array_equal(glm.observed(batch), y[idx])
    np.testing.assert_allclose(glm.eta_jacobian(batch), np.column_stack([X[idx], np.ones(4)]), atol=1e-12)
    np.testing.assert_allclose(glm.eta_offset(batch), 0.0, atol=1e-12)


def test_poisson_with_offset_and_bambi_form(data):
    X, y, offset = data
    counts = (3 * y).astype(int)
    with pm.Model(coords={"obs": range(N)}) as model:
        x0 = pm.Data("x0", X[:, 0], dims="obs")
        x1 = pm.Data("x1", X[:, 1], dims="obs")
        b0, b1 = pm.Normal("b0"), pm.Normal("b1")
        pm.Poisson("count", mu=pm.math.exp(offset + b0 * x0 + b1 * x1), observed=counts, dims="obs")
    tall, glm = _view(model)
    assert glm.family == "poisson_log" and np.isinf(glm.max_curvature)
    batch = tall.row_slice(10, 20)
    theta = np.array([0.5, -0.25])
    np.testing.assert_allclose(glm.eta(theta, batch), offset[10:20] + X[10:20, :2] @ theta, rtol=1e-12)
    np.testing.assert_allclose(glm.eta_offset(batch), offset[10:20], rtol=1e-12)
    np.testing.assert_array_equal(glm.observed(batch), counts[10:20])


def test_normal_with_known_sigma_is_the_identity_family(data):
    X, y, _ = data
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Normal("obs", X @ beta, 0.5, observed=y)
    tall, glm = _view(model)
    assert glm.family == "normal_identity" and glm.sigma == 0.5 and glm.max_curvature == 4.0
    batch = tall.gather(np.arange(5))
    np.testing.assert_allclose(glm.eta(np.ones(3), batch), X[:5].sum(axis=1), rtol=1e-12)


def test_sigmoid_of_p_is_the_logistic_family(data):
    X, y, _ = data
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("obs", p=pm.math.sigmoid(X @ beta), observed=y)
    assert _view(model)[1].family == "bernoulli_logit"


def test_non_affine_predictor_is_refused(data):
    X, y, _ = data
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        scale = pm.HalfNormal("scale")
        pm.Bernoulli("obs", logit_p=scale * (X @ beta), observed=y)
    with pytest.raises(ValueError, match="not affine in the free variables"):
        _view(model)


def test_unsupported_family_and_link_are_refused(data):
    X, y, _ = data
    with pm.Model() as student:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.StudentT("obs", nu=4, mu=X @ beta, sigma=1.0, observed=y)
    with pytest.raises(ValueError, match="has distribution StudentTRV.*pms.HMCECS"):
        _view(student)
    with pm.Model() as free_sigma:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Normal("obs", X @ beta, pm.HalfNormal("sigma"), observed=y)
    with pytest.raises(ValueError, match="sigma that is not one known positive number"):
        _view(free_sigma)
    with pm.Model() as softplus_link:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Poisson("obs", mu=pm.math.log1pexp(X @ beta), observed=y)
    with pytest.raises(ValueError, match="not written through the canonical link"):
        _view(softplus_link)
    with pm.Model() as two:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("a", logit_p=X @ beta, observed=y)
        pm.Bernoulli("b", logit_p=X @ beta, observed=y)
    with pytest.raises(ValueError, match="this model has 2 observed variables"):
        _view(two)
