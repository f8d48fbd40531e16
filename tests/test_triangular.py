"""The rows' graph rewritten for differentiation (model/triangular.py): cholesky(L Lᵀ) read from a
lower-triangular L, diagonals by indexing, small triangular solves written out — each exact, and only
where it applies."""

import itertools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.traversal import applys_between
from pytensor.tensor.slinalg import Cholesky
from zoo import build

from pymc_subsample import TallModel
from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS
from pymc_subsample.model.triangular import factors_from_triangular_products

ROWS, COLS = np.tril_indices(3)


def function(inputs, outputs):
    """The graph's values, not a backend's: full rewriting on PyTensor's Python linker (no kernel
    compiled; conftest.python_linker says why)."""
    return pytensor.function(inputs, outputs, mode=PYTHON_LINKER_ARRAYS)


def _choleskys(inputs, output):
    return [n for n in applys_between(inputs, [output])
            if isinstance(getattr(n.op, "core_op", n.op), Cholesky)]


def _factor_graph(rows=ROWS, cols=COLS, leading_axis=False):
    """(packed values, cholesky(L Lᵀ) with L = zeros set at (rows, cols) from them, as MvNormal)."""
    packed = pt.dvector("packed")
    lower = pt.set_subtensor(pt.zeros((3, 3))[rows, cols], packed)
    cov = lower @ lower.T
    return packed, pt.linalg.cholesky(cov[None] if leading_axis else cov, lower=True)


@pytest.mark.parametrize("leading_axis", [False, True])
@pytest.mark.parametrize("signs", [(1, 1, 1), (-1, 1, -1)])
def test_factor_equals_the_cholesky_of_the_product_for_any_diagonal_signs(signs, leading_axis):
    packed, chol = _factor_graph(leading_axis=leading_axis)
    replaced = factors_from_triangular_products(chol, [packed])
    assert _choleskys([packed], chol) and not _choleskys([packed], replaced)
    rng = np.random.default_rng(1)
    values = rng.normal(size=6)
    lower = np.zeros((3, 3))
    lower[ROWS, COLS] = values
    lower[np.diag_indices(3)] = np.abs(np.diag(lower)) * signs
    values = lower[ROWS, COLS]
    expected = np.linalg.cholesky(lower @ lower.T)  # its diagonal is positive
    got = function([packed], replaced)(values)
    np.testing.assert_allclose(got.reshape(3, 3), expected, rtol=1e-12, atol=1e-12)
    # the derivatives through it too (what the estimator's graphs take)
    grad = function([packed], pytensor.grad(replaced.sum(), packed))(values)
    grad_ref = function([packed], pytensor.grad(chol.sum(), packed))(values)
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-9, atol=1e-9)


def test_a_matrix_not_known_to_be_lower_triangular_keeps_its_cholesky():
    # an index above the diagonal (row 0, column 1): L is not lower triangular
    packed, chol = _factor_graph(rows=np.array([0, 0, 1, 1, 2, 2]), cols=np.array([0, 1, 1, 0, 2, 0]))
    assert factors_from_triangular_products(chol, [packed]) is chol
    # a negative column counts from the end: (0, -1) is above the diagonal though 0 ≥ −1
    packed, chol = _factor_graph(rows=np.array([0, 1, 1, 2, 2, 0]), cols=np.array([0, 0, 1, 1, 2, -1]))
    assert factors_from_triangular_products(chol, [packed]) is chol
    # a plain matrix input: nothing says it is triangular, unless it is tagged so (as PyMC tags chol)
    lower = pt.dmatrix("lower")
    chol = pt.linalg.cholesky(lower @ lower.T, lower=True)
    assert factors_from_triangular_products(chol, [lower]) is chol
    lower.tag.lower_triangular = True
    assert not _choleskys([lower], factors_from_triangular_products(chol, [lower]))
    # the upper factor is not replaced (only lower=True is L·diag(sign))
    upper = pt.linalg.cholesky(lower @ lower.T, lower=False)
    assert factors_from_triangular_products(upper, [lower]) is upper


@pytest.mark.usefixtures("python_linker")
def test_mvnormal_lkj_rows_factor_nothing_again():
    """The zoo's MvNormal(chol=LKJCholeskyCov): the tall model's row graph holds no Cholesky (the
    rows' values against PyMC's own graph, which factors L Lᵀ: tests/test_zoo.py, to 1e-10)."""
    tall = TallModel(build("mvnormal_lkj", 50))
    assert not _choleskys([tall.theta], tall.batch_loglik)


