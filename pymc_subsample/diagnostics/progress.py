"""Columns of PyMC's live progress bar for the subsampling step methods.

PyMC builds its sampling progress bar from two hooks of the step method, the ones its NUTS
uses for "Divergences", "Step size" and "Grad evals". PyMC reads them under private names;
:class:`~pymc_subsample.pymc_protocol.ProgressBarForPyMC` defines those over the two
public methods of :class:`ProgressBarMixin`:

* ``step.progressbar_config(n_chains)`` returns the rich columns and their initial values
  per chain;
* ``step.progressbar_update_functions()`` returns one function per stats dict of a
  draw (a single-block step returns ``[stats]``, so one function); each maps the stats of
  the chain's latest draw to the fields of that chain's row (plus ``"failing"``, which turns
  the bar red).

The update functions run in the main process (for ``cores > 1`` too: the workers send their
stats back), so they can only use the stats of one draw: running quantities (acceptance
rates, divergence counts) must be stats the step keeps per chain itself.

Here a step lists its columns as :class:`StatColumn` (stat name, label, format) and
:class:`ProgressBarMixin` turns them into the two methods. Values are formatted to strings in the
update function, so a NaN, None, or a missing stat shows as text and never breaks the bar.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pymc_subsample.pymc_protocol import ProgressBarForPyMC

__all__ = ["MISSING", "ProgressBarMixin", "StatColumn", "compact", "format_stat", "progressbar_config",
           "progressbar_update"]

#: what a column shows before the first draw, or when the draw's stats lack the stat
MISSING = "-"


@dataclass(frozen=True)
class StatColumn:
    """One column of the bar: the value of ``stat`` in the latest draw, under ``label``.

    ``fmt`` is a ``str.format`` template with one field (``"{:.2f}"``) or a callable
    value → str.
    """

    stat: str
    label: str
    fmt: str | Callable[[Any], str] = "{:.2f}"

    def format(self, stats: Mapping[str, Any]) -> str:
        return format_stat(stats.get(self.stat), self.fmt)


def compact(value) -> str:
    """A number in at most ~7 characters: ``0.83``, ``12.40``, ``1.2e+04``, ``3.1e-05``, ``nan``."""
    value = float(value)
    if value == 0 or 0.01 <= abs(value) < 1000:
        return f"{value:.2f}"
    return f"{value:.2g}"  # also nan and inf


def format_stat(value, fmt: str | Callable[[Any], str] = "{:.2f}") -> str:
    """``value`` formatted by ``fmt``; :data:`MISSING` for None, ``str(value)`` if ``fmt`` does not apply."""
    if value is None:
        return MISSING
    try:
        return fmt(value) if callable(fmt) else fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def progressbar_config(columns: Sequence[StatColumn], n_chains: int = 1):
    """Rich columns and initial per-chain values, in the form PyMC's progress-bar hook returns them."""
    from rich.progress import TextColumn
    from rich.table import Column

    rich_columns = [
        TextColumn(f"{{task.fields[{col.stat}]}}", table_column=Column(col.label, ratio=1))
        for col in columns
    ]
    stats = {col.stat: [MISSING] * n_chains for col in columns}
    return rich_columns, stats


def progressbar_update(
    columns: Sequence[StatColumn], failing: Callable[[Mapping[str, Any]], bool] | None = None
):
    """The update function: stats of one draw → ``{stat: formatted value}`` (and ``failing``)."""
    columns = tuple(columns)

    def update_stats(stats):
        fields = {col.stat: col.format(stats) for col in columns}
        if failing is not None:
            try:
                fields["failing"] = bool(failing(stats))
            except (TypeError, ValueError):
                fields["failing"] = False
        return fields

    return update_stats


class ProgressBarMixin(ProgressBarForPyMC):
    """The bar's configuration and update functions from :meth:`progress_columns`.

    A step lists it before PyMC's step class; its base
    :class:`~pymc_subsample.pymc_protocol.ProgressBarForPyMC` gives PyMC its hooks over
    :meth:`progressbar_config` and :meth:`progressbar_update_functions`. They are methods of the
    step, not static methods as in PyMC, so the columns can depend on the step's settings.
    """

    #: the columns of the bar; override :meth:`progress_columns` when they depend on settings
    _progress_columns: tuple[StatColumn, ...] = ()

    def progress_columns(self) -> Sequence[StatColumn]:
        return self._progress_columns

    def progress_failing(self, stats: Mapping[str, Any]) -> bool:
        """Whether the chain's bar turns red after this draw (default: never)."""
        return False

    def progressbar_config(self, n_chains=1):
        """Rich columns and their initial values for ``n_chains`` chains, from :meth:`progress_columns`."""
        return progressbar_config(self.progress_columns(), n_chains)

    def progressbar_update_functions(self):
        """One update function: this step's draws have one stats dict each."""
        return (progressbar_update(self.progress_columns(), self.progress_failing),)
