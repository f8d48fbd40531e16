"""The closed-form prior (pymc_subsample.model.closed_form_prior, pymc_subsample.prior_kernel) against
PyMC's own log prior and its gradient, and the models it leaves to the compiled prior."""

import numpy as np
import pymc as pm
import pytensor
import pytest
from pytensor.compile.mode import Mode

from pymc_subsample.model.tall import TallModel

RNG = np.random.default_rng(3)
N = 200
X = RNG.normal(size=N)
Y = 1.0 + 0.5 * X + RNG.normal(size=N)
GROUP = RNG.integers(0, 4, size=N)


def _with_rows(priors):
    """A model with the free variables ``priors()`` makes (returning μ of the rows) and normal rows."""
    with pm.Model() as model:
        mu = priors()
        pm.Normal("y", mu, 1.0, observed=Y)
    return model


def every_family():
    alpha = pm.Normal("alpha", 0.5, 2.0)
    tau = pm.HalfNormal("tau", 1.5)
    effects = pm.Normal("effects", alpha, tau, shape=4)  # a hierarchical prior: μ and σ free
    shape = pm.Gamma("shape", 2.0, 0.5)
    scale = pm.Exponential("scale", 2.0)
    weight = pm.Beta("weight", 2.0, 3.0)
    spread = pm.HalfCauchy("spread", 1.2)
    nu = pm.Gamma("nu", alpha=shape, beta=2.0)  # a Gamma whose α is free
    slope = pm.StudentT("slope", nu=nu, mu=0.0, sigma=spread)
    weights = pm.Beta("weights", alpha=scale, beta=weight, shape=2)  # both Beta parameters free
    return effects[GROUP] + slope * X + weights[0] - weights[1]


def indexed_parameter():
    means = pm.Normal("means", 0.0, 1.0, shape=2)
    effects = pm.Normal("effects", means[np.array([0, 0, 1, 1])], 1.0, shape=4)  # μ[g] of a free vector
    return effects[GROUP]


def _model_prior(model, tall):
    """PyMC's log p(θ) of the free variables (Jacobians included) and its gradient, on the Python
    linker: a reference computed apart from the package's graphs.
    """
    logp = model.logp(vars=model.free_RVs, jacobian=True)
    grad = pytensor.grad(logp, tall.value_vars)
    function = pytensor.function(tall.value_vars, [logp, *grad], mode=Mode(linker="py", optimizer=None))

    def at(theta):
        point = tall.theta_to_point(theta)
        value, *grads = function(*(point[v.name] for v in tall.value_vars))
        return float(value), np.concatenate([np.ravel(g) for g in grads])
    return at


@pytest.mark.parametrize("priors", [every_family, indexed_parameter])
def test_closed_form_prior_is_pymcs_log_prior(priors):
    model = _with_rows(priors)
    tall = TallModel(model)
    prior = tall.closed_form_prior
    assert prior is not None
    reference = _model_prior(model, tall)
    rng = np.random.default_rng(0)
    for _ in range(5):
        theta = tall.initial_theta + rng.normal(scale=0.8, size=tall.ndim)
        value, grad = prior(theta)
        want_value, want_grad = reference(theta)
        np.testing.assert_allclose(value, want_value, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)
    # the set-up's and the sampler's prior is this one
    value, grad = tall.prior_value_and_grad(theta, setup=True)
    np.testing.assert_allclose(value, want_value, rtol=1e-12, atol=1e-9)


def quadratic_potential():
    beta = pm.Normal("beta", 0.0, 1.0, shape=3)
    scale = pm.HalfNormal("scale", 1.0)
    # a soft sum-to-zero and a soft pin: quadratic in θ
    pm.Potential("sum_to_zero", pm.logp(pm.Normal.dist(0.0, 0.01), beta.sum()))
    pm.Potential("pin", -0.5 * ((beta[0] - 0.2) / 0.5) ** 2)
    return beta[GROUP % 3] * scale


@pytest.mark.parametrize("priors", [quadratic_potential])
def test_quadratic_potentials_are_read(priors):
    model = _with_rows(priors)
    tall = TallModel(model)
    prior = tall.closed_form_prior
    assert prior is not None and prior.curvature.shape == (tall.ndim, tall.ndim)
    potential = model.logp(vars=model.potentials)
    potentials = pytensor.function(tall.value_vars, [potential, *pytensor.grad(potential, tall.value_vars,
                                                                              disconnected_inputs="ignore")],
                                   mode=Mode(linker="py", optimizer=None), on_unused_input="ignore")
    reference = _model_prior(model, tall)
    rng = np.random.default_rng(4)
    for _ in range(4):
        theta = tall.initial_theta + rng.normal(scale=0.8, size=tall.ndim)
        point = tall.theta_to_point(theta)
        want_value, want_grad = reference(theta)
        extra, *extra_grads = potentials(*(point[v.name] for v in tall.value_vars))
        value, grad = prior(theta)
        np.testing.assert_allclose(value, want_value + float(extra), rtol=1e-10)
        np.testing.assert_allclose(grad, want_grad + np.concatenate([np.ravel(g) for g in extra_grads]),
                                   rtol=1e-9, atol=1e-9)


def not_quadratic_potential():
    mu = pm.Normal("mu", 0.0, 1.0)
    pm.Potential("pull", -(mu ** 4))
    return mu


def computed_parameter():
    alpha = pm.Normal("alpha", 0.0, 1.0)
    effects = pm.Normal("effects", 2.0 * alpha, 1.0, shape=4)  # a parameter computed from a variable
    return effects[GROUP]


def interval_transform():
    return pm.Uniform("mu", -5.0, 5.0)


def data_parameter():
    scale = pm.Data("scale", 2.0)
    return pm.Normal("mu", 0.0, scale)


@pytest.mark.parametrize("priors", [computed_parameter, interval_transform, not_quadratic_potential,
                                    data_parameter])
def test_priors_the_kernel_does_not_compute_are_compiled(priors):
    model = _with_rows(priors)
    tall = TallModel(model)
    assert tall.closed_form_prior is None
    reference = _model_prior(model, tall)
    theta = tall.initial_theta + 0.3
    value, grad = tall.prior_value_and_grad(theta)
    want_value, want_grad = reference(theta)
    if priors is not_quadratic_potential:  # the model's prior holds the potential too
        want_value += -theta[0] ** 4
        want_grad = want_grad - 4.0 * theta[0] ** 3
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)
