"""HMC-ECS's iteration in one Numba call (:mod:`pymc_subsample.kernels.eta_nuts`): the same iteration as
the resumable machine around the target's own estimate, its in-place subsample update written back
on rejection, the arguments it keeps on the rows of the subsample the step holds, and where it runs."""

import numpy as np
import pymc as pm
import pytest
from conftest import logistic_data, logistic_model
from zoo import build

import pymc_subsample as pms
from pymc_subsample.kernels.compiled_nuts import ECSNUTSResult, _result
from pymc_subsample.kernels.eta_nuts import eta_nuts_iteration
from pymc_subsample.kernels.resumable_nuts import WRONG_SIZE, NUTSMachine, ecs_nuts_iteration
from pymc_subsample.kernels.subsample_update import propose_block_indices
from pymc_subsample.step_methods.compiled_inner import TargetEstimate
from pymc_subsample.subsample.batch import GatheredOnUse


@pytest.fixture(scope="module")
def logistic():
    X, y = logistic_data(5000, 3, seed=2)
    return logistic_model(X, y)


def warmed_step(model, subsample_size=300, num_blocks=10, **kwargs):
    with model:
        step = pms.HMCECS(subsample_size=subsample_size, num_blocks=num_blocks, rng=3, **kwargs)
    point = model.initial_point()
    for _ in range(30):
        point, _ = step.step(point)
    return step


def fused_iteration(eta_nuts, machine, theta, start, new_rows, old_rows, start_position, log_u, momentum,
                    step_size, inverse_mass, seed, max_treedepth) -> ECSNUTSResult:
    """:func:`eta_nuts_iteration` on the arguments ``eta_nuts`` holds, its result as the resumable
    machine's; ``start`` = (value, grad, extras) at θ₀ on u, or None to compute them there."""
    fresh = start is None
    value, grad, extras = (0.0, theta, theta[:1]) if fresh else start
    take, log_ratio, value, grad, extras, status, out = eta_nuts_iteration(
        machine.work, machine.ints, machine.rng, eta_nuts.prior, eta_nuts.fixed, eta_nuts.kept, eta_nuts.rows,
        theta, float(value), grad, extras, fresh, new_rows, old_rows, int(start_position), float(log_u),
        momentum, float(step_size), inverse_mass, np.uint64(seed), int(max_treedepth))
    assert status != WRONG_SIZE
    return ECSNUTSResult(bool(take), float(log_ratio), (float(value), grad, extras), _result(out))


def assert_same_iteration(got, ref):
    """The same decisions, and the same numbers to rounding: LLVM may order a sum of the kernel
    differently once it is compiled into the iteration (seen: 1 ulp)."""
    assert got.subsample_accepted is ref.subsample_accepted
    close = dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.subsample_log_ratio, ref.subsample_log_ratio, **close)
    for a, b in zip(got.start, ref.start, strict=True):
        np.testing.assert_allclose(a, b, **close)
    for key in ref.nuts._fields:
        a, b = getattr(got.nuts, key), getattr(ref.nuts, key)
        if isinstance(b, (bool, int)):
            assert a == b, key
        else:
            np.testing.assert_allclose(a, b, err_msg=key, **close)


