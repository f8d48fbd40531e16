"""Compiled functions: PyTensor's public API, the user's mode honoured, no patch of any library;
PyMC's private step-protocol names in one module (``pymc_protocol.py``)."""

import ast
import re
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.link.numba.linker import NumbaLinker

from pymc_subsample.model.compile import (
    compile_function,
    compile_mode,
    compile_numpy,
    compile_python,
    current_mode,
    direct_call,
    runs_on_numpy,
)

PACKAGE = Path(__file__).resolve().parents[1] / "pymc_subsample"


def _graph():
    x = pt.vector("x")
    return x, pt.softplus(x).sum() + pt.exp(-x).sum()


def _expected(values):
    return np.log1p(np.exp(values)).sum() + np.exp(-values).sum()


def test_compiled_function_matches_numpy_in_the_default_numba_mode():
    x, y = _graph()
    values = np.linspace(-3, 3, 7)
    function = compile_function([x], y)
    assert isinstance(function.maker.linker, NumbaLinker)
    np.testing.assert_allclose(function(values), _expected(values), rtol=1e-12)
    np.testing.assert_allclose(compile_python([x], y)(values), _expected(values), rtol=1e-12)


def test_direct_call_is_the_numba_function_only_where_it_takes_and_gives_the_same():
    """A Numba-linked function of its inputs alone is called as its Numba function, with the same
    outputs; one reading a shared variable, or with updates, stays the function itself."""
    x = pt.vector("x", dtype="float64")
    plain = pytensor.function([x], [pt.softplus(x).sum(), pt.sigmoid(x)], mode="NUMBA", trust_input=True)
    direct = direct_call(plain)
    assert direct is not plain
    value = np.array([-1.0, 0.5, 3.0])
    for got, expected in zip(direct(value), plain(value), strict=True):
        np.testing.assert_array_equal(got, expected)
    shared = pytensor.shared(np.ones(3))
    reads_shared = pytensor.function([x], [(x * shared).sum()], mode="NUMBA")
    counter = pytensor.shared(0.0)
    updates = pytensor.function([x], [x.sum()], mode="NUMBA", updates={counter: counter + 1.0})
    assert direct_call(reads_shared) is reads_shared and direct_call(updates) is updates


