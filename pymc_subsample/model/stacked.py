"""Observed variables of different lengths, their rows stacked on one observation axis.

A model with two data sets that share parameters (a Normal regression on N₁ rows and a Poisson one
on N₂ other rows) has a log-likelihood that is a sum over N = N₁ + N₂ rows, each row of one data
set: the subsampling estimators need nothing more than that sum's rows (Dang et al. 2019 eq. 2.1 sums over
any set of independent terms). Here each observed variable's per-row log-density is made a graph
over all N rows, its data arrays padded to N rows by repeating their first row, and row k takes
the log-density of its own data set (``switch`` on a constant mask, itself a row leaf that the
batches gather like the data):

    ℓ_k = Σ_j [k in rows of j] · ℓ_j(row k of j's padded data).

Why padding, not a batch split by data set: every part of the package downstream (batches, block
updates that keep the positions of unchanged rows, the proxy's per-row terms, full passes in
chunks) then sees one axis of N rows, unchanged. The price: a row evaluates every data set's
log-density (the others' at their first row, finite, and multiplied by zero in the gradient), and
the padded copies of the data are held in memory, N rows per array. A size equal to a data set's
length written into its graph (the ``size`` PyMC gives ``observed=`` numpy arrays, a ``dims``
length) becomes N, so that it follows the stacked rows as it follows a single data set's. The
padded copies are taken when the step is built: a later ``pm.set_data`` reaches them through a new
step (as it must anyway, since N changes with it). Rows streamed from disk (``pms.Data``) are not
stacked: an error says so.

Each data set's :class:`DataSetRows` keeps its replacements and mask, so that the view of the
model as a distributional regression (:mod:`~pymc_subsample.model.distributional`) reads every
observed variable's parameters over the same stacked rows and switches each row's f by the same
mask: a stacked model of regressions takes the η path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import clone_replace
from pytensor.tensor.variable import TensorVariable

from pymc_subsample.model.rows import find_row_leaves, find_size_constants

__all__ = ["DataSetRows", "stacked_rows"]


@dataclass(frozen=True)
class DataSetRows:
    """One observed variable's place on the stacked axis."""

    start: int
    stop: int
    #: its row leaves and sizes → their padded, stacked versions (the tall model's leaves)
    replacements: dict
    #: boolean constant of N rows, True on [start, stop): a row leaf that batches gather
    mask: TensorVariable

    def over_stacked_rows(self, graph):
        """``graph`` (of this data set's rows, e.g. a parameter of its observed variable) over the
        stacked rows: its data padded as its log-density's are, so that a batch gathers it alike.
        """
        # rebuilt, not replaced: the data's static length (numpy data has one) changes with it
        return clone_replace(graph, self.replacements, rebuild_strict=False)


def stacked_rows(names, terms, lengths):
    """(ℓ over the stacked rows, a graph of length Σ lengths; each name's :class:`DataSetRows`),
    from each observed variable's per-row log-density ``terms[j]`` over its ``lengths[j]`` rows.
    """
    total_rows = int(sum(lengths))
    data_sets, start, stacked = {}, 0, None
    for name, term, n_rows in zip(names, terms, lengths, strict=True):
        mask = np.zeros(total_rows, dtype=bool)
        mask[start : start + n_rows] = True
        rows = DataSetRows(start, start + n_rows, _padded_leaves(name, term, n_rows, start, total_rows),
                           pt.constant(mask, name=f"{name}_rows_mask"))
        own = pt.switch(rows.mask, rows.over_stacked_rows(term), 0.0)
        stacked = own if stacked is None else stacked + own
        data_sets[name] = rows
        start += n_rows
    return stacked, data_sets


def _padded_leaves(name, term, n_rows, start, total_rows):
    """Each row leaf of ``term`` as a constant of ``total_rows`` rows: its own rows at
    [start, start + n_rows), its first row everywhere else.
    """
    replacements = {}
    for size in find_size_constants([term], n_rows):  # `size=[n]` of numpy data, a `dims` length
        value = np.array(size.get_value() if isinstance(size, SharedVariable) else size.data)
        value.flat[0] = total_rows
        replacements[size] = pt.constant(value, dtype=size.type.dtype)
    for leaf in find_row_leaves([term], n_rows):
        if leaf.streamed:
            raise ValueError(
                f"pms.Data {leaf.name!r} streams the rows of {name!r}, whose length differs from "
                "another observed variable's; stacked data sets must be in memory (pm.Data or "
                "arrays)."
            )
        data = np.asarray(leaf.data)
        before = np.repeat(data[:1], start, axis=0)
        after = np.repeat(data[:1], total_rows - start - n_rows, axis=0)
        replacements[leaf.variable] = pt.constant(np.concatenate([before, data, after]), name=leaf.name)
    return replacements
