"""pms.compare: a report that leads with cost, then agreement, in under 100 columns."""

from types import SimpleNamespace

import arviz_base as azb
import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from conftest import logistic_data, logistic_model

import pymc_subsample as pms
from pymc_subsample.diagnostics.compare import bulk_ess, sampling_seconds
from pymc_subsample.diagnostics.signed import flat_draws
from pymc_subsample.step_methods.hmcecs import HMCECS


def _run(seed, scale, seconds, evals_per_draw, sd=1.0, chains=2, draws=400):
    rng = np.random.default_rng(seed)
    # AR(1) draws: the ESS falls with `scale` (the autocorrelation), so ESS/s differs by design
    x = np.empty((chains, draws, 2))
    x[:, 0] = rng.normal(size=(chains, 2))
    for t in range(1, draws):
        x[:, t] = scale * x[:, t - 1] + np.sqrt(1 - scale**2) * rng.normal(size=(chains, 2))
    return azb.from_dict(
        {"posterior": {"beta": sd * x},
         "sample_stats": {"n_loglik_evals": np.full((chains, draws), evals_per_draw)}},
        attrs={"sample_stats": {"sampling_time": seconds}},
    )


def test_report_leads_with_speed_then_agreement_and_fits_100_columns():
    fast = _run(0, 0.2, seconds=2.0, evals_per_draw=1_000)
    slow = _run(1, 0.2, seconds=20.0, evals_per_draw=100_000)
    result = pms.compare(fast, slow, setup_seconds=1.0, reference_setup_seconds=4.0)
    text = str(result)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in repr(result).splitlines()), repr(result)
    assert lines[1].startswith("seconds, set-up + sampling") and "3.0" in lines[1] and "24.0" in lines[1]
    t = result.table
    this, ref = t["ess_per_second"].min(), t["ref_ess_per_second"].min()
    assert this == pytest.approx(t["ess_bulk"].min() / 3.0)  # set-up counted
    assert ref == pytest.approx(t["ref_ess_bulk"].min() / 24.0)
    speed = next(line for line in lines if line.startswith("speed:"))
    assert f"{this / ref:.3g}× faster" in speed
    assert text.index("speed:") < text.index("agreement:") < text.index("relative CT")
    assert f"{t['abs_mean_diff_over_sd'].max():.3f} reference sd" in text
    assert result.summary().startswith(f"min ESS/s {this:.3g} vs {ref:.3g}")
    # the reverse comparison says slower, by the inverse ratio
    back = pms.compare(slow, fast, setup_seconds=4.0, reference_setup_seconds=1.0)
    assert f"{this / ref:.3g}× slower" in str(back)


def test_report_against_moments_only_has_no_speed_line():
    run = _run(2, 0.5, seconds=5.0, evals_per_draw=10, sd=2.0)
    reference = {"names": ["beta[0]", "beta[1]"], "mean": [0.0, 0.0], "sd": [1.0, 1.0]}
    result = pms.compare(run, reference)
    text = str(result)
    assert "speed:" not in text and "agreement:" in text
    assert result.table["sd_ratio"].between(1.7, 2.3).all()  # sd 2 against 1: the table says so
    assert "–" in text.splitlines()[1]  # the reference's seconds are unknown, shown as a dash


def test_reference_timed_on_its_posterior_only_as_nutpie_records_it():
    # pm.sample(nuts_sampler="nutpie") puts sampling_time on the posterior's attributes only
    run = _run(3, 0.2, seconds=2.0, evals_per_draw=1_000)
    reference = _run(4, 0.2, seconds=8.0, evals_per_draw=1)
    del reference["sample_stats"].attrs["sampling_time"]
    reference["posterior"].attrs["sampling_time"] = 8.0
    assert sampling_seconds(reference) == 8.0
    result = pms.compare(run, reference, reference_setup_seconds=2.0)
    assert result.cost["reference"]["seconds"] == pytest.approx(10.0)
    assert "speed:" in str(result)


def test_caller_measured_seconds_replace_the_recorded_ones():
    run = _run(5, 0.2, seconds=2.0, evals_per_draw=10)
    reference = _run(6, 0.2, seconds=3.0, evals_per_draw=10)
    for tree in (run, reference):
        del tree["sample_stats"].attrs["sampling_time"]
    unknown = pms.compare(run, reference, setup_seconds=1.0)
    assert np.isnan(unknown.cost["seconds"]) and "speed:" not in str(unknown)
    timed = pms.compare(run, reference, seconds=4.0, reference_seconds=12.0)
    assert (timed.cost["seconds"], timed.cost["reference"]["seconds"]) == (4.0, 12.0)
    assert timed.table["ess_per_second"].to_numpy() == pytest.approx(timed.table["ess_bulk"].to_numpy() / 4.0)


