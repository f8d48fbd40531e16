"""What the loaders share: the path a user passes, decompression by file name, the choice
of a data set's parts, the checks on columns and labels with their error messages, and the
stacking of parts into one design matrix.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO

import numpy as np

PathLike = str | os.PathLike


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing by extension."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix in (".xz", ".lzma"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def read_bytes(path: PathLike) -> bytes:
    """The whole (decompressed) content of ``path``."""
    with open_binary(Path(path)) as fh:
        return fh.read()


def check_part(part: str, allowed: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``part`` is one of ``allowed``."""
    if part not in allowed:
        raise ValueError(
            f"unknown part {part!r}; allowed values are "
            + ", ".join(repr(a) for a in allowed)
        )


def find_file(path: PathLike, candidates: Sequence[str], what: str) -> Path:
    """Resolve ``path`` (a file, or a directory holding one of ``candidates``).

    Parameters
    ----------
    path : str or os.PathLike
        A file, returned as is, or a directory searched for ``candidates`` in order.
    candidates : sequence of str
        File names accepted inside a directory.
    what : str
        The data set's name, which starts the error message.

    Returns
    -------
    pathlib.Path
        The file to read.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist, or is a directory holding none of ``candidates``.
    """
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


def files_for_part(
    path: PathLike,
    part: str,
    parts: dict[str, Sequence[str]],
    default_part: str,
    what: str,
) -> list[Path]:
    """Files to read for ``part`` (a name of ``parts``, or ``"all"``); a file ``path`` is read as is."""
    allowed = (*parts, "all")
    check_part(part, allowed)
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
    return [find_file(p, parts[name], f"{what} ({name} part)") for name in names]


def load_table(path: Path, n_columns: int, columns: str) -> np.ndarray:
    """Read a numeric table (whitespace, tab or comma separated, no header) of ``n_columns`` columns.

    ``columns`` describes the expected columns in the error message for a wrong count.
    """
    # the first line tells the delimiter; np.loadtxt's default splits on any whitespace
    with open_binary(path) as fh:
        first = fh.readline()
    delimiter = "," if b"," in first else None
    with open_binary(path) as fh:
        data = np.loadtxt(fh, dtype=np.float64, delimiter=delimiter, ndmin=2)
    if data.shape[1] != n_columns:
        raise ValueError(
            f"'{path}': expected {n_columns} columns ({columns}), got {data.shape[1]}"
        )
    return data


def check_labels(path: Path, label: np.ndarray, allowed: Sequence[float], message: str) -> None:
    """Raise ``ValueError("'path': message")`` unless every label is one of ``allowed``."""
    if not np.all(np.isin(label, allowed)):
        raise ValueError(f"'{path}': {message}")


def stack(
    parts: Iterable, read: Callable[..., tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of every part, in order: ``read(part)`` gives one part's ``(X, y)``."""
    Xs, ys = zip(*(read(part) for part in parts))
    return np.concatenate(Xs), np.concatenate(ys)
