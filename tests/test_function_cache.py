"""Compiled functions kept on disk (model/function_cache.py): keys, loading, shared variables."""

import os
import pickle

import numpy as np
import pymc as pm
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.tensor.elemwise import Elemwise

import pymc_subsample as pms
import pymc_subsample.model.function_cache as function_cache
from pymc_subsample.model.compile import compile_derived, compile_function, compile_python
from pymc_subsample.model.function_cache import CompiledFunction, SharedAsInputs, graph_key


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder of this test's own, and a count of the functions compiled (not loaded)."""
    monkeypatch.setattr(function_cache, "cache_folder", lambda: tmp_path)
    monkeypatch.delenv(function_cache.ENVIRONMENT_SWITCH, raising=False)
    compiled = []

    def counted(compile_):
        def compile_and_count(*graph):
            compiled.append(graph)
            return compile_(*graph)

        return compile_and_count

    cached_function = function_cache.cached_function
    cached_derived_function = function_cache.cached_derived_function

    def counting(inputs, outputs, compile_, *args, **kwargs):
        return cached_function(inputs, outputs, counted(compile_), *args, **kwargs)

    def counting_derived(inputs, sources, derive, compile_, *args, **kwargs):
        return cached_derived_function(inputs, sources, derive, counted(compile_), *args, **kwargs)

    monkeypatch.setattr(function_cache, "cached_function", counting)
    monkeypatch.setattr(function_cache, "cached_derived_function", counting_derived)
    monkeypatch.setattr(function_cache, "_in_memory_functions", {})
    return tmp_path, compiled


def as_in_a_new_process():
    """Forget the functions this process keeps in memory: the next use loads its file."""
    function_cache.forget_functions_in_memory()


def graph(scale=2.0, dtype="float64", name="x"):
    x = pt.vector(name, dtype=dtype)
    y = pt.vector("y", dtype=dtype)
    return [x, y], [pt.exp(x * scale) + y, (x * y).sum()]


def test_the_key_is_the_computation_not_the_names():
    inputs, outputs = graph()
    same_inputs, same_outputs = graph(name="renamed")  # built again, other names: the same computation
    key = graph_key(inputs, outputs)
    assert key is not None and graph_key(same_inputs, same_outputs) == key
    others = [
        graph_key(*graph(scale=3.0)),  # a constant's value
        graph_key(*graph(dtype="float32")),  # the types
        graph_key(inputs[::-1], outputs),  # the inputs' order
        graph_key(inputs, outputs[::-1]),  # the outputs' order
        graph_key(inputs, [pt.log(inputs[0] * 2.0) + inputs[1], outputs[1]]),  # an op
        graph_key(inputs, outputs, context=("other mode",)),  # how it is compiled
        graph_key(inputs, outputs[0]),  # one output returns an array, a list of one a list
        graph_key(inputs, outputs[:1]),
    ]
    assert key not in others and len(set(others)) == len(others)


def test_the_key_does_not_see_what_an_op_caches_on_itself():
    """An Elemwise's ``inplace_pattern`` (a PyTensor frozendict) keeps its hash once computed, and
    pickled with it: the same graph must keep its key (a model's first set-up in a process, before
    any function was compiled, once wrote files that its second set-up could not find)."""
    x = pt.vector("x")
    op = Elemwise(ps.mul)  # a fresh op: its pattern not hashed yet
    key = graph_key([x], [op(x, x)])
    hash(op.inplace_pattern)
    assert graph_key([x], [op(x, x)]) == key


