"""Compiling the package's PyTensor functions through PyTensor's public API.

Every function is a ``pytensor.function``: in PyTensor's default mode (its Numba backend, whose
compiled kernels PyTensor keeps in its own on-disk cache), or in the mode the user chose with
``pytensor.config.mode`` / ``PYTENSOR_FLAGS`` or with a step's ``compile_kwargs`` (for example
``{"mode": "C"}``), which :func:`compile_mode` applies while a step is set up. Graphs evaluated a
few times at set-up on a few rows (a link check, a row-free φ(θ)) run on PyTensor's Python linker:
no kernel to compile for a handful of calls.
"""

from __future__ import annotations

import contextvars
import functools
from contextlib import contextmanager

import numpy as np
import pytensor
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.scalar import Add, Cast, Mul
from pytensor.scalar.math import Softplus, TriGamma
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.row_terms_kernel import TRIGAMMA_ASYMPTOTIC, trigamma_scalar  # noqa: F401

__all__ = [
    "PYTHON_LINKER",
    "PYTHON_LINKER_ARRAYS",
    "SLOW_REWRITES",
    "compile_function",
    "compile_mode",
    "compile_numpy",
    "compile_python",
    "current_mode",
    "direct_call",
    "has_blockwise",
    "numba_callable",
    "numba_mode",
    "runs_on_numpy",
]

#: graph rewrites that cost more than they give on the estimator's graphs: factoring products out of
#: sums (x·a + x·b ↔ x·(a + b)) over the derivatives of a likelihood doubles the rewriting time of a
#: StudentT estimator and leaves the compiled call no faster
SLOW_REWRITES = ("local_greedy_distributor",)

#: for graphs evaluated a few times at set-up on a few rows or none (the link check of a
#: distributional regression, a model's row-free φ(θ)): PyTensor's Python linker, nothing compiled
PYTHON_LINKER = Mode(linker="py", optimizer="fast_compile")

#: the Python linker for graphs over large arrays (a prior's gradient at hundreds of points): full
#: rewriting removes the ``second`` ops of a gradient graph, which the light rewriting leaves to run
#: one element at a time in Python, and no fusion, whose fused ops would run so too
PYTHON_LINKER_ARRAYS = Mode(linker="py", optimizer="fast_run").excluding("fusion")

#: the mode of the step being set up (``compile_kwargs={"mode": ...}``); None: PyTensor's default
_mode: contextvars.ContextVar = contextvars.ContextVar("pymc_subsample_mode", default=None)


@contextmanager
def compile_mode(mode):
    """Compile the functions built inside the block in ``mode`` (a name such as ``"NUMBA"`` or
    ``"C"``, which means PyTensor's ``"CVM"`` as PyMC's ``backend="c"`` does, or a ``Mode``);
    ``None`` keeps PyTensor's default. Scoped to the block and the thread
    (a context variable): no PyTensor setting is changed.
    """
    if isinstance(mode, str) and mode.lower() == "c":
        mode = "CVM"  # as PyMC's backend="c": C kernels, and Python for ops that have none
    token = _mode.set(None if mode is None else get_mode(mode))
    try:
        yield
    finally:
        _mode.reset(token)


def current_mode(exclude=()):
    """The mode functions are compiled in now, without the rewrites named in ``exclude`` (without
    them, the mode object itself: a key for caches of compiled functions).
    """
    mode = _mode.get() or get_mode(None)
    return mode.excluding(*exclude) if exclude else mode


def compile_function(inputs, outputs, *, exclude=()):
    """``pytensor.function`` with ``trust_input=True`` in :func:`current_mode`, without the graph
    rewrites named in ``exclude`` (e.g. :data:`SLOW_REWRITES`).
    """
    return pytensor.function(inputs, outputs, mode=current_mode(exclude), on_unused_input="ignore",
                             trust_input=True)


def compile_python(inputs, outputs, *, arrays=False):
    """``pytensor.function`` on PyTensor's Python linker (:data:`PYTHON_LINKER`: light rewriting;
    with ``arrays``, :data:`PYTHON_LINKER_ARRAYS`), for graphs called a few times at set-up.
    """
    mode = PYTHON_LINKER_ARRAYS if arrays else PYTHON_LINKER
    return pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")


def has_blockwise(function) -> bool:
    """Whether a compiled function holds a ``Blockwise`` node: an op PyTensor could vectorise only
    by looping over the batch (and which fails on an empty batch).
    """
    return any(isinstance(node.op, Blockwise) for node in function.maker.fgraph.apply_nodes)


def runs_on_numpy(function) -> bool:
    """Whether every elementwise node of a function on PyTensor's Python linker calls a NumPy or
    SciPy ufunc over whole arrays: no scalar op (softplus, a fused Composite) runs one element at a
    time in Python, so the function is as fast as compiled code on large arrays.
    """
    for node in function.maker.fgraph.apply_nodes:
        if not isinstance(node.op, Elemwise) or isinstance(node.op.scalar_op, (Add, Mul, Cast)):
            continue  # PyTensor folds variadic Add and Mul into their binary ufuncs, Cast is astype
        spec = node.op.nfunc_spec
        if spec is None or spec[1] != len(node.inputs):
            return False
    return True


