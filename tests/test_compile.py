"""Compiled functions: same results with the precompiled header, and GCC accepts the header."""

import os
import pickle
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_subsample.model import compile as compile_module
from pymc_subsample.model.compile import compile_function, precompiled_header_flags


def _is_gcc():
    cxx = pytensor.config.cxx
    if not cxx:
        return False
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.lower()
    return "clang" not in version and ("gcc" in version or "g++" in version or "free software" in version)


def test_compiled_function_matches_numpy():
    x = pt.vector("x")
    fn = compile_function([x], [pt.sum(pt.exp(x) * x), pytensor.grad(pt.sum(pt.exp(x) * x), x)])
    values = np.linspace(-1, 1, 7)
    total, grad = fn(values)
    np.testing.assert_allclose(total, np.sum(np.exp(values) * values), rtol=1e-14)
    np.testing.assert_allclose(grad, np.exp(values) * (1 + values), rtol=1e-14)
    # the header is given to GCC only while our functions compile: no global state is left changed
    from pytensor.link.c.cmodule import GCC_compiler

    assert "-include" not in pytensor.config.gcc__cxxflags
    assert GCC_compiler.compile_str.__module__ == "pytensor.link.c.cmodule"


@pytest.mark.skipif(not _is_gcc(), reason="precompiled headers are built for GCC only")
def test_gcc_accepts_the_precompiled_header(tmp_path):
    flags = precompiled_header_flags()
    assert "-include" in flags, "GCC is the compiler, so the precompiled header should have been built"
    header = shlex.split(flags)[shlex.split(flags).index("-include") + 1]
    assert os.path.exists(header + ".gch")
    # a module compiled with PyTensor's flags must use it: an unusable header is an error here
    from pytensor.link.c.cmodule import GCC_compiler

    source = tmp_path / "mod.cpp"
    source.write_text("#include <Python.h>\nint f() { return 1; }\n")
    includes = [f"-I{d}" for d in compile_module._include_dirs()]
    cmd = [pytensor.config.cxx, "-fsyntax-only", *compile_module._CLINKER_FLAGS, *GCC_compiler.compile_args(),
           *includes, *shlex.split(flags), "-Werror=invalid-pch", str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_set_up_pauses_the_collector_stack_records_and_blas_threads_and_restores_them(monkeypatch):
    import gc
    import time

    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return {lib["filepath"]: lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    seen = []
    limit = pytensor.config.traceback__limit
    paused = compile_module.set_up_without_overheads(
        lambda: seen.append((gc.isenabled(), pytensor.config.traceback__limit, blas_threads())) or "result")
    assert gc.isenabled()
    with threadpool_limits(2, user_api="blas"):  # the user's (or PyMC's) setting, given back after
        before = blas_threads()
        assert paused() == "result"
        assert blas_threads() == before
    assert seen[0][:2] == (False, 0) and gc.isenabled() and pytensor.config.traceback__limit == limit
    assert seen[0][2] and set(seen[0][2].values()) == {1}, "the set-up ran with more than one BLAS thread"

    # a set-up that raises gives the collector back too
    def fails():
        raise RuntimeError("set-up failed")

    with pytest.raises(RuntimeError, match="set-up failed"):
        compile_module.set_up_without_overheads(fails)()
    assert gc.isenabled()

    # a long set-up gets its collections back after the pause, so its garbage stays bounded
    monkeypatch.setattr(compile_module, "COLLECTOR_PAUSE_SECONDS", 0.05)

    def long_set_up():
        start = time.perf_counter()
        while not gc.isenabled() and time.perf_counter() - start < 5:
            time.sleep(0.01)
        return gc.isenabled()

    assert compile_module.set_up_without_overheads(long_set_up)()

    # the user's own choice is left alone: off stays off
    gc.disable()
    try:
        compile_module.set_up_without_overheads(lambda: seen.append(pytensor.config.traceback__limit))()
        assert not gc.isenabled() and seen[-1] == 0
    finally:
        gc.enable()


def test_every_step_set_up_pauses_the_collector():
    import pymc_subsample as pms

    for step in (pms.HMCECS, pms.SubsampleMH, pms.SGLD, pms.SGHMC, pms.SGFS, pms.ISS, pms.FireflyMC,
                 pms.ZigZag):
        assert getattr(step.__init__, "__wrapped__", None) is not None, step.__name__


def _new_constant():
    """A constant no earlier run put in a C module (it is part of a fused op's code): a function
    using it compiles its elementwise module now, so that a check of what is compiled can fail."""
    return 1.0 + uuid.uuid4().int % 10**9 / 1e10


def _counting_compiles(monkeypatch):
    """A list that grows by one module name per C module GCC compiles from now on."""
    from pytensor.link.c.cmodule import GCC_compiler

    compiled = []
    original = GCC_compiler.compile_str

    def counting(module_name, *args, **kwargs):
        compiled.append(module_name)
        return original(module_name, *args, **kwargs)

    monkeypatch.setattr(GCC_compiler, "compile_str", staticmethod(counting))
    return compiled


@pytest.mark.skipif(not _is_gcc(), reason="precompiled headers are built for GCC only")
def test_modules_compiled_with_the_header_serve_pytensors_own_functions(monkeypatch):
    """Our modules keep the keys PyTensor gives them without the header: a function of PyMC's (its
    trace, its NUTS gradient) made of the same ops compiles nothing again.
    A key with the header's flags in it compiled every shared module twice on a first run."""
    scale = _new_constant()
    x = pt.dvector("x")
    graph = (pt.cosh(x) * scale - x).sum()
    compiled = _counting_compiles(monkeypatch)
    ours = compile_function([x], [graph, pytensor.grad(graph, x)])
    assert compiled, "our function should have compiled its new elementwise module"
    compiled.clear()
    theirs = pytensor.function([x], [graph, pytensor.grad(graph, x)])
    assert compiled == [], "PyTensor compiled again modules our function had compiled"
    values = np.array([0.5, -1.0])
    for got, want in zip(ours(values), theirs(values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-15)


def test_a_pickled_function_computes_the_same_after_loading():
    """pm.sample with spawn/forkserver pickles the step into its workers: the functions must come
    back working. (They link again there; their C modules are found under PyTensor's own keys, which
    the header does not change: the test above.)"""
    scale = _new_constant()
    x = pt.dvector("x")
    function = compile_function([x], (pt.sinh(x) * scale).sum())
    loaded = pickle.loads(pickle.dumps(function))
    np.testing.assert_allclose(loaded(np.array([0.0, 1.0])), scale * np.sinh(1.0), rtol=1e-15)


def _three_new_fused_ops():
    """A graph with three elementwise kernels no earlier run compiled, kept apart by reductions, and
    the same in NumPy."""
    a, b, c = (_new_constant() for _ in range(3))
    x = pt.dvector("x")
    first = pt.exp(x * a).sum()
    second = (pt.cos(x * b) * first).sum()
    graph = pt.tanh(x * c + second)

    def numpy_value(v):
        return np.tanh(v * c + (np.cos(v * b) * np.exp(v * a).sum()).sum())

    return x, graph, numpy_value


def _compiles_by_thread(monkeypatch, fail_in_pool=False):
    """Names of the threads that run GCC from now on, one per module (``fail_in_pool``: a build in
    a pool thread fails as a compiler error would)."""
    import threading

    from pytensor.link.c.cmodule import GCC_compiler

    threads = []
    original = GCC_compiler.compile_str

    def recording(*args, **kwargs):
        name = threading.current_thread().name
        threads.append(name)
        if fail_in_pool and name.startswith("gcc"):
            raise RuntimeError("GCC failed")
        return original(*args, **kwargs)

    monkeypatch.setattr(GCC_compiler, "compile_str", staticmethod(recording))
    return threads


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_functions_missing_modules_are_built_side_by_side_under_pytensors_keys(monkeypatch, jobs):
    """With two cores or more, the C modules a function misses are built by GCC processes at once
    (threads of a pool), moved where PyTensor expects them and filed under PyTensor's own keys: the
    same graph compiled by PyTensor afterwards compiles nothing. With one core, one after another in
    the caller's thread, as PyTensor does."""
    from pymc_subsample.model import side_by_side

    monkeypatch.setattr(side_by_side, "build_jobs", lambda: jobs)
    made, new_folder = [], side_by_side._new_folder
    monkeypatch.setattr(side_by_side, "_new_folder",
                        lambda parent, *a: made.append(Path(parent)) or new_folder(parent, *a))
    x, graph, numpy_value = _three_new_fused_ops()
    threads = _compiles_by_thread(monkeypatch)
    ours = compile_function([x], [graph])
    in_pool = [name for name in threads if name.startswith("gcc")]
    if jobs == 1:
        assert threads and not in_pool
    else:  # each module built once, in the pool: none again in the caller's thread
        assert len(in_pool) >= 3 and len(in_pool) == len(threads), threads
    values = np.linspace(-0.5, 0.5, 5)
    np.testing.assert_allclose(ours(values)[0], numpy_value(values), rtol=1e-13)
    threads.clear()
    theirs = pytensor.function([x], graph)
    assert threads == [], "PyTensor compiled again modules built side by side"
    np.testing.assert_allclose(theirs(values), numpy_value(values), rtol=1e-13)
    # none left of this process's build folders (another test run may be building meanwhile), and
    # none where PyTensor's cache refresh reads (it takes an empty folder for a dead module's)
    own = f"{side_by_side.FOLDER_PREFIX}{os.getpid()}_"
    assert not [f for f in os.listdir(side_by_side.builds_folder()) if f.startswith(own)]
    assert not [f for f in os.listdir(pytensor.config.compiledir) if f.startswith(own)]
    assert made[:1] == ([side_by_side.builds_folder()] if jobs > 1 else []), made


def test_build_folders_are_where_pytensors_cache_refresh_never_removes_them():
    """Another process starting PyTensor's module cache meanwhile refreshes it, and its refresh
    removes the compile directory's empty folders (a dead module's, it takes them for); when such a
    folder was gone between its two readings, the refresh crashed that process. A build folder is
    empty at first and after its builds are installed: it is made inside a folder that holds a note,
    which the refresh keeps, and never looks into."""
    from pytensor.link.c.cmodule import ModuleCache

    from pymc_subsample.model import side_by_side

    compiledir = Path(pytensor.config.compiledir)
    parent = side_by_side.builds_folder()
    assert parent.parent == compiledir and (parent / side_by_side.NOTE).exists()
    ours = side_by_side._new_folder(parent, f"{side_by_side.FOLDER_PREFIX}{os.getpid()}_")
    bare = side_by_side._new_folder(compiledir, f"{side_by_side.FOLDER_PREFIX}{os.getpid()}_")  # where made
    try:
        ModuleCache(str(compiledir)).refresh(cleanup=True)  # another process's, starting meanwhile
        assert ours.is_dir() and (parent / side_by_side.NOTE).exists(), "the refresh removed a build folder"
        assert not bare.exists(), "PyTensor's refresh keeps empty folders now: the reason above is gone"
    finally:
        shutil.rmtree(ours, ignore_errors=True)
        shutil.rmtree(bare, ignore_errors=True)


def test_a_module_whose_build_failed_is_compiled_again_in_the_callers_thread(monkeypatch):
    """A failed side-by-side build is not an error of its own: PyTensor's compilation runs again in
    the caller's thread (where a real failure raises PyTensor's own message), and the function works."""
    from pymc_subsample.model import side_by_side

    monkeypatch.setattr(side_by_side, "build_jobs", lambda: 2)
    x, graph, numpy_value = _three_new_fused_ops()
    threads = _compiles_by_thread(monkeypatch, fail_in_pool=True)
    ours = compile_function([x], [graph])
    in_caller = [name for name in threads if not name.startswith("gcc")]
    assert len(in_caller) >= 3 and len(threads) > len(in_caller), threads
    values = np.linspace(-0.5, 0.5, 5)
    np.testing.assert_allclose(ours(values)[0], numpy_value(values), rtol=1e-13)


def test_without_a_folder_for_the_builds_the_modules_are_compiled_in_the_callers_thread(monkeypatch):
    """Another process's cache clean-up may remove an empty folder: when the builds' folder cannot
    be made, nothing fails, and the caller's thread compiles as PyTensor does."""
    from pymc_subsample.model import side_by_side

    def no_folder(*args, **kwargs):
        raise FileNotFoundError("removed meanwhile")

    monkeypatch.setattr(side_by_side, "build_jobs", lambda: 2)
    monkeypatch.setattr(side_by_side, "_new_folder", no_folder)
    x, graph, numpy_value = _three_new_fused_ops()
    threads = _compiles_by_thread(monkeypatch)
    ours = compile_function([x], [graph])
    assert len(threads) >= 3 and not [name for name in threads if name.startswith("gcc")], threads
    values = np.linspace(-0.5, 0.5, 5)
    np.testing.assert_allclose(ours(values)[0], numpy_value(values), rtol=1e-13)
