"""Full-data passes in row chunks, so memory is bounded by the chunk, not by N.

For a model with ``pms.Data`` the chunks are read from the source as the pass goes; with a
``dask.distributed`` client (given to the step as ``client=``, or the active one) each chunk's
sums are computed on a worker and the partial sums are tree-reduced by ``dask.bag``: the
compiled function and the tall model travel once per worker, the rows never leave the workers.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["DEFAULT_CHUNK_SIZE", "active_client", "chunked_sum", "pass_progress", "remembered_passes",
           "resolve_client", "setup_display", "started_bar"]

DEFAULT_CHUNK_SIZE = 20_000
# measured: a LocalCluster of spawned workers on a loaded 2-core machine stopped answering in 2 of
# ~6 CI runs, every process idle, with no error to report
#: seconds a pass on a Dask cluster may take before ``TimeoutError`` (None: no limit). A test sets it:
#: a ``LocalCluster`` of spawned workers on a loaded machine can stop answering, every process
#: idle, with no error to report
DISTRIBUTED_TIMEOUT = None
#: a full pass shows a progress bar when it has at least this many chunks (and the tall model's
#: ``progressbar`` is on): shorter passes finish before a bar would be read
PROGRESS_MIN_CHUNKS = 10
#: the display of the set-up under way in this context (:func:`setup_display`), or None
_SETUP_DISPLAY: ContextVar[_SetupDisplay | None] = ContextVar("pymc_subsample_setup_display", default=None)


def chunked_sum(tall, fn, theta, *, rows=None, chunk_size=DEFAULT_CHUNK_SIZE):
    """Sum ``fn(theta, batch)`` (a tuple of arrays) over row chunks of ``tall``.

    Parameters
    ----------
    tall : TallModel
    fn : callable
        ``fn(theta, batch) -> tuple of arrays``, each a sum over the rows of ``batch``.
    theta : ndarray
    rows : array of int, optional
        Restrict the pass to these rows (gathered chunk by chunk).
    chunk_size : int
        Rows per chunk; contiguous chunks are views, so no copy of the data is made.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    memo = tall.pass_memo if rows is None else None
    key = None if memo is None else (fn, chunk_size, np.asarray(theta, dtype=float).tobytes())
    if key is not None and key in memo:
        return tuple(np.array(part, copy=True) for part in memo[key])  # the caller's own arrays
    n = tall.n_rows if rows is None else len(rows)
    ranges = [(start, min(start + chunk_size, n)) for start in range(0, n, chunk_size)]
    client = resolve_client(tall) if rows is None else None
    if rows is None:
        tall.full_passes += 1
    if client is not None and len(ranges) > 1:
        total = _distributed_sum(client, tall, fn, theta, ranges)
    else:
        total = _local_sum(tall, fn, theta, rows, ranges)
    if memo is not None:
        memo[key] = tuple(np.array(part, copy=True) for part in total)
    return total


@contextmanager
def remembered_passes(tall):
    """Within the block, a full pass of the same ``fn`` at the same θ (and chunk size) is made once.

    The set-up's centre ends at a point where it has just made the pass that the control variates'
    sums need (:func:`~pymc_subsample.control_variates.center.find_center`, then the proxy): the
    same function over the same chunks, so the proxy takes that pass's sums instead of a second pass
    over the N rows. Nothing is kept after the block, so data changed later (``pm.set_data``) is
    never answered from it; nested blocks share the outermost one's memo. Subsets' rows are gathered
    once in the block too.
    """
    # measured: the proxy's pass was one pass of three in a warm set-up of the zoo's GLMs
    if tall.pass_memo is not None:
        yield
        return
    tall.pass_memo = {}
    try:
        yield
    finally:
        tall.pass_memo = None


def _local_sum(tall, fn, theta, rows, ranges):
    total = None
    with pass_progress(tall, len(ranges) if rows is None else 0) as advance:
        for start, stop in ranges:
            batch = tall.row_slice(start, stop) if rows is None else _gathered(tall, rows[start:stop])
            total = _add(total, _as_floats(fn(theta, batch)))
            advance()
    return tuple(total)


