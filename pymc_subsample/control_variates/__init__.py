"""Control variates: the centre θ* and Taylor proxies of each row's log-likelihood."""

from pymc_subsample.control_variates.center import find_map
from pymc_subsample.control_variates.taylor import TaylorProxy, check_proxy_order

__all__ = ["TaylorProxy", "check_proxy_order", "find_map"]