def test_a_second_compilation_of_the_same_graph_is_loaded_not_compiled(cache):
    folder, compiled = cache
    first = compile_function(*graph())
    assert len(compiled) == 1 and len(list(folder.glob("*.pkl"))) == 1
    as_in_a_new_process()
    again = compile_function(*graph())
    assert len(compiled) == 1, "the graph was rewritten and compiled again"
    x, y = np.array([0.1, -0.4]), np.array([2.0, 3.0])
    for a, b in zip(first(x, y), again(x, y), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(again(x, y)[0], np.exp(2 * x) + y)
    compile_python(*graph())  # another linker: another key, compiled
    assert len(compiled) == 2


def test_a_file_holds_the_compiled_function_not_the_graph_it_was_rewritten_from(cache):
    """PyTensor's own pickle also carries the graph before rewriting and the bookkeeping of the
    variables rewriting discarded; the file, and the function pickled as PyMC pickles a step method
    for its chain processes, hold the linked function alone, which loads to the same values and
    copies."""
    folder, compiled = cache

    def gradient_graph():  # rewriting changes it a lot: sums and products to fuse and merge
        x, y = pt.vector("x"), pt.vector("y")
        value = (pt.log1p(pt.exp(x * y)) * x).sum() + (x**2).sum() * y.sum()
        return [x, y], [value, *pytensor.grad(value, [x, y])]

    function = compile_function(*gradient_graph())
    assert isinstance(function, CompiledFunction)
    plain = pytensor.function(*gradient_graph())
    own = len(pickle.dumps(plain, protocol=pickle.HIGHEST_PROTOCOL))
    (path,) = folder.glob("*.pkl")
    pickled = pickle.dumps(function, protocol=pickle.HIGHEST_PROTOCOL)
    assert path.stat().st_size < own / 3 and len(pickled) < own / 3, (path.stat().st_size, len(pickled), own)
    a, b = np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.2, -0.7])
    expected = plain(a, b)
    as_in_a_new_process()
    again = compile_function(*gradient_graph())  # loaded from the file
    for loaded in (pickle.loads(path.read_bytes()), pickle.loads(pickled)):
        assert all(o.variable in loaded.maker.fgraph.variables for o in loaded.maker.outputs)
        assert not hasattr(loaded.maker.fgraph, "shape_feature")
        for got in (function(a, b), loaded(a, b), loaded.copy()(a, b), again(a, b)):
            for e, g in zip(expected, got, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-12)
    assert len(compiled) == 1


def test_shared_variables_are_inputs_read_at_each_call(cache):
    folder, compiled = cache
    data = pytensor.shared(np.array([1.0, 2.0, 3.0]), name="data")
    x = pt.dscalar("x")
    functions = [compile_function([x], (data * x).sum()) for _ in range(2)]
    assert len(compiled) == 1, "a graph with a shared variable was not cached"
    for function in functions:
        assert isinstance(function, SharedAsInputs)
        data.set_value(np.array([1.0, 2.0, 3.0]))
        assert function(np.array(2.0)) == pytest.approx(12.0)
        data.set_value(np.array([10.0, 20.0]))  # pm.set_data reaches it, a new length included
        assert function(np.array(2.0)) == pytest.approx(60.0)


def test_a_derived_function_is_loaded_without_deriving_its_graph(cache, monkeypatch):
    """A function whose graph is derived from others (a value and its gradient) is kept under a key
    of those: found on disk, it is loaded without building the derived graph; another recipe, or
    other code of this package, derives and compiles it again."""
    folder, compiled = cache
    x = pt.dvector("x")
    source = (x**3).sum()
    derived = []

    def derive():
        derived.append(1)
        return [source, pytensor.grad(source, x)]

    functions = [compile_derived([x], [source], derive, "cube and gradient") for _ in range(2)]
    assert len(derived) == 1 and len(compiled) == 1
    for function in functions:
        value, grad = function(np.array([1.0, 2.0]))
        assert value == pytest.approx(9.0)
        np.testing.assert_allclose(grad, [3.0, 12.0])
    compile_derived([x], [source], derive, "another recipe")
    assert len(derived) == 2
    monkeypatch.setattr(function_cache, "package_source_hash", lambda: "other code")
    compile_derived([x], [source], derive, "cube and gradient")
    assert len(derived) == 3 and len(compiled) == 3


