"""Signed HMC-ECS re-chooses λ and a at the chain's own warm-up draws."""

import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model

import pymc_subsample as pms
from pymc_subsample.control_variates.center import find_map_theta
from pymc_subsample.kernels.ecs_tuning import with_block_poisson


@pytest.mark.slow
def test_signed_retunes_when_the_centre_is_far_from_the_mode():
    # Measured before the fix: centre 4 posterior sd from the mode, m = 5, N = 5,000: the set-up
    # pilot predicted P(negative) = 3e-22 and the run had 43% negative signs.
    X, y = logistic_data(5_000, 3, seed=21)
    model = logistic_model(X, y)
    mode, _ = find_map_theta(pms.TallModel(model))
    with model:
        probe = pms.HMCECS(subsample_size=5, estimator="signed", center=mode, rng=0)
    sd = np.sqrt(np.diag(np.linalg.inv(probe.target.laplace_precision())))
    far = mode + 4 * sd
    with model:
        step = pms.HMCECS(subsample_size=5, estimator="signed", center=far, rng=0)
        a0 = step.a
        idata = pm.sample(step=step, draws=300, tune=300, chains=1, random_seed=3, progressbar=False,
                          compute_convergence_checks=False)
    signs = idata.sample_stats["sign"].values.ravel()
    assert step.a != a0  # re-chosen at the chain's draws
    assert np.mean(signs < 0) < 0.1, np.mean(signs < 0)


def test_every_chain_starts_from_the_set_ups_lambda_and_a():
    """The warm-up re-tuning of λ and a belongs to its chain: the next chain (PyMC calls
    reset_tuning before each) starts from the set-up's values, not from the last chain's."""
    X, y = logistic_data(5_000, 3, seed=21)
    with logistic_model(X, y):
        step = pms.HMCECS(subsample_size=5, estimator="signed", rng=0, progressbar=False)
    setup = (step.lam, step.a, step.expected_loglik_var, step.prob_negative, step.design.kappa)
    # what a chain's re-tuning does: other pilot differences, other λ and a
    step._use(with_block_poisson(step.design, mean_d=setup[1] + 3.0, var_d=50.0))
    assert (step.lam, step.a) != setup[:2]
    step.reset_tuning()
    assert (step.lam, step.a, step.expected_loglik_var, step.prob_negative, step.design.kappa) == setup
    assert (step.potential.lam, step.potential.a) == setup[:2]
