"""The model zoo (docs/guide/models.md): the models PyMC users write, with X and y as ``pm.Data``.

Each builder takes N and a seed and returns a fresh ``pm.Model`` on synthetic data drawn
from the model itself. Tests (``tests/test_zoo.py``) and ``benchmarks/zoo.py`` share them.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

__all__ = ["ZOO", "build"]


def _design(rng, n, d):
    return rng.normal(size=(n, d))


def logistic(n, seed=0):
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 4)
    y = rng.random(n) < 1 / (1 + np.exp(-(0.3 + X @ [0.5, -1.0, 0.3, 0.8])))
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        y_ = pm.Data("y", y.astype(float))
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=4)
        pm.Bernoulli("obs", logit_p=alpha + X_ @ beta, observed=y_)
    return model


def bambi_form(n, seed=0):
    """What Bambi writes: one pm.Data per term with dims on the rows, one scalar per term."""
    rng = np.random.default_rng(seed)
    age, work = rng.normal(size=n), rng.normal(size=n)
    afam = (rng.random(n) < 0.2).astype(float)
    eta = -0.2 + 0.4 * age - 0.6 * work + 0.5 * afam
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    with pm.Model(coords={"__obs__": np.arange(n)}) as model:
        data = {k: pm.Data(k, v, dims="__obs__") for k, v in {"age": age, "work": work, "afam": afam}.items()}
        intercept = pm.Normal("Intercept", 0, 2.5)
        slopes = {k: pm.Normal(k + "_coef", 0, 1) for k in data}
        eta_ = intercept + sum(slopes[k] * data[k] for k in data)
        pm.Bernoulli("morekids", p=pm.math.invlogit(eta_), observed=pm.Data("y", y, dims="__obs__"),
                     dims="__obs__")
    return model


def _groups(rng, n, k=20):
    return rng.integers(0, k, size=n), k


def hierarchical_noncentred(n, seed=0, groups=20, *, centred_form=False):
    """Hierarchical logistic regression, a = μ + τz. ``centred_form``: the same data and the same
    posterior of (μ, τ, a, b) written a ~ N(μ, τ), NUTS's easy geometry when groups have many rows
    (a reference for the non-centred model's μ_a, τ_a, a and b)."""
    rng = np.random.default_rng(seed)
    group, k = _groups(rng, n, groups)
    x = rng.normal(size=n)
    a_true = rng.normal(0.2, 0.5, size=k)
    y = rng.random(n) < 1 / (1 + np.exp(-(a_true[group] + 0.7 * x)))
    with pm.Model(coords={"group": np.arange(k)}) as model:
        g = pm.Data("group_idx", group)
        x_ = pm.Data("x", x)
        mu = pm.Normal("mu_a", 0, 1)
        tau = pm.HalfNormal("tau_a", 1)
        if centred_form:
            a = pm.Normal("a", mu, tau, dims="group")
        else:
            z = pm.Normal("z_a", 0, 1, dims="group")
            a = pm.Deterministic("a", mu + tau * z, dims="group")
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("obs", logit_p=a[g] + b * x_, observed=pm.Data("y", y.astype(float)))
    return model


def hierarchical_centred(n, seed=0, groups=20):
    rng = np.random.default_rng(seed)
    group, k = _groups(rng, n, groups)
    x = rng.normal(size=n)
    a_true = rng.normal(0.2, 0.5, size=k)
    y = a_true[group] + 0.7 * x + rng.normal(size=n)
    with pm.Model(coords={"group": np.arange(k)}) as model:
        g = pm.Data("group_idx", group)
        x_ = pm.Data("x", x)
        mu = pm.Normal("mu_a", 0, 1)
        tau = pm.HalfNormal("tau_a", 1)
        a = pm.Normal("a", mu, tau, dims="group")
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("obs", mu=a[g] + b * x_, sigma=sigma, observed=pm.Data("y", y))
    return model


def linear(n, seed=0):
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 3)
    y = 1.0 + X @ [1.0, -0.5, 0.25] + 0.8 * rng.normal(size=n)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 2, shape=3)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("obs", mu=alpha + X_ @ beta, sigma=sigma, observed=pm.Data("y", y))
    return model


