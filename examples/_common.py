"""Small helpers shared by the examples: data paths, the logistic model, timing, tables, PNGs."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.diagnostics.compare import sampling_seconds

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DOCS = ROOT / "docs"
# what pm.sample gets in every example: one process, no progress bar, our own diagnostics
SAMPLE = dict(cores=1, progressbar=False, compute_convergence_checks=False)


def data_path(data_root, name):
    """``data_root/name`` if it exists, else None (the caller says what it does instead)."""
    path = Path(data_root) / name
    return path if path.exists() else None


def skip(message):
    """End the example without an error, saying why (e.g. ../shared/data is absent)."""
    print(f"SKIPPED: {message}")
    sys.exit(0)


def logistic_model(X, y, prior_sd=1.0, coords=None):
    """Logistic regression with X and y as ``pm.Data`` (the idiom the package is measured on)."""
    with pm.Model(coords=coords) as model:
        X_ = pm.Data("X", X)
        y_ = pm.Data("y_obs", y)
        beta = pm.Normal("beta", 0.0, prior_sd, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_ @ beta, observed=y_)
    return model


@contextmanager
def timed(store, key):
    """Add the wall seconds of the block to ``store[key]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        store[key] = store.get(key, 0.0) + time.perf_counter() - start


def sample_timed(**kwargs):
    """``pm.sample(**kwargs)`` (in the current model context) and the wall seconds it took."""
    start = time.perf_counter()
    idata = pm.sample(**kwargs)
    return idata, time.perf_counter() - start


def compare_timed(idata, setup, wall, reference, reference_wall, label="this run", **kwargs):
    """``pms.compare`` with each run's set-up taken as wall time minus its recorded sampling time.

    Parameters
    ----------
    idata, reference : xarray.DataTree
        The runs, as ``pm.sample`` returns them.
    setup : float
        Seconds spent before ``pm.sample`` for ``idata`` (building the step: MAP, proxy sums).
    wall, reference_wall : float
        Wall seconds around each ``pm.sample`` call.
    label : str, default "this run"
        Name of ``idata`` in the returned line.
    **kwargs
        Passed to ``pms.compare`` (``n_rows``, ``var_names``).

    Returns
    -------
    result : pymc_subsample.Comparison
    how : str
        How the seconds were counted: set-up plus recorded sampling time where both runs
        recorded one (``sampling_time``), else wall time including set-up for both.
    """
    recorded, reference_recorded = sampling_seconds(idata), sampling_seconds(reference)
    if np.isfinite(recorded) and np.isfinite(reference_recorded):
        # pm.sample's own work outside the draws (compilation, initialisation, conversion) is set-up
        setup_total = setup + wall - recorded
        reference_setup = reference_wall - reference_recorded
        result = pms.compare(idata, reference, setup_seconds=setup_total,
                             reference_setup_seconds=reference_setup, **kwargs)
        how = (f"seconds = set-up + recorded sampling time: {label} {setup_total:.1f} + {recorded:.1f} s, "
               f"reference {reference_setup:.1f} + {reference_recorded:.1f} s")
    else:
        result = pms.compare(idata, reference, seconds=setup + wall, reference_seconds=reference_wall,
                             **kwargs)
        how = ("no sampling time recorded, so seconds are wall time including set-up for both: "
               f"{label} {setup + wall:.1f} s, reference {reference_wall:.1f} s")
    return result, how


def print_table(header, rows, floatfmt=".3g"):
    """A Markdown table (what the READMEs paste)."""

    def cell(v):
        return format(v, floatfmt) if isinstance(v, (float, np.floating)) else str(v)

    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(cell(v) for v in row) + " |")


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only; the examples never open windows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path, dpi=90, max_kb=150):
    """Write ``fig`` as a PNG at ~90 dpi and say its size; warn when it is over ``max_kb``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    kb = path.stat().st_size / 1024
    note = "" if kb <= max_kb else f" (over {max_kb} KB: lower dpi or figsize)"
    print(f"wrote {path} ({kb:.0f} KB){note}")
    import matplotlib.pyplot as plt

    plt.close(fig)


def flat(idata, var="beta"):
    """(draws, d) array of one vector variable, chains stacked (``idata`` as pm.sample returns it)."""
    values = idata.posterior[var].values
    return values.reshape(-1, int(np.prod(values.shape[2:], dtype=int)))
