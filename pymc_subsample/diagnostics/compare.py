"""Agreement and cost of a sample against a reference sample (DESIGN step 10, seed 004 §6.2)."""

from __future__ import annotations

from dataclasses import dataclass

import arviz as az
import numpy as np
import pandas as pd

from pymc_subsample.diagnostics.signed import flat_draws, sign_weighted

__all__ = ["Comparison", "compare"]


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
                "more row\nevaluations per effective draw (CT = draws/ESS × evaluations per draw, seed 004 "
                "eq. 3.2)")
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


def _cost(idata, n_rows, extra_seconds):
    """Total seconds, total per-row likelihood evaluations and number of draws of a run."""
    stats = idata.sample_stats
    draws = int(stats.sizes["chain"] * stats.sizes["draw"])
    seconds = float(stats.attrs.get("sampling_time", np.nan)) + extra_seconds
    if "n_loglik_evals" in stats:
        evals = float(stats["n_loglik_evals"].sum())
    elif n_rows is not None and "n_steps" in stats:
        evals = float(stats["n_steps"].sum()) * n_rows  # full-data gradient steps
    else:
        evals = np.nan
    return {"seconds": seconds, "evals": evals, "draws": draws}


def compare(idata, reference, *, var_names=None, n_rows=None, setup_seconds=0.0, reference_setup_seconds=0.0):
    """Compare a sample with a reference (e.g. full-data NUTS).

    Parameters
    ----------
    idata : InferenceData
        The sample (signed runs are sign-weighted, seed 004 eq. 5.3).
    reference : InferenceData or dict
        Reference sample, or a dict with ``mean`` and ``sd`` arrays in the same flattened
        order (as in ``../shared/data/skin/reference_nuts.json``).
    var_names : list of str, optional
    n_rows : int, optional
        N, to cost a full-data reference as n_steps x N evaluations.
    setup_seconds, reference_setup_seconds : float
        Added to the sampling times (MAP, proxy sums, compilation).

    Returns
    -------
    Comparison
        ``table`` columns: mean, sd, ref_mean, ref_sd, abs_mean_diff_over_sd, sd_ratio,
        ess_bulk, inefficiency (IF = draws/ESS), ess_per_second, ess_per_million_evals,
        ct (IF x evaluations per draw, seed 004 eq. 3.2) and, with an InferenceData
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
    cost = _cost(idata, n_rows, setup_seconds)
    _add_efficiency(table, idata, var_names, cost, "")
    if not isinstance(reference, dict):
        ref_cost = _cost(reference, n_rows, reference_setup_seconds)
        ref_table = pd.DataFrame(index=names)
        _add_efficiency(ref_table, reference, var_names, ref_cost, "")
        table["ref_ess_bulk"] = ref_table["ess_bulk"].to_numpy()
        table["ref_ess_per_second"] = ref_table["ess_per_second"].to_numpy()
        table["ess_per_second_ratio"] = table["ess_per_second"] / ref_table["ess_per_second"].to_numpy()
        table["relative_ct"] = ref_table["ct"].to_numpy() / table["ct"]
        cost["reference"] = ref_cost
    return Comparison(table, cost)


def _add_efficiency(table, idata, var_names, cost, prefix):
    _, draws = flat_draws(idata, var_names)
    ess_ds = az.ess(idata, var_names=var_names, method="bulk")
    ess = np.concatenate([np.atleast_1d(ess_ds[v].values).ravel() for v in ess_ds.data_vars])
    ess = ess[: draws.shape[1]]
    table[prefix + "ess_bulk"] = ess
    table[prefix + "inefficiency"] = cost["draws"] / ess
    table[prefix + "ess_per_second"] = ess / cost["seconds"]
    table[prefix + "ess_per_million_evals"] = ess / cost["evals"] * 1e6
    table[prefix + "ct"] = table[prefix + "inefficiency"] * cost["evals"] / cost["draws"]
