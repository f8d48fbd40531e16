"""Sphinx configuration of the pymc_subsample documentation."""

import inspect
import os
import sys
from datetime import date

sys.path.insert(0, os.path.abspath(".."))

import pymc_subsample  # noqa: E402

project = "pymc_subsample"
author = "pymc_subsample developers"
copyright = f"{date.today().year}, {author}"
release = pymc_subsample.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # MathJax from the package's own copy, not a CDN: the pages render offline
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
]

templates_path = ["_templates"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"
autodoc_mock_imports = []
numpydoc_show_class_members = False
numpydoc_validation_checks = set()
numpydoc_xref_param_type = False

html_theme = "pydata_sphinx_theme"
html_title = "pymc_subsample"
html_static_path = []
html_theme_options = {
    "navigation_depth": 3,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_context = {"default_mode": "light"}


def _escape_bars(app, what, name, obj, options, lines):
    """Docstrings write |x| for absolute values and norms; reST would read a substitution."""
    for i, line in enumerate(lines):
        stripped = line.strip()
        grid_row = stripped.startswith("|") and stripped.endswith("|") and stripped.count("|") >= 3
        if "|" in line and not grid_row and not stripped.startswith(("+-", "+=")):
            lines[i] = line.replace("\\|", "|").replace("|", "\\|")


def _constructor_signature(app, what, name, obj, options, signature, return_annotation):
    """Step methods take their arguments in ``__init__``; PyMC's ``__new__`` shows only (*args, **kwargs)."""
    if what != "class" or signature != "(*args, **kwargs)" or "__init__" not in vars(obj):
        return None
    sig = inspect.signature(obj.__init__)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in list(sig.parameters.values())[1:]]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty)), None


def setup(app):
    app.connect("autodoc-process-docstring", _escape_bars, priority=400)
    app.connect("autodoc-process-signature", _constructor_signature)

# pages without sub-pages need no left sidebar
html_sidebars = {page: [] for page in ("index", "getting-started", "design", "benchmarks", "references")}