@pytest.mark.parametrize("shape, axes", [((3, 4), (0, 1)), ((2, 4, 3), (1, 2)), ((2, 3, 3), (-1, -2))])
def test_diagonals_by_indexing_equal_pytensors_and_their_gradients_hold_no_graph_op(shape, axes):
    from pytensor.compile.builders import OpFromGraph
    from pytensor.graph.traversal import ancestors

    from pymc_subsample.model.triangular import diagonals_by_indexing

    x = pt.tensor("x", shape=(None,) * len(shape))
    diagonal = pt.diagonal(x, axis1=axes[0], axis2=axes[1])
    out = (diagonal**2).sum()
    replaced = diagonals_by_indexing(out, [x])
    values = np.random.default_rng(2).normal(size=shape)
    np.testing.assert_allclose(function([x], replaced)(values),
                               (np.diagonal(values, axis1=axes[0], axis2=axes[1]) ** 2).sum(), rtol=1e-14)
    grad = pytensor.grad(replaced, x)
    np.testing.assert_allclose(function([x], grad)(values),
                               function([x], pytensor.grad(out, x))(values), rtol=1e-14)
    # why: ExtractDiag's gradient is AllocDiag, an OpFromGraph run in Python once differentiated again
    assert any(isinstance(v.owner.op, OpFromGraph) for v in ancestors([pytensor.grad(out, x)]) if v.owner)
    assert not any(isinstance(v.owner.op, OpFromGraph) for v in ancestors([grad]) if v.owner)


def test_off_diagonals_and_other_axes_keep_their_op():
    from pymc_subsample.model.triangular import diagonals_by_indexing

    x = pt.tensor3("x")
    for diagonal in (pt.diagonal(x, offset=1, axis1=1, axis2=2), pt.diagonal(x, axis1=0, axis2=1)):
        out = diagonal.sum()
        assert diagonals_by_indexing(out, [x]) is out


#: each value of each argument once in the default run; every combination (12, ~30 s of compilation
#: each on a cold cache) under ``heavy``
TRIANGULAR_DEFAULT = [(True, False, 1, False), (False, True, 2, False), (True, True, 1, True)]


TRIANGULAR_CASES = [case for case in itertools.product([True, False], [False, True], [1, 2], [False, True])
                    if case[2:] != (2, True)]


@pytest.mark.parametrize("lower, unit_diagonal, b_ndim, batch", [
    case if case in TRIANGULAR_DEFAULT else pytest.param(*case, marks=pytest.mark.heavy)
    for case in TRIANGULAR_CASES])
def test_small_triangular_solves_written_out_equal_scipys(lower, unit_diagonal, b_ndim, batch):
    import scipy.linalg

    from pymc_subsample.model.triangular import small_triangular_solves

    rng = np.random.default_rng(3)
    n = 3
    a_value = rng.normal(size=(n, n)) + 3 * np.eye(n)
    # MvNormal's form when batched: one factor with a leading axis of 1, a row of b per data row
    a = pt.tensor("a", shape=(1, n, n) if batch else (n, n))
    b_shape = (7, n) if batch else ((n,) if b_ndim == 1 else (n, 2))
    b = pt.tensor("b", shape=(None,) * len(b_shape))
    x = pt.linalg.solve_triangular(a, b, lower=lower, unit_diagonal=unit_diagonal, b_ndim=b_ndim)
    out = (x**2).sum()
    replaced = small_triangular_solves(out, [a, b])
    from pytensor.tensor.slinalg import SolveTriangular

    assert not [n_ for n_ in applys_between([a, b], [replaced])
                if isinstance(getattr(n_.op, "core_op", n_.op), SolveTriangular)]
    b_value = rng.normal(size=b_shape)
    a_arg = a_value[None] if batch else a_value
    expected = scipy.linalg.solve_triangular(a_value, b_value.T if batch else b_value, lower=lower,
                                             unit_diagonal=unit_diagonal)
    np.testing.assert_allclose(function([a, b], replaced)(a_arg, b_value), (expected**2).sum(),
                               rtol=1e-12)
    grads = function([a, b], pytensor.grad(replaced, [a, b]))(a_arg, b_value)
    grads_ref = function([a, b], pytensor.grad(out, [a, b]))(a_arg, b_value)
    for got, ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_large_or_unsized_triangular_solves_keep_their_op():
    from pymc_subsample.model.triangular import SMALL_SOLVE, small_triangular_solves

    b = pt.dvector("b")
    for a in (pt.tensor("a", shape=(SMALL_SOLVE + 1, SMALL_SOLVE + 1)), pt.dmatrix("a")):
        out = pt.linalg.solve_triangular(a, b, lower=True).sum()
        assert small_triangular_solves(out, [a, b]) is out
