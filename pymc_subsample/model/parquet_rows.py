"""Rows of numeric Parquet columns, read one row group at a time with pyarrow.

A Parquet file (or a folder of them, a dataset) stores its columns in row groups, each compressed
on its own: any row of a group costs decoding the group's columns. :class:`ParquetRows` is the
array-like that a :class:`~pymc_subsample.model.sources.RowSource` reads: its native chunks are
the row groups, so a subsample's rows are grouped by row group and the decoded groups are kept in
the source's chunk cache. Nothing reads more than one row group at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

__all__ = ["ParquetRows", "is_parquet_path"]


def is_parquet_path(path: Path) -> bool:
    """A ``.parquet``/``.pq`` file, or a folder whose files (at any depth) are Parquet files."""
    if path.is_file():
        return path.suffix in (".parquet", ".pq")
    if path.is_dir() and not any((path / marker).exists() for marker in ("zarr.json", ".zarray", ".zgroup")):
        return any(p.suffix in (".parquet", ".pq") for p in path.rglob("*") if p.is_file())
    return False


class ParquetRows:
    """Numeric columns of a Parquet file or dataset as an array of shape (N,) or (N, k).

    Parameters
    ----------
    path : str or Path
        A Parquet file, or a folder of Parquet files (read in pyarrow's dataset order).
    columns : str or sequence of str
        One column name gives a 1-D array (e.g. the response), a list gives the columns of a 2-D
        array in that order.
    name : str
        The ``pms.Data`` name, for error messages.
    """

    MAX_OPEN_FILES = 16

    def __init__(self, path, columns, name):
        try:
            import pyarrow.dataset as ds
        except ImportError as err:  # pragma: no cover - depends on the optional extra
            raise ImportError(
                f"pms.Data {name!r}: reading Parquet needs pyarrow: pip install 'pymc_subsample[scale]'."
            ) from err
        self.path, self.name = str(path), name
        self._open = OrderedDict()
        if columns is None:
            raise ValueError(
                f"pms.Data {name!r}: give the Parquet columns to read, e.g. pms.Data({name!r}, "
                f"{self.path!r}, columns=['x1', 'x2']) for a matrix or columns='y' for a vector."
            )
        self.one_column = isinstance(columns, str)
        self.columns = [columns] if self.one_column else list(columns)
        if not self.columns or not all(isinstance(c, str) for c in self.columns):
            raise ValueError(f"pms.Data {name!r}: columns must be a column name or a non-empty list of "
                             f"names; got {columns!r}.")
        dataset = ds.dataset(self.path, format="parquet")
        self.dtype = _numeric_dtype(dataset.schema, self.columns, name, self.path)
        self.files = sorted(dataset.files) if Path(self.path).is_dir() else [self.path]
        groups, sizes = [], []
        for f in range(len(self.files)):
            metadata = self._file(f).metadata
            for g in range(metadata.num_row_groups):
                groups.append((f, g))
                sizes.append(metadata.row_group(g).num_rows)
        self.groups = groups
        self.boundaries = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        n = int(self.boundaries[-1])
        self.shape = (n,) if self.one_column else (n, len(self.columns))
        first = self._file(0).metadata
        #: the codec of the first column chunk (pyarrow's name: "SNAPPY", "ZSTD", "UNCOMPRESSED", ...)
        self.compression = first.row_group(0).column(0).compression if first.num_row_groups else "NONE"

    def _file(self, f):
        """An open ``pyarrow.parquet.ParquetFile`` of file ``f`` (a small LRU of open files)."""
        import pyarrow.parquet as pq

        if f in self._open:
            self._open.move_to_end(f)
            return self._open[f]
        handle = pq.ParquetFile(self.files[f])
        self._open[f] = handle
        while len(self._open) > self.MAX_OPEN_FILES:
            self._open.popitem(last=False)[1].close()
        return handle

    def row_group(self, k) -> np.ndarray:
        """The rows of row group ``k`` (over the dataset's files), decoded."""
        f, g = self.groups[k]
        table = self._file(f).read_row_group(g, columns=self.columns)
        parts = []
        for column in self.columns:
            values = table.column(column)
            if values.null_count:
                a, b = int(self.boundaries[k]), int(self.boundaries[k + 1])
                raise ValueError(
                    f"pms.Data {self.name!r}: Parquet column {column!r} has {values.null_count} missing "
                    f"values in row group {k} (rows {a}..{b - 1}). Drop or impute those rows in the "
                    "source; subsampling needs complete rows."
                )
            parts.append(values.to_numpy().astype(self.dtype, copy=False))
        return parts[0] if self.one_column else np.column_stack(parts)

    def __getitem__(self, key):
        """Rows ``a:b`` (step 1), one row group at a time; a
        :class:`~pymc_subsample.model.sources.RowSource` gathers rows from whole row groups.
        """
        if not isinstance(key, slice):
            raise IndexError("Parquet rows are read in contiguous slices; gather rows through "
                             "pymc_subsample.model.sources.as_row_source")
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise IndexError("Parquet rows are read in contiguous slices")
        if stop <= start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        first = int(np.searchsorted(self.boundaries, start, side="right") - 1)
        last = int(np.searchsorted(self.boundaries, stop - 1, side="right") - 1)
        parts = []
        for k in range(first, last + 1):
            a, b = int(self.boundaries[k]), int(self.boundaries[k + 1])
            parts.append(self.row_group(k)[max(start, a) - a: min(stop, b) - a])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def __getstate__(self):
        # by reference: the path and columns, never a decoded row group or an open file
        return dict(self.__dict__, _open=OrderedDict())


def _numeric_dtype(schema, columns, name, path) -> np.dtype:
    """The NumPy dtype the columns share, or an error naming the missing or non-numeric ones."""
    import pyarrow as pa

    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise KeyError(
            f"pms.Data {name!r}: {path!r} has no column(s) {missing}; its columns are {schema.names}."
        )
    dtypes = []
    for column in columns:
        kind = schema.field(column).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise TypeError(
                f"pms.Data {name!r}: Parquet column {column!r} has type {kind}, which is not numeric; "
                "leave it out of columns=, or store it as numbers (e.g. category codes) first."
            )
        dtypes.append(np.dtype(kind.to_pandas_dtype()))
    return np.result_type(*dtypes)
