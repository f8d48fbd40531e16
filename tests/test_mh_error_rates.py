"""Decision errors of SubsampleMH's sequential tests against the exact full-data decision, on 300 fixed
moves (θ, θ′, u) of a logistic regression (N = 20,000), with and without control variates.

* austerity, two-sample (ε) and confidence (δ): the fraction of decisions that differ from exact MH's
  on the same uniform is at most the level (``error``);
* barker (δ): each move's acceptance probability is within δ of S(Δ) = 1/(1 + e^{−Δ}), so the mean
  over the moves of the decisions is within δ of the mean of S(Δ).

The moves are proposed as the chain proposes them near its centre (the initial scale 2.38/√d); for
the MH tests log u is drawn within 0.5 of Δ, so that the decisions are hard (with uniform u nearly
all are settled at the first look). The rates are printed (and by ``benchmarks/mh_error_rates.py
--pairs``).
"""

import math

import numpy as np
import pytest
from conftest import logistic_model

from pymc_subsample.diagnostics.mh_decisions import decision_errors, laplace_moves
from pymc_subsample.step_methods.subsample_mh import SubsampleMH

LEVEL = 0.05
MOVES = 300
NEAR = 0.5  # log u within 0.5 of Δ: hard decisions


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(5)
    n = 20_000
    X = np.column_stack([np.ones(n), rng.normal(size=(n, 2))])
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ np.array([-0.5, 1.0, -1.5])))).astype(float)
    return logistic_model(X, y)


@pytest.mark.parametrize("control_variates", [True, False])
@pytest.mark.parametrize("test", ["austerity", "confidence", "two-sample", "barker"])
def test_decision_errors_stay_within_the_level(model, test, control_variates):
    with model:
        step = SubsampleMH(test=test, error=LEVEL, control_variates=control_variates)
    moves = laplace_moves(step, MOVES, seed=3)
    # Barker's error is one of probabilities, measured on the moves' own uniforms
    result = decision_errors(step, moves, seed=4, near=None if test == "barker" else NEAR)
    what = (f"Barker deviation {result.barker_deviation:+.3f}" if test == "barker"
            else f"error rate {result.error_rate:.3f}")
    print(f"{test} control_variates={control_variates}: {what}, mean rows {result.rows.mean():.0f} "
          f"({result.rows.mean() / step.tall.n_rows:.1%} of N)")
    if test == "barker":
        se = math.sqrt(np.mean(result.barker * (1 - result.barker)) / MOVES)
        assert abs(result.barker_deviation) <= LEVEL + 3 * se
    else:
        assert result.error_rate <= LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / MOVES)


def test_decision_errors_exceed_the_level_without_the_exact_proxy_sums(model):
    """The same measure catches a test that leaves Σ_k q_k(θ′) − q_k(θ) out of Δ."""
    import dataclasses

    from pymc_subsample.kernels.mh_tests.austerity import Austerity

    class WithoutProxySums(Austerity):
        def exact_part(self, move, proxied):
            return move.log_prior_p - move.log_prior

    with model:
        step = SubsampleMH(test="austerity", error=LEVEL)
    step.accept_test = WithoutProxySums(**dataclasses.asdict(step.accept_test))
    result = decision_errors(step, laplace_moves(step, MOVES, seed=3), seed=4, near=NEAR)
    print(f"austerity without the proxy sums: error rate {result.error_rate:.3f}")
    assert result.error_rate > LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / MOVES)
