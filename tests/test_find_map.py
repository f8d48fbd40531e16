"""find_map: chunked full-data MAP against pm.find_map."""

import numpy as np
import pymc as pm
import pytest
from conftest import DATA, logistic_data, logistic_model, needs_data

import pymc_subsample as pms
from pymc_subsample.control_variates.center import find_map_theta


def skin_model():
    data = pms.datasets.load_skin(DATA / "skin", standardize=True)
    X = np.column_stack([np.ones(data.X.shape[0]), data.X])
    return logistic_model(X, data.y), X, data.y


def test_find_map_matches_pymc_on_small_model():
    X, y = logistic_data(1500, 3, seed=9)
    model = logistic_model(X, y)
    ours = pms.find_map(model, chunk_size=100, progressbar=False)
    ref = pm.find_MAP(model=model, progressbar=False)
    np.testing.assert_allclose(ours["beta"], ref["beta"], atol=1e-6)


def test_find_map_prints_one_summary_line_as_documented(capsys):
    X, y = logistic_data(1500, 3, seed=9)
    pms.find_map(logistic_model(X, y), chunk_size=100, progressbar=True)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("find_map:") and "full-data passes" in lines[0]
    assert "once per iteration" not in pms.find_map.__doc__


def test_default_centre_is_documented_as_what_the_code_does():
    # center=None is the subset MAP + one Newton step of find_center, not find_map
    from pymc_subsample.control_variates.center import find_center
    from pymc_subsample.step_methods.base import SubsampleStep

    for doc in (pms.HMCECS.__doc__, SubsampleStep.__doc__):
        assert "Newton step" in doc and "with ``pms.find_map``" not in doc
    assert "Newton" in find_center.__doc__


def test_find_map_on_rows_subset_scales_likelihood():
    X, y = logistic_data(2000, 2, seed=3)
    tall = pms.TallModel(logistic_model(X, y))
    rows = np.arange(0, 2000, 2)
    theta, _ = find_map_theta(tall, rows=rows)
    # the same optimum as the model with every selected row counted twice
    sub = pms.TallModel(logistic_model(np.repeat(X[rows], 2, axis=0), np.repeat(y[rows], 2)))
    expected, _ = find_map_theta(sub)
    np.testing.assert_allclose(theta, expected, atol=1e-6)
    with pytest.raises(ValueError, match="rows must be"):
        find_map_theta(tall, rows=np.array([5000]))


@needs_data
@pytest.mark.slow
def test_find_map_matches_pymc_on_skin_segmentation():
    model, _, _ = skin_model()
    ours = pms.find_map(model, chunk_size=20_000, progressbar=False)
    # pm.find_MAP's default tolerances stop ~0.3 short in gradient on 245k rows; tighten them
    ref = pm.find_MAP(model=model, progressbar=False, options={"ftol": 1e-15, "gtol": 1e-9, "maxcor": 20})
    sd = np.array(
        [0.0108, 0.0156, 0.0178, 0.0110]
    )  # posterior sds from ../shared/data/skin/reference_nuts.json
    assert np.max(np.abs(ours["beta"] - ref["beta"]) / sd) <= 1e-4


def _distance_in_sds(tall, theta, start=None):
    """max_j |θ_j − mode_j| / sd_j with the Laplace sds at the full-data mode (full-data L-BFGS from
    ``start``, by default PyMC's initial point)."""
    from pymc_subsample.estimators.target import SubsampledTarget

    mode, _ = find_map_theta(tall, start=start, ftol=1e-12, tol=1e-7, polish=False)
    sd = np.sqrt(np.diag(np.linalg.inv(SubsampledTarget(tall, mode).laplace_precision())))
    return float(np.max(np.abs(theta - mode) / sd))


@pytest.mark.parametrize("name", ["logistic", "poisson_offset", "student_t"])
def test_subset_newton_centre_is_within_its_tolerance_of_the_mode(name):
    # 2,000 of 20,000 rows: the subset path of find_center; on these GLMs (≤ 8 parameters, the η
    # path) exact Newton steps corrected to third order by the subset, so that the second pass is
    # at the centre (one exact step alone leaves 0.12-0.17 sds at 10⁶ rows: a third pass)
    from zoo import build

    import pymc_subsample.control_variates.center as center

    tall = pms.TallModel(build(name, 20_000))
    assert center.hessian_passes_are_cheap(tall)
    theta = center.find_center(tall, warm_rows=2000)
    assert tall.full_passes == 2
    assert _distance_in_sds(tall, theta) < center.CENTER_TOLERANCE


