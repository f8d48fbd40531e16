"""Each op pattern the graph analysis matches (pymc_subsample/model/op_patterns.py), on the graphs
the current PyTensor builds, and what it answers for the forms it must not accept."""

import pytensor.tensor as pt

from pymc_subsample.model.op_patterns import (
    is_advanced_indexing,
    is_matrix_transpose,
    is_row_gather,
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


def test_matrix_transpose_of_the_last_two_axes():
    T = pt.tensor3("T")
    assert is_matrix_transpose(M.T)
    assert is_matrix_transpose(pt.swapaxes(T, -1, -2))
    assert is_matrix_transpose(M.dimshuffle("x", 1, 0))  # a batch axis added in the same op
    assert not is_matrix_transpose(M)
    assert not is_matrix_transpose(pt.expand_dims(M, 0))
    assert not is_matrix_transpose(pt.swapaxes(T, 0, 1))
    assert not is_matrix_transpose(x.dimshuffle("x", 0))
