"""Firefly Monte Carlo (pms.FireflyMC): bounds, brightness kernels, exactness against full-data NUTS."""


from functools import partial

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model, needs_data, skin_segmentation

import pymc_subsample as pms
from pymc_subsample.control_variates.center import find_center
from pymc_subsample.control_variates.firefly_bounds import (
    CollapsedBound,
    CollapsibleBound,
    JaakkolaJordanBound,
    SlackBound,
    collapse_bound,
    row_loglik,
)
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.kernels.firefly import (
    BrightRows,
    FireflyPotential,
    flip_bright,
    flip_dark,
    log_expm1,
    propose_dark,
)
from pymc_subsample.model.glm import linear_predictor_model
from pymc_subsample.model.tall import TallModel

MIN_ESS = 400
Z_MAX = 4.0  # |z| for each of 2 × d comparisons at fixed seeds; a broken formula gives |z| ≫ 10


class ConstantBound(CollapsibleBound):
    """log B_k = const: a user-supplied collapsible bound (b = c = 0), valid when const ≤ min ℓ_k."""

    def __init__(self, value):
        self.value = value

    def coefficients(self, eta_center, y):
        return self.value, 0.0, 0.0


def laplace():
    """Centre and sd of the Laplace approximation at the model's default centre (the MAP)."""
    tall = TallModel()
    center = find_center(tall)
    precision = SubsampledTarget(tall, center, 2).laplace_precision()
    return center, np.sqrt(np.diag(np.linalg.inv(precision)))


def sample(step_or_none, seed, draws=1000, tune=400, chains=2):
    return pm.sample(step=step_or_none, draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                     progressbar=False, compute_convergence_checks=False)


def agreement(idata, reference):
    """z-scores of the means and of the sd ratios (MCSE from ArviZ ESS), and the smallest ESS."""
    ess, ess_ref = az.ess(idata).beta.values, az.ess(reference).beta.values
    post, post_ref = idata.posterior.beta, reference.posterior.beta
    z_mean = ((post.mean(("chain", "draw")) - post_ref.mean(("chain", "draw")))
              / np.sqrt(az.mcse(idata).beta ** 2 + az.mcse(reference).beta ** 2)).values
    ratio = (post.std(("chain", "draw")) / post_ref.std(("chain", "draw"))).values
    z_sd = (ratio - 1.0) / np.sqrt(1.0 / (2 * ess) + 1.0 / (2 * ess_ref))
    return z_mean, z_sd, ratio, float(min(ess.min(), ess_ref.min()))


@pytest.fixture(scope="module")
def small_logistic():
    """N = 2000, d = 3 logistic regression and its full-data NUTS reference."""
    X, y = logistic_data(n=2000, d=3, seed=7)
    with logistic_model(X, y):
        reference = sample(None, seed=11, draws=1500)
    return X, y, reference


# ---------------------------------------------------------------------- bounds
def test_jaakkola_jordan_bound_is_below_the_likelihood(rng):
    """log B(η) ≤ ℓ(η) at random η, ξ and y, with equality at s = (2y − 1)η = ±ξ."""
    eta_center = rng.normal(scale=4.0, size=20000)
    eta = rng.normal(scale=4.0, size=20000)
    y = (rng.random(20000) < 0.5).astype(float)
    bound = JaakkolaJordanBound()
    gap = row_loglik("bernoulli_logit", eta, y)[0] - bound.log_bound(eta, eta_center, y)
    assert gap.min() >= -1e-12
    assert np.median(gap) > 1e-3  # a bound, not an identity
    for sign in (1.0, -1.0):  # tight where s = ±ξ
        touch = sign * (2 * y - 1) * np.abs(eta_center)
        assert np.allclose(row_loglik("bernoulli_logit", touch, y)[0], bound.log_bound(touch, eta_center, y),
                           atol=1e-10)
    slack = SlackBound(bound, 0.01)
    expected = bound.log_bound(eta, eta_center, y) + np.log(0.99)
    assert np.allclose(slack.log_bound(eta, eta_center, y), expected)


