"""The subsampling steps' columns in PyMC's live progress bar.

Through the hooks PyMC's own progress bar reads (``step._progressbar_config(n_chains)`` and
``step._make_progressbar_update_functions()``), on the stats of real draws, and on the bar
rendered by a tiny ``pm.sample(progressbar=True)`` (rich's console swapped for a recording one).
"""

import dataclasses
import io
import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pymc.progress_bar.rich_progress as rich_progress
import pytest
from conftest import logistic_data, logistic_model
from pymc.progress_bar import MCMCProgressBarManager
from rich.console import Console

import pymc_subsample as pms
from pymc_subsample.diagnostics.progress import (
    MISSING,
    StatColumn,
    compact,
    format_stat,
    progressbar_config,
    progressbar_update,
)


def _two_decimals(v):
    return f"{v:.2f}"


def _sig3(v):
    return f"{v:.3g}"


def _count(v):
    return f"{int(v)}"


# step → (constructor, [(stat, label, expected formatting of the stat's value)])
STEPS = {
    "HMCECS": (
        lambda: pms.HMCECS(subsample_size=50, num_blocks=5),
        [("loglik_var", "σ̂²", compact), ("subsample_accept", "u-acc", _two_decimals),
         ("step_size", "step", _sig3), ("divergences", "div", _count)],
    ),
    "SubsampleMH": (
        lambda: pms.SubsampleMH(subsample_size=50, num_blocks=5),
        [("acceptance_rate", "acc", _two_decimals), ("batch_size", "m", _count),
         ("loglik_var", "σ̂²", compact), ("scale", "scale", _sig3)],
    ),
    "SGLD": (
        lambda: pms.SGLD(batch_size=30),
        [("step_size", "step", _sig3), ("grad_var", "grad-var", compact)],
    ),
    "SGHMC": (
        lambda: pms.SGHMC(batch_size=30),
        [("step_size", "step", _sig3), ("grad_var", "grad-var", compact)],
    ),
    "SGFS": (
        lambda: pms.SGFS(batch_size=30),
        [("step_size", "step", _sig3), ("grad_var", "grad-var", compact),
         ("converged", "conv", lambda v: "yes" if v else "no")],
    ),
    "ISS": (
        lambda: pms.ISS(subset_size=20),
        [("refresh_rate", "refresh", lambda v: f"{v:.3f}"), ("epsilon", "ε", _sig3),
         ("acceptance_rate", "acc", _two_decimals)],
    ),
}


@dataclass
class Run:
    step: object
    idata: object
    bar: str  # the rendered bar at the end of sampling


@pytest.fixture(scope="module")
def model():
    X, y = logistic_data(n=300, d=2, seed=3)
    return logistic_model(X, y)


def _recording_console(*args, **kwargs):
    kwargs.update(record=True, width=250, file=io.StringIO())
    console = Console(*args, **kwargs)
    _recording_console.consoles.append(console)
    return console


@pytest.fixture(scope="module", params=list(STEPS))
def run(request, model):
    make_step, _ = STEPS[request.param]
    _recording_console.consoles = []
    with model, pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.setattr(rich_progress, "Console", _recording_console)
        step = make_step()
        idata = pm.sample(draws=4, tune=4, chains=1, cores=1, step=step, progressbar=True, random_seed=13,
                          compute_convergence_checks=False, discard_tuned_samples=False)
    bar = "\n".join(c.export_text() for c in _recording_console.consoles)
    return Run(step, idata, bar)


def _draw_stats(sample_stats, draw):
    """The stats dict of one draw of chain 0, as the step returned it."""
    return {name: var.values[0, draw].item() for name, var in sample_stats.data_vars.items()}


def _columns(run):
    return STEPS[type(run.step).__name__][1]


def test_config_hook_gives_the_columns(run):
    columns, initial = run.step._progressbar_config(3)
    assert [c.get_table_column().header for c in columns] == [label for _, label, _ in _columns(run)]
    assert initial == {stat: [MISSING] * 3 for stat, _, _ in _columns(run)}
    # the default argument, as PyMC's static hooks have it
    assert len(run.step._progressbar_config()[1][_columns(run)[0][0]]) == 1


@pytest.mark.parametrize("group, draw", [("warmup_sample_stats", 0), ("warmup_sample_stats", -1),
                                         ("sample_stats", -1)])