def test_objects_with_group_attributes_give_the_same_comparison():
    run = _run(7, 0.5, seconds=2.0, evals_per_draw=10)
    reference = _run(8, 0.2, seconds=3.0, evals_per_draw=10)

    def legacy(tree):
        return SimpleNamespace(posterior=tree["posterior"].to_dataset(),
                               sample_stats=tree["sample_stats"].to_dataset())

    expected = pms.compare(run, reference).table
    pd.testing.assert_frame_equal(pms.compare(legacy(run), legacy(reference)).table, expected)


def test_ess_follows_the_flattened_components_whatever_the_dim_order():
    rng = np.random.default_rng(9)
    # component 0 mixes well, component 1 is sticky: their ESS differ by an order of magnitude
    x = np.empty((2, 500, 2))
    x[:, 0] = rng.normal(size=(2, 2))
    for t in range(1, 500):
        x[:, t, 0] = rng.normal(size=2)
        x[:, t, 1] = 0.95 * x[:, t - 1, 1] + np.sqrt(1 - 0.95**2) * rng.normal(size=2)
    tree = azb.from_dict({"posterior": {"beta": x}})
    post = tree["posterior"].to_dataset()
    moved = SimpleNamespace(posterior=post.transpose("beta_dim_0", "chain", "draw"))
    ess = bulk_ess(tree)
    assert ess[0] > 5 * ess[1]
    np.testing.assert_allclose(bulk_ess(moved), ess)
    names, draws = flat_draws(moved)
    assert names == ["beta[0]", "beta[1]"]
    np.testing.assert_array_equal(draws, x.reshape(-1, 2))


@pytest.fixture(scope="module")
def sampled_runs():
    """An HMC-ECS run and a full-data PyMC NUTS run of one small logistic regression."""
    X, y = logistic_data(2000, 3, seed=11)
    with logistic_model(X, y):
        step = pms.HMCECS(subsample_size=200, rng=0, progressbar=False)
        kwargs = dict(draws=150, tune=150, chains=2, cores=1, random_seed=12, progressbar=False,
                      compute_convergence_checks=False)
        idata = pm.sample(step=step, **kwargs)
        reference = pm.sample(nuts_sampler="pymc", **kwargs)
    return idata, reference, X.shape[0]


def test_hmcecs_run_is_a_datatree_with_the_documented_stats(sampled_runs):
    idata, _, _ = sampled_runs
    assert isinstance(idata, xr.DataTree)
    assert {"posterior", "sample_stats"} <= set(idata.children)
    stats = idata["sample_stats"]
    assert set(HMCECS.stats_dtypes_shapes) <= set(stats.data_vars)
    assert dict(stats.sizes)["chain"] == 2 and dict(stats.sizes)["draw"] == 150
    assert np.isfinite(sampling_seconds(idata))


def test_compare_and_plot_compare_accept_sampled_datatrees(sampled_runs):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idata, reference, n_rows = sampled_runs
    result = pms.compare(idata, reference, n_rows=n_rows)
    table = result.table
    assert list(table.index) == ["beta[0]", "beta[1]", "beta[2]"]
    # the same posterior: within 0.5 posterior sd in mean and 0.7-1.4 in spread at these short chains
    assert (table["abs_mean_diff_over_sd"] < 0.5).all(), table
    assert table["sd_ratio"].between(0.7, 1.4).all(), table
    assert np.isfinite(table[["ess_per_second", "ref_ess_per_second", "relative_ct"]].to_numpy()).all()
    assert result.cost["evals"] == float(idata["sample_stats"]["n_loglik_evals"].sum())
    assert result.cost["reference"]["evals"] == float(reference["sample_stats"]["n_steps"].sum()) * n_rows
    assert "speed:" in str(result)
    try:
        figures = pms.plot_compare(idata, reference)
        assert list(figures) == ["densities", "moments", "loglik_var"]
        assert len(figures["densities"].axes) == 3
        np.testing.assert_array_equal(figures["loglik_var"].axes[0].lines[0].get_ydata(),
                                      idata["sample_stats"]["loglik_var"].values[0])
    finally:
        plt.close("all")
