"""The package's layers, read from the source with ``ast``: the kernels import no PyMC, directly or
through the package modules they import, and no module imports a layer above its own."""

import ast
from collections import deque
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pymc_subsample"
ROOT = "pymc_subsample"


def _module_name(path: Path) -> str:
    parts = (ROOT, *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: every module of the package, by dotted name (a subpackage by the name of its ``__init__``)
MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str) -> list[tuple[str, int]]:
    """(imported name, line) for every import statement of ``module``, at module level or inside a
    function (a function's import runs when it is called). A name of the package is the module
    imported: ``from a.b import c`` imports the module ``a.b.c`` where there is one, else ``a.b``.
    """
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule if submodule in MODULES else base, node.lineno))
    return list(dict.fromkeys(found))


def _run_by_importing(name: str) -> list[str]:
    """The package's modules that importing ``name`` runs: the ``__init__`` of each subpackage it
    lives in, then the module itself. The root ``__init__`` is left out: it imports every layer by
    design, so that ``import pymc_subsample`` gives the whole API.
    """
    parts = name.split(".")
    prefixes = [".".join(parts[:i]) for i in range(2, len(parts) + 1)]
    return [prefix for prefix in prefixes if prefix in MODULES]


def _top(name: str) -> str:
    return name.split(".")[0]


# ------------------------------------------------------------------ kernels stay PyMC-free
KERNELS = sorted(name for name in MODULES if name == f"{ROOT}.kernels" or name.startswith(f"{ROOT}.kernels."))
#: what a kernel may not reach: PyMC itself, and the module where PyMC's private step protocol is
#: written (a class that subclasses one of its adapters is PyMC-facing, and lives in step_methods)
FORBIDDEN = {"pymc": "PyMC", f"{ROOT}.pymc_protocol": "PyMC's step protocol"}


def _reached(start: str) -> dict[str, tuple[str, int] | None]:
    """Every module of the package that importing ``start`` runs, transitively, each with the
    module and line that first imports it (None for ``start`` and its packages' ``__init__``)."""
    parent: dict[str, tuple[str, int] | None] = dict.fromkeys(_run_by_importing(start))
    queue = deque(parent)
    while queue:
        module = queue.popleft()
        for name, line in _imports(module):
            if _top(name) != ROOT:
                continue
            for reached in _run_by_importing(name):
                if reached not in parent:
                    parent[reached] = (module, line)
                    queue.append(reached)
    return parent


def _chain(parent, module: str) -> list[str]:
    links = [module]
    while parent[module] is not None:
        module, line = parent[module]
        links[-1] += f" (imported at {MODULES[module].relative_to(PACKAGE.parent)}:{line})"
        links.append(module)
    return links[::-1]


def external_imports(start: str, top: str) -> list[str]:
    """For each module that importing ``start`` runs and that imports ``top`` (a top-level package
    name, or a module of ours), the chain of imports from ``start`` to its first such import."""
    parent = _reached(start)
    found = []
    for module in parent:
        hits = [(name, line) for name, line in _imports(module) if _top(name) == top or name == top]
        if hits:
            name, line = hits[0]
            where = f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}"
            found.append(" -> ".join(_chain(parent, module)) + f" -> {name} ({where})")
    return found


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_kernel_imports_no_pymc(kernel):
    """Kernels are plain functions over arrays and the compiled callables given to them; the
    adapters to PyMC's step protocol are the step methods'."""
    found = [f"{kernel} reaches {what}: {chain}" for top, what in FORBIDDEN.items()
             for chain in external_imports(kernel, top)]
    assert not found, "\n".join(found)


def test_the_kernels_import_no_pytensor_either():
    """The kernels receive compiled functions, so they need no PyTensor of their own."""
    found = [f"{kernel} reaches PyTensor: {chain}" for kernel in KERNELS
             for chain in external_imports(kernel, "pytensor")]
    assert not found, "\n".join(found)


def test_the_import_walk_finds_a_chain_through_a_package_init():
    """The walk follows a subpackage's ``__init__``: importing ``model.chunks`` runs
    ``model/__init__.py``, which imports the tall model and so PyMC."""
    found = external_imports(f"{ROOT}.model.chunks", "pymc")
    assert any(chain.startswith(f"{ROOT}.model -> {ROOT}.model.tall") for chain in found), found


# ------------------------------------------------------------------ the order of the layers
#: the layers, lowest first: a module may import from its own layer and the ones before it. The data
#: flow is model → … → step methods → diagnostics, but the imports put diagnostics below the step
#: methods: a step method fills its progress-bar columns (diagnostics.progress) and checks its own
#: run (diagnostics.run_checks) while it samples, and no diagnostics module imports a sampler (the
#: comparisons read the traces PyMC returns).
LAYERS = ("model", "subsample", "control_variates", "estimators", "kernels", "diagnostics", "step_methods")
#: modules beside the layers: ``pymc_protocol`` (PyMC's private step protocol) and ``families`` (the
#: observed distributions' formulas) and ``prior_kernel`` (the free variables' log-densities in Numba,
#: which the model's set-up and the kernels both call), which any layer may use and which import
#: nothing of ours, and
#: ``datasets`` (example data, which no layer imports)
BESIDE = ("pymc_protocol", "families", "prior_kernel", "row_terms_kernel", "elementary", "datasets")


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_violations(module: str) -> list[str]:
    """Each import of ``module`` from a layer above its own, or of the example data."""
    own = _layer(module)
    found = []
    for name, line in _imports(module):
        layer = _layer(name) if _top(name) == ROOT else None
        if layer is None or layer in ("pymc_protocol", "families"):
            continue
        upward = layer in LAYERS and LAYERS.index(layer) > LAYERS.index(own)
        if upward or layer == "datasets":
            found.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: {module} ({own}) "
                         f"imports {name} ({layer})")
    return found


def test_every_subpackage_is_in_a_layer():
    folders = {_layer(name) for name in MODULES if _layer(name) is not None}
    assert folders <= set(LAYERS) | set(BESIDE), folders - set(LAYERS) - set(BESIDE)


def test_no_module_imports_a_layer_above_its_own():
    found = [v for module in MODULES if _layer(module) in LAYERS for v in layer_violations(module)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("beside", ["pymc_protocol", "families"])
def test_the_modules_beside_the_layers_import_nothing_of_ours(beside):
    module = f"{ROOT}.{beside}"
    ours = [f"line {line}: {name}" for name, line in _imports(module) if _top(name) == ROOT]
    assert not ours, ours
