"""A distributional regression's rows as the package's closed-form kernel reads them
(:func:`~pymc_subsample.estimators.eta_kernels.row_differences`): one observed variable of the families it
computes, its y a column of the data (or that column cast as the model casts it) and every other
parameter η or a constant.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.scalar import Cast
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import BernoulliRV, NegBinomialRV, NormalRV, PoissonRV, StudentTRV

__all__ = ["BERNOULLI_LOGIT", "NEGATIVE_BINOMIAL", "NORMAL", "NORMAL_KNOWN_SIGMA", "POISSON_LOG", "STUDENT_T",
           "ClosedFormRows", "closed_form_rows"]

#: the kernel's families, by code
BERNOULLI_LOGIT, POISSON_LOG, NORMAL_KNOWN_SIGMA, NORMAL, STUDENT_T, NEGATIVE_BINOMIAL = range(6)
#: (random variable class, links) → kernel code
_CODES = {(BernoulliRV, ("logit",)): BERNOULLI_LOGIT, (PoissonRV, ("log",)): POISSON_LOG,
          (NormalRV, ("identity", None)): NORMAL_KNOWN_SIGMA, (NormalRV, ("identity", "log")): NORMAL,
          (StudentTRV, ("log", "identity", "log")): STUDENT_T,
          (NegBinomialRV, ("log", "logit")): NEGATIVE_BINOMIAL,
          (NegBinomialRV, (None, "logit")): NEGATIVE_BINOMIAL}


class ClosedFormRows(NamedTuple):
    """A model's rows as the kernel reads them: its family ``code``, the η of each of the family's
    parameters (``eta_index``, −1 for a constant), ``constants``: the constant parameters' values by
    parameter, then the log of each in its own dtype (a σ of 1.5 is float32 in PyMC's graph, whose
    f takes log σ so), and y: the batch's column ``y_column`` cast to ``y_dtype``.
    """

    code: int
    eta_index: np.ndarray
    constants: np.ndarray
    y_column: int
    y_dtype: str

    def y(self, batch) -> np.ndarray:
        """The y of ``batch``'s rows as the model reads them (its cast), in float64."""
        return np.asarray(batch[self.y_column]).astype(self.y_dtype, copy=False).astype(np.float64)


def closed_form_rows(view) -> ClosedFormRows | None:
    """The :class:`ClosedFormRows` of a distributional regression ``view``, or None where its rows
    are not one observed variable of the kernel's families with y a column of the data (or its
    cast) and every other parameter η or a constant.
    """
    term = view.single_term()
    if term is None:
        return None
    op, params, observed = term
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
    eta_index = np.array([p if isinstance(p, int) else -1 for p in params], dtype=np.int64)
    values, logs = np.ones(len(params)), np.zeros(len(params))
    for i, value in zip(np.flatnonzero(eta_index < 0), constants, strict=True):
        values[i] = value
        logs[i] = np.log(value) if value > 0 else np.nan
    return ClosedFormRows(code, eta_index, np.concatenate([values, logs]), columns[0], str(y_dtype))


def _constant_value(graph):
    """A parameter graph's value where it is a constant scalar (or one broadcast), in its own dtype, else
    None (data, or anything read from a shared variable that ``pm.set_data`` may change).
    """
    try:
        return pt.get_underlying_scalar_constant_value(graph)
    except NotScalarConstantError:
        return None
