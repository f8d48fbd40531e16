"""A model's prior as the package's closed-form kernel reads it
(:func:`~pymc_subsample.prior_kernel.closed_form_prior`), where every free variable is of a
family the kernel computes, under no transform, log or log-odds, with each parameter a constant or
another free variable (broadcast or indexed, as a hierarchical prior's μ[g]), and the potentials, if
any, are a quadratic in θ (a soft constraint).

The kernel's value and gradient are checked against the model's own prior graph, evaluated on
PyTensor's Python linker without rewrites (nothing compiled), at the initial point and three points
around it; a prior that does not match to 1e-9 is not read so (:func:`closed_form_prior` returns
None) and the prior is compiled from the graph as before.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.logprob.transforms import LogOddsTransform, LogTransform
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors, applys_between
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.random.basic import (
    BetaRV,
    ExponentialRV,
    GammaRV,
    HalfNormalRV,
    NormalRV,
    StudentTRV,
)
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.shape import Reshape, SpecifyShape
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

from pymc_subsample.prior_kernel import (
    BETA,
    EXPONENTIAL,
    GAMMA,
    HALF_CAUCHY,
    HALF_NORMAL,
    IDENTITY,
    LOG,
    LOG_ODDS,
    MAX_PARAMS,
    NORMAL,
    STUDENT_T,
)
from pymc_subsample.prior_kernel import closed_form_prior as prior_kernel

__all__ = ["ClosedFormPrior", "closed_form_prior"]

#: evaluation of small graphs as they are: no rewriting, nothing compiled
_AS_IS = Mode(linker="py", optimizer=None)
#: ops through which a parameter may read another free variable: they move its elements, never
#: compute with them
_MOVING_OPS = (DimShuffle, Reshape, SpecifyShape, Subtensor, AdvancedSubtensor)
#: the value and gradient must match the model's own prior graph to this (relative, and absolute
#: on the scale of the value)
RTOL = 1e-9
#: potentials are read as a quadratic in θ up to this many elements of θ (its Hessian from d + 1
#: gradients on the Python linker)
QUADRATIC_MAX_D = 64


def _families():
    """Random variable class → (code, its parameters in the kernel's order: an index into the op's
    ``dist_params``, or a constant where the op has none, e.g. a HalfCauchy's loc 0).
    """
    from pymc.distributions.continuous import HalfCauchyRV  # PyMC's own op, not PyTensor's

    return {NormalRV: (NORMAL, (0, 1)), HalfNormalRV: (HALF_NORMAL, (0, 1)),
            ExponentialRV: (EXPONENTIAL, (0,)), GammaRV: (GAMMA, (0, 1)), BetaRV: (BETA, (0, 1)),
            HalfCauchyRV: (HALF_CAUCHY, (0.0, 0)), StudentTRV: (STUDENT_T, (0, 1, 2))}


class ClosedFormPrior(NamedTuple):
    """The arrays :func:`~pymc_subsample.prior_kernel.closed_form_prior` reads, one row per
    element of θ: its family and transform codes, the element each parameter reads (−1: a constant),
    the constants and their logs as the model computes them (in the constants' dtypes); the
    potentials' quadratic (θ₀, gradient and Hessian there; an empty Hessian for none); and the
    offset of the constant terms (module docstring).
    """

    family: np.ndarray
    transform: np.ndarray
    source: np.ndarray
    constants: np.ndarray
    log_constants: np.ndarray
    centre: np.ndarray
    slope: np.ndarray
    curvature: np.ndarray
    offset: np.ndarray

    def __call__(self, theta):
        """(log p(θ), ∇log p(θ)) at ``theta``."""
        return prior_kernel(tuple(self), np.ascontiguousarray(theta, dtype=np.float64))


def closed_form_prior(model, value_vars, point, theta_graph, prior_graph, prior_grad_graph,
                      start, potential_graph=None) -> ClosedFormPrior | None:
    """The :class:`ClosedFormPrior` of ``model``'s free variables ``value_vars`` (θ = their values
    raveled in this order, shapes as in ``point``) and its potentials (their sum ``potential_graph``
    of ``theta_graph``), or None where some variable or parameter is not of the forms the kernel
    reads, the potentials are not a quadratic in θ, or the kernel does not give the model's own prior
    (``prior_graph`` and ``prior_grad_graph``) at ``start`` and three points around it.
    """
    if {v.name for v in value_vars} != {v.name for v in model.value_vars}:
        return None
    start = np.asarray(start, dtype=np.float64)
    quadratic = (start, np.zeros_like(start), np.zeros((0, 0)))
    if model.potentials:
        quadratic = None if potential_graph is None else _quadratic(theta_graph, potential_graph, start)
        if quadratic is None:
            return None
    families = _families()
    layout, begin = {}, 0
    for value in value_vars:
        rv = model.values_to_rvs[value]
        shape = tuple(point[value.name].shape)
        layout[rv] = (begin, shape)
        begin += int(np.prod(shape, dtype=int))
    d = begin
    family, transform = np.empty(d, dtype=np.int64), np.empty(d, dtype=np.int64)
    source, constants = np.full((d, MAX_PARAMS), -1, dtype=np.int64), np.zeros((d, MAX_PARAMS))
    log_constants = np.zeros((d, MAX_PARAMS))
    for rv, (begin, shape) in layout.items():
        spec = families.get(type(rv.owner.op))
        code = _transform_code(model.rvs_to_transforms.get(rv))
        if spec is None or code is None:
            return None
        elements = slice(begin, begin + int(np.prod(shape, dtype=int)))
        family[elements], transform[elements] = spec[0], code
        params = rv.owner.op.dist_params(rv.owner)
        for i, which in enumerate(spec[1]):
            if isinstance(which, int):
                read = _parameter(params[which], layout, shape)
            else:
                read = None, (which, np.log(which) if which > 0 else 0.0)
            if read is None:
                return None
            indices, values = read
            if indices is not None:
                source[elements, i] = indices
            else:
                constants[elements, i], log_constants[elements, i] = values
    prior = ClosedFormPrior(family, transform, source, constants, log_constants, *quadratic, np.zeros(1))
    return _checked(prior, theta_graph, prior_graph, prior_grad_graph, start)


def _quadratic(theta_graph, potential_graph, start):
    """(θ₀ = ``start``, the potentials' gradient and Hessian there) where θ has at most
    :data:`QUADRATIC_MAX_D` elements, else None. The Hessian's columns are the gradient's changes
    along unit steps, exact where the potentials are a quadratic (:func:`_checked` then finds
    whether they are, at other points).
    """
    d = start.size
    if d > QUADRATIC_MAX_D:
        return None
    gradient = pytensor.function([theta_graph], pytensor.grad(potential_graph, theta_graph), mode=_AS_IS,
                                 on_unused_input="ignore")
    with np.errstate(all="ignore"):
        slope = np.asarray(gradient(start.astype(theta_graph.dtype)), dtype=np.float64)
        steps = start + np.eye(d)
        curvature = np.column_stack([np.asarray(gradient(step.astype(theta_graph.dtype)), dtype=np.float64)
                                     for step in steps]) - slope[:, None]
    if not (np.all(np.isfinite(slope)) and np.all(np.isfinite(curvature))):
        return None
    return start, slope, np.ascontiguousarray(0.5 * (curvature + curvature.T))


def _transform_code(transform):
    """The kernel's code of a free variable's transform, or None for one it does not compute."""
    if transform is None:
        return IDENTITY
    return {LogTransform: LOG, LogOddsTransform: LOG_ODDS}.get(type(transform))


def _parameter(param, layout, shape):
    """(the element of θ each of the variable's elements reads, None) where ``param`` is a free
    variable moved by :data:`_MOVING_OPS` only; (None, (its values, their logs) broadcast to
    ``shape``) where it is a constant; else None.
    """
    graph_ancestors = list(ancestors([param], blockers=list(layout)))  # not into the variables' own RNGs
    if any(isinstance(v, SharedVariable) for v in graph_ancestors):
        return None  # data, or a length that may change: not a constant of the analysis
    if any(v not in layout and v.owner is not None and isinstance(v.owner.op, RandomVariable)
           for v in graph_ancestors):
        return None  # a random variable that is not a free variable of θ (in a value or an index)
    sources = [v for v in graph_ancestors if v in layout]
    if not sources:
        values = _broadcast(_evaluate(param), shape)
        # the log as the model's graph takes it: in the constant's dtype (an int8 σ's in float32)
        with np.errstate(all="ignore"):
            logs = _broadcast(_evaluate(pt.log(param)), shape)
        return None if values is None or logs is None else (None, (values, np.nan_to_num(logs)))
    if len(sources) > 1:
        return None
    (rv,) = sources
    nodes = applys_between([rv], [param])
    if any(not isinstance(node.op, _MOVING_OPS) for node in nodes):
        return None
    begin, rv_shape = layout[rv]
    # the parameter's graph on the variable's element numbers: where each of its elements comes from
    numbers = pt.as_tensor_variable(np.arange(begin, begin + int(np.prod(rv_shape, dtype=int)),
                                              dtype=np.float64).reshape(rv_shape))
    moved = graph_replace(param, {rv: numbers.astype(rv.dtype)}, strict=False)
    read = _broadcast(_evaluate(moved), shape)
    return (None if read is None else read.astype(np.int64)), None


def _evaluate(graph):
    """A graph of constants evaluated as it is (:data:`_AS_IS`)."""
    return np.asarray(pytensor.function([], graph, mode=_AS_IS)(), dtype=np.float64)


def _broadcast(values, shape):
    """``values`` broadcast to ``shape`` and raveled, or None where they do not broadcast."""
    try:
        return np.broadcast_to(values, shape).ravel()
    except ValueError:
        return None


def _checked(prior, theta_graph, prior_graph, prior_grad_graph, start):
    """``prior`` with its offset where it gives the model's prior graph at ``start`` and at three
    points around it (value changes and gradients to :data:`RTOL`), else None.
    """
    reference = pytensor.function([theta_graph], [prior_graph, prior_grad_graph], mode=_AS_IS,
                                  on_unused_input="ignore")
    rng = np.random.default_rng(0)
    points = [start] + [start + rng.normal(scale=0.5, size=start.shape) for _ in range(3)]
    offset = None
    with np.errstate(all="ignore"):
        for theta in points:
            value, grad = (np.asarray(v, dtype=np.float64)
                           for v in reference(theta.astype(theta_graph.dtype)))
            own_value, own_grad = prior(theta)
            if not (np.isfinite(value) and np.isfinite(own_value)):
                return None
            offset = float(value) - own_value if offset is None else offset
            if not (np.isclose(own_value + offset, value, rtol=RTOL, atol=RTOL * (1.0 + abs(value)))
                    and np.allclose(own_grad, grad, rtol=RTOL, atol=RTOL * (1.0 + np.max(np.abs(grad))))):
                return None
    return prior._replace(offset=np.array([offset]))
