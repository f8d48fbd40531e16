"""HMCECS on crossed non-centred group effects with Zipf-distributed group sizes (``y ~ x1 + x2 +
(1|a) + (1|b)``, :func:`zoo.crossed_effects`, 10⁵ rows, 121 parameters).

With PyMC's dense mass-matrix adaptation, whose first window of 75 warm-up draws gives a singular
estimate of the 121 × 121 matrix, the chain left the region where the Taylor proxy holds soon after
that matrix took over (σ_b from 0.8 to 0.001, σ̂² from ~0.1 to 10⁸); with the Laplace matrix, or the
dense one adapted over 2d draws (the default), it stays. At θ* and the Laplace draws a few rows of
the smallest groups hold most of σ² (eq. 4.3); the default computes them exactly
(:meth:`~pymc_subsample.estimators.target.SubsampledTarget.perturbed_with_exact`).
"""

import contextlib
import io
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from zoo import crossed_effects

import pymc_subsample as pms
from pymc_subsample.kernels.ecs_tuning import PERTURBED_FLOOR

N = 100_000


def _hmcecs(step_kwargs, tune, draws):
    with crossed_effects(N) as model:
        step = pms.HMCECS(rng=0, progressbar=False, **step_kwargs)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            idata = pm.sample(step=step, tune=tune, draws=draws, chains=1, random_seed=2, progressbar=False,
                              compute_convergence_checks=False)
    return model, step, idata, [str(w.message) for w in record]


@pytest.mark.heavy
def test_dense_adaptation_from_75_draws_leaves_the_posterior_and_the_run_check_says_so():
    """PyMC's dense adaptation (``mass_matrix="laplace_adapt"``) estimates the 121 × 121 matrix from
    its first window of 75 warm-up draws: the chain then leaves the region where the proxy holds
    (σ̂² from ~0.1 to 10⁵ and more) and the post-warm-up check reports σ̂² with its value and the
    remedy."""
    _, _, idata, messages = _hmcecs({"subsample_size": 1000, "mass_matrix": "laplace_adapt"}, tune=200,
                                    draws=100)
    sigma2 = idata.sample_stats["loglik_var"].values
    assert np.median(sigma2) > 100  # far above the target 1
    variance = [m for m in messages if "σ̂² averages" in m]
    assert variance and "use the default mass_matrix ('auto') or 'laplace'" in variance[0]
    assert f"{float(np.mean(sigma2[0, :100])):.3g}" in variance[0]  # the actual value


@pytest.mark.slow
def test_defaults_keep_the_chain_where_the_proxy_holds_with_few_rows():
    """The default: the dense matrix adapted over a first window of 2d draws, and the rows whose proxy
    error dominates σ² at θ* and the Laplace draws (a few rows of the smallest groups) computed
    exactly, and m rows of the others (at least the floor): fewer rows per estimate than the
    m ≈ 6,000 that uniform subsampling would need for σ² ≤ 1. σ̂² stays near its target after
    warm-up, trees are short, and no check warns."""
    model, step, idata, messages = _hmcecs({}, tune=1000, draws=200)
    b_idx = model["b_idx"].get_value()
    exact = step.exact_rows
    assert 0 < exact.size <= 0.01 * N and step.subsample_size >= PERTURBED_FLOOR
    assert exact.size + step.subsample_size <= 2000
    assert np.median(np.bincount(b_idx)[b_idx[exact]]) < 100  # rows of small groups
    sigma2 = idata.sample_stats["loglik_var"].values
    assert np.mean(sigma2) < 1.0, np.mean(sigma2)
    assert float(idata.sample_stats["tree_depth"].mean()) <= 6.0
    checks = ("σ̂²", "effective sample size", "from where the chain ended")
    assert not [m for m in messages if any(c in m for c in checks)], messages
    assert step.potential.rows_in(step.subsample) == exact.size + step.subsample_size


