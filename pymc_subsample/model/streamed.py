"""``pms.Data``: row data in a PyMC model whose rows stay where they are.

In the model's graph a ``pms.Data`` is the output of a :class:`StreamedRows` node: a variable
with the source's static shape (N, ...) that no compiled function can evaluate. The tall model
replaces it by batches of rows read from the :class:`~pymc_subsample.model.sources.RowSource`,
so every pms step method sees only the rows it asks for. Anything that would need all N rows at
once (PyMC's NUTS, a Deterministic of length N, posterior predictive on the full data) gets
:class:`StreamedDataError` instead of silently seeing a subset or placeholder rows.

``StreamedDataError`` is a ``TypeError``: at the end of ``pm.sample`` PyMC's conversion to
``InferenceData`` tries to read the observed values, treats a ``TypeError`` as "symbolic
observation" and leaves them out with a warning, which is what we want (no copy of the N rows).
"""

from __future__ import annotations

import os

import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.traversal import ancestors
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

from pymc_subsample.model.read_cost import check_read_cost
from pymc_subsample.model.sources import DEFAULT_CACHE_BYTES, as_row_source

__all__ = ["Data", "StreamedDataError", "StreamedRows", "data_sources", "streamed_variables"]


class StreamedDataError(TypeError):
    """A computation needed all N rows of a ``pms.Data`` at once."""


class StreamedRows(Op):
    """A graph leaf standing for the N rows of a :class:`RowSource` (never evaluated whole).

    Two nodes are never merged (no ``__props__``: equality is identity), and constant folding is
    off, so the rows are read only through the tall model's batches.
    """

    def __init__(self, source):
        self.source = source

    def make_node(self):
        out = pt.tensor(dtype=self.source.dtype, shape=self.source.shape, name=self.source.name)
        return Apply(self, [], [out])

    def error(self) -> StreamedDataError:
        where = self.source.description.get("path", self.source.kind)
        return StreamedDataError(
            f"pms.Data {self.source.name!r} ({self.source.n_rows} rows in {where}) is never loaded "
            "whole, and this computation needs all of its rows. Sample the model with a pymc_subsample "
            "step method, e.g. pm.sample(step=pms.HMCECS()); full-data NUTS, Deterministics of length "
            "N and full-data posterior predictive need the rows in memory (use pm.Data for those)."
        )

    def perform(self, node, inputs, outputs):
        raise self.error()

    def do_constant_folding(self, fgraph, node):
        return False

    def __str__(self):
        return f"StreamedRows{{{self.source.name}}}"


@register_funcify_and_cache_key(StreamedRows)
def _streamed_rows_in_numba(op, node=None, **kwargs):
    """PyTensor's Numba backend (PyMC's NUTS, nutpie) asks for the op's kernel when it compiles a
    function that reads the whole source: the error then, where running ``perform`` inside
    compiled code would surface only as an error code (nutpie: "Logp function returned error").
    """
    raise op.error()


def Data(name, source, *, dims=None, chunk_rows=None, columns=None, cache_bytes=DEFAULT_CACHE_BYTES,  # noqa: N802
         local_copy=False, model=None):
    """Row data that stays where it is: a zarr array, a ``.npy`` path or memmap, Parquet columns or a
    Dask array.

    Used like ``pm.Data`` inside a model context; N comes from the source. pymc_subsample step
    methods read only the rows they need (sorted and grouped by chunk, with a small cache), and
    stream every full-data pass chunk by chunk (on a ``dask.distributed`` cluster when a client
    is active or passed to the step). No copy of the N rows goes into the ``InferenceData``.

    A source whose random rows are slow to read (a compressed zarr chunk or Parquet row group
    decoded whole for one row, with more chunks than the cache holds) gives a
    :class:`~pymc_subsample.SlowRowsWarning` here, before any draw, with the measured cost and the
    call that copies the rows into a store read row by row (:func:`~pymc_subsample.to_sampling_store`).

    Parameters
    ----------
    name : str
    source : str, Path, zarr.Array, numpy.memmap, dask.array.Array or array-like
        A path ending in ``.npy`` is read row by row with ``pread``; a ``.parquet`` file or a folder
        of Parquet files is read by row group (with ``columns``); any other existing path opens a
        zarr store.
    dims : sequence of str, optional
        As for ``pm.Data``; the first dim is the observation axis (its coordinate becomes
        ``range(N)`` when the model does not define it).
    chunk_rows : int, optional
        Rows per read for sources without native chunks (memmaps, array-likes).
    columns : str or list of str, optional
        Parquet columns: one name gives a vector (N,), a list a matrix (N, k) in that order.
    cache_bytes : int
        Size of the cache of decoded chunks (zarr, Parquet, Dask), 64 MiB by default.
    local_copy : bool or path
        True (or a folder) copies the rows once into an uncompressed zarr store in the cache folder
        (``$PYMC_SUBSAMPLE_CACHE``, else ``~/.cache/pymc_subsample``), saying the disk space needed
        first, and reads them from there; later runs on the same source reuse the copy. Sources read
        row by row already (``.npy``, memmap, uncompressed zarr) and NumPy arrays are not copied.

    Returns
    -------
    TensorVariable
        Usable in the model's graph as ``X @ beta`` or as ``observed=``.
    """
    if not (isinstance(local_copy, (bool, str, os.PathLike))):
        raise TypeError(f"pms.Data {name!r}: local_copy must be True, False or a folder path; got "
                        f"{local_copy!r}.")
    model = pm.modelcontext(model)
    rows = as_row_source(source, name, chunk_rows=chunk_rows, columns=columns, cache_bytes=cache_bytes)
    if local_copy is not False:
        from pymc_subsample.model.sampling_store import local_copy as copy_rows

        rows = copy_rows(rows, local_copy)
    else:
        check_read_cost(rows, repr(str(source)) if isinstance(source, (str, os.PathLike)) else "source")
    var = StreamedRows(rows)()
    var.name = name
    if dims is not None:
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        for dim, length in zip(dims, rows.shape):
            if dim not in model.coords:
                model.add_coord(dim, length=length)
    model.add_named_variable(var, dims=dims)
    return var


def streamed_variables(outputs) -> list:
    """The ``pms.Data`` variables in the graphs of ``outputs``."""
    return [v for v in ancestors(outputs) if v.owner is not None and isinstance(v.owner.op, StreamedRows)]


def data_sources(model=None) -> dict:
    """Descriptions (kind, path, shape, dtype) of a model's ``pms.Data``, for ``idata.attrs``.

    ``idata.attrs["pms_data_sources"] = json.dumps(pms.data_sources(model))`` records where
    the rows are, since the ``InferenceData`` keeps no copy of them.
    """
    model = pm.modelcontext(model)
    found = streamed_variables([*model.observed_RVs, *model.named_vars.values()])
    return {v.name: v.owner.op.source.description for v in found}
