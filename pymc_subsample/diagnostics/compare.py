"""Agreement and cost of a sample against a reference sample (Dang et al. 2019, §6.2).

See the "Diagnostics" part of docs/design.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import arviz_stats as azs
import numpy as np
import pandas as pd

from pymc_subsample.diagnostics.signed import run_group, sign_weighted

__all__ = ["Comparison", "bulk_ess", "compare", "sampling_seconds"]


@dataclass
class Comparison:
    """Per-parameter agreement and cost of a run against a reference.

    ``str()`` is the report a reader needs first, what the run cost against the reference
    (seconds with set-up, ESS, ESS per second and their ratio), then whether it agrees;
    ``repr()`` adds the per-parameter table; :meth:`summary` is one line.
    """

    table: pd.DataFrame
    cost: dict

    def _has(self, column) -> bool:
        return column in self.table and bool(np.isfinite(self.table[column]).any())

    def _agreement(self) -> str:
        t = self.table
        return (f"max |Δmean| = {t['abs_mean_diff_over_sd'].max():.3f} reference sd, "
                f"sd ratio {t['sd_ratio'].min():.3f}–{t['sd_ratio'].max():.3f} (1 = same spread)")

    def _speed(self):
        """(min ESS/s of this run, of the reference, their ratio), NaN where unknown."""
        this = float(self.table["ess_per_second"].min()) if self._has("ess_per_second") else np.nan
        ref = float(self.table["ref_ess_per_second"].min()) if self._has("ref_ess_per_second") else np.nan
        return this, ref, this / ref

    def summary(self) -> str:
        """One line: speed against the reference first, then agreement."""
        this, ref, ratio = self._speed()
        line = ""
        if np.isfinite(this):
            line = f"min ESS/s {this:.3g}"
            if np.isfinite(ratio):
                line += f" vs {ref:.3g} for the reference ({_times(ratio)}, set-up included); "
            else:
                line += "; "
        return line + "agreement: " + self._agreement()

    def __str__(self) -> str:
        this, ref, ratio = self._speed()
        t, cost, ref_cost = self.table, self.cost, self.cost.get("reference", {})
        rows = [("", "this run", "reference", "this/ref")]

        def row(label, a, b, fmt):
            rows.append((label, _fmt(a, fmt), _fmt(b, fmt), _fmt(a / b, ".3g") if b else ""))

        row("seconds, set-up + sampling", cost["seconds"], ref_cost.get("seconds", np.nan), ".1f")
        row("min bulk ESS", t["ess_bulk"].min(), t["ref_ess_bulk"].min() if self._has("ref_ess_bulk")
            else np.nan, ".0f")
        row("min ESS per second", this, ref, ".3g")
        row("row evaluations (millions)", cost["evals"] / 1e6, ref_cost.get("evals", np.nan) / 1e6, ".3g")
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
                 for r in rows]
        if np.isfinite(ratio):
            lines.append(f"speed: {_times(ratio)} than the reference in ESS per second, set-up included")
        lines.append("agreement: " + self._agreement())
        if self._has("relative_ct"):
            lines.append(
                f"relative CT {t['relative_ct'].median():.3g} (median): the reference needs that many times "
                "more row\nevaluations per effective draw (CT = draws/ESS × evaluations per draw, Dang et "
                "al. 2019 eq. 3.2)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        columns = [c for c in ("mean", "ref_mean", "abs_mean_diff_over_sd", "sd_ratio", "ess_bulk",
                               "ess_per_second", "ess_per_second_ratio") if c in self.table]
        short = self.table[columns].rename(columns={"abs_mean_diff_over_sd": "|Δ|/sd", "sd_ratio": "sd/ref",
                                                    "ess_bulk": "ESS", "ess_per_second": "ESS/s",
                                                    "ess_per_second_ratio": "ESS/s ratio"})
        return str(self) + "\n\n" + short.to_string(float_format=lambda x: f"{x:.4g}")


def _fmt(value, fmt) -> str:
    return format(value, fmt) if np.isfinite(value) else "–"


def _times(ratio) -> str:
    return f"{ratio:.3g}× faster" if ratio >= 1 else f"{1 / ratio:.3g}× slower"


def _moments(idata, var_names):
    if isinstance(idata, dict):
        names = idata.get("names")
        return names, np.asarray(idata["mean"], float), np.asarray(idata["sd"], float)
    table = sign_weighted(idata, var_names, quantiles=())
    return list(table.index), table["mean"].to_numpy(), table["sd"].to_numpy()


def sampling_seconds(idata) -> float:
    """Seconds that the sampler itself recorded for a run, NaN when it recorded none.

    PyMC writes ``sampling_time`` (the draws, without compilation and initialisation) into the
    attributes of both ``sample_stats`` and ``posterior``; through ``pm.sample(nuts_sampler="nutpie")``
    only ``posterior`` has it, so both groups are read.

    Parameters
    ----------
    idata : xarray.DataTree or object
        What ``pm.sample`` returns, or an object with ``posterior``/``sample_stats`` attributes.

    Returns
    -------
    float
    """
    for group in ("sample_stats", "posterior"):
        data = run_group(idata, group)
        if data is not None and "sampling_time" in data.attrs:
            return float(data.attrs["sampling_time"])
    return float("nan")


def _cost(idata, n_rows, extra_seconds, seconds=None):
    """Total seconds, total per-row likelihood evaluations and number of draws of a run."""
    post, stats = run_group(idata, "posterior"), run_group(idata, "sample_stats")
    draws = int(post.sizes["chain"] * post.sizes["draw"])
    seconds = sampling_seconds(idata) + extra_seconds if seconds is None else float(seconds)
    if stats is not None and "n_loglik_evals" in stats:
        evals = float(stats["n_loglik_evals"].sum())
    elif n_rows is not None and stats is not None and "n_steps" in stats:
        evals = float(stats["n_steps"].sum()) * n_rows  # full-data gradient steps
    else:
        evals = np.nan
    return {"seconds": seconds, "evals": evals, "draws": draws}


def compare(idata, reference, *, var_names=None, n_rows=None, setup_seconds=0.0, reference_setup_seconds=0.0,
            seconds=None, reference_seconds=None):
    """Compare a sample with a reference (e.g. full-data NUTS).

    Parameters
    ----------
    idata : xarray.DataTree or object
        The sample, as ``pm.sample`` returns it (an object with ``posterior`` and
        ``sample_stats`` attributes holding Datasets also works). Signed runs are
        sign-weighted, Dang et al. 2019 eq. 5.3.
    reference : xarray.DataTree, object or dict
        Reference sample in the same forms, or a dict with ``mean`` and ``sd`` arrays in the
        same flattened order (as in ``../shared/data/skin/reference_nuts.json``).
    var_names : str or list of str, optional
        Posterior variables to compare, by default all of the sample's.
    n_rows : int, optional
        N, to cost a full-data reference as n_steps x N evaluations.
    setup_seconds, reference_setup_seconds : float
        Added to the sampling times that the samplers recorded (``sampling_time``, see
        :func:`sampling_seconds`): MAP, proxy sums, compilation.
    seconds, reference_seconds : float, optional
        Total seconds of a run, set-up included, measured by the caller (e.g. wall time around
        set-up and ``pm.sample``). When given, used instead of the recorded sampling time plus
        ``setup_seconds`` / ``reference_setup_seconds``; needed when a sampler records no
        sampling time.

    Returns
    -------
    Comparison
        ``table`` columns: mean, sd, ref_mean, ref_sd, abs_mean_diff_over_sd, sd_ratio,
        ess_bulk, inefficiency (IF = draws/ESS), ess_per_second, ess_per_million_evals,
        ct (IF x evaluations per draw, Dang et al. 2019 eq. 3.2) and, with a sampled (not dict)
        reference, ref_ess_bulk, ref_ess_per_second, ess_per_second_ratio and relative_ct
        (CT_ref / CT, eq. 6.1). ``print(result)`` leads with cost (seconds with set-up,
        ESS, ESS/s and the ratio), then agreement, in under 100 columns.
    """
    names, mean, sd = _moments(idata, var_names)
    _, ref_mean, ref_sd = _moments(reference, var_names)
    if ref_mean.shape != mean.shape:
        raise ValueError(
            f"The reference has {ref_mean.size} parameters and the sample {mean.size}; pass var_names "
            "so both flatten to the same parameters."
        )
    table = pd.DataFrame(
        {
            "mean": mean,
            "sd": sd,
            "ref_mean": ref_mean,
            "ref_sd": ref_sd,
            "abs_mean_diff_over_sd": np.abs(mean - ref_mean) / ref_sd,
            "sd_ratio": sd / ref_sd,
        },
        index=names,
    )
    cost = _cost(idata, n_rows, setup_seconds, seconds)
    _add_efficiency(table, idata, var_names, cost, "")
    if not isinstance(reference, dict):
        ref_cost = _cost(reference, n_rows, reference_setup_seconds, reference_seconds)
        ref_table = pd.DataFrame(index=names)
        _add_efficiency(ref_table, reference, var_names, ref_cost, "")
        table["ref_ess_bulk"] = ref_table["ess_bulk"].to_numpy()
        table["ref_ess_per_second"] = ref_table["ess_per_second"].to_numpy()
        table["ess_per_second_ratio"] = table["ess_per_second"] / ref_table["ess_per_second"].to_numpy()
        table["relative_ct"] = ref_table["ct"].to_numpy() / table["ct"]
        cost["reference"] = ref_cost
    return Comparison(table, cost)


def bulk_ess(idata, var_names=None):
    """Bulk ESS of every scalar posterior component, in the order of ``flat_draws``.

    Parameters
    ----------
    idata : xarray.DataTree or object
        A run with a posterior group.
    var_names : str or list of str, optional
        Posterior variables, by default all of them.

    Returns
    -------
    numpy.ndarray
        One ESS per scalar component (arviz-stats' rank-normalised bulk ESS).
    """
    post = run_group(idata, "posterior")
    names = (list(post.data_vars) if var_names is None
             else [var_names] if isinstance(var_names, str) else list(var_names))
    ess = azs.ess(post[names], method="bulk")
    columns = []
    for v in names:
        # the variable's other dims in the posterior's order, so components flatten as flat_draws does
        dims = [d for d in post[v].dims if d not in ("chain", "draw")]
        columns.append(np.atleast_1d(ess[v].transpose(*dims).values).ravel())
    return np.concatenate(columns)


def _add_efficiency(table, idata, var_names, cost, prefix):
    ess = bulk_ess(idata, var_names)
    table[prefix + "ess_bulk"] = ess
    table[prefix + "inefficiency"] = cost["draws"] / ess
    table[prefix + "ess_per_second"] = ess / cost["seconds"]
    table[prefix + "ess_per_million_evals"] = ess / cost["evals"] * 1e6
    table[prefix + "ct"] = table[prefix + "inefficiency"] * cost["evals"] / cost["draws"]
