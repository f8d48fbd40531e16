"""Compiled functions kept on disk, so that a set-up in a new process does not rewrite its graphs again.

PyTensor caches the C modules of a compiled function in its compile directory, but not the graph
rewriting that comes before them: on a warm cache, compiling the HMC-ECS estimator of the Poisson zoo
model still takes 0.21 s, nearly all of it rewriting (``benchmarks/README.md``), every time a user runs
their script again. A PyTensor function pickles with its rewritten graph, and unpickling links that
graph without rewriting it (``FunctionMaker`` keeps the rewritten ``fgraph``), against the same C
modules: 0.025 s for that estimator. :func:`cached_function` keeps each function our set-up compiles
in ``<compiledir>/pymc_subsample_functions``, under a key of the graph *before* rewriting.

The key is a SHA-256 of everything the rewritten function depends on:

- the graph's structure from the inputs to the outputs, node by node in topological order: each
  op's class and its ``__props__`` (what PyTensor itself compares ops by; an op without
  ``__props__`` is pickled whole), the type of every variable, and each input's position;
- the value of every constant (its bytes);
- PyTensor's version, its configuration hash (``config.get_config_hash()``, the options its C
  module cache keys on), the rewriting options and the compilation mode;

and not the names, stack traces or test values of the variables, which change no computation. Two
graphs with one key are thus the same computation in PyTensor's own sense of op equality; a graph
that differs in anything else gets another key and is compiled.

A graph that reads shared variables (``pm.Data``, the lengths of a model's ``dims``) is cached with
each of them replaced by an input (an unpickled function would hold a copy of their values, which
``pm.set_data`` would not reach): :class:`SharedAsInputs` passes their current values at each call.
What is never cached: a graph with a shared random generator, or with a constant above
:data:`MAX_CONSTANT_BYTES` (the cache would hold the data). A file that fails to load for any
reason (another PyTensor, a truncated write) is compiled again and replaced. Files are written
atomically and the least recently used are removed beyond :data:`MAX_BYTES`. Set the environment
variable ``PYMC_SUBSAMPLE_FUNCTION_CACHE=0`` to compile every function afresh.

A function whose graph our code derives from a few others (the estimator and its gradient from the
rows' log-likelihood and the prior; a log prior's gradient; φ's vector-Jacobian product) is kept
under a key of those source graphs instead (:func:`cached_derived_function`), with the recipe (what
is derived, and the constants it adds, such as N) and a hash of the code that derives it
(:func:`package_source_hash`: the deriving modules and what they import, without docstrings) in the
key's context: on a hit the derived graph is never built — the gradients were most of what a warm
set-up still spent on building graphs it then loaded from here (sixteenth session).

A file holds the compiled function and nothing of the graph it was rewritten from
(:class:`_CompiledFunctionPickler`): PyTensor's own pickle of a function also carries the graph
*before* rewriting (``FunctionMaker.outputs`` still names the original output variables) and the
bookkeeping of every variable the rewriting created and discarded (the clients maps of the
function graph and of its ``DestroyHandler``, ``ShapeFeature``'s symbolic shapes, the removed
nodes): 10× the function itself, 1.2 MB for the linear zoo model's 56-node estimator. Those are
used while rewriting, which a loaded function never does again; left out, the files are ~10×
smaller and load 30-50% faster (``benchmarks/README.md``, fourteenth session). The functions
themselves pickle the same way (:class:`CompiledFunction`), which is how PyMC sends a step method
to each chain's process.

A function loaded or compiled in this process is kept in memory as well, by file
(:data:`MAX_KEPT_IN_MEMORY`, the most recently used): a second set-up of the same model in one
session (a notebook cell run again, ``pm.set_data`` and a new step, a loop over data sets) takes it
from there instead of linking its file again. Linking a loaded file was a quarter of such a set-up:
PyTensor makes a thunk for each node and computes its C module's key again, ~0.8 ms a node, 45-140 ms
for the 6-8 functions of a zoo model's HMCECS set-up (nineteenth session). The function kept is the
one the file holds (its size and modification time are checked at each use: a file replaced or
removed is loaded again, or compiled), and sharing it is what copies of a step method already do:
a compiled function keeps no state between calls, and returns new arrays.

Unpickling a file runs code from it, as PyTensor's own cache of compiled modules does from the
same directory: the cache trusts the compile directory as PyTensor does.
"""

