"""Figures comparing a subsampled run with a full-data reference (Dang et al. 2019 Figs. 1, 2 and 8).

matplotlib is optional: it is imported only when a figure is drawn
(``pip install "pymc_subsample[plots]"``).
"""

from __future__ import annotations

from pathlib import Path

import arviz_stats as azs
import numpy as np

from pymc_subsample.diagnostics.signed import draw_signs, flat_draws, run_group, weighted_moments

__all__ = ["plot_compare", "PLOT_KINDS"]

PLOT_KINDS = ("densities", "moments", "loglik_var")
_MISSING_MATPLOTLIB = (
    'plot_compare needs matplotlib; install it with `pip install "pymc_subsample[plots]"` '
    "(or `pip install matplotlib`)."
)


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError(_MISSING_MATPLOTLIB) from err
    return plt


def _posterior_vars(idata, label):
    post = run_group(idata, "posterior")
    if post is None:
        raise ValueError(f"The {label} has no posterior group: pass the result of pm.sample.")
    return list(post.data_vars)


def _shared_var_names(idata, reference, var_names):
    sample_vars, reference_vars = _posterior_vars(idata, "sample"), _posterior_vars(reference, "reference")
    if var_names is None:
        chosen = [v for v in sample_vars if v in reference_vars]
        if not chosen:
            raise ValueError(
                f"The sample ({sample_vars}) and the reference ({reference_vars}) share no posterior "
                "variable; pass var_names."
            )
        return chosen
    chosen = [var_names] if isinstance(var_names, str) else list(var_names)
    for name in chosen:
        for label, available in (("sample", sample_vars), ("reference", reference_vars)):
            if name not in available:
                raise ValueError(f"Unknown variable {name!r}: the {label}'s posterior has {available}.")
    return chosen


def _density(values, signs):
    """(grid, density): ArviZ's KDE, or a sign-weighted Gaussian KDE when some signs are negative."""
    if np.all(signs > 0):
        grid, density, _ = azs.kde(values)  # the array layer also returns the bandwidth
        return grid, density
    spread = np.std(values)
    bandwidth = 1.06 * (spread if spread > 0 else 1.0) * values.size ** (-1 / 5)  # Silverman's rule
    grid = np.linspace(values.min() - 3 * bandwidth, values.max() + 3 * bandwidth, 256)
    kernel = np.exp(-0.5 * ((grid[:, None] - values[None, :]) / bandwidth) ** 2)
    density = kernel @ signs / (signs.sum() * bandwidth * np.sqrt(2 * np.pi))
    return grid, density


