"""Each op pattern the graph analysis matches (pymc_subsample/model/op_patterns.py), on the graphs
the current PyTensor builds, and what it answers for the forms it must not accept."""

import pytensor.tensor as pt
import pytest

from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS
from pymc_subsample.model.op_patterns import (
    constant_slice,
    elementwise_input,
    is_advanced_indexing,
    is_matrix_transpose,
    is_row_gather,
    is_univariate_random_variable,
    point_mass_mixture,
    row_gather_index,
    subtensor_indices,
)

x, M = pt.vector("x"), pt.matrix("M")
g, h = pt.lvector("g"), pt.bvector("h")


def test_a_gather_by_one_integer_vector_along_the_first_axis_is_a_row_gather():
    for gathered, index in ((x[g], g), (M[g], g), (x[h], h), (x[g + 1], None)):
        node = gathered.owner
        assert is_advanced_indexing(node) and is_row_gather(node)
        assert row_gather_index(node) is (index if index is not None else node.inputs[1])


def test_other_indexing_is_not_a_row_gather():
    b = pt.bvector("b").astype(bool)
    for indexed in (M[:, g], M[g, g], x[b], x[2:5], x[3], M[g[:, None], g]):
        assert not is_row_gather(indexed.owner), indexed.owner.op
    assert is_advanced_indexing(M[:, g].owner)
    assert not is_advanced_indexing(x[2:5].owner)


def test_basic_subtensor_indices_are_slices_and_scalars():
    (span,) = subtensor_indices(x[2:5].owner)
    assert isinstance(span, slice) and span.start.data == 2 and span.stop.data == 5
    (one,) = subtensor_indices(x[3].owner)
    assert not isinstance(one, slice)


def test_a_constant_slice_of_a_vector_gives_its_bounds():
    n = pt.lscalar("n")
    assert constant_slice(x[2:5].owner) == (2, 5)
    assert constant_slice(x[:5].owner) == (0, 5)
    assert constant_slice(x[3:].owner) == (3, None)
    for other in (x[2:n], x[::2], x[3], M[1:2], x[g]):
        assert constant_slice(other.owner) is None, other.owner.op


def test_matrix_transpose_of_the_last_two_axes():
    T = pt.tensor3("T")
    assert is_matrix_transpose(M.T)
    assert is_matrix_transpose(pt.swapaxes(T, -1, -2))
    assert is_matrix_transpose(M.dimshuffle("x", 1, 0))  # a batch axis added in the same op
    assert not is_matrix_transpose(M)
    assert not is_matrix_transpose(pt.expand_dims(M, 0))
    assert not is_matrix_transpose(pt.swapaxes(T, 0, 1))
    assert not is_matrix_transpose(x.dimshuffle("x", 0))


def test_symbolic_ops_are_inlined_with_the_same_values():
    import numpy as np

    from pymc_subsample.model.op_patterns import inline_symbolic_ops

    y = pt.logsumexp(M, axis=1).sum()
    (inlined,) = inline_symbolic_ops([y])

    def ops(var):
        from pytensor.graph.traversal import applys_between

        return {type(node.op).__name__ for node in applys_between([M], [var])}

    assert "LogSumExp" in ops(y) and "LogSumExp" not in ops(inlined)
    value = np.random.default_rng(0).normal(size=(5, 3))
    # values on PyTensor's Python linker: the graphs are under test (conftest.python_linker)
    np.testing.assert_allclose(inlined.eval({M: value}, mode=PYTHON_LINKER_ARRAYS),
                               y.eval({M: value}, mode=PYTHON_LINKER_ARRAYS), rtol=1e-12)


def test_matrix_vector_products_become_sums_with_the_same_values_and_gradient():
    """X @ b, w @ X and the products of their gradient become elementwise sums; a product of two
    matrices (no static width 1) is left as it is."""
    import numpy as np
    import pytensor
    from pytensor.graph.traversal import applys_between
    from pytensor.tensor.math import Dot

    from pymc_subsample.model.op_patterns import matrix_vector_products_as_sums

    X, b, w, B = pt.dmatrix("X"), pt.dvector("b"), pt.dvector("w"), pt.dmatrix("B")
    value = (pt.softplus(X @ b) * w).sum() + (w @ X).sum() + (X @ B).sum()
    outputs = [value, pytensor.grad(value, b)]
    rewritten = matrix_vector_products_as_sums(outputs)

    def products(graphs):
        nodes = applys_between([X, b, w, B], graphs)
        return [n for n in nodes if isinstance(getattr(n.op, "core_op", n.op), Dot)]

    assert len(products(outputs)) >= 3
    left = products(rewritten)
    assert left and all(n.inputs[1] is B for n in left), left  # X @ B only
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(50, 4)), rng.normal(size=4), rng.normal(size=50), rng.normal(size=(4, 3)))
    expected = pytensor.function([X, b, w, B], outputs, mode=PYTHON_LINKER_ARRAYS)(*args)
    got = pytensor.function([X, b, w, B], rewritten, mode=PYTHON_LINKER_ARRAYS)(*args)
    for e, r in zip(expected, got, strict=True):
        np.testing.assert_allclose(r, e, rtol=1e-12)


