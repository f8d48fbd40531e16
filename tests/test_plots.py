"""pms.plot_compare: the seed 004 comparison figures (Figs. 1, 2 and the σ̂² trace)."""

import sys

import arviz_base as azb
import numpy as np
import pytest

import pymc_subsample as pms

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def agg_backend(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def make_run(seed, *, n_chains=2, n_draws=200, shift=0.0, loglik_var=False, negative_signs=False):
    """A small DataTree with ``alpha`` (scalar) and ``beta`` (shape 3)."""
    rng = np.random.default_rng(seed)
    posterior = {
        "alpha": rng.normal(shift, 1.0, size=(n_chains, n_draws)),
        "beta": rng.normal([0.0, 1.0, -2.0], [0.5, 1.0, 2.0], size=(n_chains, n_draws, 3)) + shift,
    }
    sample_stats = {}
    if loglik_var:
        sample_stats["loglik_var"] = rng.gamma(4.0, 0.25, size=(n_chains, n_draws))
        signs = np.ones((n_chains, n_draws), dtype=np.int64)
        if negative_signs:
            signs[:, ::10] = -1
        sample_stats["sign"] = signs
    groups = {"posterior": posterior}
    if sample_stats:
        groups["sample_stats"] = sample_stats
    return azb.from_dict(groups)


def assert_png(path):
    assert path.exists()
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_all_figures_have_the_expected_axes_and_save_pngs(tmp_path):
    sample = make_run(1, shift=0.05, loglik_var=True, negative_signs=True)
    reference = make_run(2)
    figures = pms.plot_compare(sample, reference, save_to=tmp_path / "cmp.png")
    assert list(figures) == ["densities", "moments", "loglik_var"]
    densities = figures["densities"].axes
    assert len(densities) == 4  # alpha + beta[0..2]
    assert [ax.get_title() for ax in densities] == ["alpha", "beta[0]", "beta[1]", "beta[2]"]
    assert all(len(ax.lines) == 2 for ax in densities)  # sample over reference
    assert len(figures["moments"].axes) == 2
    assert len(figures["loglik_var"].axes) == 2  # σ̂² trace and running sign fraction
    for kind in figures:
        assert_png(tmp_path / f"cmp_{kind}.png")


def test_loglik_var_trace_has_target_line_and_no_sign_axis_without_negative_signs(tmp_path):
    sample = make_run(1, loglik_var=True, negative_signs=False)
    path = tmp_path / "variance.png"
    figures = pms.plot_compare(sample, make_run(2), kind="loglik_var", target_variance=1.5, save_to=path)
    assert list(figures) == ["loglik_var"]
    (trace_ax,) = figures["loglik_var"].axes
    chain_lines, target_line = trace_ax.lines[:2], trace_ax.lines[2]
    np.testing.assert_array_equal(chain_lines[0].get_ydata(), sample.sample_stats["loglik_var"].values[0])
    np.testing.assert_array_equal(target_line.get_ydata(), [1.5, 1.5])
    assert_png(path)


def test_sign_axis_shows_running_fraction_of_positive_signs():
    sample = make_run(1, loglik_var=True, negative_signs=True)
    figures = pms.plot_compare(sample, make_run(2), kind="loglik_var")
    sign_ax = figures["loglik_var"].axes[1]
    signs = sample.sample_stats["sign"].values[0]
    expected = np.cumsum(signs > 0) / np.arange(1, signs.size + 1)
    np.testing.assert_allclose(sign_ax.lines[0].get_ydata(), expected)


def test_all_leaves_out_the_variance_trace_when_the_run_has_no_loglik_var():
    figures = pms.plot_compare(make_run(1), make_run(2))
    assert list(figures) == ["densities", "moments"]
    with pytest.raises(ValueError, match="loglik_var"):
        pms.plot_compare(make_run(1), make_run(2), kind="loglik_var")


def test_moments_plot_the_computed_means_and_variances(tmp_path):
    sample, reference = make_run(1, shift=0.3), make_run(2)
    figures = pms.plot_compare(sample, reference, kind="moments", save_to=tmp_path / "moments.png")
    means_ax, variances_ax = figures["moments"].axes

    def flat(idata):
        post = idata.posterior
        return np.column_stack([post["alpha"].values.reshape(-1), post["beta"].values.reshape(-1, 3)])

    for ax, statistic in ((means_ax, np.mean), (variances_ax, np.var)):
        points = ax.collections[0].get_offsets()
        np.testing.assert_allclose(points[:, 0], statistic(flat(reference), axis=0))  # x: reference
        np.testing.assert_allclose(points[:, 1], statistic(flat(sample), axis=0))  # y: sample
        identity = ax.lines[0]
        np.testing.assert_array_equal(identity.get_xdata(), identity.get_ydata())
    assert_png(tmp_path / "moments.png")


def test_moments_are_sign_weighted_for_signed_runs():
    sample = make_run(1, loglik_var=True, negative_signs=True)
    figures = pms.plot_compare(sample, make_run(2), var_names="alpha", kind="moments")
    signs = sample.sample_stats["sign"].values.reshape(-1)
    alpha = sample.posterior["alpha"].values.reshape(-1)
    points = figures["moments"].axes[0].collections[0].get_offsets()
    np.testing.assert_allclose(points[:, 1], [signs @ alpha / signs.sum()])


def test_var_names_select_variables():
    sample, reference = make_run(1), make_run(2)
    assert len(pms.plot_compare(sample, reference, ["beta"], kind="densities")["densities"].axes) == 3
    assert len(pms.plot_compare(sample, reference, "alpha", kind="densities")["densities"].axes) == 1
    points = pms.plot_compare(sample, reference, ["alpha"], kind="moments")["moments"].axes[0]
    assert points.collections[0].get_offsets().shape == (1, 2)


def test_unknown_var_name_or_kind_gives_clear_error():
    with pytest.raises(ValueError, match=r"Unknown variable 'gamma'.*\['alpha', 'beta'\]"):
        pms.plot_compare(make_run(1), make_run(2), var_names=["alpha", "gamma"])
    with pytest.raises(ValueError, match="Unknown kind"):
        pms.plot_compare(make_run(1), make_run(2), kind="trace")


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'pip install "pymc_subsample\[plots\]"'):
        pms.plot_compare(make_run(1), make_run(2))
