"""PyMC step methods over the subsampling kernels."""

from pymc_subsample.step_methods.base import SubsampleStep
from pymc_subsample.step_methods.firefly import FireflyMC
from pymc_subsample.step_methods.hmcecs import HMCECS
from pymc_subsample.step_methods.iss import ISS
from pymc_subsample.step_methods.sgfs import SGFS
from pymc_subsample.step_methods.sgmcmc import SGHMC, SGLD
from pymc_subsample.step_methods.subsample_mh import SubsampleMH
from pymc_subsample.step_methods.zigzag import ZigZag

__all__ = ["FireflyMC", "HMCECS", "ISS", "SGFS", "SGHMC", "SGLD", "SubsampleMH", "SubsampleStep", "ZigZag"]
