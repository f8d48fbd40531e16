"""The observation axis of a PyMC model, and the checks that its rows can be subsampled.

N is the observed variables' common length, or the sum of their lengths where they differ (their
rows stacked, :mod:`~pymc_subsample.model.stacked`). The checks refuse, with a message saying
what to change, models whose rows are not complete, independent observations: NaN or imputed
observations, a free variable of length N, discrete free variables, a row's log-likelihood that
reads other rows.
"""

from __future__ import annotations

import numpy as np
import pytensor
from pymc.logprob.utils import ParameterValueError

from pymc_subsample.model.compile import PYTHON_LINKER
from pymc_subsample.model.rows import leaves_with_rows_off_axis

__all__ = [
    "axis_length",
    "check_finite",
    "check_no_row_sized_free_variables",
    "check_rows_independent",
    "check_value_vars",
    "count_missing",
    "observation_axis_length",
    "observation_lengths",
]

_CHECK_ROWS = 6  # rows used by the row-independence check at construction


def observation_axis_length(model) -> int:
    """N, from the observed variables' leading axis (cheap: no graph is compiled): the sum of their
    lengths where they differ, their rows then stacked on one axis (:mod:`~pymc_subsample.model.stacked`).
    """
    return axis_length(observation_lengths(model))


def axis_length(lengths) -> int:
    """The observed variables' common length (they share their rows), or the sum of their lengths
    where these differ (their rows stacked).
    """
    distinct = set(lengths.values())
    return distinct.pop() if len(distinct) == 1 else sum(lengths.values())


def observation_lengths(model) -> dict[str, int]:
    """Each observed variable's number of rows (its leading axis), by name."""
    if not model.observed_RVs:
        raise ValueError(
            "The model has no observed variables, so there are no rows to subsample. "
            "Pass data with `observed=` to the likelihood."
        )
    _check_no_imputation(model)
    lengths = {}
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        if hasattr(value, "get_value"):
            shape = np.shape(value.get_value(borrow=True))
        elif hasattr(value, "data"):
            shape = np.shape(value.data)
        elif value.type.shape[:1] != (None,):
            shape = value.type.shape
        else:
            # PyTensor's Python linker: nothing compiled (pm.draw here cost 1.8 s of a first run)
            shape = pytensor.function([], value.shape, mode=PYTHON_LINKER)()
        if len(shape) == 0:
            raise ValueError(
                f"Observed variable {rv.name!r} is a scalar: it reduces over the rows. Give the "
                "observations themselves (one row per observation) as `observed=`."
            )
        lengths[rv.name] = int(shape[0])
    return lengths


def _check_no_imputation(model):
    """PyMC turns NaN in an observed array into imputed free variables ``<name>_unobserved``."""
    observed = {rv.name for rv in model.observed_RVs}
    for rv in model.free_RVs:
        if rv.name.endswith("_unobserved") and rv.name[: -len("_unobserved")] + "_observed" in observed:
            name = rv.name[: -len("_unobserved")]
            raise ValueError(
                f"Observed variable {name!r} contains missing (NaN) values, which PyMC imputes as "
                "free variables; subsampling needs complete rows. Drop or impute those rows before "
                "building the model."
            )
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        data = value.get_value(borrow=True) if hasattr(value, "get_value") else getattr(value, "data", None)
        if data is not None:
            bad = count_missing(data)
            if bad:
                raise ValueError(
                    f"Observed variable {rv.name!r} contains {bad} NaN, infinite or masked values; "
                    "subsampling needs complete rows. Drop or impute those rows before building "
                    "the model."
                )


def check_value_vars(model, vars) -> list:
    """The model's value variables, every one of them: a subsampling step method updates them all,
    and they must be continuous.
    """
    all_vars = list(model.value_vars)
    if vars is None:
        vars = all_vars
    vars = [model.rvs_to_values.get(v, v) for v in vars]
    missing = [v.name for v in all_vars if v not in vars]
    if missing:
        raise ValueError(
            f"Subsampling step methods must update every free variable, because each row's "
            f"likelihood depends on all of them; missing {missing}. Leave `vars=None`."
        )
    discrete = [v.name for v in vars if v.dtype.startswith(("int", "uint", "bool"))]
    if discrete:
        raise ValueError(
            f"Free variables {discrete} are discrete; subsampling step methods need continuous "
            "parameters. Marginalize the discrete variables (e.g. pymc_extras.marginalize)."
        )
    return all_vars


def check_no_row_sized_free_variables(model, point, n_rows):
    """No free variable of ``point`` has length ``n_rows`` on its first axis (a latent per row)."""
    for name, value in point.items():
        if np.ndim(value) >= 1 and np.shape(value)[0] == n_rows and n_rows > 1:
            raise ValueError(
                f"Free variable {name!r} has length N = {n_rows} along its first axis: a "
                "per-observation latent variable cannot be subsampled. Marginalize it out, or "
                "model it with global parameters only."
            )


