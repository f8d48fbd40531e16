"""Model layer: PyMC model -> tall model with rows on demand."""

from pymc_subsample.model.rows import RowLeaf
from pymc_subsample.model.tall import TallModel, as_tall_model

__all__ = ["RowLeaf", "TallModel", "as_tall_model"]
