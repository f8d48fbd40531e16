"""Accept tests of subsampled Metropolis-Hastings (no PyMC): the kernels as plain functions, and a
registry of test objects, one per ``SubsampleMH(test=...)``.

Every test decides whether to move from θ to θ′ where the exact MH log-ratio is
Δ = offset + Σ_k t_k (:mod:`~pymc_subsample.kernels.mh_tests.shared`). A test object
(:class:`AcceptTest`) is configured from the step's arguments before any set-up
(:func:`make_accept_test`) and decides one move at a time, ``decide(rng, u, move, current)
-> (accept, stats, current)``.
"""

from __future__ import annotations

import dataclasses

from pymc_subsample.kernels.mh_tests.austerity import Austerity, austerity_test
from pymc_subsample.kernels.mh_tests.barker import (
    BARKER_MIN_CONSTANT,
    Barker,
    barker_clt_error,
    barker_smoothed_error,
    barker_test,
    correction_distribution,
    correction_error,
    sample_correction,
)
from pymc_subsample.kernels.mh_tests.confidence import (
    Confidence,
    confidence_test,
    glm_taylor_range_bound,
    linear_predictor_bound,
    logistic_range_bound,
)
from pymc_subsample.kernels.mh_tests.exact import Exact
from pymc_subsample.kernels.mh_tests.pseudo_marginal import PseudoMarginal, pseudo_marginal_test
from pymc_subsample.kernels.mh_tests.shared import (
    AcceptOptions,
    AcceptTest,
    Estimate,
    Move,
    RowStream,
    SequentialTest,
    exact_barker_test,
    exact_mh_test,
    look_level,
)
from pymc_subsample.kernels.mh_tests.two_sample import TwoSample, check_probs, two_sample_test

__all__ = [
    "ACCEPT_TESTS",
    "BARKER_MIN_CONSTANT",
    "AcceptOptions",
    "AcceptTest",
    "Estimate",
    "Move",
    "RowStream",
    "SequentialTest",
    "accept_test_class",
    "austerity_test",
    "barker_clt_error",
    "barker_smoothed_error",
    "barker_test",
    "confidence_test",
    "correction_distribution",
    "correction_error",
    "exact_barker_test",
    "exact_mh_test",
    "glm_taylor_range_bound",
    "linear_predictor_bound",
    "logistic_range_bound",
    "look_level",
    "make_accept_test",
    "pseudo_marginal_test",
    "sample_correction",
    "two_sample_test",
]

#: the accept tests by the name ``SubsampleMH(test=...)`` takes
ACCEPT_TESTS: dict[str, type[AcceptTest]] = {
    cls.name: cls for cls in (PseudoMarginal, Austerity, Confidence, Barker, TwoSample, Exact)
}


def accept_test_class(name) -> type[AcceptTest]:
    """The registered test called ``name``, else a ValueError that lists the names."""
    try:
        return ACCEPT_TESTS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        names = ", ".join(map(repr, ACCEPT_TESTS))
        raise ValueError(f"Unknown test {name!r}; choose one of {names}.") from None


def make_accept_test(name, n_rows, options: AcceptOptions) -> AcceptTest:
    """The test ``name`` configured for N = ``n_rows`` rows, after the checks of the arguments
    every test shares: ``error``, ``range_bound`` and ``importance_probs``.
    """
    cls = accept_test_class(name)
    error = options.error
    if error is None and not cls.error_optional:
        raise ValueError(f"error=None (no error control) is allowed only for test='barker'; got "
                         f"test={name!r}: pass a probability strictly between 0 and 1 (e.g. 0.01).")
    if error is not None and (isinstance(error, bool) or not isinstance(error, (int, float))
                              or not 0 < error < 1):
        raise ValueError(f"error must be a probability strictly between 0 and 1 (e.g. 0.01); got {error!r}.")
    bound = options.range_bound
    named = isinstance(bound, str) and bound in ("empirical", "glm")
    if bound is not None and not callable(bound) and not named:
        raise ValueError("range_bound must be a callable (theta, theta_prop) -> C, 'glm' or 'empirical'.")
    probs = options.importance_probs
    options = dataclasses.replace(options, error=None if error is None else float(error),
                                  importance_probs=None if probs is None else check_probs(probs, n_rows))
    return cls.configure(n_rows, options)
