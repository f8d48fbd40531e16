"""HMC-ECS's kernels alone, on NumPy stand-ins for the functions over the rows: the Gibbs update of u
(Dang et al. 2019 eq. 3.5) on a toy with a known stationary law, and the estimator's design (§3.1,
eqs. 4.3 and 5.1) on given variances."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.kernels import ecs_tuning
from pymc_subsample.kernels.subsample_update import GibbsState, draw_rest, gibbs_step


def _toy_value(u):
    """log L̂(θ; u) of the toy: not a product over the blocks, so the law of u is not either."""
    return float(np.log(1.0 + u[0] + 2.0 * u[1] ** 2 + u[0] * u[1]))


def test_gibbs_step_leaves_the_estimated_likelihood_invariant():
    """u = (u₁, u₂) over 3 rows, one block redrawn uniformly per proposal: the chain's law of u is
    ∝ L̂(θ; u) (eq. 3.5 with a symmetric proposal), checked by a χ² test over the 9 states."""
    rng = np.random.default_rng(0)
    calls = []

    def estimate(theta, u):
        calls.append(np.array(theta))
        return SimpleNamespace(value=_toy_value(u))

    def propose(rng, u):
        new = u.copy()
        new[rng.integers(2)] = rng.integers(3)
        return new

    theta = np.zeros(1)
    state = GibbsState(np.array([0, 0]), None, None)
    counts = np.zeros((3, 3))
    accepted = 0
    for _ in range(40_000):
        state, info = gibbs_step(rng, state, theta, propose, estimate)
        counts[tuple(state.subsample)] += 1
        accepted += info.accepted
        assert 0.0 <= info.acceptance_probability <= 1.0
    weights = np.exp([[_toy_value((a, b)) for b in range(3)] for a in range(3)])
    expected = counts.sum() * weights / weights.sum()
    # successive states are correlated (about half the moves are rejected or change nothing): the
    # χ² statistic is divided by a generous 10 for the effective sample size
    assert stats.chi2.sf(np.sum((counts - expected) ** 2 / expected) / 10, df=8) > 0.01, counts / counts.sum()
    assert 0 < accepted < 40_000
    # the estimate at θ is made once and kept: one call per proposal after the first iteration
    assert len(calls) == 40_001


def test_gibbs_step_estimates_again_at_another_theta_only():
    values = iter(range(100))

    def estimate(theta, u):
        return SimpleNamespace(value=-np.inf if u == "bad" else 0.0, at=next(values))

    state = GibbsState("u", None, None)
    rng = np.random.default_rng(1)

    def bad(rng, u):
        return "bad"

    state, info = gibbs_step(rng, state, np.array([1.0]), bad, estimate)
    assert (state.subsample, state.estimate.at, info.accepted) == ("u", 0, False)
    assert info.acceptance_probability == 0.0  # a proposal of L̂ = 0 is never accepted
    same, _ = gibbs_step(rng, state, np.array([1.0]), bad, estimate)
    assert same.estimate.at == 0  # θ unchanged: its estimate is kept
    moved, _ = gibbs_step(rng, state, np.array([2.0]), bad, estimate)
    assert moved.estimate.at == 3 and moved.theta[0] == 2.0


def test_draw_rest_is_uniform_over_the_rows_not_computed_exactly():
    rng = np.random.default_rng(2)
    exact = np.array([0, 3, 4, 9])
    idx = draw_rest(rng, 10, exact, 60_000)
    assert not np.isin(idx, exact).any()
    counts = np.bincount(idx, minlength=10)[np.setdiff1d(np.arange(10), exact)]
    assert stats.chisquare(counts).pvalue > 0.01


def _init(estimator, n, subsample_size, differences, deviations):
    """The set-up's design with G = 100, a target of 1 and the pilot's points around θ* = 0."""
    return ecs_tuning.init(estimator, n, subsample_size, 100, 1.0, np.zeros(2), np.eye(2), differences,
                           deviations)


def _refused(*args):
    raise AssertionError("no function over the rows is needed here")


def test_a_fixed_size_needs_no_pass_over_the_rows():
    design = _init("perturbed", 5000, 300, _refused, _refused)
    assert (design.m, design.num_blocks, design.minimum, design.n_rest) == (300, 100, None, 5000)
    assert len(design.blocks) == 100 and design.blocks[-1].stop == 300
    small = _init("perturbed", 5000, 30, _refused, _refused)
    assert small.num_blocks == 30  # G ≤ m


def _constant_differences(var):
    return lambda rng, thetas: (np.zeros(len(thetas)), np.full(len(thetas), var))


@pytest.mark.parametrize("var, m", [(1.995e-6, 200), (1e-6, 100), (4e-7, 40), (1e-9, 10)])
def test_auto_size_gives_the_target_variance(var, m):
    """σ² = n² Var(d)/m ≤ 1 (eq. 4.3) at the smallest m; the default's floor is min(N, 100)."""
    n = 10_000

    def deviations(thetas, means, candidates):  # every row alike: no row is worth computing exactly
        return np.arange(candidates), np.full((candidates, len(thetas)), var), np.full(len(thetas), n * var)

    auto = _init("perturbed", n, "auto", _constant_differences(var), deviations)
    assert auto.m == m and auto.minimum == 10 and auto.exact.size == 0 and auto.setup_points.shape == (21, 2)
    default = _init("perturbed", n, None, _constant_differences(var), deviations)
    floor = ecs_tuning.PERTURBED_FLOOR
    assert default.m == max(m, floor) and default.minimum == floor == 100
    assert default.scored == (default.m > floor)  # at the floor the pass is left to the warm-up