def test_collapsed_sums_equal_the_sum_of_row_bounds(rng):
    """s₀ + s₁ᵀθ + θᵀS₂θ from the chunked pass equals Σ_k log B_k(θ) row by row (with an offset
    in η, so that every term of s₀ and s₁ counts)."""
    X, y = logistic_data(n=1500, d=3, seed=2)
    offset = rng.normal(size=1500)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ beta + pm.Data("offset", offset), observed=y)
        glm = linear_predictor_model(TallModel())
    center = rng.normal(size=3)
    collapsed = collapse_bound(glm, JaakkolaJordanBound(), center, chunk_size=400)
    batch = glm.tall.row_slice(0, 1500)
    eta_center = glm.eta(center, batch)
    for _ in range(3):
        theta = center + rng.normal(size=3)
        direct = np.sum(JaakkolaJordanBound().log_bound(glm.eta(theta, batch), eta_center, y))
        value, grad = collapsed.value_and_grad(theta)
        assert value == pytest.approx(direct, rel=1e-10)
        step = 1e-6 * np.eye(3)
        fd = [(collapsed.value_and_grad(theta + e)[0] - collapsed.value_and_grad(theta - e)[0]) / 2e-6
              for e in step]
        assert np.allclose(grad, fd, rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------- kernels
def test_brightness_moves_leave_the_conditional_invariant():
    """Many independent z_k chains at fixed θ end bright with probability 1 − B/L = odds/(1 + odds),
    for odds below and above the proposal rate q (the MH correction matters for both)."""
    rng = np.random.default_rng(3)
    rate, copies = 0.05, 40000
    for log_odds in (np.log(0.01), np.log(0.2), np.log(3.0)):
        z = np.zeros(copies, dtype=bool)
        for _ in range(300):
            proposed = ~z & (rng.random(copies) < rate)
            to_bright = proposed.copy()
            to_bright[proposed] = flip_dark(rng, np.full(proposed.sum(), log_odds), rate)
            to_dark = z.copy()
            to_dark[z] = flip_bright(rng, np.full(z.sum(), log_odds), rate)
            z = (z & ~to_dark) | to_bright
        p = np.exp(log_odds) / (1 + np.exp(log_odds))
        zscore = (z.mean() - p) / np.sqrt(p * (1 - p) / copies)
        assert abs(zscore) < Z_MAX, (np.exp(log_odds), z.mean(), p)


def test_dark_proposals_are_uniform_and_skip_bright_rows():
    rng = np.random.default_rng(4)
    n, rate, bright = 500, 0.1, np.array([3, 10, 499])
    counts = np.zeros(n)
    for _ in range(4000):
        rows = propose_dark(rng, n, rate, bright)
        assert np.all(np.diff(rows) > 0) and not np.isin(bright, rows).any()
        counts[rows] += 1
    dark = np.setdiff1d(np.arange(n), bright)
    z = (counts[dark].mean() / 4000 - rate) / np.sqrt(rate * (1 - rate) / (4000 * dark.size))
    assert abs(z) < Z_MAX


def test_potential_gradient_matches_finite_differences(rng):
    d, m = 3, 40
    jac, offset = rng.normal(size=(m, d)), rng.normal(size=m)
    y = (rng.random(m) < 0.5).astype(float)
    center = rng.normal(size=d)
    bound = SlackBound(JaakkolaJordanBound(), 0.01)
    a, b, c = bound.coefficients(offset + jac @ center, y)
    no_rows = CollapsedBound(0.0, np.zeros(d), np.zeros((d, d)))
    pot = FireflyPotential(partial(row_loglik, "bernoulli_logit"), lambda t: (-0.5 * t @ t, -t), no_rows)
    pot.bright = BrightRows(np.arange(m), offset, jac, y, a, b, c)
    theta = center + 0.3 * rng.normal(size=d)
    value, grad = pot.value_and_grad(theta)
    eta = offset + jac @ theta
    r = row_loglik("bernoulli_logit", eta, y)[0] - (a + b * eta + c * eta**2)
    assert value == pytest.approx(-0.5 * theta @ theta + np.sum(np.log(np.expm1(r))), rel=1e-12)
    fd = [(pot.value_and_grad(theta + e)[0] - pot.value_and_grad(theta - e)[0]) / 2e-6
          for e in 1e-6 * np.eye(d)]
    assert np.allclose(grad, fd, rtol=1e-5, atol=1e-5)
    assert np.allclose(log_expm1([1e-12, 1.0, 50.0]), np.log(np.expm1([1e-12, 1.0, 50.0])))


# ------------------------------------------------------------------- sampling
def test_firefly_agrees_with_full_data_nuts(small_logistic):
    """Centre two Laplace sd off the mode: the bound is tight in the wrong place, so the bright rows
    must correct location and spread; the draws must still match full-data NUTS."""
    X, y, reference = small_logistic
    with logistic_model(X, y):
        center, sd = laplace()
        step = pms.FireflyMC(center=center + 2.0 * sd)
        idata = sample(step, seed=5)
    z_mean, z_sd, ratio, ess = agreement(idata, reference)
    stats = idata.sample_stats
    print(z_mean, z_sd, ratio, ess, float(stats.n_bright.mean()), step.slack, step.proposal_rate)
    assert ess >= MIN_ESS
    assert np.abs(z_mean).max() < Z_MAX and np.abs(z_sd).max() < Z_MAX
    assert 0 < float(stats.n_bright.mean()) < 0.2 * len(y)
    assert np.all(stats.n_loglik_evals.values >= stats.n_bright.values)
    assert step.is_exact




def test_every_row_bright_is_full_data_mcmc(small_logistic):
    """Reduction: with B_k ≡ e^{-40} every row turns bright at the first update (q = 1) and stays,
    and π ∏ B ∏ (L − B)/B = π ∏ (L − B) is the full-data posterior up to e^{-40}: the potential
    equals the model's log posterior, and the draws match full-data NUTS. The bright fraction
    (100%) is far above 20%, so the run warns."""
    X, y, reference = small_logistic
    with logistic_model(X, y) as model:
        with pytest.warns(UserWarning, match="bound is too loose") as record:
            step = pms.FireflyMC(bound=ConstantBound(-40.0), slack=0.0, proposal_rate=1.0)
            idata = sample(step, seed=6, draws=600, tune=300)
        logp = model.compile_logp()
    messages = [str(w.message) for w in record if "too loose" in str(w.message)]
    assert any("expected from a pilot" in m for m in messages)  # at construction
    assert any("100.0% of the rows are bright (mean after warm-up)" in m for m in messages)  # run check
    n = len(y)
    assert np.all(idata.sample_stats.n_bright.values == n)
    # the potential with every row bright against PyMC's own full-data log posterior
    rng = np.random.default_rng(1)
    for _ in range(3):
        theta = step.proxy.center + 0.1 * rng.normal(size=3)
        assert step.potential.value_and_grad(theta)[0] == pytest.approx(logp({"beta": theta}), abs=1e-9)
    z_mean, z_sd, ratio, ess = agreement(idata, reference)
    print(z_mean, z_sd, ratio, ess)
    assert ess >= MIN_ESS
    assert np.abs(z_mean).max() < Z_MAX and np.abs(z_sd).max() < Z_MAX


def test_same_seed_same_draws_and_inner_hmc():
    X, y = logistic_data(n=300, d=2, seed=1)
    draws = []
    for inner in ("nuts", "nuts", "hmc"):
        with logistic_model(X, y):
            idata = sample(pms.FireflyMC(inner=inner), seed=3, draws=20, tune=20)
        draws.append(idata.posterior.beta.values)
        assert {"n_bright", "n_proposed", "n_loglik_evals", "step_size"} <= set(idata.sample_stats)
    assert np.array_equal(draws[0], draws[1])
    assert np.all(np.isfinite(draws[2])) and not np.array_equal(draws[0], draws[2])


def test_a_tall_model_as_model_gives_the_same_draws():
    X, y = logistic_data(n=300, d=2, seed=1)
    with logistic_model(X, y) as model:
        given = sample(pms.FireflyMC(), seed=3, draws=20, tune=20, chains=1)
        tall = sample(pms.FireflyMC(model=TallModel(model)), seed=3, draws=20, tune=20, chains=1)
    np.testing.assert_array_equal(given.posterior.beta.values, tall.posterior.beta.values)


def test_broken_user_bound_warns():
    """A 'bound' above the likelihood voids exactness: the run warns, it does not crash."""
    X, y = logistic_data(n=300, d=2, seed=1)
    with logistic_model(X, y):
        with pytest.warns(UserWarning, match="not a lower bound"):
            sample(pms.FireflyMC(bound=ConstantBound(0.0), slack=0.0, proposal_rate=1.0), seed=1, draws=5,
                   tune=5, chains=1)


# ----------------------------------------------------------------- bad input
def _poisson_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Poisson("y", mu=pm.math.exp(pm.Data("X", X) @ beta), observed=rng.poisson(1.0, size=200))
    return model


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(bound=object()), TypeError, "CollapsibleBound subclass"),
        (dict(slack=1.0), ValueError, "slack must be a number in"),
        (dict(proposal_rate=0.0), ValueError, "proposal_rate must be 'auto' or a probability"),
        (dict(max_bright_fraction=2), ValueError, "max_bright_fraction must be in"),
        (dict(inner="slice"), ValueError, "inner must be 'nuts' or 'hmc'"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    X, y = logistic_data(n=100, d=2)
    with logistic_model(X, y):
        with pytest.raises(error, match=match):
            pms.FireflyMC(**kwargs)


def test_model_without_a_bound_is_a_clear_error():
    with _poisson_model():
        with pytest.raises(ValueError, match="no built-in collapsible bound.*Pass bound="):
            pms.FireflyMC()
        with pytest.raises(ValueError, match="valid for .*bernoulli_logit.*poisson_log"):
            pms.FireflyMC(bound=JaakkolaJordanBound())
    rng = np.random.default_rng(0)
    with pm.Model():
        mu = pm.Normal("mu")
        pm.StudentT("y", nu=4, mu=mu, sigma=1, observed=rng.normal(size=50))
        with pytest.raises(ValueError, match="FireflyMC needs one observed pm.Bernoulli"):
            pms.FireflyMC()
    with pm.Model():
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=rng.normal(size=50))
        with pytest.raises(ValueError, match="'normal_identity' likelihood .*itself quadratic"):
            pms.FireflyMC()


