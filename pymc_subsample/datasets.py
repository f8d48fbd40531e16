"""Loaders for the real data sets used in tests, examples and benchmarks.

The loaders read the public data sets in their original distribution formats
(plain or compressed text, LIBSVM sparse text, MNIST IDX files). They take a
``path`` that is either the data file itself or the directory that holds it,
so they work both with the small copies kept in ``../shared/data`` and with
full-size originals downloaded by a user.

Every loader returns a :class:`Dataset` with a dense ``float64`` design matrix
and 0/1 labels for binary classification. **No intercept column is added**:
models built on these data add their own intercept. Pass
``standardize=True`` to centre and scale the features (population standard
deviation, ``ddof=0``); the constants are kept on the result so that new rows
can be transformed identically with :meth:`Dataset.standardize_new`.

Only :mod:`numpy` and the standard library are used.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

__all__ = [
    "HIGGS_FEATURE_NAMES",
    "Dataset",
    "load_cod_rna",
    "load_covtype",
    "load_higgs",
    "load_mnist",
    "load_skin",
    "read_idx",
    "read_libsvm",
    "standardize",
]

PathLike = str | os.PathLike

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


# ---------------------------------------------------------------------------
# Result type and standardisation
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Dataset:
    """A design matrix with labels, as returned by the ``load_*`` functions.

    Attributes
    ----------
    X : numpy.ndarray
        ``float64`` array of shape ``(N, p)``. No intercept column is included.
    y : numpy.ndarray
        One-dimensional array of length ``N`` (0/1 ``float64`` labels for the
        bundled loaders).
    feature_names : tuple of str
        ``p`` column names.
    mean, scale : numpy.ndarray or None
        Standardisation constants of length ``p`` (``X = (X_raw - mean) /
        scale``), or ``None`` when the features were not standardised.
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None

    def __post_init__(self) -> None:
        X = np.asarray(self.X, dtype=np.float64)
        y = np.asarray(self.y)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(
                f"y must be 1-dimensional with {X.shape[0]} entries, got shape {y.shape}"
            )
        names = tuple(str(name) for name in self.feature_names)
        if len(names) != X.shape[1]:
            raise ValueError(
                f"feature_names has {len(names)} entries but X has {X.shape[1]} columns"
            )
        if (self.mean is None) != (self.scale is None):
            raise ValueError("mean and scale must both be given or both be None")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "feature_names", names)
        for field in ("mean", "scale"):
            value = getattr(self, field)
            if value is not None:
                value = np.asarray(value, dtype=np.float64)
                if value.shape != (X.shape[1],):
                    raise ValueError(
                        f"{field} must have shape ({X.shape[1]},), got {value.shape}"
                    )
                object.__setattr__(self, field, value)

    @property
    def n_obs(self) -> int:
        """Number of rows ``N``."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns ``p`` (no intercept)."""
        return int(self.X.shape[1])

    @property
    def standardized(self) -> bool:
        """Whether ``X`` holds standardised features."""
        return self.mean is not None

    def standardize_new(self, X_new) -> np.ndarray:
        """Apply this data set's standardisation constants to new rows.

        Parameters
        ----------
        X_new : array_like
            Raw (unstandardised) rows of shape ``(M, p)``, or a single row of
            shape ``(p,)``, in the same column order as :attr:`feature_names`.

        Returns
        -------
        numpy.ndarray
            ``(X_new - mean) / scale`` as ``float64`` with the input's shape.
            If the data set was not standardised, a ``float64`` copy of
            ``X_new`` is returned unchanged.
        """
        X_new = np.array(X_new, dtype=np.float64)  # always a copy
        if X_new.ndim not in (1, 2) or X_new.shape[-1] != self.n_features:
            raise ValueError(
                f"X_new must have shape (M, {self.n_features}) or ({self.n_features},), "
                f"got {X_new.shape}"
            )
        if self.mean is None:
            return X_new
        return (X_new - self.mean) / self.scale

    def __repr__(self) -> str:
        return (
            f"Dataset(N={self.n_obs}, p={self.n_features}, "
            f"standardized={self.standardized}, "
            f"feature_names={self.feature_names[:5]!r}{'...' if self.n_features > 5 else ''})"
        )


def standardize(X) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre and scale the columns of ``X``.

    Parameters
    ----------
    X : array_like
        Array of shape ``(N, p)`` with ``N >= 1``.

    Returns
    -------
    Xs : numpy.ndarray
        ``(X - mean) / scale`` as ``float64``.
    mean : numpy.ndarray
        Column means, shape ``(p,)``.
    scale : numpy.ndarray
        Column population standard deviations (``ddof=0``), shape ``(p,)``.
        Constant columns get scale 1 (so they become all zeros).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError("cannot standardise an empty array (no rows)")
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    constant = np.ptp(X, axis=0) == 0
    scale[constant | ~(scale > 0)] = 1.0
    return (X - mean) / scale, mean, scale


def _make_dataset(X, y, feature_names, standardize_: bool) -> Dataset:
    if standardize_:
        Xs, mean, scale = standardize(X)
        return Dataset(Xs, y, tuple(feature_names), mean, scale)
    return Dataset(X, y, tuple(feature_names))


