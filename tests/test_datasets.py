"""Tests for :mod:`pymc_subsample.datasets`.

Tests marked ``needs_data`` read the real data sets in ``../shared/data``
(relative to the project root); they are skipped where that folder is absent.
All other tests write tiny files into ``tmp_path``.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from pymc_subsample.datasets import (
    HIGGS_FEATURE_NAMES,
    Dataset,
    load_cod_rna,
    load_covtype,
    load_higgs,
    load_mnist,
    load_skin,
    read_idx,
    read_libsvm,
    standardize,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

needs_data = pytest.mark.skipif(
    not DATA.exists(),
    reason="../shared/data is not present (real data sets are only on developer/CI machines)",
)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _write_idx(path: Path, array: np.ndarray, code: int, opener=open) -> None:
    be = array.astype(array.dtype.newbyteorder(">"))
    header = bytes([0, 0, code, array.ndim]) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    with opener(path, "wb") as fh:
        fh.write(header + be.tobytes())


def _write_tiny_mnist(directory: Path) -> None:
    """Four gzip IDX files with 2x2 'images' whose pixels encode the row."""
    directory.mkdir(parents=True, exist_ok=True)
    train_labels = np.array([0, 1, 2, 1, 0, 7], dtype=np.uint8)
    test_labels = np.array([1, 3, 0], dtype=np.uint8)
    for stem, labels, offset in (
        ("train", train_labels, 0),
        ("t10k", test_labels, 100),
    ):
        n = labels.size
        images = (np.arange(n * 4).reshape(n, 2, 2) + offset).astype(np.uint8)
        _write_idx(directory / f"{stem}-images-idx3-ubyte.gz", images, 0x08, gzip.open)
        _write_idx(directory / f"{stem}-labels-idx1-ubyte.gz", labels, 0x08, gzip.open)


def _check_standardized(ds: Dataset, raw: Dataset) -> None:
    assert ds.standardized and ds.mean is not None and ds.scale is not None
    varying = raw.X.std(axis=0) > 0
    np.testing.assert_allclose(ds.X.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(ds.X.std(axis=0)[varying], 1.0, rtol=1e-9)
    np.testing.assert_allclose(ds.X[:, ~varying], 0.0)
    np.testing.assert_allclose(ds.scale[~varying], 1.0)
    np.testing.assert_allclose(ds.standardize_new(raw.X), ds.X, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ds.y, raw.y)
    assert ds.feature_names == raw.feature_names


# ---------------------------------------------------------------------------
# Format readers (no shared data needed)
# ---------------------------------------------------------------------------

LIBSVM_TEXT = (
    "-1 1:-766 2:128 3:0.140625\n"
    "+1 2:0.5 4:7e-1\n"
    "\n"
    "# a comment line\n"
    "1 1:2.5   # trailing comment\n"
    "-1\n"
)
LIBSVM_X = np.array(
    [
        [-766.0, 128.0, 0.140625, 0.0],
        [0.0, 0.5, 0.0, 0.7],
        [2.5, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
    ]
)
LIBSVM_Y = np.array([-1.0, 1.0, 1.0, -1.0])


def test_read_libsvm_plain(tmp_path):
    path = tmp_path / "tiny.libsvm"
    path.write_text(LIBSVM_TEXT)
    X, y = read_libsvm(path)
    assert X.dtype == np.float64 and y.dtype == np.float64
    np.testing.assert_array_equal(X, LIBSVM_X)
    np.testing.assert_array_equal(y, LIBSVM_Y)


def test_read_libsvm_bz2_and_gz_with_n_features(tmp_path):
    bz = tmp_path / "tiny.bz2"
    bz.write_bytes(bz2.compress(LIBSVM_TEXT.encode()))
    X, y = read_libsvm(bz, n_features=6)
    assert X.shape == (4, 6)
    np.testing.assert_array_equal(X[:, :4], LIBSVM_X)
    np.testing.assert_array_equal(X[:, 4:], 0.0)
    np.testing.assert_array_equal(y, LIBSVM_Y)

    gz = tmp_path / "tiny.gz"
    gz.write_bytes(gzip.compress(LIBSVM_TEXT.encode()))
    X2, y2 = read_libsvm(gz)
    np.testing.assert_array_equal(X2, LIBSVM_X)
    np.testing.assert_array_equal(y2, LIBSVM_Y)


def test_read_libsvm_errors(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text(LIBSVM_TEXT)
    with pytest.raises(ValueError, match="n_features=3"):
        read_libsvm(path, n_features=3)
    zero_based = tmp_path / "zero.txt"
    zero_based.write_text("1 0:1.0 1:2.0\n")
    with pytest.raises(ValueError, match="indices must start at 1"):
        read_libsvm(zero_based)
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("1 1:abc\n")
    with pytest.raises(ValueError, match="malformed LIBSVM"):
        read_libsvm(garbage)
    with pytest.raises(FileNotFoundError):
        read_libsvm(tmp_path / "nope.libsvm")


def test_read_idx_gz_uint8_and_int32(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "images-idx3-ubyte.gz"
    _write_idx(path, images, 0x08, gzip.open)
    out = read_idx(path)
    assert out.dtype == np.uint8 and out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, images)

    ints = np.array([[1, -2, 70000], [-70000, 0, 2**31 - 1]], dtype=np.int32)
    path32 = tmp_path / "ints.idx.gz"
    _write_idx(path32, ints, 0x0C, gzip.open)
    out32 = read_idx(path32)
    assert out32.dtype == np.dtype(np.int32) and out32.dtype.isnative
    np.testing.assert_array_equal(out32, ints)

    plain = tmp_path / "floats.idx"
    floats = np.array([0.5, -1.25, 3.0], dtype=np.float64)
    _write_idx(plain, floats, 0x0E)
    np.testing.assert_array_equal(read_idx(plain), floats)


def test_read_idx_errors(tmp_path):
    bad_magic = tmp_path / "bad.idx"
    bad_magic.write_bytes(b"\x01\x00\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="bad magic"):
        read_idx(bad_magic)
    bad_code = tmp_path / "code.idx"
    bad_code.write_bytes(b"\x00\x00\x07\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="data type code 0x07"):
        read_idx(bad_code)
    truncated = tmp_path / "short.idx"
    truncated.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x03\x05")
    with pytest.raises(ValueError, match="data bytes"):
        read_idx(truncated)


# ---------------------------------------------------------------------------
# standardize and Dataset (no shared data needed)
# ---------------------------------------------------------------------------


def test_standardize_population_sd_and_constant_columns():
    X = np.array([[1.0, 5.0, 0.1], [3.0, 5.0, 0.1], [5.0, 5.0, 0.1], [7.0, 5.0, 0.1]])
    Xs, mean, scale = standardize(X)
    np.testing.assert_allclose(mean, [4.0, 5.0, 0.1])
    np.testing.assert_allclose(scale, [np.sqrt(5.0), 1.0, 1.0])  # ddof=0
    np.testing.assert_allclose(Xs[:, 0], (X[:, 0] - 4.0) / np.sqrt(5.0))
    np.testing.assert_array_equal(Xs[:, 1:], 0.0)
    with pytest.raises(ValueError, match="2-dimensional"):
        standardize(np.ones(3))


def test_dataset_standardize_new_and_validation():
    X = np.array([[1.0, 2.0], [3.0, 6.0]])
    ds = Dataset(
        X, np.array([0.0, 1.0]), ("a", "b"), np.array([2.0, 4.0]), np.array([1.0, 2.0])
    )
    np.testing.assert_allclose(
        ds.standardize_new([[2.0, 4.0], [4.0, 8.0]]), [[0, 0], [2, 2]]
    )
    np.testing.assert_allclose(ds.standardize_new([3.0, 6.0]), [1.0, 1.0])
    with pytest.raises(ValueError, match="shape"):
        ds.standardize_new(np.ones((2, 3)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.X = X  # type: ignore[misc]

    raw = Dataset(X, np.array([0.0, 1.0]), ["a", "b"])
    assert raw.mean is None and raw.scale is None and not raw.standardized
    assert raw.feature_names == ("a", "b")
    new = raw.standardize_new(X)
    np.testing.assert_array_equal(new, X)
    assert new is not X

    with pytest.raises(ValueError, match="feature_names"):
        Dataset(X, np.array([0.0, 1.0]), ("a",))
    with pytest.raises(ValueError, match="y must be"):
        Dataset(X, np.array([0.0, 1.0, 1.0]), ("a", "b"))


# ---------------------------------------------------------------------------
# Loaders on tiny files and error messages (no shared data needed)
# ---------------------------------------------------------------------------


def test_load_skin_tiny_file_and_directory(tmp_path):
    (tmp_path / "Skin_NonSkin.txt").write_text(
        "74\t85\t123\t1\n10\t20\t30\t2\n0\t0\t255\t1\n"
    )
    for path in (tmp_path, tmp_path / "Skin_NonSkin.txt"):
        ds = load_skin(path)
        assert ds.feature_names == ("B", "G", "R")
        np.testing.assert_array_equal(ds.X, [[74, 85, 123], [10, 20, 30], [0, 0, 255]])
        np.testing.assert_array_equal(ds.y, [1.0, 0.0, 1.0])
        assert ds.mean is None and ds.scale is None


def test_load_cod_rna_tiny_directory(tmp_path):
    (tmp_path / "cod-rna.bz2").write_bytes(bz2.compress(b"-1 1:1 8:2\n+1 2:3\n"))
    (tmp_path / "cod-rna.t.bz2").write_bytes(bz2.compress(b"1 3:4\n"))
    train = load_cod_rna(tmp_path)
    assert train.X.shape == (2, 8)
    np.testing.assert_array_equal(train.y, [0.0, 1.0])
    np.testing.assert_array_equal(train.X[0], [1, 0, 0, 0, 0, 0, 0, 2])
    every = load_cod_rna(tmp_path, part="all")
    assert every.X.shape == (3, 8)
    np.testing.assert_array_equal(every.y, [0.0, 1.0, 1.0])
    assert every.X[2, 2] == 4.0
    single = load_cod_rna(tmp_path / "cod-rna.t.bz2")
    assert single.X.shape == (1, 8)


def test_load_mnist_tiny(tmp_path):
    _write_tiny_mnist(tmp_path)
    ds = load_mnist(tmp_path, digits=(0, 1))
    # train rows with labels 0, 1, 1, 0 then test rows 1, 0
    np.testing.assert_array_equal(ds.y, [0, 1, 1, 0, 1, 0])
    assert ds.X.shape == (6, 4)
    assert ds.feature_names[:2] == ("pixel0", "pixel1")
    np.testing.assert_allclose(ds.X[0], np.arange(4) / 255.0)
    np.testing.assert_allclose(ds.X[4], (np.arange(4) + 100) / 255.0)
    assert 0.0 <= ds.X.min() and ds.X.max() <= 1.0

    reversed_ = load_mnist(
        tmp_path / "train-labels-idx1-ubyte.gz", digits=(1, 0), part="train"
    )
    np.testing.assert_array_equal(reversed_.y, [1, 0, 0, 1])

    pca = load_mnist(tmp_path, n_components=2)
    assert pca.X.shape == (6, 2) and pca.feature_names == ("PC1", "PC2")
    np.testing.assert_allclose(pca.X.mean(axis=0), 0.0, atol=1e-12)

    with pytest.raises(ValueError, match="two different digits"):
        load_mnist(tmp_path, digits=(3, 3))
    with pytest.raises(ValueError, match="n_components"):
        load_mnist(tmp_path, n_components=0)


def test_load_covtype_tiny(tmp_path):
    text = "Elevation,Slope,Cover_Type\n0.5,0.1,2\n0.25,0.2,1\n1.0,0.3,2\n"
    (tmp_path / "covtype_subset.csv.gz").write_bytes(gzip.compress(text.encode()))
    ds = load_covtype(tmp_path)
    assert ds.feature_names == ("Elevation", "Slope")
    np.testing.assert_array_equal(ds.X, [[0.5, 0.1], [0.25, 0.2], [1.0, 0.3]])
    np.testing.assert_array_equal(ds.y, [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(load_covtype(tmp_path, positive_class=1).y, [0, 1, 0])
    with pytest.raises(ValueError, match="positive_class=5"):
        load_covtype(tmp_path, positive_class=5)


def test_load_higgs_tiny(tmp_path):
    row = "\t".join(["1"] + [f"{j / 10:.1f}" for j in range(28)])
    (tmp_path / "higgs_sample.train.tsv").write_text(
        row + "\n" + row.replace("1", "0", 1) + "\n"
    )
    (tmp_path / "higgs_sample.test.tsv").write_text(row + "\n")
    ds = load_higgs(tmp_path)
    assert ds.X.shape == (2, 28) and ds.feature_names == HIGGS_FEATURE_NAMES
    np.testing.assert_array_equal(ds.y, [1.0, 0.0])
    np.testing.assert_allclose(ds.X[0], np.arange(28) / 10)
    assert load_higgs(tmp_path, part="all").X.shape == (3, 28)
    assert load_higgs(tmp_path, part="test").X.shape == (1, 28)


def test_missing_files_raise_file_not_found(tmp_path):
    missing = tmp_path / "does-not-exist"
    with pytest.raises(FileNotFoundError, match=r"does-not-exist.*Skin_NonSkin\.txt"):
        load_skin(missing)
    with pytest.raises(FileNotFoundError, match=r"Skin_NonSkin\.txt"):
        load_skin(tmp_path)  # exists but empty
    with pytest.raises(FileNotFoundError, match=r"cod-rna\.t\.bz2"):
        load_cod_rna(tmp_path, part="test")
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte\.gz"):
        load_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"covtype_subset\.csv\.gz"):
        load_covtype(missing)
    with pytest.raises(FileNotFoundError, match=r"higgs_sample\.train\.tsv"):
        load_higgs(tmp_path)


def test_unknown_part_raises_value_error(tmp_path):
    allowed = r"'train', 'test', 'all'"
    with pytest.raises(ValueError, match=rf"unknown part 'validation'.*{allowed}"):
        load_cod_rna(tmp_path, part="validation")
    with pytest.raises(ValueError, match=rf"unknown part 'valid'.*{allowed}"):
        load_higgs(tmp_path, part="valid")
    with pytest.raises(
        ValueError, match=r"unknown part 'TRAIN'.*'all', 'train', 'test'"
    ):
        load_mnist(tmp_path, part="TRAIN")
    # a single file cannot be split into parts
    single = tmp_path / "higgs.tsv"
    single.write_text("\t".join(["1"] + ["0"] * 28) + "\n")
    with pytest.raises(ValueError, match="single file"):
        load_higgs(single, part="test")


# ---------------------------------------------------------------------------
# Real data sets (skipped without ../shared/data)
# ---------------------------------------------------------------------------


@needs_data
def test_skin_real():
    raw = load_skin(DATA / "skin")
    assert raw.X.shape == (245_057, 3) and raw.y.shape == (245_057,)
    assert raw.X.dtype == np.float64
    assert raw.feature_names == ("B", "G", "R")
    assert raw.y.sum() == 50_859  # skin pixels
    assert set(np.unique(raw.y)) == {0.0, 1.0}
    assert raw.X.min() >= 0 and raw.X.max() <= 255
    std = load_skin(DATA / "skin" / "Skin_NonSkin.txt", standardize=True)
    _check_standardized(std, raw)


@needs_data
def test_cod_rna_real():
    train = load_cod_rna(DATA / "cod-rna")
    assert train.X.shape == (59_535, 8)
    assert train.y.sum() == 19_845  # one third positive
    test = load_cod_rna(DATA / "cod-rna", part="test")
    assert test.X.shape == (271_617, 8)
    assert test.y.sum() == 90_539
    _check_standardized(
        load_cod_rna(DATA / "cod-rna", part="test", standardize=True), test
    )
    # the first training row as published
    np.testing.assert_allclose(
        train.X[0],
        [-766, 128, 0.140625, 0.304688, 0.234375, 0.140625, 0.304688, 0.234375],
    )
    assert train.y[0] == 0.0


@needs_data
def test_mnist_0_vs_1_real():
    raw = load_mnist(DATA / "mnist")
    assert raw.X.shape == (14_780, 784)
    assert raw.y.sum() == 7_877  # 6,742 + 1,135 ones
    assert raw.X.min() == 0.0 and raw.X.max() == 1.0
    assert load_mnist(DATA / "mnist", part="train").X.shape[0] == 12_665
    pca = load_mnist(DATA / "mnist", n_components=10)
    assert pca.X.shape == (14_780, 10)
    assert pca.feature_names == tuple(f"PC{j}" for j in range(1, 11))
    np.testing.assert_array_equal(pca.y, raw.y)
    np.testing.assert_allclose(pca.X.mean(axis=0), 0.0, atol=1e-9)
    sds = pca.X.std(axis=0)
    assert np.all(np.diff(sds) <= 1e-9)  # decreasing variance
    # orthogonal scores; the leading component separates 0 from 1
    cov = pca.X.T @ pca.X
    np.testing.assert_allclose(cov - np.diag(np.diag(cov)), 0.0, atol=1e-6 * cov.max())
    assert abs(np.corrcoef(pca.X[:, 0], raw.y)[0, 1]) > 0.9
    std = load_mnist(DATA / "mnist", n_components=10, standardize=True)
    _check_standardized(std, pca)


@needs_data
def test_covtype_real():
    raw = load_covtype(DATA / "covtype")
    assert raw.X.shape == (92_962, 54)
    assert raw.feature_names[0] == "Elevation" and "Cover_Type" not in raw.feature_names
    assert raw.y.sum() == 45_328
    assert 0.45 < raw.y.mean() < 0.52
    std = load_covtype(DATA / "covtype" / "covtype_subset.csv.gz", standardize=True)
    _check_standardized(std, raw)  # includes a constant column -> scale 1


@needs_data
def test_higgs_real():
    raw = load_higgs(DATA / "higgs")
    assert raw.X.shape == (7_000, 28)
    assert raw.feature_names == HIGGS_FEATURE_NAMES
    assert raw.y.sum() == 3_716
    assert load_higgs(DATA / "higgs", part="test").X.shape == (500, 28)
    assert load_higgs(DATA / "higgs", part="all").X.shape == (7_500, 28)
    std = load_higgs(DATA / "higgs", standardize=True)
    _check_standardized(std, raw)
