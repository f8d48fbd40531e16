"""Sign-corrected summaries for signed pseudo-marginal output (Dang et al. 2019 eq. 5.3).

Draws from the signed HMC-ECS target |L̂| p(θ) p(u) are reweighted by the sign s
of L̂: E_π[ψ] = E[ψ s] / E[s], estimated by Σ ψ(θ_j) s_j / Σ s_j.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

__all__ = ["draw_signs", "flat_draws", "run_group", "sign_weighted", "weighted_moments", "weighted_quantile"]


def run_group(idata, group):
    """One group of a run (``"posterior"``, ``"sample_stats"``, …) as an :class:`xarray.Dataset`.

    Parameters
    ----------
    idata : xarray.DataTree or object
        What ``pm.sample`` returns (an :class:`xarray.DataTree` whose groups are child nodes), or
        any object holding the group as an attribute, such as ArviZ 0.x's ``InferenceData``.
    group : str
        Name of the group.

    Returns
    -------
    xarray.Dataset or None
        The group's variables and attributes, or None when the run has no such group.
    """
    if isinstance(idata, xr.DataTree):
        node = idata.children.get(group)
        return None if node is None else node.to_dataset()
    value = getattr(idata, group, None)
    # a node reached by attribute access on a DataTree, or a legacy group that already is a Dataset
    return value.to_dataset() if isinstance(value, xr.DataTree) else value


def _posterior(idata):
    post = run_group(idata, "posterior")
    if post is None:
        raise ValueError("The run has no posterior group: pass the result of pm.sample.")
    return post


def flat_draws(idata, var_names=None):
    """Scalar components of posterior variables as columns, chains stacked.

    Parameters
    ----------
    idata : xarray.DataTree or object
        A run with a posterior group (see :func:`run_group`).
    var_names : str or list of str, optional
        Posterior variables, by default all of them.

    Returns
    -------
    names : list of str
        ``"alpha"`` for a scalar, ``"beta[2]"`` for a component of a vector (index by position).
    draws : numpy.ndarray
        Shape (chains x draws, components).
    """
    post = _posterior(idata)
    var_names = (list(post.data_vars) if var_names is None
                 else [var_names] if isinstance(var_names, str) else list(var_names))
    names, columns = [], []
    for var in var_names:
        # chain and draw first whatever the stored order, so rows are draws and the rest flattens in C order
        array = post[var].transpose("chain", "draw", ...)
        values = array.values
        values = values.reshape(values.shape[0] * values.shape[1], -1)
        shape = array.shape[2:]
        for j in range(values.shape[1]):
            index = np.unravel_index(j, shape) if shape else ()
            names.append(var + ("[" + ",".join(map(str, index)) + "]" if shape else ""))
            columns.append(values[:, j])
    return names, np.column_stack(columns)


def weighted_quantile(values, weights, q):
    """Quantile of a signed-weighted sample: first value where the normalised cumulative weight ≥ q."""
    order = np.argsort(values)
    cum = np.cumsum(weights[order]) / np.sum(weights)
    pos = min(int(np.searchsorted(cum, q, side="left")), len(values) - 1)
    return values[order][pos]


def draw_signs(idata, n_draws):
    """The ``sign`` stat flattened over chains, or all +1 when the run has none."""
    stats = run_group(idata, "sample_stats")
    if stats is None or "sign" not in stats:
        return np.ones(n_draws)
    return np.asarray(stats["sign"].transpose("chain", "draw").values, float).reshape(-1)


def weighted_moments(draws, signs):
    """Sign-weighted means and variances (ddof 0) of the columns of ``draws`` (Dang et al. 2019 eq. 5.3)."""
    total = signs.sum()
    if total <= 0:
        raise ValueError(
            "The signs of the likelihood estimates sum to ≤ 0, so sign-weighted estimates are "
            "undefined. Increase subsample_size or lower target_variance and sample again."
        )
    mean = signs @ draws / total
    return mean, np.maximum(signs @ draws**2 / total - mean**2, 0.0)


def sign_weighted(idata, var_names=None, quantiles=(0.05, 0.5, 0.95)):
    """Sign-corrected posterior means, sds and quantiles (Dang et al. 2019 eq. 5.3).

    Parameters
    ----------
    idata : xarray.DataTree or object
        What ``pm.sample`` returns (or an object with ``posterior`` and ``sample_stats``
        attributes). With a ``sign`` sample stat (from ``HMCECS(estimator="signed")``) the
        draws are sign-weighted; without it every sign is taken as +1 and the usual summaries
        result.
    var_names : str or list of str, optional
        Posterior variables, by default all of them.
    quantiles : tuple of float
        Probabilities of the sign-weighted quantiles to report.

    Returns
    -------
    pandas.DataFrame
        One row per scalar parameter: ``mean``, ``sd`` and one column per quantile;
        ``attrs["positive_fraction"]`` is the fraction of positive signs.
    """
    names, draws = flat_draws(idata, var_names)
    signs = draw_signs(idata, draws.shape[0])
    mean, variance = weighted_moments(draws, signs)
    table = {"mean": mean, "sd": np.sqrt(variance)}
    for q in quantiles:
        table[f"q{100 * q:g}"] = [weighted_quantile(draws[:, j], signs, q) for j in range(draws.shape[1])]
    frame = pd.DataFrame(table, index=names)
    frame.attrs["positive_fraction"] = float(np.mean(signs > 0))
    return frame
