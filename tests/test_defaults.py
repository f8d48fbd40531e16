"""Every step method with no arguments on the zoo GLMs (X and y as pm.Data) agrees with full-data NUTS.

Each pairing is one method on one model at N = 20,000 (the whole
grid at N = 100,000 is ``benchmarks/defaults.py``, its table in benchmarks/README.md).
Agreement is MCSE-scaled (:func:`zoo.agreement`) after a minimum-ESS assertion.
"""

import warnings

import pymc as pm
import pytest
from zoo import agreement, agrees, build

import pymc_subsample as pms

N = 20_000
SAMPLE = dict(chains=1, progressbar=False, compute_convergence_checks=False)
_REFERENCES = {}


def _reference(name):
    if name not in _REFERENCES:
        with build(name, N), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _REFERENCES[name] = pm.sample(draws=1000, tune=700, random_seed=11, **SAMPLE)
    return _REFERENCES[name]


@pytest.mark.slow
@pytest.mark.parametrize("method, name", [("SGLD", "logistic"), ("SGHMC", "poisson_offset"),
                                          ("SGFS", "linear"), ("SubsampleMH", "linear")])
def test_defaults_agree_with_full_data_nuts(method, name):
    model = build(name, N)
    with model:
        idata = pm.sample(step=getattr(pms, method)(), draws=1000, tune=300, random_seed=3, **SAMPLE)
    result = agreement(idata, _reference(name), [rv.name for rv in model.free_RVs])
    assert agrees(result), result


def test_sgld_default_step_size_follows_the_stated_rule():
    # the default ε is the rule's value for the measured whitened noise: ≤ 0.186 (s = 0) and
    # lower with the noisier plain estimator; thin = ⌈1/ε⌉ (≤ 50)
    from pymc_subsample.kernels.sg_tuning import langevin_step_size

    with build("linear", 5_000):
        cv = pms.SGLD()
        plain = pms.SGLD(gradient="plain")
    eps_cv, eps_plain = cv._eps(0), plain._eps(0)
    assert eps_plain < 0.2 * eps_cv <= 0.2 * langevin_step_size(0.0)
    assert cv.thin == -(-1 // eps_cv) and plain.thin == min(50, -(-1 // eps_plain))
    assert cv.whitening.chol is not None and pms.SGLD(step_size=1e-5, model=build("linear", 5_000)) \
        .whitening.chol is None  # an explicit ε keeps the seeds' unpreconditioned dynamics
