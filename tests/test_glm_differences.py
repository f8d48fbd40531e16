"""The estimator's differences written in η for GLMs and other distributional regressions equal the
generic forward-mode graph."""

import numpy as np
import pymc as pm
import pytest
from pytensor.tensor.random.basic import BernoulliRV, PoissonRV
from zoo import build

from pymc_subsample import families
from pymc_subsample.estimators import target as target_module
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.model.tall import TallModel
from pymc_subsample.subsample.batch import Batch, Subsample

#: identities of graphs: full rewriting on PyTensor's Python linker (conftest.python_linker)
pytestmark = pytest.mark.usefixtures("python_linker")


def hierarchical_logistic(n, seed=0):
    """Centred a[group]: η = a[g] + b·x is affine in (a, b) (a non-centred a = μ + σz is not)."""
    rng = np.random.default_rng(seed)
    group, x = rng.integers(0, 10, n), rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.3 * group / 10 + 0.7 * x)))).astype(float)
    with pm.Model() as model:
        a = pm.Normal("a", pm.Normal("mu_a", 0, 1), pm.HalfNormal("tau_a", 1), shape=10)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("obs", logit_p=a[pm.Data("g", group)] + b * pm.Data("x", x), observed=pm.Data("y", y))
    return model


def linear_known_sigma(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Normal("obs", mu=pm.Data("X", X) @ beta, sigma=1.5, observed=X @ [1, -1, 0.5] + rng.normal(size=n))
    return model


def gaussian_mean(n, seed=0):
    """η = μ is one scalar shared by every row: each row still needs its own f'(η*) and f''(η*)."""
    with pm.Model() as model:
        pm.Normal("y", pm.Normal("mu", 0, 10), 1.0, observed=np.random.default_rng(seed).normal(0.7, 1.0, n))
    return model


def effects_written_in_the_likelihood(n, seed=0, groups=12):
    """Non-centred varying intercept and slope written where the rows read them, as many PyMC users
    do: μ + σ_a z_a[g] + (β + σ_b z_b[g]) x. Affine in φ = (μ + σ_a z_a, β + σ_b z_b) only once the
    row-free scalings are moved before the gathers (``row_free.lift_row_free_into_gathers``)."""
    rng = np.random.default_rng(seed)
    g, x = rng.integers(0, groups, n), rng.normal(size=n)
    eta = rng.normal(0, 0.5, groups)[g] + rng.normal(0.5, 0.3, groups)[g] * x
    with pm.Model() as model:
        g_, x_ = pm.Data("g", g), pm.Data("x", x)
        mu, beta = pm.Normal("mu", 0, 1), pm.Normal("beta", 0, 1)
        sa, sb = pm.HalfNormal("sa", 1), pm.HalfNormal("sb", 1)
        za, zb = pm.Normal("za", 0, 1, shape=groups), pm.Normal("zb", 0, 1, shape=groups)
        pm.Bernoulli("y", logit_p=mu + sa * za[g_] + (beta + sb * zb[g_]) * x_,
                     observed=pm.Data("y_obs", rng.random(n) < 1 / (1 + np.exp(-eta))))
    return model


BUILD = {"hierarchical_logistic": hierarchical_logistic, "linear_known_sigma": linear_known_sigma,
         "gaussian_mean": gaussian_mean,
         "effects_written_in_the_likelihood": effects_written_in_the_likelihood}
HEAVY = pytest.mark.heavy  # a generic graph of 1-3 min of compilation on a cold cache
# by default one GLM and one model of several η per row, order 2 (HMCECS's); the rest under heavy
CASES = [pytest.param("gaussian_mean", 1, marks=HEAVY), pytest.param("gaussian_mean", 2, marks=HEAVY),
         pytest.param("logistic", 0, marks=HEAVY), pytest.param("logistic", 1, marks=HEAVY), ("logistic", 2),
         pytest.param("bambi_form", 2, marks=HEAVY),
         pytest.param("poisson_offset", 2, marks=HEAVY),
         pytest.param("hierarchical_logistic", 2, marks=HEAVY),
         pytest.param("linear_known_sigma", 2, marks=HEAVY),
         # several η per row (μ, log σ, log ν, logit p), and two observed variables sharing θ
         pytest.param("linear", 1, marks=HEAVY), ("linear", 2),
         pytest.param("hierarchical_centred", 2, marks=HEAVY),
         pytest.param("student_t", 2, marks=HEAVY),
         # its f'' is checked in the Hessian test
         pytest.param("negative_binomial", 2, marks=HEAVY), pytest.param("two_observed", 2, marks=HEAVY),
         # a point mass at 0 mixed with a Poisson, η = (logit ψ, log μ): its generic graph is a minute of
         # a cold run; by default its f is checked against the model's rows (the links test below)
         pytest.param("zero_inflated_poisson", 2, marks=HEAVY)]


def block_updates(tall, sub, rng, blocks, size):
    """The subsamples of ``blocks`` HMC-ECS block updates of ``sub``, one block of ``size`` rows each."""
    for k in range(blocks):
        block = slice(size * k, size * (k + 1))
        new_idx = sub.idx.copy()
        new_idx[block] = rng.integers(0, tall.n_rows, size)
        sub = sub.with_block(tall, new_idx, block)
        yield sub


def _targets(model, order=2):
    tall = TallModel(model)
    rng = np.random.default_rng(1)
    center = tall.initial_theta + rng.normal(scale=0.05, size=tall.ndim)
    return tall, SubsampledTarget(tall, center, order), SubsampledTarget(tall, center, order, glm=False)


@pytest.mark.parametrize("name, order", CASES)
def test_glm_differences_equal_the_generic_graph(name, order):
    tall, glm, generic = _targets(BUILD[name](5_000) if name in BUILD else build(name, 5_000), order)
    assert glm.glm is not None and generic.glm is None
    rng = np.random.default_rng(2)
    batches = [tall.gather(rng.integers(0, tall.n_rows, 400)) for _ in range(2)]
    # near θ* and far from it (where the proxy's terms are large); the η path computes each batch's
    # terms at θ* once: a batch seen before, after another, must get its own terms again
    for scale, batch in zip((0.01, 0.3, 0.3), (batches[0], batches[1], batches[0])):
        theta = glm.center + rng.normal(scale=scale, size=tall.ndim)
        np.testing.assert_allclose(glm.differences(theta, batch), generic.differences(theta, batch),
                                   rtol=1e-10, atol=1e-10)
        for a, b in zip(glm.perturbed(theta, batch), generic.perturbed(theta, batch)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(glm.difference_gradient(theta, batch),
                                   generic.difference_gradient(theta, batch), rtol=1e-10, atol=1e-9)
        signed = [t.signed(theta, batch, 100, -1.0, 4) for t in (glm, generic)]
        for a, b in zip(*signed):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)
    # the set-up's passes: the differences at several points from one vectorised call
    thetas = glm.center + rng.normal(scale=0.3, size=(3, tall.ndim))
    np.testing.assert_allclose(glm.differences_at_thetas(thetas, batches[1]),
                               np.stack([generic.differences(theta, batches[1]) for theta in thetas]),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kept", [True, False])
def test_terms_at_the_center_follow_block_updates(kept, monkeypatch):
    """The η path reads each row's terms at θ* from those kept for all N rows, or (data too large to
    keep them) keeps a batch's across HMC-ECS block updates and computes only the changed block's:
    either way a chain of block updates gives what a fresh gather gives on the generic graph."""
    if not kept:
        monkeypatch.setattr(target_module, "KEPT_TERMS_MAX_VALUES", 0)
    tall, glm, generic = _targets(build("logistic", 3_000))
    assert (glm._kept_terms is not None) == kept
    rng = np.random.default_rng(3)
    for sub in block_updates(tall, Subsample.gather(tall, rng.integers(0, tall.n_rows, 200)), rng, 4, 50):
        theta = glm.center + rng.normal(scale=0.3, size=tall.ndim)
        new_idx = sub.idx
        np.testing.assert_array_equal(sub.batch.rows, new_idx)
        for a, b in zip(glm.perturbed(theta, sub.batch), generic.perturbed(theta, tall.gather(new_idx))):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


def test_kept_terms_follow_the_exact_rows_before_the_subsample():
    """A batch of exact rows followed by subsampled ones knows its rows in order, and the terms read
    for it equal those computed for its rows."""
    tall, glm, _ = _targets(build("poisson_offset", 3_000))
    exact = Batch(tall.gather(np.array([5, 17, 2999])), rows=np.array([5, 17, 2999]))
    sub = Subsample.with_exact(tall, exact, np.array([0, 17, 40]))
    np.testing.assert_array_equal(sub.batch.rows, [5, 17, 2999, 0, 17, 40])
    computed = glm.glm.row_terms(glm.center, tuple(sub.batch)).flat()
    for read, fresh in zip(glm.center_args(sub.batch), computed, strict=True):
        np.testing.assert_allclose(read, fresh, rtol=1e-12)


def _wrong_poisson_f(monkeypatch):
    """The logistic's f for a Poisson model: an f that does not reproduce the model's rows."""
    forms = families.CLOSED_FORMS
    monkeypatch.setitem(forms, (PoissonRV, ("log",)), forms[(BernoulliRV, ("logit",))])


@pytest.mark.parametrize("name, links", [("logistic", ["logit"]), ("poisson_offset", ["log"]),
                                         ("zero_inflated_poisson", ["logit", "log"]),
                                         ("linear", ["identity", "log"]),
                                         ("student_t", ["log", "identity", "log"]),
                                         ("negative_binomial", ["log", "logit"]),
                                         ("two_observed", ["identity", "log", "logit"])])
def test_each_parameter_gets_the_link_that_makes_it_affine(name, links):
    """σ = exp(σ's unconstrained value) is log-linked as written; NegativeBinomial's p = α/(μ + α)
    is affine only under the logit (logit p = log α − log μ), found numerically."""
    assert TallModel(build(name, 2_000)).regression_view.links == links


def sine_logistic(n, seed=0):
    """logit p = sin(b·x): not affine in θ nor in its row-free value b under any link."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("obs", logit_p=pm.math.sin(b * pm.Data("x", x)), observed=rng.random(n) < 0.5)
    return model


def test_regression_view_is_used_only_where_it_reproduces_the_model(monkeypatch):
    assert _targets(sine_logistic(2_000))[1].glm is None
    # a wrong f is caught by the numerical check, and the generic graph is used
    _wrong_poisson_f(monkeypatch)
    assert _targets(build("poisson_offset", 2_000))[1].glm is None


@pytest.mark.parametrize("name", ["gaussian_mean", "logistic", "poisson_offset", "hierarchical_logistic",
                                  "linear", "student_t", "negative_binomial", "two_observed",
                                  # d = 24, and two η's of which one (log σ) is row-free
                                  "hierarchical_centred",
                                  # η affine in φ = (μ + τz, b), not in θ: Σ H_k by the chain rule
                                  "hierarchical_noncentred",
                                  # the same with μ + σ z[g] written in the likelihood
                                  "effects_written_in_the_likelihood"])
def test_eta_hessian_sums_equal_the_model_graphs(name):
    """Σℓ_k, Σ∇ℓ_k and Σ H_k of the set-up passes, from η (Σf, Σ J_kᵀ∇f_k, Σ J_kᵀ F''_k J_k), equal the
    model's own graph: its rows, its per-row gradients and Hessians (forward mode, d and d² passes)."""
    tall = TallModel(BUILD[name](3_000) if name in BUILD else build(name, 3_000))
    assert tall.regression_view is not None and tall.uses_eta_sums()
    rng = np.random.default_rng(4)
    batch = tall.gather(rng.integers(0, tall.n_rows, 300))
    theta = tall.initial_theta + rng.normal(scale=0.3, size=tall.ndim)
    total, grad, hess = tall.loglik_sum_value_grad_hessian(theta, batch)
    np.testing.assert_allclose(hess, tall.rows_hessians(theta, batch).sum(axis=0), rtol=1e-9, atol=1e-9)
    rows, grads = tall.loglik_rows_and_grads(theta, batch)
    assert total == pytest.approx(rows.sum(), rel=1e-12)
    np.testing.assert_allclose(grad, grads.sum(axis=0), rtol=1e-9, atol=1e-9)
    # the gradient alone (no Hessian): Σ J_kᵀ∇f_k for d ≤ 8, else reverse mode through η; the value alone
    value_only, grad_only = tall.loglik_sum_value_and_grad(theta, batch)
    assert value_only == total and tall.loglik_sum_value(theta, batch) == (total,)
    np.testing.assert_allclose(grad_only, grads.sum(axis=0), rtol=1e-9, atol=1e-9)


def test_a_failed_check_keeps_the_hessian_vector_products(monkeypatch):
    _wrong_poisson_f(monkeypatch)
    tall = TallModel(build("poisson_offset", 2_000))
    assert tall.regression_view is None
    batch = tall.gather(np.arange(200))
    theta = tall.initial_theta + 0.1
    hess = tall.loglik_sum_value_grad_hessian(theta, batch)[2]
    np.testing.assert_allclose(hess, tall.rows_hessians(theta, batch).sum(axis=0), rtol=1e-9, atol=1e-9)


def test_past_the_row_limit_a_glm_keeps_the_products_and_its_eta_estimator(monkeypatch):
    """Above ETA_HESSIAN_MAX_ROWS (none by default) the set-up Hessians come from the products,
    while the estimator still uses the GLM view."""
    import pymc_subsample.model.views as views_module

    monkeypatch.setattr(views_module, "ETA_HESSIAN_MAX_ROWS", 1_000)
    tall = TallModel(build("logistic", 2_000))
    assert tall.regression_view is not None and not tall.uses_eta_sums()
    assert SubsampledTarget(tall, tall.initial_theta).glm is tall.regression_view
    batch = tall.gather(np.arange(200))
    theta = tall.initial_theta + 0.1
    hess = tall.loglik_sum_value_grad_hessian(theta, batch)[2]
    np.testing.assert_allclose(hess, tall.rows_hessians(theta, batch).sum(axis=0), rtol=1e-9, atol=1e-9)
