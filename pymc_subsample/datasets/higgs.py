"""The UCI HIGGS data."""

from __future__ import annotations

import numpy as np

from pymc_subsample.datasets._common import (
    PathLike,
    check_labels,
    files_for_part,
    load_table,
    stack,
)
from pymc_subsample.datasets.dataset import Dataset, make_dataset

__all__ = ["HIGGS_FEATURE_NAMES", "load_higgs"]

#: Names of the 28 HIGGS features, in file order (21 low-level kinematic
#: features followed by 7 high-level derived masses).
HIGGS_FEATURE_NAMES: tuple[str, ...] = (
    "lepton_pT",
    "lepton_eta",
    "lepton_phi",
    "missing_energy_magnitude",
    "missing_energy_phi",
    "jet1_pt",
    "jet1_eta",
    "jet1_phi",
    "jet1_btag",
    "jet2_pt",
    "jet2_eta",
    "jet2_phi",
    "jet2_btag",
    "jet3_pt",
    "jet3_eta",
    "jet3_phi",
    "jet3_btag",
    "jet4_pt",
    "jet4_eta",
    "jet4_phi",
    "jet4_btag",
    "m_jj",
    "m_jjj",
    "m_lv",
    "m_jlv",
    "m_bb",
    "m_wbb",
    "m_wwbb",
)

#: file names accepted for each part inside a directory, in order of preference
_PARTS = {
    "train": ["higgs_sample.train.tsv", "higgs_sample.train.tsv.gz"],
    "test": ["higgs_sample.test.tsv", "higgs_sample.test.tsv.gz"],
}


def _read(file) -> tuple[np.ndarray, np.ndarray]:
    data = load_table(file, 29, "label + 28 features")
    label = data[:, 0]
    check_labels(file, label, (0, 1), "HIGGS labels must be 0 or 1")
    return data[:, 1:], label


def load_higgs(
    path: PathLike, *, part: str = "train", standardize: bool = False
) -> Dataset:
    """Load HIGGS data (label first, then 28 features; tab or comma separated).

    Parameters
    ----------
    path : str or os.PathLike
        The directory holding ``higgs_sample.train.tsv`` (7,000 rows) and
        ``higgs_sample.test.tsv`` (500 rows), or a single file such as the
        full ``HIGGS.csv.gz``, which is then read as is (``part`` must be left
        at its default).
    part : {"train", "test", "all"}, default "train"
        Which part to read; ``"all"`` stacks train then test.
    standardize : bool, default False
        Standardise the features (population sd).

    Returns
    -------
    Dataset
        ``X`` with the 28 columns named in
        :data:`~pymc_subsample.datasets.higgs.HIGGS_FEATURE_NAMES` and
        ``y`` the 0/1 signal label. No intercept column is added.
    """
    files = files_for_part(path, part, _PARTS, "train", "HIGGS data")
    X, y = stack(files, _read)
    return make_dataset(X, y, HIGGS_FEATURE_NAMES, standardize)