def poisson_offset(n, seed=0):
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    exposure = rng.uniform(0.5, 2.0, size=n)
    y = rng.poisson(exposure * np.exp(0.2 + X @ [0.3, -0.2]))
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        log_exposure = pm.Data("log_exposure", np.log(exposure))
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Poisson("obs", mu=pm.math.exp(log_exposure + alpha + X_ @ beta), observed=pm.Data("y", y))
    return model


def negative_binomial(n, seed=0):
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    mu = np.exp(0.5 + X @ [0.3, -0.2])
    y = rng.negative_binomial(3.0, 3.0 / (3.0 + mu))
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=2)
        shape = pm.Gamma("shape", 2, 0.5)
        pm.NegativeBinomial("obs", mu=pm.math.exp(alpha + X_ @ beta), alpha=shape, observed=pm.Data("y", y))
    return model


def student_t(n, seed=0):
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    y = 0.5 + X @ [1.0, -1.0] + rng.standard_t(5.0, size=n)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 2, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("obs", nu=nu, mu=alpha + X_ @ beta, sigma=sigma, observed=pm.Data("y", y))
    return model


def zero_inflated_poisson(n, seed=0):
    """A mixture likelihood: PyMC writes ZeroInflatedPoisson as a Mixture of a point mass at 0 and
    a Poisson, whose log-density joins its components' (a mixture model that once
    did not set up)."""
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    mu = np.exp(0.5 + X @ [0.3, -0.2])
    y = np.where(rng.random(n) < 0.3, 0, rng.poisson(mu))
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=2)
        psi = pm.Beta("psi", 2, 2)
        pm.ZeroInflatedPoisson("obs", psi=psi, mu=pm.math.exp(alpha + X_ @ beta), observed=pm.Data("y", y))
    return model


def mvnormal_lkj(n, seed=0):
    rng = np.random.default_rng(seed)
    cov = np.array([[1.0, 0.5], [0.5, 2.0]])
    y = rng.multivariate_normal([0.5, -0.5], cov, size=n)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(2.0), compute_corr=True
        )
        mu = pm.Normal("mu", 0, 2, shape=2)
        pm.MvNormal("obs", mu=mu, chol=chol, observed=pm.Data("y", y))
    return model


def two_observed(n, seed=0):
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    eta = X @ [0.6, -0.4]
    y1 = 1.0 + eta + rng.normal(size=n)
    y2 = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 1, shape=2)
        alpha = pm.Normal("alpha", 0, 2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y1", mu=alpha + X_ @ beta, sigma=sigma, observed=pm.Data("y1_data", y1))
        pm.Bernoulli("y2", logit_p=X_ @ beta, observed=pm.Data("y2_data", y2))
    return model


def deterministic_potential(n, seed=0):
    """A Deterministic of length N and a prior-only Potential that pulls beta[0] towards 2."""
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    y = X @ [0.4, 0.1] + rng.normal(size=n)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 1, shape=2)
        mu = pm.Deterministic("mu", X_ @ beta)
        # a prior term only: -½ (β₀ − 2)² / 0.01², strong enough to move the posterior
        pm.Potential("pull", -0.5 * ((beta[0] - 2.0) / 0.01) ** 2)
        pm.Normal("obs", mu=mu, sigma=1.0, observed=pm.Data("y", y))
    return model


def set_data_predictive(n, seed=0):
    """The pm.set_data idiom: shape of obs follows X, so new X gives new predictions."""
    rng = np.random.default_rng(seed)
    X = _design(rng, n, 2)
    y = 0.5 + X @ [1.0, 0.5] + rng.normal(size=n)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        y_ = pm.Data("y", y)
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 2, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("obs", mu=alpha + X_ @ beta, sigma=sigma, observed=y_, shape=X_.shape[0])
    return model