def test_a_derived_function_reads_shared_variables_at_each_call(cache):
    folder, compiled = cache
    data = pytensor.shared(np.array([1.0, 2.0, 3.0]), name="data")
    x = pt.dscalar("x")
    source = (data * x**2).sum()
    derived = []

    def derive():
        derived.append(1)
        return [source, pytensor.grad(source, x)]

    functions = [compile_derived([x], [source], derive, "weighted square", python=True) for _ in range(2)]
    assert len(derived) == 1 and len(compiled) == 1, "a graph with a shared variable was derived again"
    for function in functions:
        assert isinstance(function, SharedAsInputs)
        data.set_value(np.array([10.0, 20.0]))  # pm.set_data reaches it, a new length included
        value, grad = function(np.array(2.0))
        assert value == pytest.approx(120.0) and grad == pytest.approx(120.0)


def test_a_second_set_up_derives_no_estimator_graph_and_another_n_gets_its_own(cache, monkeypatch):
    """The estimator's functions are kept under a key of the graphs they are derived from and their
    recipe: a second set-up of the model builds no difference graph, and a model that differs only
    in N (a constant of the estimator, not of those graphs) or only in its prior gets its own
    function, equal to one compiled afresh."""
    import pymc_subsample.estimators.target as target_module

    built = []
    real = target_module.glm_differences_graph
    monkeypatch.setattr(target_module, "glm_differences_graph", lambda *a: built.append(1) or real(*a))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=3000), (rng.random(3000) < 0.4).astype(float)

    def set_up(n, prior_sd=1.0):
        with pm.Model():
            b = pm.Normal("b", 0, prior_sd, shape=2)
            pm.Bernoulli("y", logit_p=b[0] + b[1] * pm.Data("x", x[:n]), observed=pm.Data("y_obs", y[:n]))
            return pms.HMCECS(rng=0, progressbar=False)

    set_up(2000)
    assert built
    before = len(built)
    as_in_a_new_process()
    set_up(2000)
    assert len(built) == before, "a second set-up built the estimator's graph again"
    others = [set_up(2001), set_up(2000, prior_sd=0.1)]
    assert len(built) >= before + 2
    monkeypatch.setenv(function_cache.ENVIRONMENT_SWITCH, "0")
    for other in others:
        theta, batch = other.proxy.center + 0.01, other._draw_subsample().batch
        fresh = target_module.SubsampledTarget(other.tall, other.proxy.center)
        np.testing.assert_allclose(other.target.perturbed(theta, batch)[0], fresh.perturbed(theta, batch)[0],
                                   rtol=1e-12)


def test_a_function_used_again_in_the_process_is_taken_from_memory_while_its_file_is_unchanged(
        cache, monkeypatch):
    folder, compiled = cache
    loads = []
    load = function_cache._load
    monkeypatch.setattr(function_cache, "_load", lambda *args: loads.append(args) or load(*args))
    first = compile_function(*graph())
    (path,) = folder.glob("*.pkl")
    assert compile_function(*graph()) is first and not loads, "the file was loaded and linked again"
    path.write_bytes(path.read_bytes())  # the same bytes, written again: another version
    os.utime(path, ns=(0, 0))
    loaded = compile_function(*graph())
    assert len(loads) == 1 and loaded is not first and len(compiled) == 1
    assert compile_function(*graph()) is loaded and len(loads) == 1
    np.testing.assert_allclose(loaded(np.zeros(1), np.ones(1))[0], [2.0])
    path.unlink()
    compile_function(*graph())
    assert len(compiled) == 2, "a removed file's function was taken from memory"
    monkeypatch.setattr(function_cache, "MAX_KEPT_IN_MEMORY", 1)
    compile_function(*graph(scale=3.0))  # the only one kept now
    compile_function(*graph())
    assert len(loads) == 2 and len(compiled) == 3