from __future__ import annotations

import ast
import copy
import copyreg
import functools
import hashlib
import io
import os
import pickle
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytensor
from pytensor.compile.function.types import Function, FunctionMaker
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.destroyhandler import DestroyHandler
from pytensor.graph.features import ReplaceValidate
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.basic import MergeFeature
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.type import TensorType

__all__ = ["MAX_CONSTANT_BYTES", "MAX_BYTES", "SharedAsInputs", "cache_enabled", "cache_folder",
           "CompiledFunction", "cached_function", "compiled_function_bytes", "forget_functions_in_memory",
           "graph_key"]

#: constants larger than this (model data written as NumPy arrays) keep a graph out of the cache
MAX_CONSTANT_BYTES = 1 << 20
#: bytes kept; beyond, the least recently used files are removed down to 3/4 of it (a function takes
#: 0.02-4 MB, its rewritten graph with PyTensor's bookkeeping of it: a few MB per model and sampler)
MAX_BYTES = 256 << 20
FOLDER = "pymc_subsample_functions"
ENVIRONMENT_SWITCH = "PYMC_SUBSAMPLE_FUNCTION_CACHE"
#: compiled functions kept in memory, by file (module docstring): a zoo model's set-up uses 6-8
MAX_KEPT_IN_MEMORY = 64
#: PyTensor options that change how a graph is rewritten or linked, beyond its C-module key
_REWRITE_OPTIONS = ("mode", "linker", "optimizer", "optimizer_excluding", "optimizer_including",
                    "optimizer_requiring", "floatX", "cast_policy", "on_opt_error", "blas__ldflags")


class _NotCacheable(Exception):
    """The graph reads something a file cannot stand for (large data, a root that is not an input)."""


