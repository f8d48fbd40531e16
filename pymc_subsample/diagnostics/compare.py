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
    """Per-parameter agreement and cost; ``str()`` gives the one-line verdict."""

    table: pd.DataFrame
    cost: dict

    def summary(self) -> str:
        t = self.table
        line = (
            f"max |Δmean|/sd_ref = {t['abs_mean_diff_over_sd'].max():.3f}, "
            f"sd/sd_ref in [{t['sd_ratio'].min():.3f}, {t['sd_ratio'].max():.3f}]"
        )
        if "ess_per_second" in t and np.isfinite(t["ess_per_second"]).any():
            line += f", min ESS/s = {t['ess_per_second'].min():.3g}"
        if "ess_per_second_ratio" in t and np.isfinite(t["ess_per_second_ratio"]).any():
            line += f" ({t['ess_per_second_ratio'].min():.3g}x the reference)"
        if "relative_ct" in t and np.isfinite(t["relative_ct"]).any():
            line += f", relative CT (ref/this) median {t['relative_ct'].median():.3g}"
        return line

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return self.summary() + "\n" + self.table.to_string(float_format=lambda x: f"{x:.4g}")


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
        reference, ess_per_second_ratio and relative_ct (CT_ref / CT, eq. 6.1).
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
