"""Synthetic logistic regression used by the benchmarks (standardised features, N(0, 1) prior)."""

import numpy as np
import pymc as pm


def logistic_data(n_rows, n_features, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    beta = rng.normal(scale=0.5, size=n_features)
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(np.float64)
    return X, y


def logistic_model(X, y):
    """X and y both as pm.Data, PyMC's own idiom (the form the benchmarks measure)."""
    with pm.Model() as model:
        X_ = pm.Data("X", X)
        y_ = pm.Data("y_obs", y)
        beta = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y_)
    return model
