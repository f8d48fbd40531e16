"""Control variates: the centre θ* and Taylor proxies q_k around it."""

from pymc_subsample.control_variates.center import find_map
from pymc_subsample.control_variates.taylor import RowProxyTerms, TaylorProxy, check_proxy_order

__all__ = ["RowProxyTerms", "TaylorProxy", "check_proxy_order", "find_map"]
