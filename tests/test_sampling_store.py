"""Data as users store them: compressed, large-chunked zarr and Parquet. The read-cost warning,
``pms.to_sampling_store`` (streamed, resumable) and Parquet columns through ``pms.Data``."""

import logging
import pickle
import re
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.model.file_rows import ZarrChunkRows
from pymc_subsample.model.read_cost import read_cost
from pymc_subsample.model.sources import as_row_source

EXTRAS = "is in the test and scale extras: pip install -e '.[test]'"
zarr = pytest.importorskip("zarr", reason=f"zarr {EXTRAS}")
pa = pytest.importorskip("pyarrow", reason=f"pyarrow {EXTRAS}")
pq = pytest.importorskip("pyarrow.parquet", reason=f"pyarrow {EXTRAS}")

N, D, BIG_CHUNK = 20_000, 3, 5_000
#: smaller than one decoded chunk of X (5,000 rows × 3 float64 = 117.2 KiB)
SMALL_CACHE = 48 * 2**10


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Logistic regression rows in memory, in a zstd zarr store of large chunks and in Parquet."""
    rng = np.random.default_rng(21)
    X = rng.normal(size=(N, D))
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ np.array([0.7, -0.4, 0.2])))).astype(float)
    root = tmp_path_factory.mktemp("stored")
    zarr.create_array(str(root / "X.zarr"), data=X, chunks=(BIG_CHUNK, D))  # zarr's default codec: zstd
    zarr.create_array(str(root / "y.zarr"), data=y, chunks=(BIG_CHUNK,))
    table = pa.table({**{f"x{j}": X[:, j] for j in range(D)}, "y": y, "label": ["a"] * N})
    pq.write_table(table, root / "rows.parquet", row_group_size=3_000)  # snappy, pyarrow's default
    (root / "dataset").mkdir()
    pq.write_table(table.slice(0, 8_000), root / "dataset" / "part-0.parquet", row_group_size=3_000)
    pq.write_table(table.slice(8_000), root / "dataset" / "part-1.parquet", row_group_size=3_000)
    return X, y, root


def _model(X_source, y_source, in_memory=False, **kwargs):
    with pm.Model() as model:
        X = pm.Data("X", X_source) if in_memory else pms.Data("X", X_source, **kwargs.get("X", {}))
        y = pm.Data("y", y_source) if in_memory else pms.Data("y", y_source, **kwargs.get("y", {}))
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("obs", logit_p=X @ beta, observed=y)
    return model


def _draws(model, rows_kept=True):
    """``rows_kept=False``: HMCECS without the iterations that keep every row's arguments in memory
    (:mod:`pymc_subsample.step_methods.fused_ecs`, which draw from their own random stream), as it
    runs on rows read from a store."""
    with model, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not extract data from symbolic observation")
        step = pms.HMCECS(subsample_size=300, progressbar=False)
        if not rows_kept:
            step._eta_nuts_state = None
        idata = pm.sample(step=step, draws=30, tune=30, chains=1, random_seed=11, progressbar=False,
                          compute_convergence_checks=False)
    return idata.posterior["beta"].values


@pytest.fixture(scope="module")
def reference(data):
    X, y, _ = data
    return _draws(_model(X, y, in_memory=True), rows_kept=False)


def _quiet(model_fn):
    """Build the model with SlowRowsWarning raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pms.SlowRowsWarning)
        return model_fn()


def test_large_compressed_chunks_warn_and_the_store_gives_the_in_memory_draws(data, reference, tmp_path):
    X, y, root = data
    figure = (r"a random row costs [\d.]+ ms on average to read .* whole chunk of 5,000 rows \(117\.2 KiB "
              r"decoded, codec zstd\), larger than the 48\.0 KiB row cache")
    remedy = rf"pms.Data\('X', pms.to_sampling_store\('{root / 'X.zarr'}', 'X_rows.zarr'\)\)"
    with pm.Model(), pytest.warns(pms.SlowRowsWarning, match=figure) as caught:
        pms.Data("X", root / "X.zarr", cache_bytes=SMALL_CACHE)
    assert len(caught) == 1 and "local_copy=True" in str(caught[0].message)
    assert re.search(remedy, str(caught[0].message))
    X_store = pms.to_sampling_store(root / "X.zarr", tmp_path / "X_rows.zarr", progressbar=False)
    y_store = pms.to_sampling_store(zarr.open_array(str(root / "y.zarr")), tmp_path / "y_rows.zarr",
                                    chunk_rows=1_500, progressbar=False)
    assert X_store.compressors == () and y_store.chunks == (1_500,)
    small_cache = {"cache_bytes": SMALL_CACHE}
    model = _quiet(lambda: _model(X_store, y_store, X=small_cache, y=small_cache))
    # same seed, same draws: the set-up's full passes add chunks in another order than one in-memory
    # sum, so they agree to round-off (another draw would differ by about the posterior sd, ~1e-2)
    np.testing.assert_allclose(_draws(model), reference, rtol=0, atol=1e-8)