def test_rows_of_large_error_are_computed_exactly():
    """5 rows of 10⁴ hold most of Σ(d − d̄)²: computed exactly, they leave m ≈ 100 for the rest, where
    uniform subsampling needs m ≈ 2,600 for σ² ≤ 1."""
    n, small, large = 10_000, 1e-6, 5e-2
    spread = np.full(n, small)
    spread[[7, 70, 700, 7000, 9999]] = large

    def deviations(thetas, means, candidates):
        order = np.argsort(-spread, kind="stable")[:candidates]
        return order, np.repeat(spread[order, None], len(thetas), axis=1), np.full(len(thetas), spread.sum())

    differences = _constant_differences(spread.mean())  # Var(d): the rows' mean squared deviation
    design = _init("perturbed", n, "auto", differences, deviations)
    assert set(spread.argsort()[-5:]) <= set(design.exact)
    assert design.m + design.exact.size < 200
    rest = np.setdiff1d(np.arange(n), design.exact)
    assert design.n_rest**2 * spread[rest].mean() / design.m <= 1.0  # σ² on the rest (eq. 4.3)


def test_signed_design_and_its_groups():
    n = 20_000
    design = _init("signed", n, None, _constant_differences(1e-8), _refused)
    assert design.m == 1000 and design.expected_loglik_var <= 1.0 and design.prob_negative < 1e-6
    assert design.kappa == max(1, round(design.lam / design.num_blocks))
    # the pilot's mean of d is D̄/n; a = D̄ − λ centres each factor (d̂ − a)/λ at 1 (eq. 5.1)
    assert design.a == pytest.approx(-design.lam)


def test_retune_follows_the_warm_up_schedule():
    calls = []

    def differences(rng, thetas):
        calls.append(len(thetas))
        return np.zeros(len(thetas)), np.full(len(thetas), 1e-6)

    def deviations(thetas, means, candidates):
        return np.arange(candidates), np.full((candidates, len(thetas)), 1e-6), np.full(len(thetas), 1e-2)

    design = _init("perturbed", 10_000, "auto", differences, deviations)
    calls.clear()
    thetas, info_at = [], {}
    for count in range(200):
        design, info = ecs_tuning.retune(design, thetas, [], differences, deviations)
        info_at[count] = info
        thetas.append(np.zeros(2))
    # at draws 50 and 150: the size's pilot at the last 25 draws, then the exact rows' pilot at the
    # points of the pass (SCORE_POINTS of them); at 150 the pass again, the design's σ² near the target
    assert calls == [25, 5, 25, 5]
    assert [c for c, i in info_at.items() if i.last_size_choice] == [150]

    signed = _init("signed", 10_000, 50, differences, _refused)
    calls.clear()
    signs = []
    for count in range(120):
        signed, info = ecs_tuning.retune(signed, thetas[:count], signs, differences, _refused)
        assert info.redraw == (count in (25, 50, 100))
        signs.append(-1 if count % 2 else 1)
    assert calls == [20, 20, 20]
    assert info_at[0].negative == 0.0 and ecs_tuning.negative_fraction(signs) == pytest.approx(13 / 25)