def count_missing(data) -> int:
    """The NaN, infinite and masked entries of an array.

    Masked ones count because ``pm.set_data`` turns NaN into a masked array, on which
    ``np.isfinite`` masks them too: ``np.all(np.isfinite(masked))`` is True, and NaN rows set after
    a first model reached the sums.
    """
    array = np.asarray(data)  # a masked array's data, NaN under the mask included
    missing = ~np.isfinite(array) if np.issubdtype(array.dtype, np.inexact) else np.zeros(array.shape, bool)
    if np.ma.isMaskedArray(data):
        missing |= np.ma.getmaskarray(data)
    return int(np.count_nonzero(missing))


def check_finite(leaves):
    """No row leaf holds NaN, infinite or masked values (streamed ones are checked as they are read)."""
    for leaf in leaves:
        if leaf.streamed:  # checked chunk by chunk as the passes read it
            continue
        bad = count_missing(leaf.data)
        if bad:
            raise ValueError(
                f"Data {leaf.name!r} contains {bad} NaN, infinite or masked values (pm.set_data masks "
                "NaN). Drop or impute those rows before building the model (subsampling needs "
                "finite row data)."
            )


def check_rows_independent(loglik_rows, gather, n_rows, theta, rows_graph):
    """Each row's ℓ_k does not depend on the other rows (no reduction over rows), checked on a few
    rows at a jittered ``theta``: ``loglik_rows(theta, batch)`` gives the model's log-likelihood terms
    of a batch of rows (``gather(idx)``), ``rows_graph`` is the rows' graph, for the message where the
    rows are not on the first axis of some array.
    """
    k = min(_CHECK_ROWS, n_rows)
    rng = np.random.default_rng(0)
    idx = rng.choice(n_rows, size=k, replace=False)
    # jitter: at the initial point a reduction can vanish (e.g. mean(x) * 0)
    theta = theta + rng.normal(scale=0.1, size=np.shape(theta))
    # with functions the set-up compiles anyway (a separate per-row function cost 4.4 s of a
    # fresh machine's first run): _rows_together_and_apart
    try:
        together, apart = _rows_together_and_apart(loglik_rows, gather, theta, idx)
    except ParameterValueError:  # the model's own check (e.g. a scale that can be negative): its message
        raise
    except (ValueError, AssertionError, IndexError) as err:  # shapes of N met shapes of k rows
        raise ValueError(_rows_not_on_first_axis_message(err, rows_graph, n_rows)) from err
    if not np.allclose(together, apart, rtol=1e-8, atol=1e-8, equal_nan=True):
        raise ValueError(
            "The log-likelihood of one row depends on other rows: some observed value or "
            "parameter reduces over the observation axis (e.g. a mean or sum over the data). "
            "Precompute such summaries as constants outside the model, or reshape the data so "
            "that each row is one independent observation."
        )


def _rows_together_and_apart(loglik_rows, gather, theta, idx):
    """The log-likelihood of the rows ``idx`` computed together and apart, equal where rows are
    independent: per row, all together against the two halves (the second in reverse order),
    where the model's rows come one value each; else sums, all together and over two different
    splits (one row at a time, the halves), so that a reduction over rows cannot cancel out.
    """
    halves = [part for part in (idx[: len(idx) // 2], idx[len(idx) // 2:][::-1]) if part.size]
    together = loglik_rows(theta, gather(idx))
    if together.shape == (len(idx),):
        apart = {row: value for part in halves
                 for row, value in zip(part, loglik_rows(theta, gather(part)))}
        return together, np.array([apart[row] for row in idx])

    def total(rows):
        return float(np.sum(loglik_rows(theta, gather(rows))))

    together = float(np.sum(together))
    alone = sum(total(idx[i : i + 1]) for i in range(len(idx)))
    halves_sum = sum(total(part) for part in halves)
    return np.array([together, halves_sum]), np.array([alone, alone])


def _rows_not_on_first_axis_message(err, rows_graph, n_rows) -> str:
    off_axis = leaves_with_rows_off_axis([rows_graph], n_rows)
    which = f" ({', '.join(off_axis)})" if off_axis else ""
    first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
    return (
        f"The log-likelihood cannot be computed on a subset of the N = {n_rows} rows "
        f"({first_line}): some array of the model has one entry per observation but not along its "
        f"first axis{which}. Store every such array with the observations on its first axis, "
        "e.g. pm.Data('X', X) with X of shape (N, features) and `X @ beta` rather than "
        "`beta @ X.T`."
    )
