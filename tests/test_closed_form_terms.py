"""The rows' terms at θ written out for the closed form's families (ClosedFormRows.row_terms) against
the model's graph of f and its derivatives in η, evaluated in NumPy."""

import numpy as np
import pytest
from zoo import build

from pymc_subsample.model.distributional import RowTerms
from pymc_subsample.model.tall import TallModel


@pytest.mark.parametrize("name", ["logistic", "linear", "poisson_offset", "two_observed",
                                  "hierarchical_centred", "set_data_predictive", "student_t",
                                  "heteroscedastic", "heavy_tails_by_row"])
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
    for name in ("negative_binomial",):
        view = TallModel(build(name, 3000)).regression_view
        assert view.closed_form is not None and not view.closed_form.has_row_terms


def test_bernoulli_and_poisson_terms_far_out_in_eta():
    """softplus, σ(η) and e^η where a naive formula overflows or cancels, against SciPy's."""
    from scipy import special

    from pymc_subsample.model.closed_form import BERNOULLI_LOGIT, POISSON_LOG
    from pymc_subsample.row_terms_kernel import closed_form_row_terms

    eta = np.array([-700.0, -40.0, -1.0, 0.0, 3.0, 40.0, 700.0])
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    constants = np.tile(np.r_[np.ones(3), np.zeros(3)], (1, 1))
    pair_row = np.zeros((1, 1), dtype=np.int64)
    index = np.array([[0, -1, -1]])
    value, first, second = closed_form_row_terms(np.array([BERNOULLI_LOGIT]), index, constants, y[None],
                                                 eta[None], pair_row)
    rate = special.expit(eta)
    np.testing.assert_allclose(value, y * eta - np.logaddexp(0.0, eta), rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(first[0], y - rate, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(second[0], -rate * (1.0 - rate), rtol=1e-13, atol=1e-300)
    counts = np.array([0.0, 3.0, 1.0, 0.0, 25.0, 2.0, 0.0])
    small = eta.clip(-40.0, 40.0)
    value, first, second = closed_form_row_terms(np.array([POISSON_LOG]), index, constants, counts[None],
                                                 small[None], pair_row)
    want = counts * small - np.exp(small) - special.gammaln(counts + 1.0)
    np.testing.assert_allclose(value, want, rtol=1e-14)
    np.testing.assert_allclose(first[0], counts - np.exp(small), rtol=1e-14)
    np.testing.assert_allclose(second[0], -np.exp(small), rtol=1e-14)

