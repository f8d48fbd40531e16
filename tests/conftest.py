"""Shared fixtures: small tall models with known structure and the real-data path."""

from pathlib import Path

import numpy as np
import pymc as pm
import pytest

from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS, compile_mode

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not DATA.exists(),
    reason="../shared/data is not present (real data sets are only on developer/CI machines)",
)


@pytest.fixture
def python_linker():
    """Compile the package's functions inside the test on PyTensor's Python linker, with PyTensor's
    full graph rewriting but no fusion (:data:`~pymc_subsample.model.compile.PYTHON_LINKER_ARRAYS`).

    For tests of graph identities (two graphs, or a graph and NumPy, give the same numbers; a
    rewritten graph holds no op of some kind): the graphs are under test, not the backend, and on a
    cold cache Numba compiles every kernel of them (a generic forward-mode estimator of a
    distributional regression: ~2 minutes, against ~25 s here). The samplers' agreement tests, the
    kernels' own tests and the demo run on PyTensor's default backend.
    """
    with compile_mode(PYTHON_LINKER_ARRAYS):
        yield


def skin_segmentation():
    """Skin Segmentation as the stored reference fits it: (X with intercept first, y, reference).

    The reference (``reference_nuts.json``) is a full-data NUTS run on standardised B, G, R with an
    intercept and N(0, 1) priors: the same design every real-data test compares against.
    """
    import json

    from pymc_subsample.datasets import load_skin

    data = load_skin(DATA / "skin", standardize=True)
    X = np.column_stack([np.ones(len(data.y)), data.X])
    return X, data.y, json.loads((DATA / "skin" / "reference_nuts.json").read_text())


def logistic_data(n=2000, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    beta = rng.normal(size=d)
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ beta))).astype(float)
    return X, y


def logistic_model(X, y, use_data=True, prior_sd=1.0):
    with pm.Model() as model:
        X_ = pm.Data("X", X) if use_data else X
        beta = pm.Normal("beta", 0, prior_sd, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y)
    return model


def gaussian_linear_model(n=1000, d=3, sigma=0.5, seed=1, prior_sd=10.0):
    """y = X beta + N(0, sigma²) with sigma known: the posterior is Gaussian and known."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + sigma * rng.normal(size=n)
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        beta = pm.Normal("beta", 0, prior_sd, shape=d)
        pm.Normal("y", mu=X_ @ beta, sigma=sigma, observed=y)
    prec = X.T @ X / sigma**2 + np.eye(d) / prior_sd**2
    cov = np.linalg.inv(prec)
    mean = cov @ (X.T @ y / sigma**2)
    return model, mean, cov


def normal_population(n, mean, sd):
    """n values with exactly the given mean and population sd, shaped like a normal sample.

    Normal quantiles at (k + ½)/n: a few rows drawn from them behave like iid normal draws, so
    statistics of subsamples (t, Welch's t, sums of mini-batches) have known laws.
    """
    from scipy.stats import norm

    z = norm.ppf((np.arange(n) + 0.5) / n)
    return mean + sd * (z - z.mean()) / z.std()


@pytest.fixture
def rng():
    return np.random.default_rng(20261123)


def ar1_draws(rho, n, d=2, seed=0):
    """n draws of d independent stationary AR(1) chains with coefficient ρ: known integrated
    autocorrelation time (1 + ρ)/(1 − ρ), ESS/n → (1 − ρ)/(1 + ρ)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, d))
    for t in range(1, n):
        x[t] = rho * x[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(d)
    return x