def crossed_effects(n, seed=0, levels=(16, 100), zipf=1.5, *, centred_form=False):
    """What Bambi builds for ``y ~ x1 + x2 + (1|a) + (1|b)``: a logistic regression with two crossed
    non-centred group effects ``σ_a z_a[a] + σ_b z_b[b]`` whose group sizes are Zipf-distributed
    (level j of a factor has weight ∝ (j+1)^−``zipf``: at 10⁵ rows, groups of 47,206 to 761 rows
    and of 41,607 to 30), X, y and both indices as ``pm.Data``. ``centred_form``: the same data and
    posterior of (intercept, β, σ, effects) written effect ~ N(0, σ), NUTS's easier geometry where
    the largest groups pin their effects down (a full-data reference for the effects and σ)."""
    rng = np.random.default_rng(seed)
    indices = []
    for k in levels:
        weights = np.arange(1, k + 1, dtype=float) ** -zipf
        indices.append(rng.choice(k, size=n, p=weights / weights.sum()))
    a_idx, b_idx = indices
    X = rng.normal(size=(n, 2))
    effects = 0.5 * rng.normal(size=levels[0])[a_idx] + 0.8 * rng.normal(size=levels[1])[b_idx]
    y = (rng.random(n) < 1 / (1 + np.exp(-(-0.5 + X @ [0.6, -0.4] + effects)))).astype(float)
    with pm.Model(coords={"a": np.arange(levels[0]), "b": np.arange(levels[1])}) as model:
        X_ = pm.Data("X", X)
        a_ = pm.Data("a_idx", a_idx)
        b_ = pm.Data("b_idx", b_idx)
        intercept = pm.Normal("Intercept", 0, 2.5)
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma_a = pm.HalfNormal("sigma_a", 1)
        sigma_b = pm.HalfNormal("sigma_b", 1)
        if centred_form:
            effect_a = pm.Normal("effect_a", 0, sigma_a, dims="a")
            effect_b = pm.Normal("effect_b", 0, sigma_b, dims="b")
            eta_ = intercept + X_ @ beta + effect_a[a_] + effect_b[b_]
        else:
            z_a = pm.Normal("z_a", 0, 1, dims="a")
            z_b = pm.Normal("z_b", 0, 1, dims="b")
            eta_ = intercept + X_ @ beta + sigma_a * z_a[a_] + sigma_b * z_b[b_]
            pm.Deterministic("effect_a", sigma_a * z_a, dims="a")
            pm.Deterministic("effect_b", sigma_b * z_b, dims="b")
        pm.Bernoulli("obs", logit_p=eta_, observed=pm.Data("y", y))
    return model

ZOO = {
    "logistic": logistic,
    "bambi_form": bambi_form,
    "hierarchical_noncentred": hierarchical_noncentred,
    "hierarchical_centred": hierarchical_centred,
    "linear": linear,
    "poisson_offset": poisson_offset,
    "negative_binomial": negative_binomial,
    "student_t": student_t,
    "mvnormal_lkj": mvnormal_lkj,
    "two_observed": two_observed,
    "deterministic_potential": deterministic_potential,
    "set_data_predictive": set_data_predictive,
    "zero_inflated_poisson": zero_inflated_poisson,
    "crossed_effects": crossed_effects,
}