# ---------------------------------------------------------------------------
# File helpers
# ---------------------------------------------------------------------------


def _open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing by extension."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix in (".xz", ".lzma"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def _read_bytes(path: PathLike) -> bytes:
    path = Path(path)
    with _open_binary(path) as fh:
        return fh.read()


def _check_part(part: str, allowed: Sequence[str]) -> None:
    if part not in allowed:
        raise ValueError(
            f"unknown part {part!r}; allowed values are "
            + ", ".join(repr(a) for a in allowed)
        )


def _find_file(path: PathLike, candidates: Sequence[str], what: str) -> Path:
    """Resolve ``path`` (a file, or a directory holding one of ``candidates``)."""
    p = Path(path)
    if p.is_file():
        return p
    expected = " or ".join(repr(c) for c in candidates)
    if p.is_dir():
        for name in candidates:
            if (p / name).is_file():
                return p / name
        raise FileNotFoundError(
            f"{what}: directory '{p}' does not contain the expected file {expected}"
        )
    raise FileNotFoundError(
        f"{what}: '{p}' does not exist; expected the file {expected} "
        "or the directory that holds it"
    )


def _files_for_part(
    path: PathLike,
    part: str,
    parts: dict[str, Sequence[str]],
    default_part: str,
    what: str,
) -> list[Path]:
    """Files to read for ``part``; a file ``path`` is read as is."""
    allowed = (*parts, "all")
    _check_part(part, allowed)
    p = Path(path)
    if p.is_file():
        if part != default_part:
            raise ValueError(
                f"part={part!r} selects files inside a directory, but '{p}' is a single "
                "file; pass the directory that holds the files, or leave part at its "
                f"default ({default_part!r}) to read this file as is"
            )
        return [p]
    names = list(parts) if part == "all" else [part]
    return [_find_file(p, parts[name], f"{what} ({name} part)") for name in names]


def _load_text_table(path: Path) -> np.ndarray:
    """Read a numeric table (whitespace, tab or comma separated, no header)."""
    with _open_binary(path) as fh:
        first = fh.readline()
    delimiter = "," if b"," in first else None
    with _open_binary(path) as fh:
        data = np.loadtxt(fh, dtype=np.float64, delimiter=delimiter, ndmin=2)
    return data


# ---------------------------------------------------------------------------
# Format readers
# ---------------------------------------------------------------------------


def read_libsvm(path: PathLike, n_features: int | None = None):
    """Read a LIBSVM / SVMlight sparse text file into dense arrays.

    Each line is ``label idx:value idx:value ...`` with 1-based feature
    indices; omitted features are zero. Blank lines and lines starting with
    ``#`` are skipped, as are trailing ``# comment`` parts of a line.

    Parameters
    ----------
    path : str or os.PathLike
        The file; ``.bz2``, ``.gz`` and ``.xz`` files are decompressed.
    n_features : int, optional
        Number of columns of ``X``. Defaults to the largest index present.

    Returns
    -------
    X : numpy.ndarray
        Dense ``float64`` array of shape ``(N, p)``.
    y : numpy.ndarray
        ``float64`` labels of shape ``(N,)``, as written in the file.

    Raises
    ------
    ValueError
        If the file is malformed, an index is below 1, or an index exceeds
        ``n_features``.
    """
    text = _read_bytes(path)
    lines = []
    for line in text.splitlines():
        if b"#" in line:
            line = line.split(b"#", 1)[0]
        line = line.strip()
        if line:
            lines.append(line)
    n = len(lines)
    nnz = np.fromiter((ln.count(b":") for ln in lines), dtype=np.int64, count=n)
    joined = b" ".join(lines).replace(b":", b" ").decode("ascii", errors="replace")
    expected = n + 2 * int(nnz.sum())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            values = np.fromstring(joined, dtype=np.float64, sep=" ")
    except (ValueError, DeprecationWarning) as exc:
        raise ValueError(f"malformed LIBSVM file '{path}': {exc}") from None
    if values.size != expected:
        raise ValueError(
            f"malformed LIBSVM file '{path}': expected {expected} numbers, "
            f"parsed {values.size}"
        )
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        starts[1:] = np.cumsum(1 + 2 * nnz[:-1])
    y = values[starts].copy()
    is_label = np.zeros(values.size, dtype=bool)
    is_label[starts] = True
    pairs = values[~is_label].reshape(-1, 2)
    idx_f = pairs[:, 0]
    idx = idx_f.astype(np.int64)
    if np.any(idx != idx_f):
        raise ValueError(f"malformed LIBSVM file '{path}': non-integer feature index")
    if idx.size and idx.min() < 1:
        raise ValueError(
            f"LIBSVM file '{path}' has feature index {idx.min()}; indices must start at 1"
        )
    max_idx = int(idx.max()) if idx.size else 0
    if n_features is None:
        n_features = max_idx
    elif max_idx > n_features:
        raise ValueError(
            f"LIBSVM file '{path}' has feature index {max_idx} > n_features={n_features}"
        )
    X = np.zeros((n, int(n_features)), dtype=np.float64)
    rows = np.repeat(np.arange(n), nnz)
    X[rows, idx - 1] = pairs[:, 1]
    return X, y