@pytest.mark.usefixtures("python_linker")
def test_estimator_with_exact_rows_is_the_difference_estimator_on_the_rest():
    """ℓ̂ = Σq + Σ_E d + (n_R/m) Σ_u d (seed 004 eqs. 4.1-4.3 on the rows R not in E): with every row
    in E but one (a subsample of the one other row) it is the exact log posterior at any centre,
    with none it is the uniform estimator, and its gradient is that of its value."""

    from pymc_subsample import TallModel
    from pymc_subsample.control_variates.center import find_center
    from pymc_subsample.estimators.loglik import difference_estimator
    from pymc_subsample.estimators.target import SubsampledTarget
    from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS

    n = 5000
    model = crossed_effects(n)
    tall = TallModel(model)
    rng = np.random.default_rng(0)
    center = find_center(tall)
    theta = center + rng.normal(scale=0.05, size=tall.ndim)
    exact_logp = model.compile_logp(mode=PYTHON_LINKER_ARRAYS)(tall.theta_to_point(theta))
    for c in (center, center + rng.normal(scale=0.3, size=tall.ndim)):
        target = SubsampledTarget(tall, c)
        # n − 1 rows exact, the last one a subsample of one row of R = {that row}
        value, _, sigma2 = target.perturbed_with_exact(theta, tall.row_slice(0, n), n - 1, 1.0)
        assert value == pytest.approx(exact_logp, rel=1e-10) and sigma2 == 0.0
    # E = the first 40 rows, a subsample of 300 of the others
    target = SubsampledTarget(tall, center)
    exact = np.arange(40)
    idx = rng.integers(40, n, size=300)
    batch = tall.gather(np.concatenate([exact, idx]))
    value, grad, sigma2 = target.perturbed_with_exact(theta, batch, 40, float(n - 40))
    d = target.differences(theta, batch)
    sum_q, _ = target.proxy.sum_value_and_grad(theta)
    loglik_rest, sigma2_rest = difference_estimator(d[40:], n - 40)
    prior = target.prior_value(theta)
    assert sigma2 == pytest.approx(sigma2_rest, rel=1e-10)
    assert value == pytest.approx(prior + sum_q + d[:40].sum() + loglik_rest - 0.5 * sigma2_rest, rel=1e-10)
    # with no exact rows and n_rest = N it is the uniform estimator
    uniform = target.perturbed(theta, tall.gather(idx))
    with_none = target.perturbed_with_exact(theta, tall.gather(idx), 0, float(n))
    assert with_none[0] == pytest.approx(uniform[0], rel=1e-12)
    np.testing.assert_allclose(with_none[1], uniform[1], rtol=1e-10, atol=1e-10)
    eps = 1e-5
    for j in range(0, tall.ndim, 7):
        e = np.zeros(tall.ndim)
        e[j] = eps
        fd = (target.perturbed_with_exact(theta + e, batch, 40, float(n - 40))[0]
              - target.perturbed_with_exact(theta - e, batch, 40, float(n - 40))[0]) / (2 * eps)
        assert grad[j] == pytest.approx(fd, rel=1e-4, abs=1e-3), (j, grad[j], fd)


@pytest.mark.slow
def test_setup_makes_few_full_passes_on_one_progress_display():
    """The set-up's full-data passes are counted (≤ 15, the pass that scores rows for exact
    computation included) and shown on one display: one line of output for the whole set-up, where
    each long pass drew a bar of its own; nothing with ``progressbar=False``."""
    outputs = []
    for progressbar in (True, False):
        out = io.StringIO()
        with crossed_effects(N), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            step = pms.HMCECS(rng=0, chunk_size=5000, progressbar=progressbar)  # 20 chunks a pass
        outputs.append(out.getvalue())
        assert 3 <= step.tall.full_passes <= 15, step.tall.full_passes
    lines = [line for line in outputs[0].splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("HMCECS set-up: full-data pass "), outputs[0]
    assert outputs[1] == ""


@pytest.mark.heavy
def test_defaults_agree_with_full_data_nuts():
    """``HMCECS()`` with its defaults against full-data NUTS (nutpie, the model as written) on every
    parameter and group effect: ESS ≥ 100 first, then MCSE-scaled z ≤ 4.5 and sd ratios in
    [0.8, 1.25], with m ≤ 5% of N and mean tree depth ≤ 6 (minutes: NUTS reads all 10⁵ rows at
    every gradient)."""
    pytest.importorskip("nutpie", reason="the full-data reference runs on nutpie (pip install nutpie)")
    from zoo import agreement, worst_of

    names = ["Intercept", "beta", "sigma_a", "sigma_b", "effect_a", "effect_b"]
    with crossed_effects(N):
        # nutpie's low-rank mass matrix: with its diagonal one, the intercept and the group effects
        # (whose sum the rows pin down) had a bulk ESS of 6-18 in 2000 iterations
        reference = pm.sample(chains=2, cores=1, random_seed=1, nuts_sampler="nutpie", progressbar=False,
                              compute_convergence_checks=False, nuts={"adaptation": "low_rank"})
    with crossed_effects(N):
        step = pms.HMCECS(rng=0, progressbar=False)
        idata = pm.sample(step=step, chains=2, cores=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    result = agreement(idata, reference, names)
    worst = worst_of(result)
    assert worst["ess"] >= 100, result
    ref_ess = az.ess(reference, var_names=names)
    assert min(float(ref_ess[v].min()) for v in names) >= 100
    assert worst["z"] <= 4.5, result
    assert 0.8 <= worst["sd_min"] and worst["sd_max"] <= 1.25, result
    assert step.subsample_size + step.exact_rows.size <= 0.05 * N
    assert float(idata.sample_stats["tree_depth"].mean()) <= 6.0


@pytest.mark.heavy
def test_subsample_mh_defaults_agree_or_warn():
    """Pseudo-marginal ``SubsampleMH()`` on the same model: a random walk in 121 dimensions mixes too
    slowly to agree within a test's draws, and its ESS check says so with the remedy."""
    with crossed_effects(N):
        step = pms.SubsampleMH(rng=0, progressbar=False)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            pm.sample(step=step, tune=200, draws=200, chains=1, random_seed=2, progressbar=False,
                      compute_convergence_checks=False)
    messages = [str(w.message) for w in record]
    assert [m for m in messages if "effective sample size" in m and "HMCECS" in m], messages
