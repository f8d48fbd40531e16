"""The UCI Skin Segmentation data."""

from __future__ import annotations

import numpy as np

from pymc_subsample.datasets._common import PathLike, check_labels, find_file, load_table
from pymc_subsample.datasets.dataset import Dataset, make_dataset

__all__ = ["load_skin"]


def load_skin(path: PathLike, *, standardize: bool = False) -> Dataset:
    """Load the UCI Skin Segmentation data (245,057 rows, features B, G, R).

    Parameters
    ----------
    path : str or os.PathLike
        ``Skin_NonSkin.txt`` (plain or compressed) or the directory that
        holds it.
    standardize : bool, default False
        Standardise the features (population sd); see :func:`standardize`.

    Returns
    -------
    Dataset
        ``X`` with columns ``("B", "G", "R")`` and ``y = (label == 1)`` as
        0/1 floats (1 = skin). No intercept column is added.
    """
    file = find_file(
        path,
        ["Skin_NonSkin.txt", "Skin_NonSkin.txt.gz", "Skin_NonSkin.txt.bz2"],
        "Skin Segmentation data",
    )
    data = load_table(file, 4, "B, G, R, label")
    label = data[:, 3]
    check_labels(file, label, (1, 2), "labels must be 1 (skin) or 2 (non-skin)")
    y = (label == 1).astype(np.float64)
    return make_dataset(data[:, :3], y, ("B", "G", "R"), standardize)
