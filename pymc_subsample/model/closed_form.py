"""A distributional regression's rows as the package's closed-form kernel reads them
(:func:`~pymc_subsample.estimators.eta_kernels.row_differences`): observed variables of the families it
computes, each on every row, its y a column of the data (or that column cast as the model casts it)
and every other parameter η or a constant.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.scalar import Cast
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import BernoulliRV, NegBinomialRV, NormalRV, PoissonRV, StudentTRV

from pymc_subsample.row_terms_kernel import (
    BERNOULLI_LOGIT,
    MAX_PARAMS,
    NEGATIVE_BINOMIAL,
    NORMAL,
    NORMAL_KNOWN_SIGMA,
    POISSON_LOG,
    STUDENT_T,
    closed_form_row_terms,
)

__all__ = ["BERNOULLI_LOGIT", "MAX_PARAMS", "NEGATIVE_BINOMIAL", "NORMAL", "NORMAL_KNOWN_SIGMA",
           "POISSON_LOG", "ROW_TERMS_CODES", "STUDENT_T", "ClosedFormRows", "closed_form_rows"]

#: (random variable class, links) → kernel code
_CODES = {(BernoulliRV, ("logit",)): BERNOULLI_LOGIT, (PoissonRV, ("log",)): POISSON_LOG,
          (NormalRV, ("identity", None)): NORMAL_KNOWN_SIGMA, (NormalRV, ("identity", "log")): NORMAL,
          (StudentTRV, ("log", "identity", "log")): STUDENT_T,
          (NegBinomialRV, ("log", "logit")): NEGATIVE_BINOMIAL,
          (NegBinomialRV, (None, "logit")): NEGATIVE_BINOMIAL}

#: the families whose rows' terms at θ (f and its first and second derivatives in η) are written out
#: (:meth:`ClosedFormRows.row_terms`); the negative binomial's come from the model's graph
ROW_TERMS_CODES = (BERNOULLI_LOGIT, POISSON_LOG, NORMAL_KNOWN_SIGMA, NORMAL, STUDENT_T)


class ClosedFormRows(NamedTuple):
    """A model's rows as the kernel reads them, one term per observed variable (f = Σ_t f_t): each
    term's family ``code`` (T,), the η of each of its parameters (``eta_index`` (T, MAX_PARAMS), −1 for
    a constant or no parameter), ``constants`` (T, 2·MAX_PARAMS): the constant parameters' values by
    parameter, then the log of each in its own dtype (a σ of 1.5 is float32 in PyMC's graph, whose f
    takes log σ so), and y: the batch's columns ``y_columns`` cast to ``y_dtypes``.
    """

    code: np.ndarray
    eta_index: np.ndarray
    constants: np.ndarray
    y_columns: tuple
    y_dtypes: tuple

    def y(self, batch) -> np.ndarray:
        """The y of ``batch``'s rows as the model reads them (their casts), in float64, (T, m)."""
        return np.stack([np.asarray(batch[column]).astype(dtype, copy=False).astype(np.float64)
                         for column, dtype in zip(self.y_columns, self.y_dtypes, strict=True)])

    @property
    def has_row_terms(self) -> bool:
        """Whether :meth:`row_terms` computes every term's (:data:`ROW_TERMS_CODES`)."""
        return all(int(c) in ROW_TERMS_CODES for c in self.code)

    def row_terms(self, batch, etas, pairs):
        """(f (m,), [∂f/∂η_j (m,)], {(j, l): ∂²f/∂η_j∂η_l (m,)} for ``pairs``) of ``batch``'s rows at
        ``etas`` (one (m,) array per η), f = Σ_t f_t, for the families of :data:`ROW_TERMS_CODES`, in
        one Numba loop over the rows (:func:`~pymc_subsample.row_terms_kernel.closed_form_row_terms`,
        whose docstring has the formulas).

        What the set-up's passes and the proxy's terms at θ* read, in place of the model's graph of f
        and its derivatives evaluated in NumPy, whose rewriting cost 0.2-0.4 s of a set-up (the linear
        zoo model, 2026-12-01). log σ of a constant σ is the model's, in σ's dtype.
        """
        p = len(etas)
        pair_row = np.full((p, p), -1, dtype=np.int64)
        for i, (j, k) in enumerate(pairs):
            pair_row[j, k] = i
        etas = np.stack([np.asarray(e, dtype=np.float64) for e in etas])
        value, first, second = closed_form_row_terms(self.code, self.eta_index, self.constants,
                                                     np.ascontiguousarray(self.y(batch)), etas, pair_row)
        return value, list(first), {pair: second[i] for i, pair in enumerate(pairs)}


def closed_form_rows(view) -> ClosedFormRows | None:
    """The :class:`ClosedFormRows` of a distributional regression ``view``, or None where its rows
    are not observed variables of the kernel's families, each on every row, with y a column of the
    data (or its cast) and every other parameter η or a constant. A Poisson term only alone: its
    closed form is f − f* from the row's curvature at θ*, which is its own only where no other term
    reads its η.
    """
    terms = view.observed_terms()
    if not terms:
        return None
    rows = [_term_rows(view, *term) for term in terms]
    if any(row is None for row in rows) or (len(rows) > 1 and any(row[0] == POISSON_LOG for row in rows)):
        return None
    codes, eta_index, constants, columns, dtypes = zip(*rows, strict=True)
    return ClosedFormRows(np.array(codes, dtype=np.int64), np.stack(eta_index), np.stack(constants), columns,
                          dtypes)


def _term_rows(view, op, params, observed):
    """(code, η index, constants, y's column, y's dtype) of one observed variable, or None."""
    links = tuple(view.links[p] if isinstance(p, int) else None for p in params)
    code = next((c for (rv, ls), c in _CODES.items() if isinstance(op, rv) and ls == links), None)
    if code is None:
        return None
    y_dtype = observed.dtype
    if observed.owner is not None and isinstance(observed.owner.op, Elemwise) and isinstance(
            observed.owner.op.scalar_op, Cast):
        observed = observed.owner.inputs[0]
    columns = [k for k, leaf in enumerate(view.tall.batch_inputs) if leaf is observed]
    constants = [_constant_value(p) for p in params if not isinstance(p, int)]
    if not columns or any(c is None for c in constants):
        return None
    eta_index = np.full(MAX_PARAMS, -1, dtype=np.int64)
    eta_index[:len(params)] = [p if isinstance(p, int) else -1 for p in params]
    values, logs = np.ones(MAX_PARAMS), np.zeros(MAX_PARAMS)
    constant_params = [i for i, p in enumerate(params) if not isinstance(p, int)]
    for i, value in zip(constant_params, constants, strict=True):
        values[i] = value
        logs[i] = np.log(value) if value > 0 else np.nan
    return code, eta_index, np.concatenate([values, logs]), columns[0], str(y_dtype)


def _constant_value(graph):
    """A parameter graph's value where it is a constant scalar (or one broadcast), in its own dtype, else
    None (data, or anything read from a shared variable that ``pm.set_data`` may change).
    """
    try:
        return pt.get_underlying_scalar_constant_value(graph)
    except NotScalarConstantError:
        return None
