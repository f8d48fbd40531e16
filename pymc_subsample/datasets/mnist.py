"""Two-digit subsets of MNIST, read from the original IDX files, optionally projected by PCA."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pymc_subsample.datasets._common import PathLike, check_part, find_file, stack
from pymc_subsample.datasets.dataset import Dataset, make_dataset
from pymc_subsample.datasets.idx import read_idx

__all__ = ["load_mnist"]

#: the image and label files of each part, each as the file names accepted inside a directory
_MNIST_FILES = {
    "train": (
        [
            "train-images-idx3-ubyte.gz",
            "train-images-idx3-ubyte",
            "train-images.idx3-ubyte",
        ],
        [
            "train-labels-idx1-ubyte.gz",
            "train-labels-idx1-ubyte",
            "train-labels.idx1-ubyte",
        ],
    ),
    "test": (
        [
            "t10k-images-idx3-ubyte.gz",
            "t10k-images-idx3-ubyte",
            "t10k-images.idx3-ubyte",
        ],
        [
            "t10k-labels-idx1-ubyte.gz",
            "t10k-labels-idx1-ubyte",
            "t10k-labels.idx1-ubyte",
        ],
    ),
}


def _read_part(directory: Path, name: str, digits: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Pixels in [0, 1] and labels of the rows of part ``name`` that show one of ``digits``."""
    image_names, label_names = _MNIST_FILES[name]
    images = read_idx(find_file(directory, image_names, f"MNIST {name} images"))
    lab = read_idx(find_file(directory, label_names, f"MNIST {name} labels"))
    if images.ndim != 3 or lab.ndim != 1 or images.shape[0] != lab.shape[0]:
        raise ValueError(
            f"MNIST {name} files have inconsistent shapes {images.shape} and {lab.shape}"
        )
    keep = (lab == digits[0]) | (lab == digits[1])
    return images[keep].reshape(int(keep.sum()), -1).astype(np.float64) / 255.0, lab[keep]


def _pca_scores(X: np.ndarray, n_components: int) -> np.ndarray:
    """Scores on the top principal components of ``X``.

    The principal axes are the right singular vectors of the centred data
    ``Xc = X - mean``. They are obtained from the symmetric ``p x p`` matrix
    ``Xc.T @ Xc = V S**2 V.T`` (same axes as ``numpy.linalg.svd(Xc)``, but
    without forming the ``N x p`` left factor, which is much faster for
    ``N >> p``); the scores are ``Xc @ V[:, :n_components]``. Signs are fixed
    so that the largest-magnitude loading of every component is positive,
    which makes the result deterministic.
    """
    Xc = X - X.mean(axis=0)
    if Xc.shape[0] >= Xc.shape[1]:
        _eigvals, eigvecs = np.linalg.eigh(Xc.T @ Xc)
        V = eigvecs[:, ::-1][:, :n_components]
    else:
        V = np.linalg.svd(Xc, full_matrices=False)[2][:n_components].T
    signs = np.sign(V[np.argmax(np.abs(V), axis=0), np.arange(n_components)])
    signs[signs == 0] = 1.0
    return Xc @ (V * signs)


def load_mnist(
    path: PathLike,
    *,
    digits: tuple[int, int] = (0, 1),
    part: str = "all",
    n_components: int | None = None,
    standardize: bool = False,
) -> Dataset:
    """Load a two-digit subset of MNIST for binary classification.

    The seed setup is ``digits=(0, 1)``, ``n_components=10``, which gives
    N = 12,665 + 2,115 = 14,780 rows.

    Parameters
    ----------
    path : str or os.PathLike
        The directory holding the four IDX files
        (``train-images-idx3-ubyte.gz`` etc., plain or gzip), or any one of
        them (its directory is used).
    digits : tuple of two int, default (0, 1)
        The two digits kept; ``y = (label == digits[1])``.
    part : {"all", "train", "test"}, default "all"
        Which part to read; ``"all"`` stacks train then test.
    n_components : int, optional
        If given, project the pixels onto the top ``n_components`` principal
        components of the selected rows (PCA by SVD of the centred data);
        columns are then ``PC1, PC2, ...``. Otherwise the 784 pixels
        ``pixel0 ... pixel783`` are returned.
    standardize : bool, default False
        Standardise the (pixel or component) features, after any PCA.

    Returns
    -------
    Dataset
        Pixels are scaled to [0, 1] before any PCA. No intercept column is
        added.
    """
    check_part(part, ("all", "train", "test"))
    digits = tuple(int(d) for d in digits)
    if (
        len(digits) != 2
        or digits[0] == digits[1]
        or not all(0 <= d <= 9 for d in digits)
    ):
        raise ValueError(f"digits must be two different digits in 0..9, got {digits}")
    p = Path(path)
    directory = p.parent if p.is_file() else p
    parts = ["train", "test"] if part == "all" else [part]
    X, labels = stack(parts, lambda name: _read_part(directory, name, digits))
    y = (labels == digits[1]).astype(np.float64)
    if n_components is not None:
        n_components = int(n_components)
        if not 1 <= n_components <= min(X.shape):
            raise ValueError(
                f"n_components must be between 1 and {min(X.shape)}, got {n_components}"
            )
        X = _pca_scores(X, n_components)
        names = tuple(f"PC{j + 1}" for j in range(n_components))
    else:
        names = tuple(f"pixel{j}" for j in range(X.shape[1]))
    return make_dataset(X, y, names, standardize)
