"""The UCI forest covertype data, as a binary task."""

from __future__ import annotations

import numpy as np

from pymc_subsample.datasets._common import PathLike, find_file, open_binary
from pymc_subsample.datasets.dataset import Dataset, make_dataset

__all__ = ["load_covtype"]


def load_covtype(
    path: PathLike, *, positive_class: int = 2, standardize: bool = False
) -> Dataset:
    """Load the forest covertype data (CSV with header) as a binary task.

    Parameters
    ----------
    path : str or os.PathLike
        ``covtype_subset.csv.gz`` (or another CSV with a header row and a
        ``Cover_Type`` column, plain or compressed), or the directory that
        holds ``covtype_subset.csv.gz``.
    positive_class : int, default 2
        ``y = (Cover_Type == positive_class)``; class 2 versus rest is the
        usual task.
    standardize : bool, default False
        Standardise the features (population sd). Columns that are constant
        in the data get scale 1.

    Returns
    -------
    Dataset
        ``X`` with the 54 feature columns named as in the header. No
        intercept column is added.
    """
    file = find_file(
        path,
        ["covtype_subset.csv.gz", "covtype_subset.csv", "covtype_subset.csv.bz2"],
        "covertype data",
    )
    with open_binary(file) as fh:
        header = fh.readline().decode("utf-8").strip().split(",")
        header = [h.strip().strip('"') for h in header]
        if "Cover_Type" not in header:
            raise ValueError(f"'{file}': no 'Cover_Type' column in the header")
        data = np.loadtxt(fh, dtype=np.float64, delimiter=",", ndmin=2)
    if data.shape[1] != len(header):
        raise ValueError(
            f"'{file}': header has {len(header)} columns but rows have {data.shape[1]}"
        )
    label_col = header.index("Cover_Type")
    label = data[:, label_col]
    if not np.any(label == positive_class):
        present = ", ".join(str(int(c)) for c in np.unique(label))
        raise ValueError(
            f"positive_class={positive_class!r} does not occur in '{file}' "
            f"(classes present: {present})"
        )
    y = (label == positive_class).astype(np.float64)
    keep = [j for j in range(len(header)) if j != label_col]
    names = tuple(header[j] for j in keep)
    return make_dataset(data[:, keep], y, names, standardize)