@pytest.mark.parametrize("log_u", [-50.0, 50.0, "ratio"])
@pytest.mark.parametrize("fresh", [True, False])
def test_the_fused_iteration_is_the_resumable_machines(logistic, log_u, fresh):
    """The same subsample update, draw and statistics, to rounding, as the resumable machine calling the
    target's estimate on the proposal made by the Python path (u′ taken, rejected, at the ratio); the
    rows it holds are u′'s after a take and u's again after a rejection."""
    step = warmed_step(logistic)
    eta_nuts = step._eta_nuts()
    assert eta_nuts is not None
    subsample, theta, d = step.subsample, np.array(step.current_theta), step.tall.ndim
    new_idx, block, offset = propose_block_indices(np.random.default_rng(11), step.design, subsample.idx)
    proposal = subsample.with_block(step.tall, new_idx, block, offset)
    current = TargetEstimate(step, subsample.batch, subsample)
    proposed = TargetEstimate(step, proposal.batch, proposal)
    start = current(theta)
    if log_u == "ratio":  # just below the ratio: taken
        log_u = np.nextafter(float(proposed(theta)[0]) - float(start[0]), -np.inf)
    rng = np.random.default_rng(5)
    momentum, seed = rng.normal(size=d), rng.integers(2**64, dtype=np.uint64)
    inverse_mass, step_size = step.inner._current_inverse_mass(), 0.3
    ref = ecs_nuts_iteration(lambda q, e: e(q), theta, start, (current,), (proposed,), log_u, momentum,
                             step_size, inverse_mass, seed, 10, machine=NUTSMachine(d))
    eta_nuts.hold("u", current.fused_rows)
    got = fused_iteration(eta_nuts, NUTSMachine(d), theta, None if fresh else start, new_idx[block],
                          subsample.idx[block], block.start + offset, log_u, momentum, step_size,
                          inverse_mass, seed, 10)
    assert_same_iteration(got, ref)
    held = proposed if ref.subsample_accepted else current
    for a, b in zip(eta_nuts.rows, held.fused_rows, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_rows_held_are_those_of_the_steps_subsample(logistic):
    """After many iterations of in-place updates, the estimate on the step's subsample, its rows gathered
    from the data by its indices, is the one the iterations carry (a small m, a first-order proxy: both
    branches of the update are taken)."""
    step = warmed_step(logistic, subsample_size=40, num_blocks=4, proxy_order=1)
    assert step._eta_nuts() is not None
    accepted = 0
    point = {"beta": step.current_theta}
    for _ in range(60):
        idx = step.subsample.idx
        point, _ = step.step(point)
        accepted += not np.array_equal(idx, step.subsample.idx)
    assert 0 < accepted < 60
    theta = step.current_theta
    carried = step.current
    on_rows = TargetEstimate(step, step.subsample.batch, step.subsample)(theta)
    np.testing.assert_allclose(float(on_rows[0]), carried.value, rtol=1e-12)
    np.testing.assert_allclose(on_rows[1], carried.grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(on_rows[2], carried.extras, rtol=1e-10)


def test_where_the_fused_iteration_runs(logistic):
    with logistic:
        assert pms.HMCECS(subsample_size=300)._eta_nuts() is not None
        # the signed estimator, HMC
        assert pms.HMCECS(estimator="signed")._eta_nuts() is None
        assert pms.HMCECS(subsample_size=300, inner="hmc", compiled=True)._eta_nuts() is None
    rng = np.random.default_rng(0)
    with pm.Model():  # f compiled from the model: no closed form
        x = pm.Data("x", rng.normal(size=2000))
        b = pm.Normal("b", 0, 1, shape=2)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(b[0] + b[1] * x),
                               observed=rng.poisson(2.0, size=2000))
        assert pms.HMCECS(subsample_size=300)._eta_nuts() is None
    # a negative binomial's closed form; two observed variables' terms; a prior over a model's dims (a
    # shared length, read as a constant)
    for name in ("negative_binomial", "two_observed", "hierarchical_centred"):
        with build(name, 2000):
            assert pms.HMCECS(subsample_size=300)._eta_nuts() is not None, name


def test_a_subsample_kept_by_its_indices_copies_its_indices_not_the_data(logistic):
    """PyMC deep-copies the step's sampling state at every pm.sample and chain: the subsample kept by
    its indices copies them and shares what gathers its rows."""
    import copy

    step = warmed_step(logistic)
    subsample = step.subsample
    assert isinstance(subsample, GatheredOnUse)
    state = step.sampling_state
    copied = state.subsample
    assert copied is not subsample and copied._gather is subsample._gather
    np.testing.assert_array_equal(copied.idx, subsample.idx)
    copied.idx[0] = -1
    assert subsample.idx[0] != -1
    for a, b in zip(copy.deepcopy(subsample).batch, subsample.batch, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_rows_held_follow_the_rows_computed_exactly(logistic):
    """With rows computed exactly before the subsample's in the batch, the block update writes at the
    block's positions after them: the estimate on the step's subsample, gathered from the data, is the
    one the iterations carry."""
    from pymc_subsample.kernels import ecs_tuning

    step = warmed_step(logistic, subsample_size=40, num_blocks=4, proxy_order=1)
    step._use(ecs_tuning.with_size(step.design, 40, exact=np.array([3, 17, 4000])))
    step.subsample, step.current = step._draw_subsample(), None
    point = {"beta": step.current_theta}
    for _ in range(40):
        point, _ = step.step(point)
    assert step._eta_nuts() is not None and step.potential.n_exact == 3
    np.testing.assert_array_equal(step.subsample.batch.rows[:3], [3, 17, 4000])
    on_rows = TargetEstimate(step, step.subsample.batch, step.subsample)(step.current_theta)
    np.testing.assert_allclose(float(on_rows[0]), step.current.value, rtol=1e-12)
    np.testing.assert_allclose(on_rows[1], step.current.grad, rtol=1e-10, atol=1e-10)


def test_the_kernels_random_rows_avoid_the_exact_ones_and_are_uniform_over_the_rest():
    from scipy import stats

    from pymc_subsample.kernels.eta_nuts import _row_outside

    stream, exact = np.array([12345], dtype=np.uint64), np.array([0, 3, 4, 9], dtype=np.int64)
    rows = np.array([_row_outside(stream, 10, exact) for _ in range(12_000)])
    counts = np.bincount(rows, minlength=10)
    assert counts[exact].sum() == 0
    assert stats.chisquare(counts[np.setdiff1d(np.arange(10), exact)]).pvalue > 1e-3


@pytest.mark.parametrize("size", [7, 8])
def test_the_kernels_normals_are_standard(size):
    """Box-Muller pairs, an odd length's last from a pair of its own: independent draws, so their
    mean's standard error is 1/√n and their variance's √(2/n)."""
    from pymc_subsample.kernels.eta_nuts import _standard_normals

    stream, out = np.array([99], dtype=np.uint64), np.empty(size)
    draws = np.empty((20_000, size))
    for k in range(len(draws)):
        _standard_normals(stream, out)
        draws[k] = out
    n = draws.size
    assert abs(draws.mean()) < 4 / np.sqrt(n)
    assert abs(draws.var() - 1.0) < 4 * np.sqrt(2.0 / n)
    corr = np.corrcoef(draws, rowvar=False)
    assert np.abs(corr - np.eye(size)).max() < 4 / np.sqrt(len(draws))


def test_the_momentum_factor_draws_from_the_mass_matrix(logistic):
    step = warmed_step(logistic)
    factor, _, inverse_mass, _ = step.inner.fixed_for_draws()
    np.testing.assert_allclose(factor @ factor.T @ inverse_mass, np.eye(len(factor)), atol=1e-10)


def test_draws_held_ahead_are_handed_out_from_the_last_point_only(logistic):
    """After warm-up one call runs many iterations; from a point other than the last draw the draws
    held are dropped and the iteration starts there, on the subsample of the last draw handed out,
    whose rows and estimate are those the next iterations carry."""
    step = warmed_step(logistic)
    step.stop_tuning()
    calls = []
    draws_from = step._draws_from
    step._draws_from = lambda *a: calls.append(1) or draws_from(*a)
    point = {"beta": step.current_theta}
    for _ in range(10):
        point, _ = step.step(point)
    assert len(calls) == 1 and step.draws_ahead.next == 10
    handed_out = step.subsample
    elsewhere = {"beta": point["beta"] + 0.01}
    point, _ = step.step(elsewhere)
    assert len(calls) == 2 and step.draws_ahead.next == 1
    # the first new iteration's u is the last one handed out, or its one-block update
    changed = np.flatnonzero(step.subsample.idx != handed_out.idx)
    assert any(set(changed) <= set(range(b.start, b.stop)) for b in step.design.blocks), changed
    for _ in range(step.draws_ahead.draws.theta.shape[0] + 5):  # past the end of the call's draws
        point, _ = step.step(point)
    assert len(calls) == 3
    while step.draws_ahead.next < len(step.draws_ahead.draws.theta):  # to the last draw, the one estimated
        point, stats = step.step(point)
    rows = step.potential.rows_in(step.subsample)
    assert stats[0]["n_loglik_evals"] == rows * (1 + stats[0]["n_steps"])  # u′ at θ₀, then the path
    on_rows = TargetEstimate(step, step.subsample.batch, step.subsample)(step.current_theta)
    np.testing.assert_allclose(float(on_rows[0]), step.current.value, rtol=1e-12)
    np.testing.assert_allclose(on_rows[1], step.current.grad, rtol=1e-10, atol=1e-10)
    # from elsewhere after the call's last draw: the estimate at the new θ₀ is made first
    _, stats = step.step({"beta": point["beta"] - 0.01})
    assert len(calls) == 4
    assert stats[0]["n_loglik_evals"] == rows * (2 + stats[0]["n_steps"])


def test_draws_held_ahead_agree_with_the_path_through_python(logistic):
    """The iterations run ahead in Numba draw their random numbers from their own stream: their
    posterior moments agree with those of PyMC's NUTS on the same estimate (``compiled=False``)
    within Monte Carlo standard error, after a minimum ESS."""
    import arviz as az

    runs = {}
    with logistic:
        for compiled in (True, False):
            step = pms.HMCECS(subsample_size=300, num_blocks=10, rng=5, compiled=compiled)
            runs[compiled] = pm.sample(step=step, draws=1500, tune=500, chains=1, random_seed=11,
                                       progressbar=False, compute_convergence_checks=False)
    draws = {k: v.posterior["beta"].values[0] for k, v in runs.items()}
    ess = {k: np.asarray(az.ess(v, var_names=["beta"])["beta"]) for k, v in runs.items()}
    assert min(e.min() for e in ess.values()) >= 300
    se = {k: draws[k].std(axis=0) / np.sqrt(ess[k]) for k in draws}
    z = (draws[True].mean(axis=0) - draws[False].mean(axis=0)) / np.hypot(se[True], se[False])
    assert np.abs(z).max() < 4, z
    sd_ratio = draws[True].std(axis=0) / draws[False].std(axis=0)
    assert np.all(np.abs(np.log(sd_ratio)) < 4 * np.sqrt(1 / ess[True] + 1 / ess[False])), sd_ratio


@pytest.mark.parametrize("tune", [0, 40])
def test_a_chain_runs_ahead_only_the_draws_it_was_given(logistic, tune):
    """During warm-up one iteration a call; after it as many as the chain has left, 64 at most, so
    that no iteration is run and dropped; the rows counted are those of the draws handed out."""
    with logistic:
        step = pms.HMCECS(subsample_size=300, num_blocks=10, rng=5)
    calls = []
    draws_from = step._draws_from
    step._draws_from = lambda eta_nuts, theta: calls.append(step.tune) or draws_from(eta_nuts, theta)
    before = step.potential.n_rows_evaluated
    with logistic:
        idata = pm.sample(step=step, draws=100, tune=tune, chains=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False, discard_tuned_samples=False)
    assert calls == [True] * tune + [False] * 2  # 64 + 36
    assert len(step.draws_ahead.draws.theta) == 36 and step.draws_ahead.next == 36
    counted = int(idata.sample_stats["n_loglik_evals"].sum())
    if tune:
        counted += int(idata.warmup_sample_stats["n_loglik_evals"].sum())
    assert step.potential.n_rows_evaluated - before == counted