def _plot_densities(plt, names, sample, sample_signs, reference, figsize):
    n_panels = len(names)
    n_cols = min(4, n_panels)
    n_rows = -(-n_panels // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=figsize or (3.2 * n_cols, 2.6 * n_rows), squeeze=False)
    for ax in axes.ravel()[n_panels:]:
        fig.delaxes(ax)
    for j, (ax, name) in enumerate(zip(axes.ravel(), names)):
        ax.plot(*_density(reference[:, j], np.ones(reference.shape[0])), color="C3", label="reference")
        ax.plot(*_density(sample[:, j], sample_signs), color="C2", label="sample")
        ax.set_title(name)
        ax.set_yticks([])
    axes[0, 0].legend(fontsize="small")
    fig.suptitle("Marginal posteriors: sample over reference (Dang et al. 2019 Fig. 1)")
    fig.tight_layout()
    return fig


def _plot_moments(plt, names, sample, sample_signs, reference, figsize):
    mean, variance = weighted_moments(sample, sample_signs)
    ref_mean, ref_variance = weighted_moments(reference, np.ones(reference.shape[0]))
    fig, axes = plt.subplots(1, 2, figsize=figsize or (8.0, 3.8))
    panels = ((axes[0], mean, ref_mean, "mean"), (axes[1], variance, ref_variance, "variance"))
    for ax, ours, theirs, what in panels:
        ax.scatter(theirs, ours, s=16, color="C2", zorder=3)
        low, high = min(theirs.min(), ours.min()), max(theirs.max(), ours.max())
        pad = 0.05 * (high - low) if high > low else 0.05 * max(abs(high), 1.0)
        ax.plot([low - pad, high + pad], [low - pad, high + pad], color="0.4", lw=1, ls="--", zorder=1)
        ax.set_xlabel(f"reference posterior {what}")
        ax.set_ylabel(f"sample posterior {what}")
        ax.set_title(f"Posterior {what}s ({len(names)} parameters)")
    fig.suptitle("Posterior moments: sample against reference (Dang et al. 2019 Fig. 2)")
    fig.tight_layout()
    return fig


def _plot_loglik_var(plt, stats, target_variance, figsize):
    variance = np.asarray(stats["loglik_var"].transpose("chain", "draw").values, float)
    signs = np.asarray(stats["sign"].transpose("chain", "draw").values, float) if "sign" in stats else None
    show_signs = signs is not None and bool(np.any(signs < 0))
    fig, axes = plt.subplots(
        2 if show_signs else 1, 1, figsize=figsize or (8.0, 5.6 if show_signs else 3.2),
        sharex=True, squeeze=False,
    )
    trace_ax = axes[0, 0]
    for chain, values in enumerate(variance):
        trace_ax.plot(values, lw=0.8, alpha=0.8, color=f"C{chain % 10}", label=f"chain {chain}")
    trace_ax.axhline(target_variance, color="k", ls="--", lw=1, label=f"target {target_variance:g}")
    trace_ax.set_ylabel("σ̂² (loglik_var)")
    trace_ax.set_title("Variance of the log-likelihood estimator (Dang et al. 2019 Fig. 8)")
    trace_ax.legend(fontsize="small", loc="upper right")
    if show_signs:
        sign_ax = axes[1, 0]
        running = np.cumsum(signs > 0, axis=1) / np.arange(1, signs.shape[1] + 1)
        for chain, values in enumerate(running):
            sign_ax.plot(values, lw=1, color=f"C{chain % 10}")
        sign_ax.set_ylim(-0.02, 1.02)
        sign_ax.set_ylabel("running fraction sign = +1")
    axes[-1, 0].set_xlabel("draw")
    fig.tight_layout()
    return fig


def _draw(plt, figures, kinds, idata, reference, var_names, stats, target_variance, figsize):
    """Fill ``figures`` with the requested kinds (so a failure part-way can close what was drawn)."""
    if "densities" in kinds or "moments" in kinds:
        chosen = _shared_var_names(idata, reference, var_names)
        names, sample = flat_draws(idata, chosen)
        reference_names, reference_draws = flat_draws(reference, chosen)
        if names != reference_names:
            raise ValueError(f"The sample's components {names} differ from the reference's {reference_names}")
        sample_signs = draw_signs(idata, sample.shape[0])
        if "densities" in kinds:
            figures["densities"] = _plot_densities(plt, names, sample, sample_signs, reference_draws, figsize)
        if "moments" in kinds:
            figures["moments"] = _plot_moments(plt, names, sample, sample_signs, reference_draws, figsize)
    if "loglik_var" in kinds:
        figures["loglik_var"] = _plot_loglik_var(plt, stats, target_variance, figsize)


def plot_compare(
    idata, reference, var_names=None, *, kind="all", target_variance=1.0, figsize=None, save_to=None
):
    """Draw the Dang et al. 2019 comparison figures of a subsampled run against a full-data reference.

    Parameters
    ----------
    idata : xarray.DataTree or object
        The subsampled run, as ``pm.sample`` returns it (an object with ``posterior`` and
        ``sample_stats`` attributes holding Datasets also works). Its ``sample_stats`` may hold
        ``loglik_var`` (σ̂², the variance of the log-likelihood estimator) and, for signed
        HMC-ECS, ``sign`` (±1); with negative signs the densities and moments are sign-weighted
        (Dang et al. 2019 eq. 5.3).
    reference : xarray.DataTree or object
        The full-data run (e.g. NUTS) taken as the truth, in the same forms.
    var_names : str or list of str, optional
        Posterior variables to compare; by default those in both posteriors. Vector variables are
        flattened into scalar components labelled like ``beta[2]``.
    kind : {"all", "densities", "moments", "loglik_var"} or sequence of them
        ``"densities"``: one axis per scalar component with the kernel density of the sample (green)
        over the reference's (red), Dang et al. 2019 Fig. 1. ``"moments"``: two axes, posterior means and
        posterior variances of the sample against the reference's with the identity line, Dang et al. 2019
        Fig. 2. ``"loglik_var"``: the trace of σ̂² over draws, one line per chain, with a horizontal
        line at ``target_variance`` (as in Dang et al. 2019 Fig. 8), and, when a ``sign`` stat has a negative
        value, a second axis with the running fraction of positive signs. ``"all"`` draws all three,
        leaving out ``"loglik_var"`` when the run has no ``loglik_var`` stat.
    target_variance : float, default 1.0
        The σ̂² the run was tuned to (Dang et al. 2019 §3.3 follows Pitt et al. 2012 in targeting 1).
    figsize : tuple of float, optional
        Size of each figure; by default one that fits its number of axes.
    save_to : str or path-like, optional
        Also write PNG files: with one kind, to exactly this path; with several, to
        ``<stem>_<kind><suffix>`` beside it (``cmp.png`` gives ``cmp_densities.png``, ...).

    Returns
    -------
    dict of str to matplotlib.figure.Figure
        One figure per kind drawn, keyed by kind, in the order of ``PLOT_KINDS``; each figure's
        axes are ``fig.axes`` (densities: one per component; moments: ``[means, variances]``;
        loglik_var: ``[σ̂² trace]`` or ``[σ̂² trace, sign fraction]``).

    Raises
    ------
    ImportError
        When matplotlib is not installed (``pip install "pymc_subsample[plots]"``).
    ValueError
        For an unknown variable or kind, components that differ between the runs, or a
        requested ``"loglik_var"`` figure for a run without that stat.
    """
    plt = _pyplot()
    kinds = list(PLOT_KINDS) if kind == "all" else [kind] if isinstance(kind, str) else list(kind)
    unknown = [k for k in kinds if k not in PLOT_KINDS]
    if unknown:
        raise ValueError(f"Unknown kind {unknown}; choose from 'all' or {list(PLOT_KINDS)}.")
    stats = run_group(idata, "sample_stats")
    has_loglik_var = stats is not None and "loglik_var" in stats
    if kind == "all" and not has_loglik_var:
        kinds.remove("loglik_var")
    elif "loglik_var" in kinds and not has_loglik_var:
        raise ValueError("The run has no 'loglik_var' sample stat, so there is no σ̂² trace to plot.")

    figures = {}  # filled by _draw, so that figures drawn before an error can be closed
    try:
        _draw(plt, figures, kinds, idata, reference, var_names, stats, target_variance, figsize)
    except Exception:
        for fig in figures.values():
            plt.close(fig)
        raise
    if save_to is not None:
        path = Path(save_to)
        for name, fig in figures.items():
            suffix = path.suffix or ".png"
            target = path if len(figures) == 1 else path.with_name(f"{path.stem}_{name}{suffix}")
            fig.savefig(target, format="png", dpi=100)
    return figures