def test_a_later_re_choice_makes_its_pass_where_the_rows_grew_harder():
    """After the pass at draw 50, the one at draw 150 is made where the pilot at the chain's last
    draws asks for more than the current m, or where σ² as that pass measured it (0.01 here), grown
    as the pilot's Var(d) grew since, would exceed half the target; only there."""
    n, first = 10_000, 1e-9  # m = n² Var(d) at the floor, 10; σ² = n² Var(d) / 10 = 0.01
    for growth, passes_made in [(1, 1), (40, 1), (60, 2), (2000, 2)]:
        variance, passes = [first], []

        def differences(rng, thetas, variance=variance):
            return np.zeros(len(thetas)), np.full(len(thetas), variance[0])

        def deviations(thetas, means, candidates, passes=passes, variance=variance):
            passes.append(1)  # every row's squared deviation as the pilot's Var(d), none larger
            return (np.arange(candidates), np.full((candidates, len(thetas)), variance[0]),
                    np.full(len(thetas), n * variance[0]))

        design = _init("perturbed", n, "auto", differences, deviations)
        passes.clear()
        thetas = [np.zeros(2)] * 50
        design, _ = ecs_tuning.retune(design, thetas, [], differences, deviations)
        assert passes == [1] and design.m == 10
        assert design.scored_at == pytest.approx((first, 0.01))
        variance[0] = growth * first
        design, info = ecs_tuning.retune(design, thetas * 3, [], differences, deviations)
        assert len(passes) == passes_made and info.last_size_choice, growth
    assert design.m == ecs_tuning.choose_subsample_size(n, [2000 * first], minimum=10)  # the pass's
    # the same pilot, but an m below what it asks for (rows computed exactly that the pilot's rows
    # include): the pass again, however small σ² was
    smaller = dataclasses.replace(ecs_tuning.with_size(design, 100), scored_at=(2e-6, 1e-9))
    ecs_tuning.retune(smaller, thetas * 3, [], differences, deviations)
    assert len(passes) == 3


def test_a_short_warm_up_scores_the_rows_at_its_end():
    differences = _constant_differences(1e-8)
    passes = []

    def deviations(thetas, means, candidates):
        passes.append(len(thetas))
        return np.arange(candidates), np.full((candidates, len(thetas)), 1e-8), np.full(len(thetas), 1e-4)

    design = _init("perturbed", 10_000, None, differences, deviations)
    assert not design.scored and passes == []
    for thetas in ([], [np.zeros(2)] * 20):
        end, info = ecs_tuning.retune(design, thetas, [], differences, deviations, final=True)
        assert end.scored and not info.last_size_choice
    assert passes == [5, 5]  # of the set-up's points without warm-up draws, else of the chain's
    again, _ = ecs_tuning.retune(end, [], [], differences, deviations, final=True)
    assert again is end and passes == [5, 5]  # scored once


def test_the_pass_scores_evenly_spaced_latest_points():
    warm_up = np.arange(25.0)[:, None]  # 25 consecutive draws: the latest, then every fifth back
    assert ecs_tuning.scoring_points(warm_up).ravel().tolist() == [4.0, 9.0, 14.0, 19.0, 24.0]
    setup = np.arange(21.0)[:, None]  # θ* (0) and 20 Laplace draws: not θ*, where every d_k is zero
    assert ecs_tuning.scoring_points(setup).ravel().tolist() == [4.0, 8.0, 12.0, 16.0, 20.0]
    few = np.arange(3.0)[:, None]
    assert ecs_tuning.scoring_points(few).ravel().tolist() == [0.0, 1.0, 2.0]