def test_update_function_formats_a_real_draw(run, group, draw):
    stats = _draw_stats(run.idata[group], draw)
    (update,) = run.step._make_progressbar_update_functions()
    fields = update(stats)
    expected = {stat: fmt(stats[stat]) for stat, _, fmt in _columns(run)}
    assert {k: v for k, v in fields.items() if k != "failing"} == expected
    for stat, value in expected.items():  # sensible in warm-up and after it: finite numbers
        if stat != "converged":
            assert math.isfinite(float(value)), (stat, value)
    # PyMC's manager reads them the same way (one update function per stats dict of a draw)
    manager = MCMCProgressBarManager(run.step, chains=1, draws=1, tune=1, progressbar=True)
    failing, shown = manager._extract_stats([stats])
    assert failing is False
    assert shown == expected


def test_rendered_bar_shows_the_last_draw(run):
    last = _draw_stats(run.idata.sample_stats, -1)
    for stat, label, fmt in _columns(run):
        assert label in run.bar, (label, run.bar)
        assert fmt(last[stat]) in run.bar, (stat, fmt(last[stat]), run.bar)
    # PyMC's own columns are still there
    assert "Draw" in run.bar and "Speed" in run.bar


def test_pymc_saves_and_restores_the_steps_own_state(run):
    """Beside the bar: PyMC resets chains sampled in sequence from ``step.sampling_state``, which
    is built from the step's state class (``pymc_protocol.step_state``); set it back, and the
    step's fields follow."""
    step = run.step
    state = step.sampling_state
    assert type(state) is getattr(sys.modules[type(step).__module__], f"{type(step).__name__}State")
    assert state.tune is False  # pm.sample stopped the warm-up
    step.sampling_state = dataclasses.replace(state, tune=True)
    assert step.tune is True
    step.sampling_state = state  # the module's other tests see the step as pm.sample left it
    assert step.tune is False


def test_update_function_survives_nan_and_missing_stats(run):
    (update,) = run.step._make_progressbar_update_functions()
    stats = {stat: math.nan for stat, _, _ in _columns(run)}
    fields = update(stats)
    assert all(isinstance(v, str) for k, v in fields.items() if k != "failing")
    assert fields[_columns(run)[0][0]] == "nan"
    assert not fields.get("failing", False)
    assert {k: v for k, v in update({}).items() if k != "failing"} == {
        stat: MISSING for stat, _, _ in _columns(run)}


def test_hmcecs_divergences_turn_the_bar_red():
    # the hooks and the failing rule need no compiled step: only the estimator is read
    step = object.__new__(pms.HMCECS)
    step.estimator = "perturbed"
    (update,) = step._make_progressbar_update_functions()
    base = {"loglik_var": 0.83, "subsample_accept": 0.41, "step_size": 0.25}
    assert update(base | {"divergences": 0})["failing"] is False
    fields = update(base | {"divergences": np.int64(2)})
    assert fields["failing"] is True
    assert fields == {"loglik_var": "0.83", "subsample_accept": "0.41", "step_size": "0.25",
                      "divergences": "2", "failing": True}
    assert update(base | {"divergences": math.nan})["failing"] is False
    assert update(base | {"divergences": None})["failing"] is False
    step.estimator = "signed"
    labels = [c.get_table_column().header for c in step._progressbar_config(1)[0]]
    assert labels == ["σ̂²", "u-acc", "step", "div", "sign"]
    assert update(base | {"divergences": 0, "sign": -1}).get("sign") is None  # built for "perturbed"
    (update,) = step._make_progressbar_update_functions()
    assert update(base | {"divergences": 0, "sign": -1})["sign"] == "-1"


def test_subsample_mh_shows_sigma2_only_for_pseudo_marginal():
    step = object.__new__(pms.SubsampleMH)
    step.test = "pseudo-marginal"
    assert "σ̂²" in [c.label for c in step.progress_columns()]
    step.test = "austerity"
    assert [c.label for c in step.progress_columns()] == ["acc", "m", "scale"]


def test_format_helpers():
    assert [compact(v) for v in (0.834, 0, 12.4, 12345.0, 3.1e-5, -0.5, math.nan, math.inf)] == [
        "0.83", "0.00", "12.40", "1.2e+04", "3.1e-05", "-0.50", "nan", "inf"]
    assert format_stat(None) == MISSING
    assert format_stat(math.nan, "{:.0f}") == "nan"
    assert format_stat("oops", "{:.2f}") == "oops"  # a format that does not apply: str(value)
    assert format_stat(np.float32(0.5), "{:.2f}") == "0.50"
    cols = [StatColumn("a", "A", "{:.1f}"), StatColumn("b", "B", compact)]
    rich_cols, initial = progressbar_config(cols, n_chains=2)
    assert [c.get_table_column().header for c in rich_cols] == ["A", "B"]
    assert initial == {"a": [MISSING, MISSING], "b": [MISSING, MISSING]}

    def broken(stats):
        raise TypeError

    fields = progressbar_update(cols, failing=broken)({"a": 1.0})
    assert fields == {"a": "1.0", "b": MISSING, "failing": False}
