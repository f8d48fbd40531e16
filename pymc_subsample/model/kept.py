"""Each model's analysis and log-density terms, kept for the next TallModel of the same model graph.

Why: a second set-up in a process (a notebook cell run again, a loop over data sets with
``pm.set_data``) would analyse the graph again: PyMC's derivation of the log-density terms, the
rows' graphs, the regression view and its check, the independence check, and compile the functions
again. The analysis (:class:`~pymc_subsample.model.analysis.GraphAnalysis`, with its compiled
functions and views) is a function of the graph, the value variables, the initial values and the
rows' count, which :func:`structure_key` holds; data values are read at each use (a leaf reads its
shared variable). Both tables hold the model weakly, and nothing kept holds it: the views are built
on a TallModel that holds it weakly (:func:`~pymc_subsample.model.tall.analyse`).
"""

from __future__ import annotations

import weakref

import numpy as np

__all__ = ["KEPT", "KeptAnalyses", "forget_kept_analyses", "structure_key"]


class KeptAnalyses:
    """Each model's last analysis, by its :func:`structure_key`, and its log-density terms."""

    def __init__(self):
        self._analyses = weakref.WeakKeyDictionary()  # model → (structure key, analysis)
        self._terms = weakref.WeakKeyDictionary()  # model → (the terms' key, terms)

    def __contains__(self, model) -> bool:
        return model in self._analyses

    def clear(self):
        self._analyses.clear()
        self._terms.clear()

    def analysis(self, model, vars, lengths, analyse) -> tuple:
        """(the model's kept analysis where its structure is unchanged, else ``analyse()``; whether
        it was kept). Not kept: stacked rows of different lengths (their padded copies of the data
        would go stale).
        """
        # measured: the analysis took 0.05-0.09 s, 3-6 of PyMC's gradient passes at 10⁶ rows on the zoo
        key = structure_key(model, vars, lengths)
        kept = self._analyses.get(model)
        if kept is not None and _same(kept[0], key):
            return kept[1], True
        analysis = analyse()
        if analysis.data_sets is None:
            self._analyses[model] = (key, analysis)
        return analysis, False

    def logp_terms(self, model) -> list:
        """``model.logp(vars=[*observed, *free, *potentials], sum=False)``: each observed variable's,
        free variable's and potential's term, derived once per model graph in a process.

        Why: PyMC derives the terms again at each call (its logprob rewriting), a large part of a
        second set-up. The terms are a function of the variables, their value variables and
        transforms, and ``check_bounds`` alone, which the key holds and compares by identity: a
        model that gained a variable, or whose graph was rebuilt (``pm.do``, ``pm.observe``: another
        model), derives them again; ``pm.set_data`` changes values, not graphs. PyTensor's graphs are
        immutable, and every use of them here clones or rebuilds. One call for the rows' and the
        prior's terms: each call derives the logp of the whole model's graph, so two cost twice
        (18.9 against 42.4 ms, linear).
        """
        variables = [*model.observed_RVs, *model.free_RVs, *model.potentials]
        key = (*variables, *[model.rvs_to_values.get(v) for v in variables],
               *[model.rvs_to_transforms.get(v) for v in variables], model.check_bounds)
        # measured: PyMC's logprob rewriting took ~30 ms, a quarter of a second set-up of the linear
        # zoo model
        kept = self._terms.get(model)
        if kept is not None and len(kept[0]) == len(key) and all(a is b for a, b in zip(kept[0], key)):
            return list(kept[1])
        terms = model.logp(vars=variables, sum=False)
        self._terms[model] = (key, list(terms))
        return list(terms)


#: the analyses every TallModel of the process takes
KEPT = KeptAnalyses()


def forget_kept_analyses():
    """Drop every model's kept analysis and log-density terms, as a process starts without them
    (``benchmarks/setup_scaling.py``'s set-up from disk).
    """
    KEPT.clear()


def structure_key(model, vars, lengths) -> tuple:
    """What a model's analysis depends on besides data values, compared by identity
    (:func:`_same`): the variables, their value variables, transforms and initial values,
    ``check_bounds``, the value variables asked for; and by value: each observed variable's rows,
    the shape of every ``pm.Data`` and the length of every dimension (``pm.set_data`` may change
    them, and with them the free variables' shapes).
    """
    variables = [*model.observed_RVs, *model.free_RVs, *model.potentials, *model.deterministics]
    shapes = tuple(_value_of(v, shape=True) for v in model.data_vars)
    dims = tuple((name, _value_of(length)) for name, length in model.dim_lengths.items())
    return (*variables, *[model.rvs_to_values.get(v) for v in variables],
            *[model.rvs_to_transforms.get(v) for v in variables],
            *[model.rvs_to_initial_values.get(v) for v in model.free_RVs], model.check_bounds,
            None if vars is None else tuple(map(id, vars)), tuple(sorted(lengths.items())), shapes, dims)


def _value_of(variable, shape=False):
    """A shared variable's value or a constant's (their shape, with ``shape``) as a tuple; any
    other variable's identity.
    """
    if hasattr(variable, "get_value"):
        value = variable.get_value(borrow=True)
    elif hasattr(variable, "data"):
        value = variable.data
    else:
        return id(variable)
    return np.shape(value) if shape else tuple(np.atleast_1d(value).tolist())


def _same(kept, key) -> bool:
    """Keys' entries the same object, or equal tuples of plain values (never ``==`` on a graph
    variable, which builds a graph).
    """
    return len(kept) == len(key) and all(
        a is b or (type(a) is tuple and type(b) is tuple and a == b) for a, b in zip(kept, key, strict=True))
