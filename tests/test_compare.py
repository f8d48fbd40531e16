"""pms.compare: a report that leads with cost, then agreement, in under 100 columns (issue 13)."""

import arviz as az
import numpy as np
import pytest

import pymc_subsample as pms


def _run(seed, scale, seconds, evals_per_draw, sd=1.0, chains=2, draws=400):
    rng = np.random.default_rng(seed)
    # AR(1) draws: the ESS falls with `scale` (the autocorrelation), so ESS/s differs by design
    x = np.empty((chains, draws, 2))
    x[:, 0] = rng.normal(size=(chains, 2))
    for t in range(1, draws):
        x[:, t] = scale * x[:, t - 1] + np.sqrt(1 - scale**2) * rng.normal(size=(chains, 2))
    idata = az.from_dict(posterior={"beta": sd * x},
                         sample_stats={"n_loglik_evals": np.full((chains, draws), evals_per_draw)})
    idata.sample_stats.attrs["sampling_time"] = seconds
    return idata


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
