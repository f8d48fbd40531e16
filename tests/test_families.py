"""The family table (pymc_subsample/families.py): each family's row log-density against PyMC's own
logp, its NumPy and PyTensor forms against each other, its derivatives against finite differences,
its Firefly bound below the likelihood and its Zig-Zag curvature bound, on random rows (fixed seeds)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_subsample.families import (
    FAMILIES,
    GLM_FAMILIES,
    LINKS,
    NUMPY,
    PYTENSOR,
    PointMassMixture,
    glm_family_of,
    row_loglik,
)
from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS
from pymc_subsample.model.op_patterns import elementwise_input

M = 200  # rows per check
IDS = [f"{family.rv_op.__name__}{family.links}" for family in FAMILIES]


def _eval(graph):
    """A graph without inputs evaluated on PyTensor's Python linker: the graphs are under test, not
    the backend, and nothing is compiled."""
    return pytensor.function([], graph, mode=PYTHON_LINKER_ARRAYS)()


def _rows(family, seed, eta_scale=1.0):
    """(y, the parameters as the formulas take them: η under its link or a constant, the same as
    PyMC's parameters): random η and constants, y drawn from the distribution itself."""
    rng = np.random.default_rng(seed)
    args, params = [], []
    for link in family.links:
        if link is None:  # a constant parameter (a known σ, a known μ): positive numbers fit both
            value = rng.uniform(0.5, 2.0, size=M)
            args.append(value)
            params.append(value)
        else:
            eta = rng.normal(scale=eta_scale, size=M)
            args.append(eta)
            params.append(LINKS[link].inverse(NUMPY, eta))
    rv = family.rv_op()(*params)
    y = np.asarray(pm.draw(rv, random_seed=seed), dtype=float)
    return y, args, rv


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_row_log_density_equals_pymc_logp(family):
    for seed in range(3):
        y, args, rv = _rows(family, seed)
        expected = _eval(pm.logp(rv, y))
        np.testing.assert_allclose(family.logp(NUMPY, y, *args), expected, rtol=1e-10, atol=1e-10)
        graph = family.logp(PYTENSOR, pt.as_tensor(y), *[pt.as_tensor(a) for a in args])
        np.testing.assert_allclose(_eval(graph), expected, rtol=1e-10, atol=1e-10)


def _finite_difference(function, args, j, h=1e-6):
    """∂function/∂args[j] elementwise, by central differences."""
    up, down = list(args), list(args)
    up[j], down[j] = args[j] + h, args[j] - h
    return (function(*up) - function(*down)) / (2 * h)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_derivatives_in_eta_match_finite_differences(family):
    """∂_j f from pytensor.grad of the table's f (as the distributional view takes them, and ∂_jj f),
    and the written score of a GLM family, against finite differences of the NumPy form."""
    y, args, _ = _rows(family, 10)
    etas = [j for j, link in enumerate(family.links) if link is not None]
    variables = [pt.vector(f"a{j}", dtype="float64") for j in range(len(args))]
    value = family.logp(PYTENSOR, pt.as_tensor(y), *variables).sum()
    first = pytensor.grad(value, [variables[j] for j in etas])
    second = [pytensor.grad(g.sum(), variables[j]) for g, j in zip(first, etas, strict=True)]
    derivatives = pytensor.function(variables, [*first, *second], mode=PYTHON_LINKER_ARRAYS)(*args)

    def f(*a):
        return family.logp(NUMPY, y, *a)

    for i, j in enumerate(etas):
        np.testing.assert_allclose(derivatives[i], _finite_difference(f, args, j), rtol=1e-5, atol=1e-6)

        def d_f(*a, j=j):
            return _finite_difference(f, a, j, h=1e-4)

        np.testing.assert_allclose(derivatives[len(etas) + i], _finite_difference(d_f, args, j, h=1e-4),
                                   rtol=1e-4, atol=1e-4)
    if family.score is not None:
        (j,) = etas
        constants = [a for a, link in zip(args, family.links, strict=True) if link is None]
        score = family.score(NUMPY, y, args[j], *constants)
        np.testing.assert_allclose(score, _finite_difference(f, args, j), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(score, derivatives[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(GLM_FAMILIES))
def test_zigzag_curvature_bound_holds_on_random_rows(name):
    """|∂f(y, η) − ∂f(y, η')| ≤ κ |η − η'| for every row, at points far from 0 too: the Lipschitz
    constant the Zig-Zag thinning bound multiplies (kernels/zigzag.py); ∞ for the Poisson."""
    family = GLM_FAMILIES[name]
    for seed, scale in ((20, 1.0), (21, 10.0)):
        y, args, _ = _rows(family, seed)
        (j,) = [j for j, link in enumerate(family.links) if link is not None]
        constants = [float(a[0]) for a, link in zip(args, family.links, strict=True) if link is None]
        kappa = family.max_curvature(*constants)
        if not np.isfinite(kappa):
            assert name == "poisson_log"
            continue
        rng = np.random.default_rng(seed)
        eta, other = rng.normal(scale=scale, size=(2, M))
        score = family.score_function(*constants)
        change = np.abs(score(y, eta) - score(y, other))
        assert np.all(change <= kappa * np.abs(eta - other) * (1 + 1e-12) + 1e-15)
        # and κ is the supremum, not a loose bound: |∂²f| comes within 1% of it near η = 0
        grid = np.linspace(-0.5, 0.5, 1001)
        curvature = np.abs(np.gradient(score(y[0], grid), grid))
        assert curvature.max() >= 0.99 * kappa


@pytest.mark.parametrize("name", [name for name, f in GLM_FAMILIES.items() if f.firefly_bound is not None])
def test_firefly_bound_is_below_the_likelihood_and_tight_at_the_centre(name):
    """log B_k(η) = a_k + b_k η + c_k η² ≤ f(y_k, η) for every η (firefly_bounds.py's contract), with
    equality at η_k(θ*)."""
    family = GLM_FAMILIES[name]
    for seed in range(3):
        y, (eta_center,), _ = _rows(family, 30 + seed, eta_scale=3.0)
        a, b, c = family.firefly_bound(eta_center, y)
        rng = np.random.default_rng(seed)
        for eta in (rng.normal(scale=3.0, size=M), eta_center + rng.normal(scale=0.1, size=M), eta_center):
            gap = family.logp(NUMPY, y, eta) - (a + b * eta + c * eta**2)
            assert np.all(gap >= -1e-12)
        np.testing.assert_allclose(a + b * eta_center + c * eta_center**2, family.logp(NUMPY, y, eta_center),
                                   atol=1e-12)


@pytest.mark.parametrize("name", ["log", "logit"])
def test_links_invert_each_other_and_are_found_in_the_graph(name):
    link = LINKS[name]
    p = np.random.default_rng(40).uniform(0.05, 0.95, size=M)
    np.testing.assert_allclose(link.inverse(NUMPY, link.forward(NUMPY, p)), p, rtol=1e-12)
    np.testing.assert_allclose(_eval(link.forward(PYTENSOR, pt.as_tensor(p))), link.forward(NUMPY, p),
                               rtol=1e-12)
    x = pt.vector("x")
    assert elementwise_input(link.inverse(PYTENSOR, x), link.written_as) is x
    assert elementwise_input(link.inverse(PYTENSOR, x)[None], link.written_as) is None
    assert elementwise_input(link.inverse(PYTENSOR, x)[None], link.written_as, through_dimshuffles=True) is x
    other = next(o for o in LINKS.values() if o.written_as not in (None, link.written_as))
    assert elementwise_input(link.inverse(PYTENSOR, x), other.written_as) is None


def test_zero_inflated_row_equals_pymc_logp():
    """The point-mass mixture of a ZeroInflatedPoisson, with the Poisson family as its component."""
    rng = np.random.default_rng(50)
    eta_weight, eta = rng.normal(size=(2, M))
    rv = pm.ZeroInflatedPoisson.dist(psi=LINKS["logit"].inverse(NUMPY, eta_weight), mu=np.exp(eta))
    y = np.asarray(pm.draw(rv, random_seed=50), dtype=float)
    assert np.any(y == 0) and np.any(y > 0)
    poisson = GLM_FAMILIES["poisson_log"]
    mixture = PointMassMixture(poisson.rv_op(), 0.0)
    for weight_link, weight in (("logit", eta_weight), (None, LINKS["logit"].inverse(NUMPY, eta_weight))):
        value = mixture.logp(NUMPY, y, weight, weight_link, poisson.logp(NUMPY, y, eta))
        np.testing.assert_allclose(value, _eval(pm.logp(rv, y)), rtol=1e-10)


def test_glm_families_are_found_by_distribution_and_read_by_firefly():
    assert glm_family_of(pm.Bernoulli.dist(p=0.3).owner.op).glm == "bernoulli_logit"
    assert glm_family_of(pm.Normal.dist().owner.op).glm == "normal_identity"
    assert glm_family_of(pm.StudentT.dist(nu=3).owner.op) is None
    y, (eta,), _ = _rows(GLM_FAMILIES["poisson_log"], 60)
    value, score = row_loglik("poisson_log", eta, y)
    np.testing.assert_array_equal(value, GLM_FAMILIES["poisson_log"].logp(NUMPY, y, eta))
    np.testing.assert_array_equal(score, y - np.exp(eta))
    with pytest.raises(ValueError, match="No row log-likelihood for family 'normal_identity'; supported: "
                                         "bernoulli_logit, poisson_log."):
        row_loglik("normal_identity", eta, y)


def test_the_table_imports_no_pymc():
    """The kernels read the table, and stay PyMC-free: it imports neither PyMC nor the package's
    model (whose __init__ imports PyMC)."""
    import ast
    from pathlib import Path

    import pymc_subsample.families as module

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    assert not [n for n in names if n.split(".")[0] == "pymc" or n.startswith("pymc_subsample")], names