def softplus(x):
    """log(1 + eˣ) over an array, without overflow: max(x, 0) + log1p(e^−|x|)."""
    # measured: 19 ms over 10⁶ values, against 41 ms for NumPy's logaddexp(0, x)
    out = np.log1p(np.exp(-np.abs(x)))
    out += np.maximum(x, 0.0)
    return out


def trigamma(x):
    """ψ′(x) over an array: a Numba ufunc of
    :func:`~pymc_subsample.row_terms_kernel.trigamma_scalar`, compiled on first use and kept
    in Numba's cache on disk.
    """
    # measured over 10⁶ values: 13-17 ns a value, against 210 ns for SciPy's polygamma(1, x) (its
    # Hurwitz zeta), which took 1.2 s of a 500 + 500 draw HMCECS run on the negative binomial zoo
    # model at 10⁶ rows (the rows' terms at θ* in the set-up's and the warm-up's passes)
    return _trigamma_ufunc()(x)


@functools.cache
def _trigamma_ufunc():
    import numba  # PyTensor's, loaded with its Numba linker

    return numba.vectorize(["float64(float64)"], cache=True)(trigamma_scalar)


# measured: with a Python call per element, the negative binomial's rows' terms over 10⁵ rows took 3 s
#: scalar ops whose PyTensor Elemwise has no array function on the Python linker (each element a
#: Python call), with a NumPy or SciPy function over whole arrays of this module; given to
#: ``Elemwise`` as its public ``nfunc_spec``
ARRAY_FUNCTIONS = {Softplus: f"{__name__}.softplus", TriGamma: f"{__name__}.trigamma"}


def compile_numpy(inputs, outputs):
    """``outputs`` as a function on PyTensor's Python linker whose every elementwise op is a NumPy or
    SciPy function over whole arrays, or None where some op has none (:func:`runs_on_numpy`).

    The graph is rewritten first as :data:`PYTHON_LINKER_ARRAYS` would (no fusion, no in-place ops),
    then the elementwise ops of :data:`ARRAY_FUNCTIONS` are rebuilt with their array function: the
    rewrites make a softplus of ``log1p(exp(x))`` again, so they must come first. Nothing is compiled:
    for the set-up's passes over the rows, where a compiled kernel's first call costs more than the
    passes save.
    """
    # no C-only rewrites (the C BLAS ones would look for a BLAS library to link, and warn where none is)
    rewritten = rewrite_graph(list(outputs), include=("fast_run",), exclude=("fusion", "inplace", "cxx_only"),
                              clone=True)
    # in the order of the graph, each node rebuilt on its inputs as they are then: a softplus of a
    # softplus (a zero-inflated likelihood's log-sum-exp of log-weights) gets the array function in both
    fgraph = FunctionGraph(outputs=rewritten, clone=False)
    for node in fgraph.toposort():
        spec = ARRAY_FUNCTIONS.get(type(getattr(node.op, "scalar_op", None)))
        if isinstance(node.op, Elemwise) and spec is not None:
            (out,) = node.outputs
            fgraph.replace(out, Elemwise(node.op.scalar_op, nfunc_spec=(spec, 1, 1))(*node.inputs),
                           import_missing=True)
    rewritten = list(fgraph.outputs)
    function = pytensor.function(inputs, rewritten, mode=Mode(linker="py", optimizer=None),
                                 on_unused_input="ignore", trust_input=True)
    return function if runs_on_numpy(function) else None


def numba_callable(function):
    """The Numba function a ``pytensor.function`` compiled by PyTensor's Numba linker runs, callable
    from other Numba code with the function's inputs as positional arrays and returning its outputs
    as a tuple; None for a function of another linker.

    PyTensor's JIT linkers keep it as the ``jit_fn`` of the function's ``vm`` (nutpie calls a PyMC
    model's log density through the same attribute). Read, never changed; this is the one place the
    package reads it.
    """
    jit_fn = getattr(getattr(function, "vm", None), "jit_fn", None)
    return jit_fn if isinstance(jit_fn, _numba_dispatcher()) else None


def direct_call(function):
    """``function`` (a ``pytensor.function``) as its :func:`numba_callable` where that takes the same
    arguments and gives the same outputs (no shared variable among its inputs, no updates), else
    itself: a call from Python then skips the function's own wrapper, 1.2 µs against 2.9 µs for a
    logistic's prior (d = 4, 2026-11-30). The outputs are the same values, as a tuple.
    """
    jit_fn, maker = numba_callable(function), getattr(function, "maker", None)
    if jit_fn is None or maker is None or any(getattr(i, "implicit", True) for i in maker.inputs):
        return function
    if len(maker.fgraph.outputs) != len(maker.outputs):  # updates are outputs of the graph
        return function
    return jit_fn


def _numba_dispatcher():
    from numba.core.dispatcher import (
        Dispatcher,  # imported on use: numba is PyTensor's, loaded with its linker
    )

    return Dispatcher


def numba_mode() -> bool:
    """Whether :func:`current_mode` compiles with PyTensor's Numba linker."""
    from pytensor.link.numba.linker import NumbaLinker

    return isinstance(current_mode().linker, NumbaLinker)