def test_the_centres_last_pass_serves_the_proxys_sums():
    """The set-up's centre ends with a pass at θ*, the one the proxy's sums need: the proxy takes
    its sums (two full passes in all, where three were made), and they are those of a fresh pass.
    Nothing is remembered after the set-up."""
    from zoo import build

    from pymc_subsample.model.chunks import chunked_sum

    with build("poisson_offset", 50_000):  # > 2 · 20,000 rows: the subset path of the default centre
        step = pms.SubsampleMH(progressbar=False)
    tall = step.tall
    assert tall.full_passes == 2 and tall.pass_memo is None
    total, grad, hess = chunked_sum(tall, tall.loglik_sum_value_grad_hessian, step.proxy.center)
    assert tall.full_passes == 3
    np.testing.assert_allclose([step.proxy.loglik_sum], [total], rtol=1e-13)
    np.testing.assert_allclose(step.proxy.grad_sum, grad, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(step.proxy.hess_sum, hess, rtol=1e-12)


def test_centre_of_a_non_centred_model_by_expansions_in_phi_within_tolerance(monkeypatch):
    """The non-centred μ + τz: the log posterior is not concave in θ, but the rows are affine in φ =
    (a, β); the expansions in φ reach the tolerance in two passes, with no full-data L-BFGS: B over
    all rows, each step corrected to third order by the subset, so that the second pass is at the
    centre."""
    from zoo import build


    tall = pms.TallModel(build("hierarchical_noncentred", 20_000))
    assert tall.uses_eta_sums() and tall.regression_view.phi is not None
    # 5,000 of 20,000 rows: ≥ 200 per group, so the subset corrects each step
    _assert_centre_by_expansions(tall, monkeypatch, warm_rows=5000, max_passes=2)


def _assert_centre_by_expansions(tall, monkeypatch, warm_rows, max_passes, mode_from_centre=False):
    """find_center reaches its tolerance of the mode in ≤ ``max_passes`` full passes, and never
    by full-data L-BFGS (``mode_from_centre``: the reference mode by L-BFGS from the centre found,
    where from PyMC's initial point it takes hundreds of passes)."""
    import pymc_subsample.control_variates.center as center

    full_lbfgs = []
    real = center.find_map_theta
    monkeypatch.setattr(center, "find_map_theta",
                        lambda *a, **k: (k.get("rows") is None and full_lbfgs.append(1)) or real(*a, **k))
    theta = center.find_center(tall, warm_rows=warm_rows)
    assert not full_lbfgs
    # besides the passes of the centre, the one that reads η's Jacobian of every row in φ, for
    # those passes and for the estimate (TallModel.kept_affine)
    kept_read = tall.kept_affine(phi=True) is not None
    assert tall.full_passes - kept_read <= max_passes
    monkeypatch.setattr(center, "find_map_theta", real)
    assert _distance_in_sds(tall, theta, theta if mode_from_centre else None) < center.CENTER_TOLERANCE


def test_centre_of_a_non_concave_posterior_goes_to_lbfgs_without_an_exact_newton_step(monkeypatch):
    """Where the expansions in φ are not taken (refused here), the subset-Newton steps in θ meet a
    Hessian that is not negative definite, and so would the exact one; the rows' curvature in θ is
    not concave (τz), so no expansion in θ is taken either: the pass of Jacobians for an exact
    Newton step is skipped and full-data L-BFGS starts from the best point seen; the centre is still
    near the mode."""
    from zoo import build

    import pymc_subsample.control_variates.center as center

    tall = pms.TallModel(build("hierarchical_noncentred", 20_000))
    real_expansions = center.expansion_steps
    in_theta = []

    def phi_refused(tall, coordinates, start, *a, **k):
        if isinstance(coordinates, center.PhiCoordinates):
            return None, start
        in_theta.append(real_expansions(tall, coordinates, start, *a, **k)[0])
        return None, in_theta[-1] if in_theta[-1] is not None else start

    monkeypatch.setattr(center, "expansion_steps", phi_refused)
    exact_newton = []
    real = center._newton_polish
    monkeypatch.setattr(center, "_newton_polish", lambda *a, **k: exact_newton.append(1) or real(*a, **k))
    theta = center.find_center(tall, warm_rows=2000)
    assert not exact_newton
    assert len(in_theta) == 1 and in_theta[0] is None  # refused: the curvature in θ is indefinite
    assert _distance_in_sds(tall, theta) < 0.1


def test_centre_where_the_prior_is_not_concave_by_expansions_in_theta(monkeypatch):
    """A centred hierarchical model's rows are concave in θ, its prior a ~ N(μ, σ) is not: where the
    subset-Newton steps meet a Hessian that is not negative definite (at 10⁷ rows, one step of 93 sds
    from the subset MAP; forced here), expansions of the log-likelihood in θ with the exact prior
    reach the tolerance in a few gradient passes, without full-data L-BFGS."""
    from zoo import build

    import pymc_subsample.control_variates.center as center

    tall = pms.TallModel(build("hierarchical_centred", 50_000))
    monkeypatch.setattr(center, "_subset_newton_steps",
                        lambda tall, start, *a, **k: (None, -np.inf, start, False))
    # ≤ 4 passes: the subset-Newton steps' own count here (5,000 of 50,000 rows)
    _assert_centre_by_expansions(tall, monkeypatch, warm_rows=5000, max_passes=4)


def test_an_expansion_is_taken_only_where_the_rows_curvature_is_concave():
    from pymc_subsample.control_variates.expansion import _concave

    negative = -np.diag([3.0, 1e-3, 2e5])
    assert _concave(negative)
    # parameters no row reads (a centred model's μ, σ): a zero block, bounded by the prior
    assert _concave(np.block([[negative, np.zeros((3, 2))], [np.zeros((2, 5))]]))
    assert _concave(negative + 1e-12 * np.eye(3) * 2e5 * 1e-3)  # rounding
    assert not _concave(np.diag([-3.0, 1e-2, -2e5]))  # one direction without a maximum


def test_centre_with_many_groups_takes_the_curvature_over_all_rows_and_a_trust_region(monkeypatch):
    """With few subset rows per group (400 groups, 10 rows each of a 4,000-row subset) a group's
    curvature from the subset is poor, and at the subset MAP some groups saturate (all their subset
    rows 0: p(1 − p) ≈ 0), where the expansion is flat and its step far off. Unguarded, the steps in φ
    overshot and full-data L-BFGS took over (53 passes here; 1,000 groups at 10⁵ rows: 57); with B
    over all rows and the trust region, the expansions reach the tolerance in a few passes."""
    from zoo import hierarchical_noncentred

    import pymc_subsample.control_variates.center as center

    tall = pms.TallModel(hierarchical_noncentred(20_000, groups=400))
    coordinates = center.PhiCoordinates(tall, tall.regression_view, center.DEFAULT_CHUNK_SIZE)
    assert coordinates.rows_per_group(np.arange(4000)) < center.MIN_ROWS_PER_GROUP
    _assert_centre_by_expansions(tall, monkeypatch, warm_rows=4000, max_passes=6)


def test_phi_and_the_prior_come_from_one_compiled_function_in_the_set_up():
    """Rows affine in φ(θ), data in memory: the expansions' log p, φ and ∇log p + Dφᵀc, and the
    set-up's prior, come from the function the estimate in φ compiles, equal to those on PyTensor's
    Python linker; a coordinate system on θ itself gives ∇log p + c."""
    from zoo import build

    import pymc_subsample.control_variates.center as center
    from pymc_subsample.control_variates.expansion import ThetaCoordinates

    tall = pms.TallModel(build("crossed_effects", 3_000))
    view = tall.regression_view
    compiled = center.PhiCoordinates(tall, view, center.DEFAULT_CHUNK_SIZE)
    python = center.PhiCoordinates(tall, view, center.DEFAULT_CHUNK_SIZE, compiled=False)
    rng = np.random.default_rng(2)
    theta = tall.initial_theta + rng.normal(scale=0.3, size=tall.ndim)
    weights = rng.normal(size=view.phi.size)
    prior, phi = compiled.prior_and_value(theta)
    expected_prior, expected_phi = python.prior_and_value(theta)
    assert prior == pytest.approx(expected_prior, rel=1e-12)
    np.testing.assert_allclose(phi, expected_phi, rtol=1e-12)
    np.testing.assert_allclose(compiled.value(theta), expected_phi, rtol=1e-12)
    expected = tall.prior_value_and_grad(theta)[1] + view.phi.vjp(theta, weights)
    np.testing.assert_allclose(compiled.prior_gradient_plus_vjp(theta, weights), expected, rtol=1e-10)
    np.testing.assert_allclose(python.prior_gradient_plus_vjp(theta, weights), expected, rtol=1e-10)
    in_setup = tall.prior_value_and_grad(theta, setup=True)
    assert in_setup[0] == pytest.approx(expected_prior, rel=1e-12)
    np.testing.assert_allclose(in_setup[1], tall.prior_value_and_grad(theta)[1], rtol=1e-12)
    assert view.phi.prior_and_pullback(tall) is view.phi.prior_and_pullback(tall)
    in_theta = ThetaCoordinates(tall, center.DEFAULT_CHUNK_SIZE)
    assert in_theta.prior_and_value(theta)[0] == pytest.approx(expected_prior, rel=1e-12)
    in_theta_weights = rng.normal(size=tall.ndim)
    np.testing.assert_allclose(in_theta.prior_gradient_plus_vjp(theta, in_theta_weights),
                               tall.prior_value_and_grad(theta)[1] + in_theta_weights, rtol=1e-10)


def test_the_trust_region_bounds_each_coordinates_step_and_only_where_it_must():
    """B's diagonal is made at least |A_i| / R in magnitude: a coordinate's Newton step −A_i / B_ii is
    then at most R; where the steps are within R already, B is returned as it is."""
    from pymc_subsample.control_variates.expansion import TRUST_RADIUS, _trust_region

    quadratic = np.array([[-4.0, 1.0], [1.0, -1e-3]])
    near = np.array([0.5, 1e-3])
    assert _trust_region(near, quadratic) is quadratic
    damped = _trust_region(np.array([0.5, 10.0]), quadratic)
    np.testing.assert_array_equal(damped - np.diag(np.diag(damped)), quadratic - np.diag(np.diag(quadratic)))
    assert damped[0, 0] == -4.0 and damped[1, 1] == pytest.approx(-10.0 / TRUST_RADIUS)
    assert abs(10.0 / damped[1, 1]) == pytest.approx(TRUST_RADIUS)


def test_a_subsets_rows_are_gathered_once_while_passes_are_remembered(monkeypatch):
    """The centre's subset MAP evaluates the same rows many times: within a remembered block they
    are gathered once (and the sums are those of a fresh gather); outside, and after, every call
    gathers them again, so data changed later is read afresh."""
    from zoo import build

    from pymc_subsample.model.chunks import chunked_sum, remembered_passes

    tall = pms.TallModel(build("poisson_offset", 5_000))
    gathers = []
    gather = tall.gather
    # the subset's chunks (1,000 and 500 rows; the set-up functions gather a few rows of their own)
    monkeypatch.setattr(tall, "gather",
                        lambda idx: (len(idx) >= 500 and gathers.append(len(idx))) or gather(idx))
    rows = np.random.default_rng(0).choice(tall.n_rows, 1_500, replace=False)
    theta = tall.initial_theta
    fresh = chunked_sum(tall, tall.loglik_sum_value_and_grad, theta, rows=rows, chunk_size=1_000)
    assert gathers == [1_000, 500]
    gathers.clear()
    with remembered_passes(tall):
        for point in (theta, theta + 0.1, theta):
            sums = chunked_sum(tall, tall.loglik_sum_value_and_grad, point, rows=rows, chunk_size=1_000)
    assert gathers == [1_000, 500]
    for got, want in zip(sums, fresh, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-14)
    gathers.clear()
    chunked_sum(tall, tall.loglik_sum_value_and_grad, theta, rows=rows, chunk_size=1_000)
    assert gathers == [1_000, 500]


def test_centre_with_crossed_effects_bounds_each_expansion_step(monkeypatch):
    """Crossed effects (η = intercept + xβ + σ_a z_a[a] + σ_b z_b[b]): B in φ is singular along the
    intercept against every effect of one factor, which leaves each row's η as it is. Unbounded, the
    first expansion's maximum moved far along that direction and off it, the log posterior fell, and
    full-data L-BFGS took over (168 passes at these 2·10⁵ rows); with each step bounded in φ
    (:func:`_bounded_expansion_maximum`) the expansions reach the tolerance in a few passes."""
    from zoo import build

    tall = pms.TallModel(build("crossed_effects", 200_000))
    _assert_centre_by_expansions(tall, monkeypatch, warm_rows=20_000, max_passes=6, mode_from_centre=True)


def test_a_subset_map_beyond_its_budget_leaves_the_steps_in_phi_to_start_at_the_initial_point(monkeypatch):
    """Crossed effects, curved in θ along both factors' σ z: L-BFGS needs hundreds of evaluations for
    the subset MAP, so it stops at SUBSET_MAP_MIN_EVALUATIONS and the expansions in φ start from the
    initial point, reaching the tolerance with no full-data L-BFGS; the non-centred model's subset
    MAP converges within it and starts them."""
    from zoo import build

    import pymc_subsample.control_variates.center as center

    subset_runs, starts = [], []
    real_map, real_steps = center.find_map_theta, center.expansion_steps

    def find_map_spy(*args, **kwargs):
        theta, result = real_map(*args, **kwargs)
        if kwargs.get("rows") is not None:
            subset_runs.append(result)
        return theta, result

    def steps_spy(tall, coordinates, start, *args, **kwargs):
        starts.append(np.array(start))
        return real_steps(tall, coordinates, start, *args, **kwargs)

    monkeypatch.setattr(center, "find_map_theta", find_map_spy)
    monkeypatch.setattr(center, "expansion_steps", steps_spy)
    crossed = pms.TallModel(build("crossed_effects", 100_000))
    theta = center.find_center(crossed)
    (run,) = subset_runs
    assert not run.success and run.nfev < 2 * center.SUBSET_MAP_MIN_EVALUATIONS
    np.testing.assert_array_equal(starts[0], crossed.initial_theta)
    monkeypatch.setattr(center, "find_map_theta", real_map)
    assert _distance_in_sds(crossed, theta, theta) < center.CENTER_TOLERANCE

    monkeypatch.setattr(center, "find_map_theta", find_map_spy)
    subset_runs.clear(), starts.clear()
    noncentred = pms.TallModel(build("hierarchical_noncentred", 100_000))
    center.find_center(noncentred)
    (run,) = subset_runs
    assert run.success and run.nfev <= center.SUBSET_MAP_MIN_EVALUATIONS
    np.testing.assert_array_equal(starts[0], run.x)


def test_an_expansions_maximisation_stops_where_it_stalls_far_from_the_mode():
    """Stalled: the last STALL_WINDOW iterations gained under STALL_FRACTION of a gain of at least
    STALL_MIN_GAIN. A small gain (near the mode, where the gain measures the distance to it) never
    stalls, and a stalled maximum counts as damped: not the expansion's own, never the centre."""
    from pymc_subsample.control_variates import expansion

    window, fraction = expansion.STALL_WINDOW, expansion.STALL_FRACTION
    far = [1000.0, 10.0] + [10.0 - k * 1e-4 for k in range(1, window + 1)]  # gain ≈ 990, the window's 1e-3
    assert expansion._stalled(far)
    moving = [1000.0, 100.0] + [100.0 - 9 * k for k in range(1, window + 1)]  # the window gained 90
    assert 90 > fraction * 990 and not expansion._stalled(moving)
    near = [0.5] + [0.5 - 1e-3 - k * 1e-9 for k in range(window + 1)]  # gain < STALL_MIN_GAIN
    assert not expansion._stalled(near)
    assert not expansion._stalled(far[:window])  # too few iterations to tell


def test_the_expansions_preconditioner_is_the_magnitude_of_the_whole_hessian():
    """L Lᵀ = |H|, H = −(JᵀBJ + C) with C the prior's Hessian and φ's curvature along A: where C
    makes H indefinite (a non-centred σ·z far from the mode), the negative eigenvalues enter with
    their magnitude, and the smallest are floored; a positive definite H is taken as it is."""
    from pymc_subsample.control_variates.expansion import PRECONDITIONER_FLOOR, _expansion_preconditioner

    rng = np.random.default_rng(0)
    jacobian = rng.normal(size=(6, 4))
    root = rng.normal(size=(6, 6))
    quadratic = -(root @ root.T)
    indefinite = rng.normal(size=(4, 4))
    curvature = 30.0 * (indefinite + indefinite.T)
    hessian = -(jacobian.T @ quadratic @ jacobian + curvature)
    eigenvalues, vectors = np.linalg.eigh(hessian)
    assert eigenvalues.min() < 0
    magnitudes = np.maximum(np.abs(eigenvalues), PRECONDITIONER_FLOOR * np.abs(eigenvalues).max())
    chol = _expansion_preconditioner(jacobian, curvature, quadratic)
    np.testing.assert_allclose(chol @ chol.T, (vectors * magnitudes) @ vectors.T, rtol=1e-10, atol=1e-10)
    assert _expansion_preconditioner(jacobian, np.zeros((4, 4)), np.zeros((6, 6))) is None
    concave = _expansion_preconditioner(jacobian, -np.eye(4), quadratic)  # H positive definite: H itself
    np.testing.assert_allclose(concave @ concave.T, np.eye(4) - jacobian.T @ quadratic @ jacobian, rtol=1e-10)
