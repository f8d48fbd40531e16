"""Diagnostics: agreement with a reference, sign-weighted summaries."""

from pymc_subsample.diagnostics.compare import Comparison, compare
from pymc_subsample.diagnostics.signed import sign_weighted

__all__ = ["Comparison", "compare", "sign_weighted"]
