"""PyMC step methods over the subsampling kernels."""

from pymc_subsample.step_methods.base import SubsampleStep

__all__ = ["SubsampleStep"]