def two_data_sets(n, seed=0):
    """A Normal regression on n rows and a Poisson one on n // 2 other rows, sharing the slope b:
    rows of different lengths stacked on one axis of 3n/2 (model/stacked.py)."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n // 2)
    y1 = 1.0 + 0.5 * x1 + rng.normal(size=n)
    y2 = rng.poisson(np.exp(0.3 + 0.5 * x2))
    with pm.Model() as model:
        a, b, c = (pm.Normal(name, 0, 2) for name in "abc")
        s = pm.HalfNormal("s", 2)
        pm.Normal("y1", a + b * pm.Data("x1", x1), s, observed=pm.Data("y1_data", y1))
        pm.Poisson("y2", pm.math.exp(c + b * pm.Data("x2", x2)), observed=pm.Data("y2_data", y2))
    return model


def heteroscedastic(n, seed=0, heavy_tails=False):
    """A normal regression whose log σ is linear in x too, so that σ differs between rows; with
    ``heavy_tails`` a StudentT regression whose log ν is linear in x as well."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    noise = rng.standard_t(5.0, size=n) if heavy_tails else rng.normal(size=n)
    with pm.Model() as model:
        x_ = pm.Data("x", x)
        beta = pm.Normal("beta", 0, 1, shape=2)
        gamma = pm.Normal("gamma", 0, 1, shape=2)
        mu, sigma = beta[0] + beta[1] * x_, pm.math.exp(gamma[0] + gamma[1] * x_)
        y = 0.3 + 0.8 * x + np.exp(-0.2 + 0.4 * x) * noise
        if heavy_tails:
            delta = pm.Normal("delta", 0, 1, shape=2)
            pm.StudentT("y", nu=pm.math.exp(1.5 + delta[0] + delta[1] * x_), mu=mu, sigma=sigma, observed=y)
        else:
            pm.Normal("y", mu, sigma, observed=y)
    return model


#: models beyond the core zoo that the benchmarks take by name too (tests use them where they say)
BEYOND_ZOO = {"two_data_sets": two_data_sets, "crossed_effects": crossed_effects,
              "heteroscedastic": heteroscedastic,
              "heavy_tails_by_row": lambda n, seed=0: heteroscedastic(n, seed, heavy_tails=True)}


def build(name, n=20_000, seed=0):
    return {**ZOO, **BEYOND_ZOO}[name](n, seed)


def agreement(idata, reference, var_names):
    """Per variable: min ESS, max MCSE-scaled |Δmean| (z) and sd ratios of ``idata`` against a reference.

    z = |mean − mean_ref| / √(sd²/ESS + sd²/ESS_ref): the Monte Carlo standard error of the
    difference, so the tolerance on z is fixed and a minimum ESS keeps it from widening.
    """
    import arviz as az

    ess, ess_ref = az.ess(idata, var_names=var_names), az.ess(reference, var_names=var_names)
    out = {}
    for var in var_names:
        draws = idata.posterior[var].values.reshape(-1, *idata.posterior[var].shape[2:])
        refs = reference.posterior[var].values.reshape(-1, *reference.posterior[var].shape[2:])
        sd = refs.std(axis=0)
        e = np.asarray(ess[var].values).reshape(sd.shape)
        e_ref = np.asarray(ess_ref[var].values).reshape(sd.shape)
        mcse = np.sqrt(sd**2 / e + sd**2 / e_ref)
        out[var] = dict(ess=float(np.min(e)), z=float(np.max(np.abs(draws.mean(0) - refs.mean(0)) / mcse)),
                        shift=float(np.max(np.abs(draws.mean(0) - refs.mean(0)) / sd)),
                        sd_ratio=np.atleast_1d(draws.std(axis=0) / sd))
    return out


def worst_of(result):
    """The worst of :func:`agreement` over its variables: min ESS, max z, max shift, min and max sd ratio."""
    ratios = np.concatenate([np.atleast_1d(r["sd_ratio"]) for r in result.values()])
    return dict(ess=min(r["ess"] for r in result.values()), z=max(r["z"] for r in result.values()),
                shift=max(r["shift"] for r in result.values()), sd_min=float(ratios.min()),
                sd_max=float(ratios.max()))


def agrees(result, min_ess=100, z_max=4.5, sd_tol=0.25):
    """Whether every variable of :func:`agreement` has ESS ≥ min_ess, z < z_max and sd within sd_tol."""
    return all(r["ess"] >= min_ess and r["z"] < z_max and np.all(np.abs(r["sd_ratio"] - 1) < sd_tol)
               for r in result.values())
