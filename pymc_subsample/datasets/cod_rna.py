"""The cod-rna data of the LIBSVM collection."""

from __future__ import annotations

import numpy as np

from pymc_subsample.datasets._common import PathLike, check_labels, files_for_part, stack
from pymc_subsample.datasets.dataset import Dataset, make_dataset
from pymc_subsample.datasets.libsvm import read_libsvm

__all__ = ["load_cod_rna"]

#: file names accepted for each part inside a directory, in order of preference
_PARTS = {
    "train": ["cod-rna.bz2", "cod-rna", "cod-rna.gz"],
    "test": ["cod-rna.t.bz2", "cod-rna.t", "cod-rna.t.gz"],
}


def _read(file) -> tuple[np.ndarray, np.ndarray]:
    X, y = read_libsvm(file, n_features=8)
    check_labels(file, y, (-1, 1), "cod-rna labels must be -1 or +1")
    return X, (y == 1).astype(np.float64)


def load_cod_rna(
    path: PathLike, *, part: str = "train", standardize: bool = False
) -> Dataset:
    """Load the cod-rna data (LIBSVM collection, 8 features).

    Parameters
    ----------
    path : str or os.PathLike
        The directory holding ``cod-rna.bz2`` (training part, 59,535 rows)
        and ``cod-rna.t.bz2`` (test part, 271,617 rows), or a single LIBSVM
        file, which is then read as is (``part`` must be left at its default).
    part : {"train", "test", "all"}, default "train"
        Which part to read; ``"all"`` stacks train then test.
    standardize : bool, default False
        Standardise the features (population sd); see :func:`standardize`.

    Returns
    -------
    Dataset
        ``X`` with columns ``x1 ... x8`` and ``y`` = 1 for label +1, 0 for
        label -1. No intercept column is added.
    """
    files = files_for_part(path, part, _PARTS, "train", "cod-rna data")
    X, y = stack(files, _read)
    names = tuple(f"x{j + 1}" for j in range(8))
    return make_dataset(X, y, names, standardize)
