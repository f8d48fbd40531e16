"""Compiling the package's PyTensor functions, and keeping a first run's C compilation short.

On a fresh machine (empty PyTensor cache) almost all of a first run's set-up is GCC compiling
one C module per distinct op of every compiled function: about 40 modules for HMCECS, 20 for
PyMC's NUTS, each 0.4-1.3 s. Of a small module's 0.55 s, 0.3 s is parsing the same headers
(Python.h, NumPy's, the C++ standard library) again. :func:`compile_function` therefore gives
GCC a *precompiled header* of exactly those headers, built once per machine (about 1 s) in
PyTensor's compile directory, through PyTensor's public ``gcc__cxxflags`` setting, changed only
while our functions compile. GCC itself checks the precompiled header against the flags of each
module and falls back to reading the headers when it does not match, so the result is the same
code either way; with another compiler (clang, MSVC) nothing changes. The modules a function
misses are built side by side, one GCC process per core (:mod:`~pymc_subsample.model.side_by_side`).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import subprocess
import sysconfig
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytensor
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.tensor.blockwise import Blockwise
from threadpoolctl import ThreadpoolController

from pymc_subsample.model import function_cache
from pymc_subsample.model.side_by_side import modules_side_by_side

__all__ = [
    "PYTHON_LINKER",
    "PYTHON_LINKER_ARRAYS",
    "SLOW_REWRITES",
    "compile_function",
    "compile_python",
    "has_blockwise",
    "precompiled_header_flags",
    "set_up_without_overheads",
]

#: the headers every PyTensor C module includes first, in its order (pytensor/link/c/basic.py)
_HEADERS = (
    "<Python.h>",
    '"pytensor_mod_helper.h"',
    "<math.h>",
    "<numpy/arrayobject.h>",
    "<numpy/arrayscalars.h>",
    "<numpy/npy_math.h>",
    "<vector>",
    "<algorithm>",
)
#: flags PyTensor's CLinker adds to every module; a precompiled header is used only by modules
#: compiled with the same code-generation flags
_CLINKER_FLAGS = ("-O3", "-fno-math-errno", "-g", "-fvisibility=hidden")
#: no debug information (PyTensor passes -g; the later -g0 wins): 15-20% of GCC's time per module
_EXTRA_FLAGS = ("-g0",)
_headers: dict[str, Path | None] = {}  # compiledir → header whose .gch GCC uses, or None


#: graph rewrites that cost more than they give on the estimator's graphs: factoring products out of
#: sums (x·a + x·b ↔ x·(a + b)) over the derivatives of a likelihood took half of the StudentT
#: estimator's 3.7 s of rewriting on every construction, cache or not; without it, 1.8 s, and the
#: compiled call is as fast or faster (StudentT 261 → 249 µs, logistic 150 → 143 µs at m = 1000)
SLOW_REWRITES = ("local_greedy_distributor",)

#: for graphs evaluated a few times at set-up on a few rows or none (the link check of a
#: distributional regression, a model's row-free φ(θ)): PyTensor's Python linker, no C module
PYTHON_LINKER = Mode(linker="py", optimizer="fast_compile")


def compile_function(inputs, outputs, *, exclude=()):
    """``pytensor.function`` with ``trust_input=True``, compiled against the precompiled header,
    without the graph rewrites named in ``exclude`` (e.g. :data:`SLOW_REWRITES`), or the same
    function rewritten by an earlier process (:mod:`~pymc_subsample.model.function_cache`).
    """
    return function_cache.cached_function(inputs, outputs, **_c_compilation(exclude))


def compile_derived(inputs, sources, derive, recipe, *, python=False, exclude=()):
    """:func:`compile_function` (:func:`compile_python` with ``python``) of ``derive()``, a graph
    built from ``sources`` alone by code of this package, kept on disk under a key of ``sources``:
    a set-up that finds it there does not build the derived graph
    (:func:`~pymc_subsample.model.function_cache.cached_derived_function`; ``recipe`` names
    ``derive``; ``exclude`` as :func:`compile_function`'s).
    """
    compilation = _python_compilation(False) if python else _c_compilation(exclude)
    return function_cache.cached_derived_function(inputs, sources, derive, recipe=recipe, **compilation)


def _c_compilation(exclude) -> dict:
    """The cache's ``compile_``, ``context`` and ``load_context`` for :func:`compile_function`: the C
    linker against the precompiled header, which a loaded function is linked under too.
    """
    kwargs = {"mode": get_default_mode().excluding(*exclude)} if exclude else {}

    def compile_(inputs, outputs):
        with _our_c_modules():
            return pytensor.function(inputs, outputs, on_unused_input="ignore", trust_input=True, **kwargs)

    return {"compile_": compile_, "context": ("compile_function", tuple(exclude)),
            "load_context": _our_c_modules}


def _python_compilation(arrays) -> dict:
    """The cache's ``compile_`` and ``context`` for :func:`compile_python` (PyTensor's Python linker)."""
    mode = PYTHON_LINKER_ARRAYS if arrays else PYTHON_LINKER

    def compile_(inputs, outputs):
        return pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")

    return {"compile_": compile_, "context": ("compile_python", arrays)}


def has_blockwise(function) -> bool:
    """Whether a compiled function holds a ``Blockwise`` node: an op PyTensor could vectorise only
    by looping over the batch in Python (and which fails on an empty batch).
    """
    return any(isinstance(node.op, Blockwise) for node in function.maker.fgraph.apply_nodes)


#: the Python linker for graphs over large arrays (a prior's gradient at hundreds of points): full
#: rewriting removes the ``second`` ops of a gradient graph, which the light rewriting leaves to
#: run one element at a time in Python (256 points, d = 1,004: 54 → 4 ms a call), and no fusion,
#: whose fused ops would run so too (3.3 s)
PYTHON_LINKER_ARRAYS = Mode(linker="py", optimizer="fast_run").excluding("fusion")


def compile_python(inputs, outputs, *, arrays=False):
    """``pytensor.function`` on PyTensor's Python linker (:data:`PYTHON_LINKER`: no C module, light
    rewriting; with ``arrays``, :data:`PYTHON_LINKER_ARRAYS`), for graphs called a few times at
    set-up, or the same function from an earlier process.
    """
    return function_cache.cached_function(inputs, outputs, **_python_compilation(arrays))


#: seconds of a set-up without the garbage collector's automatic collections, at most
COLLECTOR_PAUSE_SECONDS = 3.0


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """The process's BLAS libraries as threadpoolctl sees them, found once: ``threadpool_limits`` scans
    every loaded shared library at each call (6 ms a set-up once PyTensor's C modules are loaded,
    twice in a nested one, half a gradient pass at 10⁶ rows); BLAS is loaded by then (NumPy, SciPy).
    """
    return ThreadpoolController()


def set_up_without_overheads(method):
    """Run ``method`` (a step's set-up) without two of Python's and PyTensor's bookkeeping costs
    that do nothing for it: the garbage collector's automatic collections, off for its first
    :data:`COLLECTOR_PAUSE_SECONDS` seconds, and PyTensor's record of the creating Python stack on
    every new graph variable (``traceback__limit=0`` while it runs).

    Why the collector: graph rewriting allocates ~2·10⁵ objects per set-up, which now and then
    triggers a full collection that scans every object of the session (PyMC, PyTensor, SciPy, the
    user's own): a 1.1 s pause in one of five warm set-ups of 0.65 s (logistic zoo model, 10⁶ rows;
    linear: 0.8 s in one of four of 1.0 s). Paused, the set-up's garbage, all in the youngest
    generation, is collected at its end (``gc.collect(0)``, 0.03 s; left to the next automatic
    collection, it landed in the user's next call), and a set-up costs the same as the collector's
    good runs, without the pauses: 0.646-0.669 s against 0.642-0.664 s and 1.72-1.77 s
    (``gc.freeze`` of the older objects instead was slower, 0.79-0.84 s: full collections of the
    unfrozen rest then come every few thousand objects). A set-up that rewrites graphs for minutes
    (MvNormal with LKJ) gets its collections back after the pause, so its garbage stays bounded.
    Where the collector is off already, it stays off.

    Why the stack record: PyTensor walks eight frames and reads their source lines for each of the
    ~10⁴ variables a set-up creates, 11% of a warm set-up's profile (linear, 10⁶ rows); the
    records name lines of this package, which a user's error message does not need.

    Why one BLAS thread: the set-up's linear algebra is small (products over chunks of 20,000 rows,
    d × d matrices, the centre's L-BFGS on d ≤ 10³ coordinates), and OpenBLAS's threads cost more than
    they give there: on 2 cores the non-centred zoo model's warm set-up at 10⁶ rows took 0.83-1.00 s
    with its default 2 threads, 0.49-0.64 s with 1 (three interleaved pairs of runs; L-BFGS's own
    Fortran step 0.7 ms a call, against 0.05 ms alone). PyMC limits the BLAS threads of its sampling
    the same way (``pm.sample(blas_cores=...)``, by default the cores it samples on). The limit is
    ``threadpoolctl``'s (a dependency of PyMC), lifted when the set-up ends, through one controller
    per process (:func:`_blas_controller`).

    Nested set-ups (a step's ``__init__`` calling its base's) pause the collector once; the flag
    and the thread limit are set again inside, and restored in order.
    """

    @functools.wraps(method)
    def lean(*args, **kwargs):
        pause = gc.isenabled()  # else off already (by the user, or by an enclosing set-up)
        if pause:
            gc.disable()
            timer = threading.Timer(COLLECTOR_PAUSE_SECONDS, gc.enable)
            timer.daemon = True
            timer.start()
        try:
            one_blas_thread = _blas_controller().limit(limits=1, user_api="blas")
            with pytensor.config.change_flags(traceback__limit=0), one_blas_thread:
                return method(*args, **kwargs)
        finally:
            if pause:
                timer.cancel()
                gc.enable()
                # the set-up's garbage now, in its own time, not in the user's next call (0.03 s warm)
                gc.collect(0)

    return lean


_compile_str_lock = threading.RLock()


@contextmanager
def _our_c_modules():
    """GCC builds the C modules of the functions compiled or loaded meanwhile with the precompiled
    header, and a function's missing modules side by side, one GCC per core
    (:mod:`~pymc_subsample.model.side_by_side`), under the module keys PyTensor gives them without
    either.

    The header's flags are added to the compiler's command line (``GCC_compiler.compile_str``'s
    ``preargs``), not to ``gcc__cxxflags``, which PyTensor puts in every module's cache key: with the
    flag there, a module of ours and the same module of PyMC's (a ``Shape_i``, an ``AllocEmpty``, the
    elementwise ops of a prior) had two keys and were compiled twice — on a first run, the modules
    of ``pm.sample``'s own trace functions again after our set-up (0.8–1.1 s of GCC in a 10–14 s
    cold start of the ``deterministic_potential`` zoo model), and none of a user's earlier NUTS
    runs' modules served us.
    A module built with the header is the same code (the header holds the includes every module
    starts with; ``-g0`` drops debug information only), so either build may serve either key.
    """
    from pytensor.link.c.cmodule import GCC_compiler

    extra = precompiled_header_flags()
    with _compile_str_lock:
        original = GCC_compiler.__dict__["compile_str"]
        compile_str = original.__func__
        if extra:
            extra = extra.split(" ")

            def with_header(module_name, src_code, location=None, include_dirs=None, lib_dirs=None,
                            libs=None, preargs=None, **kwargs):
                # after PyTensor's own flags, so that -g0 overrides its -g
                return compile_str(module_name, src_code, location, include_dirs, lib_dirs, libs,
                                   [*(preargs or ()), *extra], **kwargs)
        else:
            with_header = compile_str
        try:
            with modules_side_by_side(GCC_compiler, with_header):
                yield
        finally:
            GCC_compiler.compile_str = original


def precompiled_header_flags() -> str:
    """``-g0 -include <header>`` for GCC when its precompiled header exists or can be built, else ""."""
    compiledir = pytensor.config.compiledir
    header = _headers.get(compiledir)
    # built again when the cache was cleared meanwhile: a missing header would fail every module
    if compiledir not in _headers or (header is not None and not _gch(header).exists()):
        header = _headers[compiledir] = _build_precompiled_header(Path(compiledir))
    return "" if header is None else " ".join([*_EXTRA_FLAGS, "-include", str(header)])


def _gch(header: Path) -> Path:
    return header.with_name(f"{header.name}.gch")


def _build_precompiled_header(compiledir: Path) -> Path | None:
    cxx = pytensor.config.cxx
    if not cxx:
        return None
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.lower()
        if "clang" in version:
            return None
        from pytensor.link.c.cmodule import GCC_compiler

        includes = [f"-I{d}" for d in _include_dirs()]
        args = [*_CLINKER_FLAGS, *GCC_compiler.compile_args(), *_EXTRA_FLAGS, *includes]
        key = hashlib.sha256(" ".join([cxx, *args]).encode()).hexdigest()[:16]
        folder = compiledir / "pymc_subsample_pch"
        header = folder / f"headers_{key}.h"
        if " " in str(header):  # the flags are passed on as one string split on spaces
            return None
        if not _gch(header).exists():
            folder.mkdir(parents=True, exist_ok=True)
            text = folder / f"{header.name}.{os.getpid()}"
            text.write_text("".join(f"#include {h}\n" for h in _HEADERS))
            os.replace(text, header)
            partial = folder / f"{header.name}.gch.{os.getpid()}"
            done = subprocess.run([cxx, "-x", "c++-header", *args, str(header), "-o", str(partial)],
                                  capture_output=True)
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                return None
            os.replace(partial, _gch(header))  # atomic: concurrent builders agree
        return header
    except (OSError, ImportError, AttributeError):  # no compiler, or a PyTensor without GCC_compiler
        return None


def _include_dirs():
    c_code = Path(pytensor.__file__).parent / "link" / "c" / "c_code"
    return [np.get_include(), sysconfig.get_paths()["include"], str(c_code)]