def test_a_damaged_file_is_compiled_again_and_replaced(cache):
    folder, compiled = cache
    compile_function(*graph())
    (path,) = folder.glob("*.pkl")
    path.write_bytes(b"not a pickle")
    function = compile_function(*graph())
    assert len(compiled) == 2
    np.testing.assert_allclose(function(np.zeros(1), np.ones(1))[0], [2.0])
    compile_function(*graph())
    assert len(compiled) == 2  # the replacement loads


def test_large_constants_random_generators_and_the_switch_keep_graphs_out(cache, monkeypatch):
    folder, compiled = cache
    x = pt.vector("x")
    large = pt.constant(np.ones(function_cache.MAX_CONSTANT_BYTES // 8 + 1))
    assert graph_key([x], x + large) is None
    rng = pytensor.shared(np.random.default_rng(0))
    draw = pt.random.normal(0, 1, size=2, rng=rng)
    compile_function([x], x + draw)
    monkeypatch.setenv(function_cache.ENVIRONMENT_SWITCH, "0")
    compile_function(*graph())
    assert len(compiled) == 2 and not list(folder.glob("*.pkl"))


def test_the_least_recently_used_files_are_removed(cache, monkeypatch):
    folder, _ = cache
    for scale in (1.0, 2.0, 3.0, 4.0):
        compile_function(*graph(scale=scale))
    first, *rest = sorted(folder.glob("*.pkl"), key=lambda f: f.stat().st_mtime)
    compile_function(*graph(scale=1.0))  # loaded: now the most recently used
    total = sum(f.stat().st_size for f in folder.glob("*.pkl"))
    limit = total + 1000  # the fifth function goes over it
    monkeypatch.setattr(function_cache, "MAX_BYTES", limit)
    compile_function(*graph(scale=5.0))
    kept = list(folder.glob("*.pkl"))
    assert first in kept and rest[0] not in kept, "the least recently used file was not the one removed"
    assert sum(f.stat().st_size for f in kept) <= 0.75 * limit


def test_a_second_set_up_of_a_model_with_dims_and_data_compiles_nothing(cache):
    folder, compiled = cache
    rng = np.random.default_rng(0)
    group = rng.integers(0, 5, size=2000)
    y = rng.normal(0.3 * group, 1.0)
    with pm.Model(coords={"group": np.arange(5)}):
        g = pm.Data("g", group)
        a = pm.Normal("a", 0, 1, dims="group")
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", a[g], sigma, observed=pm.Data("y_obs", y))
        first = pms.HMCECS(rng=0, progressbar=False)
        before = len(compiled)
        as_in_a_new_process()
        second = pms.HMCECS(rng=0, progressbar=False)
    assert before >= 5 and len(compiled) == before, f"{len(compiled) - before} of {before} compiled again"
    theta = first.proxy.center + 0.01
    batch = first._draw_subsample().batch
    np.testing.assert_allclose(second.target.perturbed(theta, batch)[0],
                               first.target.perturbed(theta, batch)[0], rtol=1e-12)


def test_a_set_up_on_other_data_of_a_model_with_many_groups_compiles_nothing(cache):
    """The row-free proxy's sums at θ* are inputs of the estimator, not constants of its graph, and
    φ's vectorised functions (from 64 coordinates on) hold nothing unpicklable: a second set-up on
    other observed values loads every function. (Once the sums were constants, a new key each set-up
    and, at 1,000 groups, too large to cache; the vectorised functions held a Blockwise(Split).)"""
    folder, compiled = cache
    rng = np.random.default_rng(0)
    groups, n = 70, 3000
    g_idx, x = rng.integers(0, groups, size=n), rng.normal(size=n)
    with pm.Model():
        g, x_ = pm.Data("g", g_idx), pm.Data("x", x)
        mu, tau, b = pm.Normal("mu", 0, 1), pm.HalfNormal("tau", 1), pm.Normal("b", 0, 1)
        a = pm.Deterministic("a", mu + tau * pm.Normal("z", 0, 1, shape=groups))
        y = pm.Data("y_obs", (rng.random(n) < 0.4).astype(float))
        pm.Bernoulli("y", logit_p=a[g] + b * x_, observed=y)
        first = pms.HMCECS(rng=0, progressbar=False)
        assert first.tall.regression_view.phi is not None and first.target.proxy.sum_in_graph
        before = len(compiled)
        pm.set_data({"y_obs": (rng.random(n) < 0.6).astype(float)})
        as_in_a_new_process()
        second = pms.HMCECS(rng=0, progressbar=False)
    assert abs(second.target.proxy.loglik_sum - first.target.proxy.loglik_sum) > 1.0  # other sums
    assert before >= 5 and len(compiled) == before, f"compiled again: {[g for g in compiled[before:]]}"


def _package_files():
    from pathlib import Path

    root = Path(function_cache.__file__).resolve().parents[1]
    return root, {path: path.read_bytes() for path in sorted(root.rglob("*.py"))}


def _edited(files, root, relative, edit):
    edited = dict(files)
    edited[root / relative] = edit(files[root / relative].decode()).encode()
    return edited


def test_the_source_hash_is_the_deriving_code_not_its_comments_or_other_modules():
    """Derived functions are keyed by the code that derives them: a changed line of a module that
    builds derived graphs (or one it imports) changes the hash; a comment, a docstring or a change to
    a module outside that code (a data set loader, a sampler's kernel, the GLM view that only Firefly
    and Zig-Zag use) keeps it, so that the functions on disk stay valid."""
    root, files = _package_files()
    digest = function_cache._deriving_code_hash(root, files)
    assert function_cache._deriving_code_hash(root, dict(files)) == digest
    kept = [
        _edited(files, root, "estimators/target.py", lambda s: s.replace("\n", "\n# a comment\n", 3)),
        _edited(files, root, "model/tall.py", lambda s: s.replace('"""', '"""Reworded. ', 1)),
        _edited(files, root, "datasets.py", lambda s: s + "\nSOMETHING = 1\n"),
        _edited(files, root, "kernels/mh_tests.py", lambda s: s + "\nSOMETHING = 1\n"),
        _edited(files, root, "model/glm.py", lambda s: s + "\nSOMETHING = 1\n"),
    ]
    for edited in kept:
        assert function_cache._deriving_code_hash(root, edited) == digest
    changed = [
        _edited(files, root, "estimators/target.py", lambda s: s + "\nSOMETHING = 1\n"),  # a deriving module
        _edited(files, root, "model/differences.py", lambda s: s + "\nSOMETHING = 1\n"),  # imported by one
        _edited(files, root, "model/distributional.py", lambda s: s + "\nSOMETHING = 1\n"),  # the GLM view
    ]
    for edited in changed:
        assert function_cache._deriving_code_hash(root, edited) != digest


def test_the_source_hash_is_kept_under_the_files_bytes(tmp_path, monkeypatch):
    """The syntax trees are parsed once per version of the files: the outcome is kept in the cache
    folder and read back by a new process (here: the memo cleared), even where parsing would fail."""
    monkeypatch.setattr(function_cache, "cache_folder", lambda: tmp_path)
    function_cache.package_source_hash.cache_clear()
    try:
        digest = function_cache.package_source_hash()
        root, files = _package_files()
        assert digest == function_cache._deriving_code_hash(root, files)
        assert len(list((tmp_path / function_cache._SOURCE_HASHES).glob("*.txt"))) == 1
        function_cache.package_source_hash.cache_clear()
        monkeypatch.setattr(function_cache, "_deriving_code_hash", lambda *a: pytest.fail("parsed again"))
        assert function_cache.package_source_hash() == digest
    finally:
        function_cache.package_source_hash.cache_clear()