def cache_enabled() -> bool:
    return os.environ.get(ENVIRONMENT_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_folder() -> Path:
    """Where the functions are kept: beside PyTensor's C modules, in its compile directory."""
    return Path(pytensor.config.compiledir) / FOLDER


def graph_key(inputs, outputs, context=()) -> str | None:
    """The cache key of ``pytensor.function(inputs, outputs)`` compiled under ``context`` (module
    docstring), or None when the graph must not be cached.
    """
    # a function of one output returns an array, of a list of outputs a list: not the same function
    listed = isinstance(outputs, (list, tuple))
    outputs = list(outputs) if listed else [outputs]
    digest = hashlib.sha256()
    try:
        digest.update(pickle.dumps((pytensor.__version__, np.__version__, pytensor.config.get_config_hash(),
                                    [str(getattr(pytensor.config, o, None)) for o in _REWRITE_OPTIONS],
                                    tuple(context), listed)))
        refs = {}
        for i, variable in enumerate(inputs):
            refs[variable] = ("input", i)
            digest.update(pickle.dumps(("input", i, variable.type)))
        for node in io_toposort(list(inputs), outputs):
            digest.update(pickle.dumps((_op_signature(node.op), [_ref(v, refs, digest) for v in node.inputs],
                                        [out.type for out in node.outputs])))
            for j, out in enumerate(node.outputs):
                refs[out] = ("node", len(refs), j)
        digest.update(pickle.dumps([_ref(v, refs, digest) for v in outputs]))
    except Exception:  # _NotCacheable, or anything a graph's ops cannot be pickled with: compiled as usual
        return None
    return digest.hexdigest()


def _op_signature(op):
    props = getattr(op, "__props__", None)
    cls = (type(op).__module__, type(op).__qualname__)
    if props is None:
        return cls, pickle.dumps(op)
    return cls, tuple((p, _prop_value(getattr(op, p))) for p in props)


def _prop_value(value):
    """An op's property as its key sees it: a mapping by its items, without the state it caches
    on itself. PyTensor's ``frozendict`` (an Elemwise's ``inplace_pattern``) pickles the hash it
    computes on first use, so the same graph had one key before any function was compiled in
    the process and another after (a model's first set-up wrote files its second could not find).
    """
    if isinstance(value, Mapping):
        return ("mapping", tuple(sorted(((k, _prop_value(v)) for k, v in value.items()), key=repr)))
    return value


def _ref(variable, refs, digest):
    """The token of a node's input: an input's or an earlier node output's position, or a constant's
    value, which is hashed into ``digest`` once.
    """
    if variable in refs:
        return refs[variable]
    if not isinstance(variable, Constant):  # a shared variable, or a root the inputs do not give
        raise _NotCacheable(variable)
    data = variable.data
    if isinstance(data, np.ndarray):
        if data.nbytes > MAX_CONSTANT_BYTES:
            raise _NotCacheable(variable)
        value = (data.dtype.str, data.shape, hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest())
    else:
        value = pickle.dumps(data)
    token = ("constant", len(refs))
    refs[variable] = token
    digest.update(pickle.dumps((token, variable.type, value)))
    return token


def cached_function(inputs, outputs, compile_, context=(), load_context=None):
    """``compile_(inputs, outputs)`` (a ``pytensor.function``), or the function a previous call with
    the same key kept on disk. ``load_context``: a context manager under which the function is linked
    again (the compiler flags its C modules were built with, so that it finds them).

    A graph that reads shared variables (``pm.Data``, the lengths of a model's ``dims``) is compiled
    with each of them replaced by an input of its type, and called with their current values
    (:class:`SharedAsInputs`): the file holds no copy of them, and a later ``pm.set_data`` reaches
    the function as it reaches one compiled with the shared variables themselves.
    """
    if not cache_enabled():
        return _pickled_lean(compile_(inputs, outputs))
    single = not isinstance(outputs, (list, tuple))
    outputs = [outputs] if single else list(outputs)
    shared = _shared_variables(outputs)
    if shared is None:  # random generators: updated in place
        return _pickled_lean(compile_(inputs, outputs[0] if single else outputs))
    if shared:
        stand_ins = [v.type(name=v.name) for v in shared]
        outputs = graph_replace(outputs, dict(zip(shared, stand_ins, strict=True)), strict=False)
        inputs = [*inputs, *stand_ins]
    outputs = outputs[0] if single else outputs
    function = _pickled_lean(_cached(inputs, outputs, compile_, context, load_context))
    return SharedAsInputs(function, shared) if shared else function


def cached_derived_function(inputs, sources, derive, compile_, recipe, context=(), load_context=None):
    """``compile_(inputs, derive())``, kept on disk under a key of ``sources`` instead of the derived
    graphs: a hit loads the function without calling ``derive``.

    For functions whose graphs are derived from a few others by code of this package alone (a log
    density and its gradient, a vector-Jacobian product): ``derive() -> outputs`` must read nothing
    but ``sources`` and ``inputs``. Building the derived graph was the cost a warm set-up still paid
    for a function it then loaded from here: ``pytensor.grad`` of a model's log prior took 15-54 ms
    of every set-up of the zoo's models (``benchmarks/README.md``, sixteenth session). The key is
    :func:`graph_key` of ``sources`` (shared variables as inputs, as :func:`cached_function` does),
    with ``recipe`` (the name of ``derive``, which fixes its outputs' arity) and a hash of the code
    that derives graphs (:func:`package_source_hash`) in its context: a file written by other
    deriving code is never loaded. ``derive`` must be defined in a module that calls this function
    or ``compile_derived``, and call only code those modules import (the hash covers no other).
    A derived graph that reads a shared variable the sources do not is compiled by
    :func:`cached_function` instead.
    """
    if not cache_enabled():
        return cached_function(inputs, derive(), compile_, context, load_context)
    shared = _shared_variables(sources)
    key = None
    if shared is not None:
        stand_ins = [v.type(name=v.name) for v in shared]
        replace = dict(zip(shared, stand_ins, strict=True))
        key_sources = graph_replace(list(sources), replace, strict=False) if shared else list(sources)
        key = graph_key([*inputs, *stand_ins], key_sources,
                        (*context, "derived", recipe, package_source_hash()))
    if key is None:
        return cached_function(inputs, derive(), compile_, context, load_context)
    path = cache_folder() / f"{key}.pkl"
    function = _kept_function(path, len(inputs) + len(shared), load_context)
    if function is None:
        outputs = derive()
        listed = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        read = _shared_variables(listed)
        if read is None or not set(read) <= set(shared):
            return cached_function(inputs, outputs, compile_, context, load_context)
        if shared:
            outputs = graph_replace(outputs, replace, strict=False)
        function = compile_([*inputs, *stand_ins], outputs)
        _store(function, path.parent, path)
    function = _pickled_lean(function)
    return SharedAsInputs(function, shared) if shared else function


def _shared_variables(outputs) -> list | None:
    """The shared variables ``outputs`` read, in a fixed order; None where one is not a tensor (a
    random generator, updated in place: never cached).
    """
    shared = list(dict.fromkeys(v for v in graph_inputs(list(outputs)) if isinstance(v, SharedVariable)))
    return None if any(not isinstance(v.type, TensorType) for v in shared) else shared


#: the functions whose callers derive graphs: the modules that call them are where hashing starts
_DERIVING_CALLS = frozenset({"compile_derived", "cached_derived_function"})
_SOURCE_HASHES = "source_hashes"


@functools.cache
def package_source_hash() -> str:
    """A hash of the code that derives the graphs of :func:`cached_derived_function`, or the
    package's version where its files cannot be read.

    The code is every module that calls :data:`_DERIVING_CALLS` and every module of this package
    they import, transitively (a package's ``__init__`` only where a name is imported from it that
    is not a submodule): 17 of the package's 59 files. Each is hashed as its syntax tree without
    docstrings (``ast.dump``, which has no line numbers), so that a comment, a docstring or a change
    to a sampler, a diagnostic or a data set loader keeps the functions on disk; hashing the raw
    bytes of every file had made a one-line comment re-derive and rewrite every estimator the tests
    build (a test run on a new commit 12 → 15 min, seventeenth session). Parsing costs 0.26 s, so the
    outcome is kept beside the functions under a hash of the files' raw bytes (2.2 ms a process).
    """
    root = Path(__file__).resolve().parents[1]
    try:
        files = {path: path.read_bytes() for path in sorted(root.rglob("*.py"))}
    except OSError:
        from pymc_subsample import __version__

        return f"version {__version__}"
    raw = hashlib.sha256()
    for path, text in files.items():
        raw.update(str(path.relative_to(root)).encode() + b"\0" + text + b"\0")
    kept = cache_folder() / _SOURCE_HASHES / f"{raw.hexdigest()}.txt"
    try:
        return kept.read_text().strip()
    except OSError:
        pass
    digest = _deriving_code_hash(root, files)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(kept, digest.encode())
        for stale in sorted(kept.parent.glob("*.txt"), key=lambda f: f.stat().st_mtime)[:-64]:
            stale.unlink(missing_ok=True)  # one small file per version of the code: the last 64 kept
    except OSError:
        pass
    return digest


def _deriving_code_hash(root: Path, files: dict) -> str:
    """SHA-256 of the docstring-free syntax trees of the modules :func:`package_source_hash` names."""
    package = root.name
    texts = {_module_name(path, root, package): (path, text) for path, text in files.items()}
    # parsed on demand: only the modules hashed, and those whose text names a deriving call
    starts = [name for name, (_, text) in texts.items()
              if any(call.encode() in text for call in _DERIVING_CALLS)]
    trees = {name: ast.parse(texts[name][1]) for name in starts}
    todo = [name for name in starts if _calls_any(trees[name], _DERIVING_CALLS)]
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in texts:
            continue
        seen.add(name)
        if name not in trees:
            trees[name] = ast.parse(texts[name][1])
        for module, names in _package_imports(trees[name], package):
            for imported in names:
                if f"{module}.{imported}" in texts:  # a submodule
                    todo.append(f"{module}.{imported}")
                elif not imported.startswith("__"):  # a name: its module, or a package's __init__
                    todo.append(module)
            if not names:
                todo.append(module)
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(f"{texts[name][0].relative_to(root)}\0{ast.dump(_without_docstrings(trees[name]))}\0".encode())
    return digest.hexdigest()


def _module_name(path: Path, root: Path, package: str) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join((package, *parts[:-1])) if parts[-1] == "__init__" else ".".join((package, *parts))


def _calls_any(tree, names) -> bool:
    return any(isinstance(node, ast.Call) and _called_name(node) in names
               for node in ast.walk(tree))


def _called_name(call):
    return getattr(call.func, "id", getattr(call.func, "attr", None))


def _package_imports(tree, package):
    """(module, imported names) for each import of ``package``'s modules anywhere in ``tree``
    (imports inside functions included); ``import a.b`` gives (``a.b``, ()).
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            yield node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package:
                    yield alias.name, ()


def _without_docstrings(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


class SharedAsInputs:
    """A compiled function whose last inputs stand for shared variables: called with the other
    inputs, it passes their current values (``get_value(borrow=True)``, no copy).
    """

    def __init__(self, function, shared):
        self.function, self.shared = function, list(shared)
        self.maker = function.maker

    def __call__(self, *args):
        return self.function(*args, *[v.get_value(borrow=True) for v in self.shared])


def _cached(inputs, outputs, compile_, context, load_context):
    key = graph_key(inputs, outputs, context)
    if key is None:
        return compile_(inputs, outputs)
    folder = cache_folder()
    path = folder / f"{key}.pkl"
    function = _kept_function(path, len(inputs), load_context)
    if function is None:
        function = compile_(inputs, outputs)
        _store(function, folder, path)
    return function


def _kept_function(path, n_inputs, load_context):
    """The function kept at ``path``, or None where there is none, it fails to load, or it does not
    take ``n_inputs`` inputs. From memory where this process loaded or stored that file unchanged.
    """
    function = _in_memory(path)
    if function is None:
        if not path.exists():
            return None
        function = _load(path, load_context)
        if function is None:
            return None
        _keep_in_memory(path, function)
    if len(function.maker.fgraph.inputs) != n_inputs:
        return None
    return function


#: path → ((size, modification time) of the file, the function it holds), least recently used first
_in_memory_functions: dict[Path, tuple[tuple[int, int], Function]] = {}


def _file_version(path):
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _in_memory(path):
    """The function this process keeps for ``path``, if the file is still the one it came from."""
    entry = _in_memory_functions.pop(path, None)
    if entry is None:
        return None
    version, function = entry
    if _file_version(path) != version:
        return None
    try:
        os.utime(path)  # recently used, for the files' pruning
    except OSError:
        return None
    _keep_in_memory(path, function)  # now the most recently used, under the touched file's version
    return function


def forget_functions_in_memory():
    """Forget the functions this process keeps in memory: each next use loads its file, as a new
    process does (for benchmarks and tests of that path).
    """
    _in_memory_functions.clear()


def _keep_in_memory(path, function):
    version = _file_version(path)
    if version is None:
        return
    _in_memory_functions.pop(path, None)
    _in_memory_functions[path] = (version, function)
    while len(_in_memory_functions) > MAX_KEPT_IN_MEMORY:
        del _in_memory_functions[next(iter(_in_memory_functions))]


def _load(path, load_context):
    try:
        data = path.read_bytes()
        if load_context is None:
            function = pickle.loads(data)
        else:
            with load_context():
                function = pickle.loads(data)
        os.utime(path)  # recently used
        return function
    except Exception:  # a stale or damaged file is compiled again and replaced, never trusted
        path.unlink(missing_ok=True)
        return None


def _store(function, folder, path):
    try:
        data = compiled_function_bytes(function)
        folder.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, data)
        _keep_in_memory(path, function)
        _prune(folder)
    except Exception:  # an unpicklable function, a read-only or full disk: the run goes on uncached
        return


def _write_atomically(path, data: bytes):
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)  # a concurrent reader sees the whole file or none


def _prune(folder):
    files = [(f, f.stat()) for f in folder.glob("*.pkl")]
    total = sum(stat.st_size for _, stat in files)
    if total <= MAX_BYTES:
        return
    for stale, stat in sorted(files, key=lambda entry: entry[1].st_mtime):  # least recently used first
        if total <= MAX_BYTES * 3 // 4:
            break
        stale.unlink(missing_ok=True)
        total -= stat.st_size


def compiled_function_bytes(function) -> bytes:
    """``function`` pickled without the graph it was rewritten from (:class:`_CompiledFunctionPickler`)."""
    buffer = io.BytesIO()
    _CompiledFunctionPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(function)
    return buffer.getvalue()


def _state(obj) -> dict:
    """A copy of the state pickle would store for ``obj`` (its class's ``__getstate__``: PyTensor's
    leave out what does not pickle, such as the rewriting history's closures).
    """
    return dict(obj.__getstate__())


def _rebuilt(obj, state):
    """What pickle's default reduction of a plain object gives: its class and its state."""
    return copyreg.__newobj__, (type(obj),), state


def _maker_reduced(maker):
    """A ``FunctionMaker`` whose outputs name the rewritten graph's variables: the originals hold
    the whole graph before rewriting, and a compiled maker reads only their ``borrow`` flags.
    """
    state = _state(maker)
    outputs = []
    for spec, variable in zip(maker.outputs, maker.fgraph.outputs, strict=False):  # then updates
        spec = copy.copy(spec)
        spec.variable = variable
        outputs.append(spec)
    state["outputs"] = outputs
    return _rebuilt(maker, state)


#: features of a function graph that serve its rewriting only (symbolic shapes; merging equal
#: nodes), and the attributes they set on it
_REWRITING_FEATURES = {ShapeFeature: "shape_feature", MergeFeature: "merge_feature"}


def _live_clients(clients, graph):
    """A clients map without the variables the rewriting created and discarded."""
    return {variable: users for variable, users in clients.items() if variable in graph.variables}


def _fgraph_reduced(fgraph):
    state = _state(fgraph)  # PyTensor's own, less the bound methods of its features
    rewriting = tuple(_REWRITING_FEATURES)
    state["_features"] = [f for f in fgraph._features if not isinstance(f, rewriting)]
    for attribute in _REWRITING_FEATURES.values():
        state.pop(attribute, None)
    state["clients"] = _live_clients(fgraph.clients, fgraph)
    return _rebuilt(fgraph, state)


def _destroy_handler_reduced(handler):
    state = _state(handler)
    state["clients"] = _live_clients(handler.clients, handler.fgraph)
    return _rebuilt(handler, state)


def _replace_validate_reduced(feature):
    state = _state(feature)
    state["_nodes_removed"] = set()  # the nodes the rewriting removed
    return _rebuilt(feature, state)


class CompiledFunction(Function):
    """A compiled PyTensor function that pickles as :func:`compiled_function_bytes` does: its linked
    graph without the graphs it was rewritten from. PyMC sends a step method to each chain's process
    by pickling it (``pm.sample(cores=...)`` under forkserver or spawn), our functions with it:
    PyTensor's own pickle of them made the linear zoo model's HMCECS step 6.1 MB, 0.5 s to pickle
    and 0.7 s to load in each process (``benchmarks/README.md``, fourteenth session). Loaded, it is
    a plain ``Function``.
    """

    def __reduce__(self):
        return pickle.loads, (compiled_function_bytes(self),)


def _pickled_lean(function):
    """``function`` as a :class:`CompiledFunction` (its class changed in place, nothing else: the
    subclass adds no state), where it is a plain PyTensor ``Function``.
    """
    if type(function) is Function:
        function.__class__ = CompiledFunction
    return function


class _CompiledFunctionPickler(pickle.Pickler):
    """Pickles a compiled PyTensor function as its linked graph, without what rewriting kept of the
    graphs before it (module docstring). Loaded with plain ``pickle.loads``: the objects are those
    of PyTensor's own pickle, with less in them, so a file needs nothing of this module to load.
    """

    dispatch_table = {
        **copyreg.dispatch_table,
        CompiledFunction: copyreg.dispatch_table[Function],  # PyTensor's own reduction of a function
        FunctionMaker: _maker_reduced,
        FunctionGraph: _fgraph_reduced,
        DestroyHandler: _destroy_handler_reduced,
        ReplaceValidate: _replace_validate_reduced,
    }
