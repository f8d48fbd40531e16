"""Subsamples: index samplers and the gathered rows that go with them."""

from pymc_subsample.subsample.indices import (
    block_slices,
    block_update,
    uniform_with_replacement,
    without_replacement,
)

__all__ = ["block_slices", "block_update", "uniform_with_replacement", "without_replacement"]
