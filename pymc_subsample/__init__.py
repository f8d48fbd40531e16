"""pymc_subsample: subsampling MCMC for PyMC models on tall data.

Flow: model (tall model, rows on demand) -> control variates -> estimators ->
kernels -> step methods -> diagnostics. Importing this package changes no global
state (it does not register step methods with PyMC).
"""

from pymc_subsample import datasets
from pymc_subsample.control_variates import TaylorProxy, find_map
from pymc_subsample.diagnostics import Comparison, compare, plot_compare, sign_weighted
from pymc_subsample.kernels.mh_tests import logistic_range_bound
from pymc_subsample.model import TallModel
from pymc_subsample.model.read_cost import SlowRowsWarning
from pymc_subsample.model.sampling_store import to_sampling_store
from pymc_subsample.model.streamed import Data, StreamedDataError, data_sources
from pymc_subsample.step_methods.firefly import FireflyMC
from pymc_subsample.step_methods.hmcecs import HMCECS
from pymc_subsample.step_methods.iss import ISS, check_refresh_rate
from pymc_subsample.step_methods.sgfs import SGFS, drop_unconverged
from pymc_subsample.step_methods.sgmcmc import SGHMC, SGLD
from pymc_subsample.step_methods.subsample_mh import SubsampleMH
from pymc_subsample.step_methods.zigzag import ZigZag

__all__ = [
    "FireflyMC",
    "HMCECS",
    "ISS",
    "SGFS",
    "SGHMC",
    "SGLD",
    "SubsampleMH",
    "ZigZag",
    "Comparison",
    "Data",
    "SlowRowsWarning",
    "StreamedDataError",
    "TallModel",
    "TaylorProxy",
    "check_refresh_rate",
    "compare",
    "data_sources",
    "datasets",
    "drop_unconverged",
    "find_map",
    "logistic_range_bound",
    "plot_compare",
    "sign_weighted",
    "to_sampling_store",
]
__version__ = "0.1.0"