def test_bound_with_wrong_coefficient_shapes_is_a_clear_error():
    class Bad(CollapsibleBound):
        def coefficients(self, eta_center, y):
            return np.zeros(3), 0.0, 0.0

    X, y = logistic_data(n=100, d=2)
    with logistic_model(X, y):
        with pytest.raises(ValueError, match="must return three arrays"):
            pms.FireflyMC(bound=Bad())


# ------------------------------------------------------------------ real data
@needs_data
@pytest.mark.slow
def test_skin_segmentation_against_full_data_nuts():
    X, y, ref = skin_segmentation()
    with logistic_model(X, y):
        step = pms.FireflyMC()
        idata = sample(step, seed=2026, draws=1000, tune=500)
    result = pms.compare(idata, ref)
    print(repr(result), float(idata.sample_stats.n_bright.mean()))
    assert result.table["ess_bulk"].min() >= MIN_ESS
    assert result.table["abs_mean_diff_over_sd"].max() <= 0.1
    assert result.table["sd_ratio"].between(0.9, 1.1).all()
    assert float(idata.sample_stats.n_bright.mean()) < 0.01 * len(y)


def test_a_model_without_affine_predictor_is_refused_before_the_centre(monkeypatch):
    import pymc_subsample.step_methods.base as base

    def no_centre(*args, **kwargs):
        raise AssertionError("the centre's full passes ran before the model check")

    monkeypatch.setattr(base, "resolve_center", no_centre)
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(300, 2)), (rng.random(300) < 0.5).astype(float)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        scale = pm.HalfNormal("scale")
        pm.Bernoulli("obs", logit_p=scale * (X @ beta), observed=y)
        with pytest.raises(ValueError, match="not affine in the free variables"):
            pms.FireflyMC()