def _gathered(tall, rows):
    """``tall.gather(rows)``, gathered once per remembered block (:func:`remembered_passes`): the
    centre's subset MAP evaluates the same rows many times, and each gather of them at random from
    the full arrays reads the whole of them again.
    """
    # measured: the subset MAP evaluates the same 20,000 rows 10-30 times; at 10⁶ rows each gather
    # cost ~2 ms (30 ms of the linear zoo model's 0.3 s set-up)
    memo = tall.pass_memo
    if memo is None:
        return tall.gather(rows)
    key = ("gathered", np.asarray(rows).tobytes())
    if key not in memo:
        memo[key] = tall.gather(rows)
    return memo[key]


@contextmanager
def pass_progress(tall, n_chunks):
    """Progress over the ``n_chunks`` chunks of one full pass: ``advance()`` after each chunk.

    Inside :func:`setup_display` the pass updates the set-up's one display; outside it, a long pass
    shows PyMC's own progress bar. Nothing is shown with the tall model's ``progressbar`` off or for
    a pass of fewer than :data:`PROGRESS_MIN_CHUNKS` chunks.
    """
    if not getattr(tall, "progressbar", False) or n_chunks < PROGRESS_MIN_CHUNKS:
        yield lambda: None
        return
    display = _SETUP_DISPLAY.get()
    if display is not None:
        yield display.start_pass(tall, n_chunks)
        return
    with _SetupDisplay("full-data pass") as display:
        yield display.start_pass(tall, n_chunks)


@contextmanager
def setup_display(title):
    """One progress display for a whole set-up: every long full pass made inside the block updates
    the same bar (its description names the pass and its count), so that a set-up of many passes
    prints one bar, not one per pass. The bar is opened on the first long pass (a set-up of short
    passes prints nothing); nested blocks share the outermost.
    """
    if _SETUP_DISPLAY.get() is not None:
        yield
        return
    display = _SetupDisplay(title)
    token = _SETUP_DISPLAY.set(display)
    try:
        yield
    finally:
        _SETUP_DISPLAY.reset(token)
        display.close()


class _SetupDisplay:
    """A PyMC progress bar with one task, opened on the first pass it is told of."""

    def __init__(self, title):
        self.title = title
        self.bar = self.task = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_pass(self, tall, n_chunks):
        description = f"{self.title}: full-data pass {tall.full_passes} ({tall.n_rows:,} rows)"
        if self.bar is None:
            self.bar, self.task = started_bar(description, n_chunks)
        else:
            self.bar.update(self.task, description=description, total=n_chunks, completed=0)
        return lambda: self.bar.update(self.task, advance=1)

    def close(self):
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def started_bar(description, total, completed=0):
    """A started PyMC progress bar with one task (the bar, the task): the package's passes and
    copies show the same bar.
    """
    from pymc.progress_bar.rich_progress import CustomProgress
    from rich.progress import Progress

    bar = CustomProgress(*Progress.get_default_columns())
    bar.start()
    return bar, bar.add_task(description, total=total, completed=completed)


def resolve_client(tall):
    """The Dask client for ``tall``'s full passes: its own, else the active one for ``pms.Data``."""
    if getattr(tall, "client", None) is not None:
        return tall.client
    if not any(leaf.streamed for leaf in tall.leaves):
        return None
    return active_client()


def active_client():
    """Dask's active client (``distributed.default_client``), or None where none runs."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client is running
        return None


def _distributed_sum(client, tall, fn, theta, ranges):
    import dask.bag as db
    from dask import delayed

    # one copy of (fn, tall) per worker: a Delayed argument is a single key in the graph
    shipped = delayed((fn, tall), pure=True, traverse=False)
    parts = db.from_sequence(ranges, npartitions=len(ranges)).map(_chunk_sums, shipped, theta)
    return tuple(client.compute(parts.fold(_add, _add)).result(timeout=DISTRIBUTED_TIMEOUT))


def _chunk_sums(chunk, shipped, theta):
    fn, tall = shipped
    return _as_floats(fn(theta, tall.row_slice(*chunk)))


def _as_floats(parts):
    return [np.array(p, dtype=float) for p in parts]


def _add(total, parts):
    return parts if total is None else [t + p for t, p in zip(total, parts)]

