"""Copy the rows of any ``pms.Data`` source into a store whose rows are read alone.

:func:`to_sampling_store` writes an uncompressed zarr array chunked along the rows only, the layout
:class:`~pymc_subsample.model.file_rows.ZarrChunkRows` reads with one ``pread`` per run of rows, so
a random row costs a page read at any N, whatever the source's codec and chunking. The copy streams:
one output chunk at a time (on a ``dask.distributed`` cluster when a client is given or active for a
Dask source), each source chunk decoded about once, never all rows in memory. The store records the
chunks it has written in its attributes, so a second call after an interruption writes only the
others; a finished store is returned as it is. :func:`local_copy` makes the same copy in a cache
folder, named after the source, for ``pms.Data(..., local_copy=True)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pymc_subsample.model.chunks import active_client, started_bar
from pymc_subsample.model.read_cost import size_text
from pymc_subsample.model.sources import RowSource, as_row_source

__all__ = ["DEFAULT_STORE_CHUNK_BYTES", "cache_folder", "local_copy", "to_sampling_store"]

# PyMC's logger prints INFO lines (as pm.sample's own "Sequential sampling ..."): where the disk space
# a copy needs is said before it is written
_log = logging.getLogger("pymc")
#: key of the store's attributes that records the source and the chunks written so far
ATTRS_KEY = "pymc_subsample_store"
#: bytes per chunk file of a store: few files (every one stays open in ZarrChunkRows' LRU of 64 at
#: a few GB), and one chunk per write, so memory during the copy is about two such chunks
DEFAULT_STORE_CHUNK_BYTES = 64 * 2**20
#: environment variable naming the folder of ``local_copy=True`` copies
CACHE_ENV = "PYMC_SUBSAMPLE_CACHE"


def to_sampling_store(source, path, *, columns=None, chunk_rows=None, client=None, progressbar=True):
    """Copy the rows of ``source`` into an uncompressed zarr store at ``path``; returns it, opened.

    The returned zarr array is what ``pms.Data`` takes: its rows are read alone from the chunk
    files with ``pread``, so a random row costs one page read at any N. The copy is streamed chunk
    by chunk; a call interrupted part-way can be made again and writes only the missing chunks.

    Parameters
    ----------
    source : path, zarr.Array, dask.array.Array, numpy.memmap or array-like
        Anything ``pms.Data`` takes: a ``.npy`` path, a zarr store (compressed, any chunks), a
        Parquet file or dataset (with ``columns``), a Dask array.
    path : str or Path
        The zarr store to write. If it holds a store written by this function from the same
        source (path, shape, dtype, chunks and the modification time of its file or zarr metadata;
        a Dask array's name; for an array-like, its shape, dtype and chunks alone), the chunks it
        already has are kept.
    columns : str or list of str, optional
        Parquet columns, as for ``pms.Data``.
    chunk_rows : int, optional
        Rows per chunk file; by default ~64 MiB of rows (:data:`DEFAULT_STORE_CHUNK_BYTES`).
    client : distributed.Client, optional
        Write the chunks on this Dask cluster (a task per source chunk). For a Dask source the
        active client is used when none is given; without one the copy runs in this process.
    progressbar : bool
        Show a progress bar over the chunks.

    Returns
    -------
    zarr.Array
        The store, opened read-only.

    Raises
    ------
    FileExistsError
        ``path`` exists and is not a copy of this source made by this function.
    OSError
        The disk holding ``path`` has less free space than the copy needs (nothing is written).
    """
    import zarr

    path = Path(path)
    rows = source if isinstance(source, RowSource) else as_row_source(source, path.stem, columns=columns)
    chunk_rows = _store_chunk_rows(rows, chunk_rows)
    n = rows.n_rows
    n_chunks = -(-n // chunk_rows)
    record = {"source": _fingerprint(rows), "chunk_rows": chunk_rows, "done": [], "complete": False}
    done = _written_chunks(path, record)
    if len(done) < n_chunks:
        row_bytes = int(np.prod(rows.shape[1:], dtype=np.int64)) * rows.dtype.itemsize
        need = (n_chunks - len(done)) * chunk_rows * row_bytes  # edge chunks are stored padded to full size
        free = shutil.disk_usage(_existing_parent(path)).free
        if need > free:
            raise OSError(f"to_sampling_store needs {size_text(need)} of disk at {str(path)!r} and "
                          f"{size_text(free)} are free there; free some space or give a path on a larger "
                          "disk.")
        _log.info("Writing %s: %s chunks of %s rows, %s uncompressed (%s free there)", path,
                  f"{n_chunks - len(done):,}", f"{chunk_rows:,}", size_text(need), size_text(free))
        if not path.exists():
            zarr.create_array(str(path), shape=rows.shape, dtype=rows.dtype.newbyteorder("<"),
                              chunks=(chunk_rows, *rows.shape[1:]), compressors=None, filters=None,
                              fill_value=0, attributes={ATTRS_KEY: record})
        target = zarr.open_array(str(path), mode="r+")
        client = _client(rows, client)
        todo = [(k, k * chunk_rows, min((k + 1) * chunk_rows, n)) for k in range(n_chunks) if k not in done]
        units = _units(rows, todo)
        title = f"copy to {path.name} ({size_text(need)})"
        with _progress(title, n_chunks, len(done), progressbar) as advance:
            if client is None:
                for unit in units:
                    for k in _write_unit(rows, target, unit):
                        done.add(k)
                        _record(target, record, done)
                        advance()
            else:
                _write_on_cluster(client, rows, path, units, record, done, target, advance)
        target.update_attributes({ATTRS_KEY: dict(record, done=sorted(done), complete=True)})
    return zarr.open_array(str(path), mode="r")


def local_copy(rows, folder=True, progressbar=True):
    """The rows of ``rows`` (a :class:`RowSource`) in a store of the cache folder, copied once.

    Sources whose rows are read alone or sit in memory come back unchanged. The copy is named after
    the source (its path, shape, dtype, chunks and the modification time of its file or zarr
    metadata, or a Dask array's name), so later runs on the same source reuse it, and an
    interrupted copy is resumed.
    """
    if rows.direct or isinstance(rows.array, np.ndarray):
        return rows
    key = _fingerprint(rows)
    if "path" not in key and "dask_name" not in key:
        raise ValueError(
            f"pms.Data {rows.name!r}: local_copy needs a source with a path (a zarr store, a Parquet "
            "file) or a Dask array, to name its copy; copy this one with pms.to_sampling_store(source, "
            "path) and pass the result."
        )
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_folder(folder) / f"{rows.name}-{digest}.zarr"
    store = to_sampling_store(rows, path, progressbar=progressbar)
    return as_row_source(store, rows.name, cache_bytes=rows.cache_bytes)


def cache_folder(folder=True) -> Path:
    """The folder of ``local_copy`` stores: ``folder`` if a path, else ``$PYMC_SUBSAMPLE_CACHE``,
    else ``$XDG_CACHE_HOME/pymc_subsample`` (``~/.cache/pymc_subsample``).
    """
    if folder is not True:
        return Path(folder)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pymc_subsample"


def _store_chunk_rows(rows, chunk_rows):
    """Rows per chunk file: ~:data:`DEFAULT_STORE_CHUNK_BYTES`, and for a source with native chunks
    its chunk split in equal parts or a multiple of it, so that an output chunk is rarely put
    together from two source chunks (one copy of each row fewer).
    """
    if chunk_rows is None:
        row_bytes = max(int(np.prod(rows.shape[1:], dtype=np.int64)) * rows.dtype.itemsize, 1)
        target = max(1, DEFAULT_STORE_CHUNK_BYTES // row_bytes)
        native = int(rows.boundaries[1]) if len(rows.boundaries) > 2 else 0
        if native > target:
            target = -(-native // -(-native // target))  # native split in equal parts of ≤ ~target
        elif native:
            target = native * (target // native)
        return int(min(rows.n_rows, target))
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer; got {chunk_rows!r}.")
    return int(chunk_rows)


def _fingerprint(rows) -> dict:
    """What names the source: its description, its native chunks, and what says it changed."""
    key = json.loads(json.dumps(rows.description, default=str))
    key["chunks"] = [int(np.max(np.diff(rows.boundaries), initial=0)), len(rows.boundaries) - 1]
    if rows.kind == "dask":
        key["dask_name"] = rows.array.name
    if "path" in key and Path(key["path"]).exists():
        stamp = Path(key["path"])
        for meta in ("zarr.json", ".zarray"):  # a zarr array's metadata changes when it is rewritten
            if (stamp / meta).exists():
                stamp = stamp / meta
        key["mtime_ns"] = stamp.stat().st_mtime_ns
    return key


def _written_chunks(path, record) -> set:
    """The chunks a store at ``path`` already holds for this source (empty if there is none)."""
    if not path.exists():
        return set()
    import zarr

    try:
        stored = zarr.open_array(str(path), mode="r").attrs.get(ATTRS_KEY)
    except (FileNotFoundError, ValueError, TypeError, KeyError):  # zarr's "no array there" varies
        stored = None
    if stored is None:
        raise FileExistsError(f"{str(path)!r} exists and is not a store written by to_sampling_store; give "
                              "another path or remove it.")
    if stored["source"] != record["source"] or stored["chunk_rows"] != record["chunk_rows"]:
        raise FileExistsError(
            f"{str(path)!r} holds a copy of another source ({stored['source']}, chunks of "
            f"{stored['chunk_rows']} rows); give another path or remove it."
        )
    return set(stored["done"])


def _units(rows, todo):
    """The chunks to write (k, start, stop), grouped by the source chunk holding their first row: one
    task reads each source chunk about once (a Dask worker's cache starts empty).
    """
    first = np.searchsorted(rows.boundaries, [start for _, start, _ in todo], side="right") - 1
    units, last = [], None
    for chunk, source_chunk in zip(todo, first):
        if source_chunk != last:
            units.append([])
            last = source_chunk
        units[-1].append(chunk)
    return units


def _write_unit(rows, target, unit):
    for k, a, b in unit:
        target[a:b] = rows.rows(a, b)
        yield k


def _write_on_cluster(client, rows, path, units, record, done, target, advance):
    from distributed import as_completed

    shipped = client.scatter(rows, broadcast=True)
    futures = [client.submit(_write_unit_at, shipped, str(path), unit, pure=False) for unit in units]
    for future in as_completed(futures):
        for k in future.result():
            done.add(k)
            advance()
        _record(target, record, done)


def _write_unit_at(rows, path, unit):
    import zarr

    return list(_write_unit(rows, zarr.open_array(path, mode="r+"), unit))


def _record(target, record, done):
    target.update_attributes({ATTRS_KEY: dict(record, done=sorted(done))})


def _client(rows, client):
    if client is not None or rows.kind != "dask":
        return client
    return active_client()


@contextmanager
def _progress(description, total, completed, show):
    if not show:
        yield lambda: None
        return
    bar, task = started_bar(description, total, completed)
    try:
        yield lambda: bar.update(task, advance=1)
    finally:
        bar.stop()


def _existing_parent(path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path


