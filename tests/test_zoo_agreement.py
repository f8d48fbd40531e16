"""HMCECS and SubsampleMH with their defaults against full-data NUTS on the model zoo (tests/zoo.py),
X and y as pm.Data: MCSE-scaled z and sd ratios after a minimum ESS (:func:`zoo.agrees`)."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from zoo import agreement, agrees, build, hierarchical_noncentred, two_data_sets

import pymc_subsample as pms
from pymc_subsample.kernels.ecs_tuning import PERTURBED_FLOOR

N = 20_000

# every zoo model but the non-centred ones (below); deterministic_potential is checked against its
# exact posterior in test_zoo.py
HEAVY = pytest.mark.heavy
# under heavy besides those below: student_t (its rows and gradients are in the default run), two
# observed variables (two data sets of different lengths are, below) and the centred hierarchical
# model (NUTS's reference for the non-centred one is it, below), about a minute each
AGREEMENT = ["logistic", "bambi_form", "poisson_offset", "linear", "negative_binomial",
             pytest.param("student_t", marks=HEAVY), pytest.param("two_observed", marks=HEAVY),
             pytest.param("hierarchical_centred", marks=HEAVY), "set_data_predictive",
             # no distributional view: the generic graph, 3 min on a cold cache
             pytest.param("mvnormal_lkj", marks=pytest.mark.heavy),
             # a mixture's log-density: NUTS's function of it and the two samplers', 2.4 min cold
             pytest.param("zero_inflated_poisson", marks=pytest.mark.heavy)]
SAMPLE = dict(chains=1, progressbar=False, compute_convergence_checks=False)


def _nuts(model, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pm.sample(random_seed=5, **SAMPLE, **kwargs)


DEFAULT_RUN = dict(draws=600, tune=500)


def _both_agree_with(model, ref, names, runs=None):
    """HMCECS and SubsampleMH with their defaults on ``model``, each against the NUTS run ``ref``:
    ESS ≥ 100 first, so the MCSE tolerance cannot widen without limit, then z and sd
    (:func:`zoo.agrees`), and no warning of ours. Returns the two steps, for checks of their own."""
    runs = runs or {pms.HMCECS: DEFAULT_RUN, pms.SubsampleMH: DEFAULT_RUN}
    steps = []
    for step_class, run in runs.items():
        with model, warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            step = step_class(rng=0)
            idata = pm.sample(step=step, random_seed=6, **SAMPLE, **run)
        assert idata.posterior.sizes["draw"] == run["draws"]
        result = agreement(idata, ref, names)
        assert agrees(result), (step_class.__name__, result)
        assert not [w for w in record if "pymc_subsample" in w.filename], [str(w.message) for w in record]
        steps.append(step)
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("name", AGREEMENT)
def test_hmcecs_and_pseudo_marginal_mh_defaults_agree_with_nuts(name):
    model = build(name, N)
    ref = _nuts(model, **DEFAULT_RUN)
    _, mh = _both_agree_with(model, ref, [rv.name for rv in model.free_RVs])
    assert mh.test == "pseudo-marginal"  # SubsampleMH's default test


@pytest.mark.slow
def test_both_samplers_agree_with_nuts_on_the_noncentred_hierarchical_model():
    """With m = 1000 of 20,000 rows, against NUTS on the same data and posterior written centred,
    a ~ N(μ, τ): with 1000 rows a group that is NUTS's easy geometry (ESS ≥ 1,000 of 600 draws), where
    the non-centred form gave it ~70 per 600 for μ_a and τ_a (and 67 s for 1500 draws); compared on
    μ_a, τ_a, the group effects a = μ + τz and b. SubsampleMH's random walk needs the covariance of
    its warm-up draws: with the Laplace covariance (μ_a's variance 10× the posterior's) it had an ESS
    of 2 of 1500 draws, with the adapted one ~300 of 800."""
    model = build("hierarchical_noncentred", N)
    ref = _nuts(hierarchical_noncentred(N, centred_form=True), draws=600, tune=500)
    names = ["mu_a", "tau_a", "a", "b"]
    ess_ref = az.ess(ref, var_names=names)
    assert min(float(ess_ref[v].min()) for v in names) >= 100  # the reference's MCSE enters every z
    # 2000 draws: in 1000, μ_a's ESS was 52 in one run and above 100 in another of the same seed. The
    # same seed's path differs between a cold and a warm PyTensor cache: the prior's Numba function
    # compiled afresh and loaded from the cache differ in the last bit (PyMC's default NUTS's draws
    # too), so this test must pass on any path, not on one seed's (HMCECS's target_accept of 0.9 on
    # this curved posterior: with 0.8, one chain in 29 stayed 500 draws in a tail, μ_a's ESS 4)
    _both_agree_with(model, ref, names, {pms.HMCECS: dict(draws=2000, tune=500),
                                         pms.SubsampleMH: dict(draws=800, tune=800)})


def _bambi_model(bmb, n, seed=0):
    """A Bambi formula with a categorical term and a group intercept (a zoo item)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    k = 50
    data = pd.DataFrame({"age": rng.normal(size=n), "work": rng.choice(["none", "part", "full"], size=n),
                         "group": rng.choice([f"g{i}" for i in range(k)], size=n)})
    work = data["work"].map({"none": 0.0, "part": 0.3, "full": -0.4}).to_numpy()
    group = data["group"].str[1:].astype(int).to_numpy()
    eta = -0.2 + 0.5 * data["age"].to_numpy() + work + rng.normal(0, 0.5, size=k)[group]
    data["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    model = bmb.Model("y ~ age + work + (1|group)", data, family="bernoulli")
    model.build()
    return model.backend.model


@pytest.mark.slow
def test_bambi_formula_with_a_group_intercept_agrees_with_nuts():
    """Both samplers with defaults. SubsampleMH's random walk (55 parameters: the intercept and the
    50 group offsets on a ridge, whose non-centred mode puts σ_group far above the posterior's, so
    its Laplace covariance has 48x the intercept's posterior variance) mixes only with the warm-up
    draws' covariance adapted again every COVARIANCE_EVERY draws (with three comparisons: ESS 5 of
    1000 draws) and its thin grown to 500 moves per draw."""
    bmb = pytest.importorskip("bambi", reason="Bambi is an optional test dependency: pip install bambi")
    model = _bambi_model(bmb, N)
    ref = _nuts(model, draws=1000, tune=1000)
    for step_class in (pms.HMCECS, pms.SubsampleMH):
        with model, warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            step = step_class(rng=0)
            idata = pm.sample(step=step, draws=1000, tune=1000, random_seed=6, **SAMPLE)
        # HMCECS: chosen again at the chain's warm-up draws (SubsampleMH: its own default, 1000)
        assert step.subsample_size == (PERTURBED_FLOOR if step_class is pms.HMCECS else 1000)
        result = agreement(idata, ref, [rv.name for rv in model.free_RVs])
        assert agrees(result), (step_class.__name__, result)
        assert not [w for w in record if "pymc_subsample" in w.filename], [str(w.message) for w in record]


@pytest.mark.slow
def test_both_samplers_agree_with_nuts_on_two_data_sets_of_different_lengths():
    """Two observed variables of 20,000 and 10,000 rows sharing b: their rows stacked on one axis
    of 30,000 (model/stacked.py; rows and gradients in tests/test_stacked.py)."""
    model = two_data_sets(N)
    steps = _both_agree_with(model, _nuts(model, **DEFAULT_RUN), ["a", "b", "c", "s"])
    assert [step.tall.n_rows for step in steps] == [N + N // 2] * 2
