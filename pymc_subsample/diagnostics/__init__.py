"""Diagnostics: agreement with a reference, sign-weighted summaries, comparison figures."""

from pymc_subsample.diagnostics.compare import Comparison, compare
from pymc_subsample.diagnostics.plots import plot_compare
from pymc_subsample.diagnostics.signed import sign_weighted

__all__ = ["Comparison", "compare", "plot_compare", "sign_weighted"]