def test_too_large():
    n = 5000  # rows per estimate of N/4 = 1250 or more are too many
    design = _init("perturbed", n, None, _constant_differences(1e-9), _refused)
    assert not ecs_tuning.too_large(design)
    assert ecs_tuning.too_large(ecs_tuning.with_size(design, 1249, np.arange(1)))
    assert not ecs_tuning.too_large(ecs_tuning.with_size(design, 1248, np.arange(1)))
    fixed = _init("perturbed", n, 4000, _refused, _refused)
    assert not ecs_tuning.too_large(fixed)  # a size the user chose is never reported


def test_the_setup_pass_is_made_where_it_costs_less_than_the_early_draws():
    """m a little above the floor: the first SIZE_RETUNE_AT[0] draws' extra rows cost less than a
    pass over N rows at SCORE_POINTS of the 21 set-up points, which the chain's re-choice makes at
    its own draws anyway; far above it (rows of small groups), the pass picks the exact rows at set-up."""
    n, floor, points = 1_000_000, 1000, 21
    per_row = ecs_tuning.SIZE_RETUNE_AT[0] * ecs_tuning.EARLY_STEPS_PER_DRAW * ecs_tuning.STEP_ROW_COST
    break_even = floor + ecs_tuning.SCORE_POINTS * n / per_row
    assert not ecs_tuning.scores_at_setup(n, floor, floor, points)
    assert not ecs_tuning.scores_at_setup(n, int(break_even) - 1, floor, points)
    assert ecs_tuning.scores_at_setup(n, int(break_even) + 1, floor, points)
    # a curved posterior's early draws take ~25 times the steps: the pass pays far sooner
    curved = ecs_tuning.CURVED_EARLY_STEPS_PER_DRAW
    assert ecs_tuning.scores_at_setup(n, int(break_even) - 1, floor, points, curved)
    assert not ecs_tuning.scores_at_setup(n, floor + 100, floor, points, curved)
    calls = []

    def deviations(thetas, means, candidates):
        calls.append(len(thetas))
        return np.arange(candidates), np.full((candidates, len(thetas)), 1e-12), np.full(len(thetas), 1e-6)

    near = _init("perturbed", n, None, _constant_differences(1.5 * floor / n**2), deviations)
    assert 1000 < near.m <= 1501 and not near.scored and calls == []
    far = _init("perturbed", n, None, _constant_differences(1e5 / n**2), deviations)
    assert far.scored and calls == [ecs_tuning.SCORE_POINTS]


def test_pilot_points_are_laplace_draws_where_the_posterior_has_mass():
    """Under a Gaussian log posterior the bound ½χ²_d(0.999) keeps the Laplace draws themselves; where
    the log posterior falls off a ridge (θ₁ > 1.5 here), the draws there are replaced by others; where
    no draw qualifies, those of least drop are taken."""
    from pymc_subsample.kernels.tuning import laplace_draws, plausible_laplace_draws

    center, precision = np.zeros(3), np.diag([1.0, 4.0, 0.25])
    gaussian = lambda theta: -0.5 * theta @ precision @ theta  # noqa: E731
    first = plausible_laplace_draws(np.random.default_rng(5), center, precision, 20, gaussian)
    np.testing.assert_array_equal(first, laplace_draws(np.random.default_rng(5), center, precision, 20))

    def ridge(theta):
        return gaussian(theta) - (1e4 if theta[0] > 1.5 else 0.0)

    plain = laplace_draws(np.random.default_rng(1), center, precision, 200)
    assert (plain[:, 0] > 1.5).sum() >= 5  # the plain draws do leave the ridge
    kept = plausible_laplace_draws(np.random.default_rng(1), center, precision, 200, ridge)
    assert kept.shape == (200, 3) and (kept[:, 0] <= 1.5).all()
    bound = 0.5 * stats.chi2.ppf(0.999, 3)
    assert all(-ridge(theta) <= bound for theta in kept)

    def nowhere(theta):  # every draw implausible: the 4 of least drop, nearest θ* in the metric
        return 0.0 if not theta.any() else -1e6 - 0.5 * theta @ precision @ theta

    least = plausible_laplace_draws(np.random.default_rng(2), center, precision, 4, nowhere)
    drawn = np.concatenate([laplace_draws(np.random.default_rng(2), center, precision, 4 * 20)])
    order = np.argsort([t @ precision @ t for t in drawn])
    np.testing.assert_allclose(least, drawn[order[:4]])
