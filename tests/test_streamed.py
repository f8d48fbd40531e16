"""pms.Data: rows that stay where they are (npy memmap, zarr, Dask), read on demand."""

import importlib.util
import pickle

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.model import chunks
from pymc_subsample.model.chunks import chunked_sum
from pymc_subsample.model.file_rows import ZarrChunkRows
from pymc_subsample.model.sources import as_row_source
from pymc_subsample.model.tall import TallModel

zarr = pytest.importorskip("zarr", reason="zarr is in the test extra: pip install -e '.[test]'")
da = pytest.importorskip("dask.array", reason="dask is in the test extra: pip install -e '.[test]'")

N_BIG, D = 1_000_000, 3
CHUNK = 10_000


class ChunkGuard:
    """An array-like that refuses any read of more than one chunk's worth of rows at once."""

    def __init__(self, data, chunk):
        self.data, self.chunk = data, chunk
        self.shape, self.dtype = data.shape, data.dtype
        self.largest_read = 0

    def __getitem__(self, key):
        rows = len(range(*key.indices(self.shape[0]))) if isinstance(key, slice) else np.size(key)
        if rows > self.chunk:
            raise MemoryError(f"read of {rows} rows at once; the source allows {self.chunk}")
        self.largest_read = max(self.largest_read, rows)
        return self.data[key]


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Logistic regression data at N = 10⁶ in memory, in .npy files and in zarr stores."""
    rng = np.random.default_rng(12)
    X = rng.normal(size=(N_BIG, D))
    y = (rng.random(N_BIG) < 1 / (1 + np.exp(-X @ np.array([0.8, -0.5, 0.3])))).astype(float)
    root = tmp_path_factory.mktemp("rows")
    np.save(root / "X.npy", X)
    np.save(root / "y.npy", y)
    zarr.create_array(str(root / "X.zarr"), data=X, chunks=(CHUNK, D))
    zarr.create_array(str(root / "y.zarr"), data=y, chunks=(CHUNK,))
    # uncompressed: rows read alone from the chunk files (ZarrChunkRows)
    zarr.create_array(str(root / "X_raw.zarr"), data=X, chunks=(CHUNK, D), compressors=None)
    zarr.create_array(str(root / "y_raw.zarr"), data=y, chunks=(CHUNK,), compressors=None)
    return X, y, root


def _model(X_source, y_source, in_memory=False, chunk_rows=None):
    with pm.Model() as model:
        X = pm.Data("X", X_source) if in_memory else pms.Data("X", X_source, chunk_rows=chunk_rows)
        y = pm.Data("y", y_source) if in_memory else pms.Data("y", y_source, chunk_rows=chunk_rows)
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("obs", logit_p=X @ beta, observed=y)
    return model


STEPS = {
    "hmcecs": lambda: pms.HMCECS(subsample_size=500),
    "pseudo-marginal": lambda: pms.SubsampleMH(subsample_size=500, thin=2),
    "sgld-cv": lambda: pms.SGLD(gradient="cv", batch_size=200, thin=2),
}


def _draws(model, step, rows_kept=True):
    """``rows_kept=False``: HMCECS without the iterations that keep every row's arguments in memory
    (:mod:`pymc_subsample.step_methods.fused_ecs`, which draw from their own random stream), as it
    runs on rows read from a file."""
    with model:
        sampler = STEPS[step]()
        if not rows_kept:
            sampler._eta_nuts_state = None
        idata = pm.sample(step=sampler, draws=40, tune=40, chains=1, random_seed=7,
                          progressbar=False, compute_convergence_checks=False)
    return idata


@pytest.mark.slow
@pytest.mark.parametrize("step", list(STEPS))
def test_same_draws_as_in_memory_data_from_npy_and_zarr(big, step):
    X, y, root = big
    reference = _draws(_model(X, y, in_memory=True), step, rows_kept=False).posterior["beta"].values
    for X_source, y_source in [(root / "X.npy", root / "y.npy"), (root / "X.zarr", root / "y.zarr"),
                               (root / "X_raw.zarr", root / "y_raw.zarr")]:
        with pytest.warns(UserWarning, match="Could not extract data from symbolic observation"):
            idata = _draws(_model(X_source, y_source), step)
        # the set-up's full passes add the chunks in another order than one in-memory sum, so the
        # draws agree to round-off (seen: 1.7e-10 after 40 draws), not bit for bit; another draw
        # would differ by about the posterior sd (~1e-2)
        np.testing.assert_allclose(idata.posterior["beta"].values, reference, rtol=0, atol=1e-8)
        # no copy of the N rows in the output (PyMC 6 keeps an empty observed_data group)
        for group in ("constant_data", "observed_data"):
            assert group not in idata.children or not idata[group].ds.data_vars, group


@pytest.mark.slow
def test_sampling_never_reads_more_than_a_chunk_at_once(big):
    X, y, _ = big
    X_guard, y_guard = ChunkGuard(X, CHUNK), ChunkGuard(y, CHUNK)
    with pytest.warns(UserWarning, match="symbolic observation"):
        idata = _draws(_model(X_guard, y_guard, chunk_rows=CHUNK), "hmcecs")
    assert idata.posterior["beta"].shape == (1, 40, D)
    assert 0 < X_guard.largest_read <= CHUNK
    # the guard works: a whole-array read is refused
    with pytest.raises(MemoryError, match="allows 10000"):
        X_guard[0:N_BIG]


def test_full_passes_on_a_dask_cluster_equal_the_in_process_sums(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(chunks, "DISTRIBUTED_TIMEOUT", 240)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60_000, D))
    y = (rng.random(60_000) < 0.5).astype(float)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    tall = TallModel(_model(tmp_path / "X.npy", tmp_path / "y.npy"))
    theta = np.array([0.1, -0.2, 0.3])
    local = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, theta, chunk_size=7_000)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        tall.client = client
        try:
            remote = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, theta, chunk_size=7_000)
        except TimeoutError:
            pytest.skip("the LocalCluster did not answer within 240 s (an intermittent stall of "
                        "distributed's spawned workers on a loaded machine, every process idle)")
        tall.client = None
    for a, b in zip(local, remote):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    in_memory = TallModel(_model(X, y, in_memory=True))
    exact = in_memory.loglik_sum_value_grad_hessian(theta, in_memory.row_slice(0, 60_000))
    for a, b in zip(exact, remote):
        np.testing.assert_allclose(b, a, rtol=1e-10)


def test_rows_are_read_by_chunk_in_any_order_with_a_cache(tmp_path):
    data = np.arange(100.0).reshape(50, 2)
    store = zarr.create_array(str(tmp_path / "a.zarr"), data=data, chunks=(8, 2))
    source = as_row_source(store, "a")
    idx = np.array([49, 3, 3, 17, 0, 48])
    np.testing.assert_array_equal(source[idx], data[idx])
    np.testing.assert_array_equal(source[5:30], data[5:30])
    read = source.chunks_read
    np.testing.assert_array_equal(source[np.array([1, 2, 49])], data[[1, 2, 49]])
    assert source.chunks_read == read  # chunks 0 and 6 are cached
    dask_source = as_row_source(da.from_array(data, chunks=(7, 2)), "a")
    np.testing.assert_array_equal(dask_source[idx], data[idx])
    np.testing.assert_array_equal(dask_source[6:22], data[6:22])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_uncompressed_zarr_rows_are_read_alone_from_the_chunk_files(tmp_path, zarr_format):
    rng = np.random.default_rng(4)
    data = rng.normal(size=(1003, 3)).astype(np.float32)
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=zarr_format)
    group.create_array("X", data=data, chunks=(100, 3), compressors=None)  # stored under g.zarr/X
    y = group.create_array("y", shape=(250,), chunks=(100,), dtype="f8", compressors=None, fill_value=0.0)
    y[:100] = np.arange(100.0)  # chunks 1 and 2 are never written: the fill value
    for source in (as_row_source(tmp_path / "g.zarr" / "X", "X"), as_row_source(group["X"], "X")):
        assert isinstance(source.array, ZarrChunkRows)
        assert source.description["read"] == "rows from chunk files"
        idx = rng.integers(0, 1003, 700)
        np.testing.assert_array_equal(source[idx], data[idx])
        np.testing.assert_array_equal(source[37:1003], data[37:])
        np.testing.assert_array_equal(source[0:100], data[:100])
        assert source.chunks_read == 0  # no chunk decoded whole, no chunk cache
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(source))[idx[:50]], data[idx[:50]])
    filled = as_row_source(group["y"], "y")
    np.testing.assert_array_equal(filled[np.array([5, 150, 99, 249])], [5.0, 0.0, 99.0, 0.0])
    np.testing.assert_array_equal(filled[95:105], [95, 96, 97, 98, 99, 0, 0, 0, 0, 0])
    compressed = zarr.create_array(str(tmp_path / "c.zarr"), data=data, chunks=(100, 3),
                                   zarr_format=zarr_format)
    assert not isinstance(as_row_source(compressed, "X").array, ZarrChunkRows)  # decoded whole, cached


def test_plain_nuts_on_streamed_data_is_a_clear_error(tmp_path):
    X, y = np.ones((100, D)), np.ones(100)
    np.save(tmp_path / "X.npy", X)
    with pm.Model():
        Xd = pms.Data("X", tmp_path / "X.npy")
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("obs", logit_p=Xd @ beta, observed=y)
        samplers = ["pymc", *(["nutpie"] if importlib.util.find_spec("nutpie") else [])]
        for sampler in samplers:
            with pytest.raises(pms.StreamedDataError, match="Sample the model with a pymc_subsample step"):
                pm.sample(draws=5, tune=5, chains=1, progressbar=False, nuts_sampler=sampler)


def test_bad_sources_are_clear_errors(tmp_path):
    with pm.Model():
        with pytest.raises(FileNotFoundError, match="does not exist"):
            pms.Data("X", tmp_path / "missing.npy")
        with pytest.raises(TypeError, match="not numeric"):
            pms.Data("X", np.array(["a", "b"]))
        unknown = da.from_array(np.ones((10, 2)), chunks=(5, 2))
        unknown = unknown[unknown[:, 0] > 0]
        with pytest.raises(ValueError, match="unknown chunk sizes"):
            pms.Data("X", unknown)
    np.save(tmp_path / "X.npy", np.ones((99, D)))
    with pm.Model() as model:
        Xd = pms.Data("X", tmp_path / "X.npy")
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Normal("obs", mu=(Xd @ beta)[:1].sum(), sigma=1, observed=np.zeros(100))
    with pytest.raises(ValueError, match="has 99 rows but the observed variables have N = 100"):
        TallModel(model)


def test_nan_found_during_a_pass_names_the_chunk(tmp_path):
    X = np.random.default_rng(0).normal(size=(3000, D))
    X[2500, 1] = np.nan
    zarr.create_array(str(tmp_path / "X.zarr"), data=X, chunks=(1000, D))
    model = _model(tmp_path / "X.zarr", np.ones(3000), in_memory=False)
    with pytest.raises(ValueError, match=r"NaN or infinite values in chunk 2 \(rows 2000..2999\)"):
        with model:
            pms.HMCECS(subsample_size=100)


def test_saga_table_of_streamed_data_lives_on_disk_in_float32(tmp_path):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(5_000, D))
    y = (rng.random(5_000) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(float)
    np.save(tmp_path / "X.npy", X)
    draws = {}
    for streamed in (False, True):
        model = _model(tmp_path / "X.npy", y) if streamed else _model(X, y, in_memory=True)
        with model:
            step = pms.SGLD(gradient="saga", batch_size=50, thin=2)
            table = step.estimator.new_table()
            idata = pm.sample(step=step, draws=30, tune=30, chains=1, random_seed=3, progressbar=False,
                              compute_convergence_checks=False)
        draws[streamed] = idata.posterior["beta"].values
        assert isinstance(table.grads, np.memmap) == streamed
        assert table.grads.dtype == (np.float32 if streamed else np.float64)
    # float32 table entries: the same chain up to rounding
    np.testing.assert_allclose(draws[True], draws[False], atol=1e-4)


def test_long_full_passes_show_a_progress_bar_and_are_counted(tmp_path, capsys):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(30_000, D))
    y = (rng.random(30_000) < 0.5).astype(float)
    np.save(tmp_path / "X.npy", X)
    for progressbar in (True, False):
        with _model(tmp_path / "X.npy", y):
            step = pms.HMCECS(subsample_size=200, chunk_size=2_000, progressbar=progressbar)
        shown = capsys.readouterr().out
        assert ("full-data pass" in shown) == progressbar
        assert step.tall.full_passes >= 2  # the centre's Newton step and the proxy sums at least


def test_dims_and_coords_work_as_with_pm_data(tmp_path):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(4_000, 2))
    y = (rng.random(4_000) < 0.5).astype(float)
    np.save(tmp_path / "y.npy", y)
    with pm.Model(coords={"feature": ["a", "b"]}) as model:
        X_ = pms.Data("X", X, dims=("obs", "feature"))
        y_ = pms.Data("y", tmp_path / "y.npy", dims="obs")
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Bernoulli("outcome", logit_p=X_ @ beta, observed=y_, dims="obs")
        with pytest.warns(UserWarning, match="symbolic observation"):
            idata = pm.sample(step=pms.HMCECS(subsample_size=200, progressbar=False), draws=10, tune=10,
                              chains=1, progressbar=False, compute_convergence_checks=False)
    assert idata.posterior["beta"].dims == ("chain", "draw", "feature")
    assert int(model.dim_lengths["obs"].eval()) == 4_000
    assert pms.data_sources(model)["y"]["path"] == str(tmp_path / "y.npy")
