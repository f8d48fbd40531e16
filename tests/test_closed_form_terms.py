"""The rows' terms at θ written out for the closed form's families (ClosedFormRows.row_terms) against
the model's graph of f and its derivatives in η, evaluated in NumPy."""

import numpy as np
import pytest
from zoo import build

from pymc_subsample.model.distributional import RowTerms
from pymc_subsample.model.tall import TallModel


@pytest.mark.parametrize("name", ["logistic", "linear", "poisson_offset", "two_observed",
                                  "hierarchical_centred", "set_data_predictive"])
def test_written_terms_are_the_graphs(name):
    tall = TallModel(build(name, 3000))
    view = tall.regression_view
    assert view.closed_form is not None and view.closed_form.has_row_terms
    batch = tall.gather(np.arange(2500))
    graph = view._terms_function("numpy")
    rng = np.random.default_rng(1)
    for _ in range(3):
        theta = tall.initial_theta + rng.normal(scale=0.3, size=tall.ndim)
        written = view.row_terms(theta, batch, setup=True)
        want = RowTerms.from_flat(graph(theta, *batch), view.n_eta, view.pairs)
        np.testing.assert_allclose(written.value, want.value, rtol=1e-12, atol=1e-12)
        for got, expected in zip(written.first + list(written.second.values()),
                                 want.first + list(want.second.values()), strict=True):
            np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=1e-11, atol=1e-12)


def test_families_without_written_second_derivatives_keep_the_graph():
    for name in ("student_t", "negative_binomial"):
        view = TallModel(build(name, 3000)).regression_view
        assert view.closed_form is not None and not view.closed_form.has_row_terms