def test_sources_read_row_by_row_or_held_in_memory_stay_quiet(data, tmp_path):
    X, y, root = data
    zarr.create_array(str(tmp_path / "raw.zarr"), data=X, chunks=(BIG_CHUNK, D), compressors=None)
    np.save(tmp_path / "X.npy", X)
    memmap = np.load(tmp_path / "X.npy", mmap_mode="r")
    for source in (tmp_path / "raw.zarr", tmp_path / "X.npy", memmap, X):
        with pm.Model():
            _quiet(lambda source=source: pms.Data("X", source, cache_bytes=SMALL_CACHE))
    # compressed, but every decoded chunk fits the default 64 MB cache: no timing, no warning
    assert read_cost(as_row_source(root / "X.zarr", "X")).slow is False
    with pm.Model():
        _quiet(lambda: pms.Data("X", root / "X.zarr"))


def test_chunks_too_large_to_time_are_judged_from_their_size(data):
    X, _, root = data
    source = as_row_source(root / "X.zarr", "X", cache_bytes=SMALL_CACHE)
    cost = read_cost(source)
    assert cost.codec == "zstd" and cost.chunk_bytes == BIG_CHUNK * D * 8 and cost.n_chunks == 4
    assert cost.row_seconds is not None and cost.slow
    assert source.chunks_read == 0  # the timed read goes past the cache and its counters


class FailingRows:
    """An array-like whose reads fail after ``fail_after`` of them; records where each read starts."""

    def __init__(self, data, fail_after=None):
        self.data, self.fail_after = data, fail_after
        self.shape, self.dtype = data.shape, data.dtype
        self.starts = []

    def __getitem__(self, key):
        if self.fail_after is not None and len(self.starts) >= self.fail_after:
            raise OSError("the source went away")
        self.starts.append(key.start)
        return self.data[key]


def test_an_interrupted_copy_resumes_where_it_stopped(tmp_path):
    data = np.random.default_rng(2).normal(size=(50_000, 2))
    path = tmp_path / "copy.zarr"
    broken = FailingRows(data, fail_after=1)  # one native chunk of 20,000 rows, then failures
    with pytest.raises(OSError, match="went away"):
        pms.to_sampling_store(broken, path, chunk_rows=5_000, progressbar=False)
    record = zarr.open_array(str(path)).attrs["pymc_subsample_store"]
    assert record["done"] == [0, 1, 2, 3] and not record["complete"]
    again = FailingRows(data)
    store = pms.to_sampling_store(again, path, chunk_rows=5_000, progressbar=False)
    assert again.starts == [20_000, 40_000]  # the first native chunk's output is not written again
    np.testing.assert_array_equal(store[:], data)
    assert store.attrs["pymc_subsample_store"]["complete"]
    finished = FailingRows(data, fail_after=0)  # a finished store is returned without reading
    np.testing.assert_array_equal(pms.to_sampling_store(finished, path, chunk_rows=5_000)[:], data)
    source = as_row_source(store, "X")
    assert isinstance(source.array, ZarrChunkRows)  # rows read alone from the chunk files


def test_copies_from_dask_locally_and_on_a_cluster_equal_the_rows(data, tmp_path):
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    X, _, root = data
    source = da.from_zarr(str(root / "X.zarr"))
    local = pms.to_sampling_store(source, tmp_path / "local.zarr", chunk_rows=4_000, progressbar=False)
    np.testing.assert_array_equal(local[:], X)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client:
        remote = pms.to_sampling_store(source, tmp_path / "remote.zarr", chunk_rows=4_000, client=client,
                                       progressbar=False)
    np.testing.assert_array_equal(remote[:], X)
    assert remote.attrs["pymc_subsample_store"]["done"] == list(range(5))


def test_local_copy_says_its_size_first_and_is_reused(data, tmp_path, caplog, capsys):
    X, _, root = data
    with caplog.at_level(logging.INFO, logger="pymc"), pm.Model():
        x = _quiet(lambda: pms.Data("X", root / "X.zarr", cache_bytes=SMALL_CACHE, local_copy=tmp_path))
    assert "468.8 KiB uncompressed" in caplog.text and "free there" in caplog.text
    assert "copy to X-" in capsys.readouterr().out  # the progress bar
    (copy,) = tmp_path.glob("X-*.zarr")
    source = x.owner.op.source
    assert isinstance(source.array, ZarrChunkRows) and source.cache_bytes == SMALL_CACHE
    np.testing.assert_array_equal(source[0:N], X)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pymc"), pm.Model():
        pms.Data("X", root / "X.zarr", local_copy=tmp_path)
    assert "Writing" not in caplog.text  # the finished copy is reused
    assert list(tmp_path.glob("X-*.zarr")) == [copy]


