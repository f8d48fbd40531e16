"""HMCECS: known posteriors (MCSE-scaled), reduction to HMC, real data, PyMC integration."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conftest import gaussian_linear_model, logistic_data, logistic_model, needs_data, skin_segmentation
from scipy.stats import norm

import pymc_subsample as pms
from pymc_subsample.kernels.ecs_tuning import PERTURBED_FLOOR


def gaussian_mean_model(n=20_000, sigma=1.0, prior_sd=10.0, seed=0):
    """y_k ~ N(μ, σ²) with σ known and μ ~ N(0, prior_sd²): the posterior of μ is Gaussian."""
    y = np.random.default_rng(seed).normal(0.7, sigma, size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, prior_sd)
        pm.Normal("y", mu, sigma, observed=y)
    post_var = 1 / (n / sigma**2 + 1 / prior_sd**2)
    return model, post_var * y.sum() / sigma**2, post_var


def assert_moments(draws, mean, var, ess):
    """Mean and variance within 4 Monte Carlo standard errors (ESS-based)."""
    se_mean = np.sqrt(var / ess)
    se_var = var * np.sqrt(2.0 / ess)
    assert abs(draws.mean() - mean) <= 4 * se_mean, (draws.mean(), mean, se_mean)
    assert abs(draws.var() - var) <= 4 * se_var, (draws.var(), var, se_var)


@pytest.mark.parametrize(
    "estimator,inner,n,m,order,num_blocks,compiled",
    [
        ("perturbed", "nuts", 2000, 2000, 0, 1, False),
        ("perturbed", "hmc", 2000, 2000, 0, 2, False),
        ("signed", "nuts", 20_000, 100, 2, 2, False),
        ("signed", "hmc", 20_000, 100, 2, 2, False),
        # the compiled iterations (kernels.compiled_nuts, kernels.compiled_hmc)
        ("perturbed", "nuts", 2000, 2000, 0, 1, True),
        ("signed", "nuts", 20_000, 100, 2, 2, True),
        ("signed", "hmc", 20_000, 100, 2, 2, True),
    ],
)
def test_gaussian_mean_posterior(estimator, inner, n, m, order, num_blocks, compiled):
    # Perturbed: a zero-order proxy gives d_k = (θ − θ*)(y_k − (θ + θ*)/2), so σ̂²(θ) ≈
    # n²(θ − θ*)²/m, and with m = n its posterior mean is ≈ 1, the regime seed 004 §3.1 aims
    # at and where −σ̂²/2 matters: without it the target would be p(θ) L(θ) e^{σ²(θ)/2}, whose
    # precision n − n²/m is 0 (improper); with −σ̂²/4 its variance doubles. The chain on
    # (θ, u) mixes slowly at σ̂² ≈ 1 (θ | u is narrow), hence the minimum ESS below.
    # Signed: the estimator needs D(θ) = ℓ − Σq to stay above a over the posterior (seed 004
    # §5); with order < 2 it falls without bound in the tails and |L̂| grows there, so it is
    # tested with the exact second-order proxy here (the block-Poisson estimator with λ > 1
    # and negative signs is tested in test_estimators.py) and on logistic regression below.
    model, mean, var = gaussian_mean_model(n=n)
    with model:
        step = pms.HMCECS(
            subsample_size=m, num_blocks=num_blocks, estimator=estimator, inner=inner,
            proxy_order=order, rng=1, compiled=compiled,
        )
        idata = pm.sample(
            step=step,
            draws=3000 if estimator == "perturbed" else 2000,
            tune=500,
            chains=1,
            random_seed=11,
            progressbar=False,
            compute_convergence_checks=False,
        )
    if order == 0:
        loglik_var = float(idata.sample_stats["loglik_var"].mean())
        assert 0.5 < loglik_var < 2.0, loglik_var  # σ̂² near 1: the estimator is really noisy
    mu = idata.posterior["mu"].values.ravel()
    ess = float(az.ess(idata, var_names=["mu"])["mu"])
    assert ess >= 100, ess  # before any ESS-scaled tolerance: a stuck chain has a wide one
    if estimator == "signed":
        summary = pms.sign_weighted(idata, ["mu"])
        assert summary.attrs["positive_fraction"] > 0.9
        assert abs(summary["mean"].iloc[0] - mean) <= 4 * np.sqrt(var / ess)
    assert_moments(mu, mean, var, ess)


def test_sign_weighted_summaries_with_negative_signs():
    """Seed 004 eq. 5.3 on draws with known signs: 50% of N(0, 1) with sign +1, 35% of N(2, 1)
    with +1 and 15% of N(2, 1) with −1 represent the density ∝ 0.5 N(0, 1) + 0.2 N(2, 1)
    (mean 4/7, variance 1 + 40/49); ignoring the signs would give mean 1."""
    rng = np.random.default_rng(3)
    size = 20_000
    component = rng.choice(3, size=size, p=[0.5, 0.35, 0.15])
    draws = np.where(component == 0, 0.0, 2.0) + rng.standard_normal(size)
    signs = np.where(component == 2, -1, 1)
    idata = az.from_dict({"posterior": {"mu": draws[None, :]}, "sample_stats": {"sign": signs[None, :]}})
    summary = pms.sign_weighted(idata, ["mu"])
    assert summary.attrs["positive_fraction"] == pytest.approx(np.mean(signs > 0))
    # delta method: the ratio Σψs/Σs has variance Var(s (ψ − μ))/(n (E s)²)
    mean, var = 4 / 7, 1 + 40 / 49
    se = np.std(signs * (draws - mean)) / (np.sqrt(size) * signs.mean())
    assert abs(summary["mean"].iloc[0] - mean) <= 4 * se, (summary["mean"].iloc[0], se)
    assert abs(summary["sd"].iloc[0] ** 2 - var) <= 4 * np.std(signs * ((draws - mean) ** 2 - var)) / (
        np.sqrt(size) * signs.mean()
    )
    # the sign-weighted median: the point where the signed mass reaches one half
    grid = np.linspace(-3.0, 5.0, 80_001)
    cdf = 0.5 / 0.7 * norm.cdf(grid) + 0.2 / 0.7 * norm.cdf(grid - 2.0)
    median = grid[np.searchsorted(cdf, 0.5)]
    assert abs(summary["q50"].iloc[0] - median) < 0.05


def test_reduces_to_full_data_hmc_with_all_rows_and_exact_proxy():
    model, mean, cov = gaussian_linear_model(n=300, d=2)
    with model:
        step = pms.HMCECS(subsample_size=300, num_blocks=10, inner="hmc", rng=2)
    step.subsample = step._draw_subsample()
    # with the second-order proxy on a Gaussian model σ̂² = 0 and ℓ̂ = ℓ for any subsample,
    # so the potential is exactly the full-data log posterior: HMC-ECS is HMC.
    logp = model.compile_logp()
    rng = np.random.default_rng(0)
    for _ in range(5):
        theta = mean + rng.normal(scale=0.1, size=2)
        est = step.potential.estimate(theta, step.subsample)
        assert est.value == pytest.approx(logp({"beta": theta}), rel=1e-10)
        assert est.loglik_var == pytest.approx(0.0, abs=1e-12)
    with model:
        idata = pm.sample(
            step=step,
            draws=1000,
            tune=500,
            chains=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    draws = idata.posterior["beta"].values.reshape(-1, 2)
    ess = az.ess(idata)["beta"].values
    for j in range(2):
        assert_moments(draws[:, j], mean[j], cov[j, j], ess[j])


def test_laplace_metric_draws_pymcs_momenta_and_is_the_default_metric():
    """LaplaceMetric draws p = L⁻ᵀz by a product; PyMC's QuadPotentialFull by a triangular solve:
    from the same generator the momenta agree to rounding, and their covariance is M = (LLᵀ)⁻¹."""
    from pymc.step_methods.hmc.quadpotential import QuadPotentialFull

    from pymc_subsample.step_methods.inner_hmc import LaplaceMetric

    a = np.random.default_rng(0).normal(size=(4, 4))
    cov = a @ a.T + np.diag([0.1, 1.0, 2.0, 5.0])
    ours, pymcs = LaplaceMetric(cov, rng=3), QuadPotentialFull(cov, rng=3)
    for _ in range(5):
        np.testing.assert_allclose(ours.random(), pymcs.random(), rtol=1e-10, atol=1e-12)
    draws = np.array([ours.random() for _ in range(20_000)])
    precision = np.linalg.inv(cov)
    # each entry of the sample covariance within 5 standard errors, Var(p_i p_j) = M_ii M_jj + M_ij²
    se = np.sqrt((np.outer(np.diag(precision), np.diag(precision)) + precision**2) / len(draws))
    assert np.all(np.abs(np.cov(draws.T) - precision) < 5 * se)
    x = np.random.default_rng(1).normal(size=4)
    np.testing.assert_allclose(ours.velocity(x), cov @ x)
    model, _, _ = gaussian_linear_model(n=300, d=2)
    with model:
        pymc_nuts = pms.HMCECS(subsample_size=300, mass_matrix="laplace", rng=0, compiled=False)
        assert isinstance(pymc_nuts.inner.potential, LaplaceMetric)
        numba_tree = pms.HMCECS(subsample_size=300, mass_matrix="laplace", rng=0)
        assert isinstance(numba_tree.inner.metric, LaplaceMetric)


@pytest.fixture(scope="module")
def small_logistic():
    X, y = logistic_data(20_000, 3, seed=5)
    return logistic_model(X, y)


def test_chains_in_parallel_and_reproducible(small_logistic):
    kwargs = dict(
        draws=50, tune=50, chains=2, random_seed=7, progressbar=False, compute_convergence_checks=False
    )
    with small_logistic:
        # spawn (Windows, and PyMC's choice for a Numba-compiled model) and forkserver (macOS): the
        # step is pickled to each chain process with its compiled functions
        parallel = {ctx: pm.sample(step=pms.HMCECS(subsample_size=200), cores=2, mp_ctx=ctx, **kwargs)
                    for ctx in ("spawn", "forkserver")}
        b = pm.sample(step=pms.HMCECS(subsample_size=200), cores=1, **kwargs)
        c = pm.sample(step=pms.HMCECS(subsample_size=200), cores=1, **kwargs)
    np.testing.assert_array_equal(b.posterior["beta"].values, c.posterior["beta"].values)
    # the chains' processes run the kernels this process compiled, loaded from PyTensor's Numba cache:
    # bitwise the same on a warm cache; on a cold one the kernel compiled here and the one loaded there
    # round differently by ~1e-10 under PyTensor's default fastmath flags (reassociation, contraction;
    # measured: equal with PYTENSOR_FLAGS=numba__fastmath=False)
    for ctx, a in parallel.items():
        np.testing.assert_allclose(a.posterior["beta"].values, b.posterior["beta"].values, rtol=1e-8,
                                   atol=1e-9, err_msg=ctx)
    a = parallel["spawn"]
    assert a.posterior["beta"].shape == (2, 50, 3)
    for stat in (
        "diverging",
        "energy",
        "step_size",
        "acceptance_rate",
        "n_steps",
        "tree_depth",
        "subsample_accept",
        "loglik_var",
        "n_loglik_evals",
        "n_grad_evals",
        "sign",
    ):
        assert stat in a.sample_stats, stat
    assert not np.array_equal(b.posterior["beta"].values[0], b.posterior["beta"].values[1])


def test_tuning_does_not_leak_between_chains_or_runs(small_logistic):
    """A step reused for a second run (after tuning and sampling) gives the same draws as a fresh
    one: no tuning state, subsample or cached estimate carries over from earlier chains."""
    kwargs = dict(
        draws=20,
        tune=30,
        chains=2,
        cores=1,
        random_seed=3,
        progressbar=False,
        compute_convergence_checks=False,
    )
    with small_logistic:
        step = pms.HMCECS(subsample_size=200)
        first = pm.sample(step=step, **kwargs)
        again = pm.sample(step=step, **kwargs)
    np.testing.assert_array_equal(first.posterior["beta"].values, again.posterior["beta"].values)
    np.testing.assert_array_equal(
        first.sample_stats["step_size"].values, again.sample_stats["step_size"].values
    )


def test_subsample_size_auto_targets_variance(small_logistic):
    with small_logistic:
        step = pms.HMCECS(subsample_size="auto", proxy_order=1, target_variance=1.0, rng=0)
    assert 10 <= step.subsample_size <= 20_000
    # σ̂² at fresh Laplace draws: its 90% quantile is what "auto" aims at the target
    rng = np.random.default_rng(1)
    precision = step.target.laplace_precision()
    thetas = step.proxy.center + rng.standard_normal((40, 3)) @ np.linalg.cholesky(np.linalg.inv(precision)).T
    step.rng = rng
    variances = [step.potential.estimate(t, step._draw_subsample()).loglik_var for t in thetas]
    assert 0.3 < np.quantile(variances, 0.9) < 3.0


@pytest.mark.parametrize("tune", [0, 20, 60])
def test_rows_computed_exactly_are_chosen_over_all_rows_before_a_draw_is_kept(small_logistic, tune,
                                                                              monkeypatch):
    """Where the pilot asks for the floor m, the set-up leaves the pass over all N rows that picks the
    rows computed exactly to each chain: its warm-up's re-tuning (draw 50), or the end of a shorter
    warm-up (none, or 20 draws). Exactly one pass per chain either way."""
    import pymc_subsample.step_methods.hmcecs as hmcecs

    passes = []
    counted = hmcecs.difference_deviations

    def counting(*args, **kwargs):
        passes.append(1)
        return counted(*args, **kwargs)

    monkeypatch.setattr(hmcecs, "difference_deviations", counting)
    with small_logistic:
        step = pms.HMCECS(rng=0)
        assert (step.subsample_size, step.exact_rows.size, len(passes)) == (PERTURBED_FLOOR, 0, 0)
        pm.sample(step=step, draws=2, tune=tune, chains=1, random_seed=1, progressbar=False,
                  compute_convergence_checks=False)
    assert len(passes) == 1


def test_a_pass_over_the_rows_reads_their_terms_kept_at_the_centre(monkeypatch):
    """Once a draw has kept the rows' terms at θ* for all N rows, the warm-up's pass that scores the
    rows reads them instead of computing them chunk by chunk (a negative binomial's trigamma), with
    the same scores; before, it computes them and keeps nothing."""
    from zoo import negative_binomial

    from pymc_subsample.kernels.tuning import difference_deviations

    with negative_binomial(5000):
        step = pms.HMCECS(rng=0, progressbar=False)
    target = step.target
    thetas, means = np.asarray(step.design.setup_points)[1:6], np.zeros(5)
    made = difference_deviations(target, thetas, means, 1000, 50)
    assert not target.terms_kept()
    target.center_args(step._draw_subsample().batch)  # a draw's batch keeps them
    assert target.terms_kept()
    computed = []
    row_terms = target.glm.row_terms
    monkeypatch.setattr(target.glm, "row_terms", lambda *args: computed.append(1) or row_terms(*args))
    read = difference_deviations(target, thetas, means, 1000, 50)
    assert computed == []
    np.testing.assert_array_equal(read[0], made[0])
    for a, b in zip(read[1:], made[1:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.abs(b).max())  # d ~10⁻⁴: squares ~10⁻⁸


@pytest.mark.parametrize("compiled", [True, False])
def test_loglik_var_is_never_stale_after_a_rejected_subsample_update(small_logistic, compiled):
    # the stat is σ̂² at θ^(j-1) with the subsample kept by the u-update,
    # the proposed one when accepted and the old one when rejected, never a previous θ's value
    with small_logistic:
        step = pms.HMCECS(subsample_size=30, num_blocks=3, proxy_order=1, rng=1, compiled=compiled)
    point, _ = step.step(small_logistic.initial_point())
    outcomes = []
    for _ in range(40):
        theta, kept = step.current_theta.copy(), step.subsample
        point, (stats,) = step.step(point)
        accepted = not np.array_equal(step.subsample.idx, kept.idx)
        expected = step.potential.estimate(theta, step.subsample).loglik_var
        assert stats["loglik_var"] == pytest.approx(expected, rel=1e-10, abs=1e-12)
        outcomes.append(accepted)
    assert 0 < sum(outcomes) < len(outcomes)  # both branches were exercised


def test_potential_keeps_a_trajectorys_estimates_until_told_to_forget(small_logistic):
    with small_logistic:  # PyMC's NUTS on the kernel's potential
        step = pms.HMCECS(subsample_size=200, rng=0, compiled=False)
    potential = step.potential
    # what PyMC's integrator calls is the kernel's own method, with no call of the adapter's between
    call = step.inner._logp_dlogp_func._pytensor_function
    assert call == potential.logp_dlogp
    potential.subsample = step._draw_subsample()
    theta = step.proxy.center + 0.01
    potential.record_trajectory()
    call(theta)
    evaluated = potential.n_rows_evaluated
    call(theta)  # kept: no second evaluation
    assert potential.n_rows_evaluated == evaluated and potential.recorded(theta) is not None
    potential.forget_trajectory()
    call(theta)
    assert potential.n_rows_evaluated == evaluated + 200 and potential.recorded(theta) is None


def test_subsample_size_auto_warns_when_it_needs_most_rows():
    # an order-0 proxy on 400 rows: σ̂² ≈ 1 needs m ≈ N, so subsampling cannot pay off
    X, y = logistic_data(n=400, d=2)
    with logistic_model(X, y):
        step = pms.HMCECS(subsample_size="auto", proxy_order=0, rng=0)
        # the choice is made again at the chain's warm-up draws, and the warning comes from the last
        with pytest.warns(UserWarning, match=r"chose m = \d+ of N = 400 rows.*order-0 Taylor proxy.*"
                                             r"full-data NUTS \(pm.sample\(\) without step=\)"):
            pm.sample(step=step, draws=5, tune=160, chains=1, progressbar=False, random_seed=1,
                      compute_convergence_checks=False)
    assert step.subsample_size >= 100
    # with the order-2 proxy the same model needs few rows, and "auto" stays silent
    with logistic_model(X, y), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert pms.HMCECS(subsample_size="auto", rng=0).subsample_size < 100
    assert not [w for w in record if "pymc_subsample" in w.filename], [str(w.message) for w in record]


def test_sampling_run_with_tiny_subsample_warns(small_logistic):
    with small_logistic:
        step = pms.HMCECS(subsample_size=5, proxy_order=0, num_blocks=1, rng=0)
        with pytest.warns(UserWarning, match="σ̂²"):
            pm.sample(
                step=step,
                draws=200,
                tune=10,
                chains=1,
                random_seed=1,
                progressbar=False,
                compute_convergence_checks=False,
            )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"estimator": "exact"}, "estimator must be one of"),
        ({"inner": "mala"}, "inner must be one of"),
        ({"mass_matrix": "dense"}, "mass_matrix must be one of"),
        ({"subsample_size": 0}, "between 1 and"),
        ({"subsample_size": 20_001}, "between 1 and"),
        ({"num_blocks": 0}, "num_blocks must be"),
        ({"estimator": "signed", "proxy_order": 1}, "signed estimator needs proxy_order=2"),
    ],
)
def test_bad_input(small_logistic, kwargs, match):
    with small_logistic, pytest.raises(ValueError, match=match):
        pms.HMCECS(**kwargs)


@pytest.mark.slow
def test_signed_logistic_regression_against_full_data_nuts():
    X, y = logistic_data(20_000, 3, seed=8)
    with logistic_model(X, y):
        kwargs = dict(
            draws=1000, tune=500, chains=2, cores=1, progressbar=False, compute_convergence_checks=False
        )
        step = pms.HMCECS(subsample_size=20, estimator="signed", rng=0)
        idata = pm.sample(step=step, random_seed=4, **kwargs)
        reference = pm.sample(random_seed=5, **kwargs)
    assert float(idata.sample_stats["loglik_var"].mean()) > 0  # not exact: d̂ varies with u
    result = pms.compare(idata, reference, n_rows=20_000)
    print(repr(result))
    assert result.table["abs_mean_diff_over_sd"].max() <= 0.15
    assert result.table["sd_ratio"].between(0.85, 1.15).all()


@needs_data
@pytest.mark.slow
def test_skin_segmentation_against_full_data_nuts():
    X, y, ref = skin_segmentation()
    with logistic_model(X, y):
        idata = pm.sample(
            step=pms.HMCECS(subsample_size=1000),
            draws=1000,
            tune=500,
            chains=2,
            cores=1,
            random_seed=2026,
            progressbar=False,
            compute_convergence_checks=False,
        )
    result = pms.compare(idata, ref)
    print(repr(result))
    assert result.table["abs_mean_diff_over_sd"].max() <= 0.1
    assert result.table["sd_ratio"].between(0.9, 1.1).all()


def test_the_setup_pilot_keeps_to_a_non_centred_posterior():
    """The pilot's points are the Laplace draws where the proxy's log posterior is plausible: on the
    non-centred zoo model the Laplace draws in θ that leave the ridge a = μ + τz (log posterior
    1,000-26,000 below the mode's) asked for m = 2,214 at 10⁵ rows (54,527 at 10⁶, 18 s of the first
    50 warm-up draws), where the chain needs only the floor."""
    from zoo import build

    with build("hierarchical_noncentred", 100_000):
        step = pms.HMCECS(rng=0)
    assert step.subsample_size == PERTURBED_FLOOR and step.exact_rows.size == 0