def test_a_numpy_function_computes_softplus_and_trigamma_over_whole_arrays():
    """Softplus and trigamma, whose elementwise ops have no array function in PyTensor, run as
    NumPy and SciPy calls over the arrays and agree with the compiled function; an op with no array
    function of ours gives None (the caller compiles)."""
    x = pt.vector("x")
    # a softplus of a softplus too (a zero-inflated likelihood's log-sum-exp of its log-weights)
    outputs = [pt.softplus(x) * 2.0, pt.tri_gamma(pt.exp(x)), pt.sigmoid(x),
               pt.softplus(1.0 - pt.softplus(x))]
    values = np.linspace(-30, 30, 11)
    on_numpy = compile_numpy([x], outputs)
    assert on_numpy is not None and runs_on_numpy(on_numpy)
    for a, b in zip(on_numpy(values), compile_function([x], outputs)(values), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert compile_numpy([x], [pt.log1mexp(-pt.exp(x))]) is None


def test_trigamma_over_arrays_agrees_with_scipy():
    """The array trigamma of the set-up's passes against SciPy's polygamma(1, x): positive values
    from 10⁻⁶ to 10⁸ (both sides of the asymptotic series' threshold), negative ones between the
    poles, the poles, NaN and ∞, float32 input."""
    import scipy.special

    from pymc_subsample.model.compile import TRIGAMMA_ASYMPTOTIC, trigamma

    x = np.concatenate([np.geomspace(1e-6, 1e8, 20_001), np.linspace(0.01, 2 * TRIGAMMA_ASYMPTOTIC, 20_001),
                        -np.linspace(0.013, 7.7, 1001)])
    np.testing.assert_allclose(trigamma(x), scipy.special.polygamma(1, x), rtol=5e-12)
    special = np.array([0.0, -1.0, -3.0, np.nan, np.inf])
    np.testing.assert_array_equal(trigamma(special), scipy.special.polygamma(1, special))
    single = np.linspace(0.5, 30, 7, dtype=np.float32)
    np.testing.assert_allclose(trigamma(single), scipy.special.polygamma(1, single.astype(float)), rtol=1e-12)


def test_a_mode_chosen_for_a_block_is_used_there_and_nowhere_else():
    x, y = _graph()
    values = np.linspace(-3, 3, 7)
    with compile_mode("FAST_COMPILE"):
        inside = compile_function([x], y)
        assert current_mode().linker is pytensor.compile.mode.get_mode("FAST_COMPILE").linker
    outside = compile_function([x], y)
    assert not isinstance(inside.maker.linker, NumbaLinker)
    assert isinstance(outside.maker.linker, NumbaLinker)
    np.testing.assert_allclose(inside(values), outside(values), rtol=1e-12)


def test_a_step_honours_its_compile_kwargs_mode():
    import pymc_subsample as pms
    from tests.conftest import logistic_data, logistic_model

    X, y = logistic_data(n=400, d=2)
    with logistic_model(X, y) as model:
        # a potential that is not a quadratic keeps the prior off the closed form (prior_kernel), so
        # that it is compiled
        pm.Potential("pull", -0.1 * model["beta"][0] ** 4)
        step = pms.HMCECS(subsample_size=50, compile_kwargs={"mode": "FAST_COMPILE"})
        pm.sample(step=step, draws=3, tune=3, chains=1, progressbar=False, random_seed=1,
                  compute_convergence_checks=False)
    functions = step.target.functions.all()
    eta = step.target._eta_perturbed  # the logistic's estimate: the prior's function, f in a kernel
    # PyTensor's functions only: a closed-form prior (prior_kernel) is the package's own Numba kernel,
    # compiled from no graph, as the closed form's f is
    functions += [] if eta is None else [f for f in (eta.rows_function, eta.prior_function)
                                         if f is not None and hasattr(f, "maker")]
    linkers = {type(f.maker.linker) for f in functions}
    assert linkers and NumbaLinker not in linkers, linkers


#: names of PyTensor's C-linker internals the package must not use
_C_INTERNALS = re.compile(
    r"\b(CLinker|GCC_compiler|dlimport|get_module_cache|link\.c\b|compile_str|make_all)\b")


def _library_names(tree) -> set:
    """Names bound by ``import pytensor...``/``import pymc...`` or ``from pytensor/pymc... import``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("pytensor", "pymc"):
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("pytensor", "pymc"):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _patches(source: str) -> list[str]:
    """Assignments to an attribute of a PyTensor or PyMC name, ``setattr`` on one, and uses of the
    C linker's internals, in ``source``.
    """
    tree = ast.parse(source)
    library = _library_names(tree)
    found = [f"line {m.string.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for m in _C_INTERNALS.finditer(source)]
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setattr", "delattr") \
                and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())]
        for target in targets:
            while isinstance(target, (ast.Attribute, ast.Subscript)):
                target = target.value
                if isinstance(target, ast.Name) and target.id in library:
                    found.append(f"line {node.lineno}: assignment to an attribute of {target.id}")
    return found


def test_the_audit_finds_a_patch_when_there_is_one():
    assert _patches("import pytensor\npytensor.config.mode = 'C'\n")
    assert _patches("from pytensor.link.c.cmodule import GCC_compiler\nGCC_compiler.compile_str = f\n")
    assert _patches("from pymc.step_methods import hmc\nsetattr(hmc, 'NUTS', None)\n")
    assert not _patches("import pytensor\nx = pytensor.config.mode\n")


def test_the_package_patches_no_pytensor_or_pymc_object_and_uses_no_c_linker_internals():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        patches = _patches(path.read_text())
        if patches:
            found[str(path.relative_to(PACKAGE))] = patches
    assert not found, found


#: counts the reads of PyTensor's ``blas__ldflags`` setting in the process it runs in
BLAS_FLAG_READS = """
import pytensor.configparser as configparser
reads = []
original = configparser.ConfigParam.__get__
def counted(self, cls, type_=None, delete_key=False):
    if self.name == "blas__ldflags":
        reads.append(1)
    return original(self, cls, type_, delete_key)
configparser.ConfigParam.__get__ = counted
"""


def test_the_numpy_functions_rewrite_no_graph_for_a_c_blas():
    """The rows' terms in NumPy are rewritten without PyTensor's C-only rewrites. Its C BLAS rewrite
    reads the BLAS link flags, and where pip installed PyTensor without a BLAS that read warned on
    every first HMCECS set-up ("PyTensor could not link to a BLAS installation"), though nothing of
    ours runs in C. In a fresh process (PyTensor reads the flags once per process), with a counter
    on that read: a test instrument in its own process, not the package's."""
    import subprocess
    import sys

    code = BLAS_FLAG_READS + """
import numpy as np
import pytensor.tensor as pt
from pymc_subsample.model.compile import compile_numpy
X, b = pt.dmatrix("X"), pt.dvector("b")
compile_numpy([X, b], [pt.softplus(X @ b)])(np.ones((3, 2)), np.ones(2))
print("reads", len(reads))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["reads", "0"], out


#: the private names PyMC 6.4's step protocol reads on a step method or a ``logp_dlogp_func``
PYMC_PROTOCOL_NAMES = ("_state_class", "_raveled_inputs", "_extra_vars_shared", "_pytensor_function",
                       "_progressbar_config", "_make_progressbar_update_functions")
#: the one module of the package that may name them
PROTOCOL_MODULE = "pymc_protocol.py"
_PROTOCOL_NAME = re.compile(r"\b(" + "|".join(PYMC_PROTOCOL_NAMES) + r")\b")


def _protocol_names(source: str) -> list[str]:
    """Every occurrence of one of PyMC's private protocol names in ``source`` (code, comment or
    docstring), as ``"line n: name"``."""
    return [f"line {source.count(chr(10), 0, m.start()) + 1}: {m.group(1)}"
            for m in _PROTOCOL_NAME.finditer(source)]


def _defined_names(source: str) -> set:
    """Names ``source`` defines: functions, assigned names, and attributes assigned to."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def test_pymc_private_protocol_names_occur_in_one_module_only():
    """Project standard: where PyMC's step protocol forces a private name, it is in one module."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative != PROTOCOL_MODULE:
            names = _protocol_names(path.read_text())
            if names:
                found[relative] = names
    assert not found, found
    # and that module defines every one of them in code, not only in its docstring (a name dropped
    # from it would silently leave PyMC's default: no per-chain state, no columns in the bar)
    assert set(PYMC_PROTOCOL_NAMES) <= _defined_names((PACKAGE / PROTOCOL_MODULE).read_text())


#: where PyMC 6.4 reads each name: its module, and the object whose source names it
PYMC_READERS = {
    "_state_class": ("pymc.step_methods.state", "WithSamplingState"),
    "_raveled_inputs": ("pymc.step_methods.hmc.integration", "CpuLeapfrogIntegrator"),
    "_pytensor_function": ("pymc.step_methods.hmc.integration", "CpuLeapfrogIntegrator"),
    "_extra_vars_shared": ("pymc.step_methods.arraystep", "GradientSharedStep"),
    "_progressbar_config": ("pymc.progress_bar.progress", "MCMCProgressBarManager"),
    "_make_progressbar_update_functions": ("pymc.progress_bar.progress", "MCMCProgressBarManager"),
}


@pytest.mark.parametrize("name", PYMC_PROTOCOL_NAMES)
def test_the_installed_pymc_still_reads_each_protocol_name(name):
    """A name PyMC stopped reading would be silently ignored (no per-chain state reset, no columns in
    the bar, PyMC's integrator calling a method we no longer feed): fail here instead, and change
    ``pymc_protocol.py``."""
    import importlib
    import inspect

    module, reader = PYMC_READERS[name]
    source = inspect.getsource(getattr(importlib.import_module(module), reader))
    assert re.search(rf"\.{name}\b", source), f"{module}.{reader} no longer reads {name}"


def test_the_protocol_scan_finds_a_name_when_there_is_one():
    assert _protocol_names("class Step:\n    _state_class = StepState\n") == ["line 2: _state_class"]
    assert _protocol_names("    def _pytensor_function(self, q):\n") == ["line 1: _pytensor_function"]
    assert _protocol_names("cols = step._progressbar_config(2)  # _raveled_inputs") == [
        "line 1: _progressbar_config", "line 1: _raveled_inputs"]
    assert {"_state_class", "_pytensor_function"} <= _defined_names(
        "def f(cls):\n    cls._state_class = S\nclass P:\n    def _pytensor_function(self): ...\n")
    assert "_raveled_inputs" not in _defined_names('"""``_raveled_inputs``"""\n')
    # names that only contain one of them are the package's own
    assert not _protocol_names("_progress_columns = ()\nmy_state_class = 1\n_state_classes = []\n")