def test_parquet_columns_give_the_in_memory_draws(data, reference):
    _, _, root = data
    columns = {"X": {"columns": ["x0", "x1", "x2"]}, "y": {"columns": "y"}}
    model = _quiet(lambda: _model(root / "rows.parquet", root / "rows.parquet", **columns))
    np.testing.assert_allclose(_draws(model), reference, rtol=0, atol=1e-8)


def test_parquet_rows_files_datasets_and_their_copy(data, tmp_path):
    X, y, root = data
    idx = np.random.default_rng(3).integers(0, N, 500)
    for path in (root / "rows.parquet", root / "dataset"):
        source = as_row_source(path, "X", columns=["x0", "x1", "x2"])
        assert source.kind == "parquet" and source.shape == (N, D)
        np.testing.assert_array_equal(source[idx], X[idx])
        np.testing.assert_array_equal(source[2_500:13_000], X[2_500:13_000])
        np.testing.assert_array_equal(as_row_source(path, "y", columns="y")[0:N], y)
        # by reference (path and columns) for Dask workers, never a decoded row group
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(source))[idx], X[idx])
    # row groups are the native chunks: 3,000 rows, and the dataset's files start new ones
    assert list(as_row_source(root / "dataset", "y", columns="y").boundaries[:5]) == [0, 3_000, 6_000,
                                                                                     8_000, 11_000]
    source = as_row_source(root / "rows.parquet", "X", columns=["x0", "x1", "x2"], cache_bytes=30_000)
    cost = read_cost(source)
    assert cost.codec == "snappy" and cost.chunk_bytes == 3_000 * D * 8 and cost.slow
    store = pms.to_sampling_store(root / "rows.parquet", tmp_path / "X.zarr", columns=["x0", "x1", "x2"],
                                  progressbar=False)
    np.testing.assert_array_equal(store[:], X)


def test_bad_inputs_are_clear_errors(data, tmp_path):
    X, _, root = data
    parquet = root / "rows.parquet"
    with pm.Model():
        with pytest.raises(KeyError, match=r"has no column\(s\) \['z'\]; its columns are \['x0'"):
            pms.Data("X", parquet, columns=["x0", "z"])
        with pytest.raises(TypeError, match="column 'label' has type string, which is not numeric; leave"):
            pms.Data("X", parquet, columns=["x0", "label"])
        with pytest.raises(ValueError, match="give the Parquet columns to read"):
            pms.Data("X", parquet)
        with pytest.raises(ValueError, match="columns= selects columns of a Parquet file"):
            pms.Data("X", root / "X.zarr", columns=["x0"])
        with pytest.raises(ValueError, match="cache_bytes must be a number of bytes"):
            pms.Data("X", root / "X.zarr", cache_bytes=-1)
        with pytest.raises(TypeError, match="local_copy must be True, False or a folder path"):
            pms.Data("X", root / "X.zarr", local_copy=1)
        with pytest.raises(ValueError, match="local_copy needs a source with a path"):
            pms.Data("X", FailingRows(X), cache_bytes=SMALL_CACHE, local_copy=tmp_path)
    holes = pa.table({"x": pa.array([1.0, None, 3.0, 4.0]), "k": pa.array([1, 2, 3, 4])})
    pq.write_table(holes, tmp_path / "holes.parquet", row_group_size=2)
    source = as_row_source(tmp_path / "holes.parquet", "X", columns=["k", "x"])
    np.testing.assert_array_equal(source[2:4], [[3.0, 3.0], [4.0, 4.0]])
    with pytest.raises(ValueError, match=r"column 'x' has 1 missing values in row group 0 \(rows 0..1\)"):
        source[0:4]
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError, match="is not a store written by to_sampling_store"):
        pms.to_sampling_store(root / "X.zarr", tmp_path / "taken", progressbar=False)
    pms.to_sampling_store(root / "y.zarr", tmp_path / "y.zarr", progressbar=False)
    with pytest.raises(FileExistsError, match="holds a copy of another source"):
        pms.to_sampling_store(root / "X.zarr", tmp_path / "y.zarr", progressbar=False)
    with pytest.raises(ValueError, match="chunk_rows must be a positive integer"):
        pms.to_sampling_store(root / "X.zarr", tmp_path / "X.zarr", chunk_rows=0)
    huge = FailingRows(np.empty((1, 1000)), fail_after=0)
    huge.shape = (10**12, 1000)  # 8 PB of float64 rows: more than any disk here
    with pytest.raises(OSError, match=r"needs 7,450,580\.6 GiB of disk at .* are free there"):
        pms.to_sampling_store(huge, tmp_path / "huge.zarr", chunk_rows=10**9)
    assert not (tmp_path / "huge.zarr").exists()  # refused before anything is written