_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), plain or ``.gz``/``.bz2``.

    The header is two zero bytes, a data-type code (``0x08`` uint8, ``0x09``
    int8, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E`` float64),
    the number of dimensions, then one big-endian uint32 per dimension,
    followed by the big-endian data.

    Parameters
    ----------
    path : str or os.PathLike
        The IDX file.

    Returns
    -------
    numpy.ndarray
        The array with the stored shape, in native byte order.

    Raises
    ------
    ValueError
        If the magic number is invalid or the data size does not match.
    """
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"'{path}' is not an IDX file (bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"'{path}': unknown IDX data type code 0x{code:02X}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"'{path}': truncated IDX header")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header != count * dtype.itemsize:
        raise ValueError(
            f"'{path}': IDX header announces shape {shape} ({count * dtype.itemsize} "
            f"bytes) but the file holds {len(raw) - header} data bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header)
    return data.astype(dtype.newbyteorder("="), copy=True).reshape(shape)


# ---------------------------------------------------------------------------
# Data set loaders
# ---------------------------------------------------------------------------


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
    file = _find_file(
        path,
        ["Skin_NonSkin.txt", "Skin_NonSkin.txt.gz", "Skin_NonSkin.txt.bz2"],
        "Skin Segmentation data",
    )
    data = _load_text_table(file)
    if data.shape[1] != 4:
        raise ValueError(
            f"'{file}': expected 4 columns (B, G, R, label), got {data.shape[1]}"
        )
    label = data[:, 3]
    if not np.all((label == 1) | (label == 2)):
        raise ValueError(f"'{file}': labels must be 1 (skin) or 2 (non-skin)")
    y = (label == 1).astype(np.float64)
    return _make_dataset(data[:, :3], y, ("B", "G", "R"), standardize)


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
    files = _files_for_part(
        path,
        part,
        {
            "train": ["cod-rna.bz2", "cod-rna", "cod-rna.gz"],
            "test": ["cod-rna.t.bz2", "cod-rna.t", "cod-rna.t.gz"],
        },
        "train",
        "cod-rna data",
    )
    Xs, ys = [], []
    for file in files:
        X, y = read_libsvm(file, n_features=8)
        if not np.all((y == 1) | (y == -1)):
            raise ValueError(f"'{file}': cod-rna labels must be -1 or +1")
        Xs.append(X)
        ys.append((y == 1).astype(np.float64))
    names = tuple(f"x{j + 1}" for j in range(8))
    return _make_dataset(np.concatenate(Xs), np.concatenate(ys), names, standardize)


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
    allowed = ("all", "train", "test")
    _check_part(part, allowed)
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
    Xs, labels = [], []
    for name in parts:
        image_names, label_names = _MNIST_FILES[name]
        images = read_idx(_find_file(directory, image_names, f"MNIST {name} images"))
        lab = read_idx(_find_file(directory, label_names, f"MNIST {name} labels"))
        if images.ndim != 3 or lab.ndim != 1 or images.shape[0] != lab.shape[0]:
            raise ValueError(
                f"MNIST {name} files have inconsistent shapes {images.shape} and {lab.shape}"
            )
        keep = (lab == digits[0]) | (lab == digits[1])
        Xs.append(images[keep].reshape(int(keep.sum()), -1).astype(np.float64) / 255.0)
        labels.append(lab[keep])
    X = np.concatenate(Xs)
    y = (np.concatenate(labels) == digits[1]).astype(np.float64)
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
    return _make_dataset(X, y, names, standardize)


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
    file = _find_file(
        path,
        ["covtype_subset.csv.gz", "covtype_subset.csv", "covtype_subset.csv.bz2"],
        "covertype data",
    )
    with _open_binary(file) as fh:
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
    return _make_dataset(data[:, keep], y, names, standardize)


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
        ``X`` with the 28 columns named in :data:`HIGGS_FEATURE_NAMES` and
        ``y`` the 0/1 signal label. No intercept column is added.
    """
    files = _files_for_part(
        path,
        part,
        {
            "train": ["higgs_sample.train.tsv", "higgs_sample.train.tsv.gz"],
            "test": ["higgs_sample.test.tsv", "higgs_sample.test.tsv.gz"],
        },
        "train",
        "HIGGS data",
    )
    Xs, ys = [], []
    for file in files:
        data = _load_text_table(file)
        if data.shape[1] != 29:
            raise ValueError(
                f"'{file}': expected 29 columns (label + 28 features), got {data.shape[1]}"
            )
        label = data[:, 0]
        if not np.all((label == 0) | (label == 1)):
            raise ValueError(f"'{file}': HIGGS labels must be 0 or 1")
        Xs.append(data[:, 1:])
        ys.append(label)
    return _make_dataset(
        np.concatenate(Xs), np.concatenate(ys), HIGGS_FEATURE_NAMES, standardize
    )