@pytest.mark.usefixtures("python_linker")
def test_a_normal_mixture_is_subsampled_with_the_models_own_values():
    """PyMC 6 writes a mixture's log-likelihood with ``logsumexp``, a symbolic op built for N rows:
    its rows on demand equal the model's terms (an error before it was inlined)."""
    import numpy as np
    import pymc as pm

    import pymc_subsample as pms

    obs = np.random.default_rng(0).normal(size=400)
    with pm.Model() as model:
        t1 = pm.Normal("t1", 0.0, 3.0)
        t2 = pm.Normal("t2", 0.0, 1.0)
        pm.NormalMixture("x", w=np.array([0.5, 0.5]), mu=pm.math.stack([t1, t1 + t2]), sigma=1.4,
                         observed=obs)
    tall = pms.TallModel(model)
    point = model.initial_point()
    point.update(t1=np.array(0.3), t2=np.array(-0.2))
    expected = model.compile_logp(vars=model.observed_RVs, sum=False, mode=PYTHON_LINKER_ARRAYS)(point)[0]
    theta = tall.point_to_theta(point)
    idx = np.array([3, 17, 250])
    np.testing.assert_allclose(tall.loglik_rows(theta, tall.gather(idx)), expected[idx], rtol=1e-12)
    total, _ = tall.loglik_sum_value_and_grad(theta, tall.row_slice(0, 400))
    np.testing.assert_allclose(total, expected.sum(), rtol=1e-12)


def test_zero_inflated_distributions_are_point_mass_mixtures():
    """PyMC's zero-inflated distributions are a point mass at 0 weighted 1 − ψ and a component
    weighted ψ; a mixture of two normals and a hurdle (a truncated component) are not."""
    import numpy as np
    import pymc as pm
    from pytensor.tensor.random.basic import NegBinomialRV, PoissonRV

    with pm.Model():
        psi = pm.Beta("psi", 2, 2)
        mu = pm.math.exp(pm.Normal("b", 0, 1))
        counts = np.arange(5)
        zip_ = pm.ZeroInflatedPoisson("zip", psi=psi, mu=mu, observed=counts)
        zinb = pm.ZeroInflatedNegativeBinomial("zinb", psi=psi, mu=mu, alpha=2.0, observed=counts)
        hurdle = pm.HurdlePoisson("hurdle", psi=psi, mu=mu, observed=counts)
        normals = pm.NormalMixture("normals", w=np.array([0.5, 0.5]), mu=np.array([0.0, 1.0]), sigma=1.0,
                                   observed=counts.astype(float))
    for rv, component in ((zip_, PoissonRV), (zinb, NegBinomialRV)):
        weight, point, other = point_mass_mixture(rv)
        assert weight is psi and point == 0.0 and isinstance(other.owner.op, component)
    assert is_univariate_random_variable(zip_.owner.inputs[-1].owner.op)  # the Poisson component
    assert not is_univariate_random_variable(zip_.owner.op)  # the mixture itself
    assert point_mass_mixture(hurdle) is None
    assert point_mass_mixture(normals) is None
    assert point_mass_mixture(psi) is None


def test_an_elementwise_op_of_a_scalar_op_gives_its_input():
    from pytensor.scalar import Exp, Sigmoid

    assert elementwise_input(pt.exp(x), Exp) is x and elementwise_input(pt.sigmoid(x), Sigmoid) is x
    assert elementwise_input(pt.exp(x), Sigmoid) is None and elementwise_input(x, Exp) is None
    assert elementwise_input(pt.exp(x)[None], Exp) is None
    assert elementwise_input(pt.exp(x)[None], Exp, through_dimshuffles=True) is x
