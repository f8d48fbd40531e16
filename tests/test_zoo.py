"""The model zoo (tests/zoo.py): rows on demand, estimator gradients and compiled graphs on the
models PyMC users write, with X and y as pm.Data; the defaults' choices on them. Agreement with
full-data NUTS: test_zoo_agreement.py."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from pytensor.graph.basic import Constant
from pytensor.raise_op import Assert
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.shape import SpecifyShape
from zoo import ZOO, build

import pymc_subsample as pms
from pymc_subsample import TallModel
from pymc_subsample.control_variates.center import find_center
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.kernels.ecs_tuning import PERTURBED_FLOOR
from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS

N = 20_000


def _full_rows(model, point):
    terms = model.compile_fn(
        model.logp(vars=model.observed_RVs, sum=False), inputs=model.value_vars, point_fn=False,
        on_unused_input="ignore", mode=PYTHON_LINKER_ARRAYS,
    )(*[point[v.name] for v in model.value_vars])
    return sum(t.reshape(t.shape[0], -1).sum(axis=1) for t in terms)


def _is_length_check(node):
    """An Assert, or a SpecifyShape of a length known only at run time."""
    if isinstance(node.op, Assert):
        return True
    return isinstance(node.op, SpecifyShape) and not all(isinstance(dim, Constant) for dim in node.inputs[1:])


#: models whose generic row graphs take minutes to compile on a cold cache: under ``heavy``
ROWS_HEAVY = {"zero_inflated_poisson", "mvnormal_lkj", "two_observed", "hierarchical_centred"}


@pytest.mark.usefixtures("python_linker")
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.heavy) if name in ROWS_HEAVY else name
                                  for name in ZOO])
def test_zoo_rows_gradients_and_no_blockwise(name):
    model = build(name, N)
    tall = TallModel(model)
    rng = np.random.default_rng(0)
    center = find_center(tall)
    target = SubsampledTarget(tall, center)
    theta = center + rng.normal(scale=0.02, size=tall.ndim)
    # rows on demand equal the full-data graph, and the batch sum equals the full sum
    full = _full_rows(model, tall.theta_to_point(theta))
    idx = rng.integers(0, N, size=300)
    np.testing.assert_allclose(tall.loglik_rows(theta, tall.gather(idx)), full[idx], rtol=0, atol=1e-10)
    total, _ = tall.loglik_sum_value_and_grad(theta, tall.row_slice(0, N))
    assert total == pytest.approx(full.sum(), rel=1e-12)
    # the perturbed estimator's compiled gradient against central finite differences
    batch = tall.gather(idx)
    value, grad, _ = target.perturbed(theta, batch)
    eps = 1e-5
    for j in range(tall.ndim):
        e = np.zeros(tall.ndim)
        e[j] = eps
        fd = (target.perturbed(theta + e, batch)[0] - target.perturbed(theta - e, batch)[0]) / (2 * eps)
        assert grad[j] == pytest.approx(fd, rel=1e-4, abs=1e-3 + 1e-7 * abs(value)), (j, grad[j], fd)
    # every function on a sampling path is Blockwise-free (no Python loop over rows); on the η path no
    # run-time length check of the batch's inputs (an Assert or SpecifyShape per input, each a Numba
    # kernel of its own on a cold cache): the kernels check their inputs' lengths themselves
    target.differences(theta, batch)
    for key, fn in target.functions.current.items():
        nodes = fn.maker.fgraph.apply_nodes
        blockwise = [node for node in nodes if isinstance(node.op, Blockwise)]
        assert not blockwise, (key, blockwise[:3])
        if target.glm is not None:
            checks = [node for node in nodes if _is_length_check(node)]
            assert not checks, (key, checks)


VECTORISED_J = ["logistic", "bambi_form", "linear", "student_t", "two_observed", "deterministic_potential",
                "hierarchical_centred", "hierarchical_noncentred"]


@pytest.mark.parametrize("name", VECTORISED_J)
def test_set_up_jacobian_of_eta_in_one_vectorised_call_equals_one_call_per_point(name):
    """The set-up's J_k = ∂η_k/∂θ (or ∂η_k/∂φ) comes from η at 0 and the unit vectors in one call
    vectorised over the points (no Blockwise node), and equals one call per point."""
    from pymc_subsample.model.regression_view import distributional_regression

    tall = TallModel(build(name, 2000))
    view = tall.regression_view
    batch = tall.gather(np.random.default_rng(0).integers(0, 2000, size=300))
    if view.phi is None:
        jacobian, d = view.eta_offset_and_jacobian, tall.ndim
    else:
        view.phi.value(tall.initial_theta)  # φ's size
        jacobian, d = view.phi_offset_and_jacobian, view.phi.size
    offset, jac = jacobian(batch)
    function = (view._phi_points if view.phi is not None else view._theta_points).vectorised
    assert function is not False, "the vectorised function was not used"
    assert not [n for n in function.maker.fgraph.apply_nodes if isinstance(n.op, Blockwise)]
    assert offset.shape == (300, view.n_eta) and jac.shape == (300, view.n_eta, d)
    # one call per point: a second view of the same model, with the vectorised functions refused
    looped = distributional_regression(tall)
    if view.phi is not None:
        looped.phi.value(tall.initial_theta)
        looped.eta_at_phis(np.zeros((1, d)), batch)
        looped._phi_points.vectorised = False
    else:
        looped.eta_at_thetas(np.zeros((1, d)), batch)
        looped._theta_points.vectorised = False
    offset_loop, jac_loop = (looped.eta_offset_and_jacobian if view.phi is None
                             else looped.phi_offset_and_jacobian)(batch)
    np.testing.assert_allclose(offset, offset_loop, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jac, jac_loop, rtol=1e-12, atol=1e-12)
    # and η at a point equals the offset plus J times it (η is affine)
    point = np.random.default_rng(1).normal(size=d)
    at_point = view.eta_at_thetas(point[None], batch)[0] if view.phi is None else \
        view.eta_at_phis(point[None], batch)[0]
    np.testing.assert_allclose(at_point, offset + jac @ point, rtol=1e-10, atol=1e-10)
    # the set-up's gradient Σ J_kᵀ∇f_k (small d) equals the reverse pass through η
    theta = tall.initial_theta + 0.1
    first = view.row_terms(theta, batch).first
    rows = (batch[0].shape[0],)
    first = [np.broadcast_to(np.asarray(g, dtype=float), rows) for g in first]
    np.testing.assert_allclose(view.sums(theta, batch, hessian=False)[1], view.eta_vjp(first, batch, theta),
                               rtol=1e-10, atol=1e-10)


def test_group_effects_set_up_takes_gradients_from_eta_jacobian_without_a_reverse_pass():
    # d = 24, but η = a[g] + b·x reads a through one group block: its Jacobian takes 3 points
    # besides 0, so the centre's gradient passes need no reverse pass through η (a Numba kernel of
    # 4-5 s on a cold cache); the values are checked against that pass above
    with build("hierarchical_centred", N):
        step = pms.HMCECS(rng=0, progressbar=False)
    view = step.target.glm
    assert step.tall.ndim == 24 and len(view.layout().points) == 4
    assert view._vjp_function is None


def test_a_deterministic_over_the_rows_is_named_with_its_remedy():
    """μ = Xβ as a Deterministic: PyMC computes it from all N rows at every draw (measured at 10⁵
    rows: 11.2 s for HMCECS's 500 + 500 draws, 1.4 s with var_names=["beta"]). The warning names it,
    says what to do and points at the user's line; a Deterministic of the parameters alone (the
    non-centred a = μ + τz) is not one."""
    with build("deterministic_potential", N), pytest.warns(UserWarning, match="Deterministic 'mu'") as caught:
        pms.HMCECS(rng=0, progressbar=False)
    (message,) = [w for w in caught if "Deterministic" in str(w.message)]
    assert "var_names" in str(message.message) and "pm.compute_deterministics" in str(message.message)
    assert message.filename == __file__
    with build("hierarchical_noncentred", N), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pms.HMCECS(rng=0, progressbar=False)
    assert not [w for w in caught if "Deterministic" in str(w.message)]


@pytest.mark.parametrize("step_class", [pms.HMCECS, pms.SubsampleMH])
def test_potential_is_honoured_and_deterministic_recorded(step_class):
    model = build("deterministic_potential", N)
    with model:
        step = step_class(rng=0)
        idata = pm.sample(step=step, draws=200, tune=200, chains=1, random_seed=3, progressbar=False,
                          compute_convergence_checks=False)
    # Gaussian with known σ = 1: the exact posterior, with the Potential's −½((β₀ − 2)/0.01)²
    X, y = model["X"].get_value(), model["y"].get_value()
    prec = X.T @ X + np.eye(2) + np.diag([1e4, 0.0])
    mean = np.linalg.solve(prec, X.T @ y + [2e4, 0.0])
    sd = np.sqrt(np.diag(np.linalg.inv(prec)))
    without_potential = np.linalg.solve(X.T @ X + np.eye(2), X.T @ y)
    assert abs(without_potential[0] - mean[0]) > 50 * sd[0]  # the Potential matters here
    draws = idata.posterior["beta"].values.reshape(-1, 2)
    ess = az.ess(idata, var_names=["beta"])["beta"].values
    assert ess.min() >= 50
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4.5 * sd / np.sqrt(ess)), (draws.mean(0), mean)
    assert idata.posterior["mu"].shape[-1] == N


def test_set_data_then_posterior_predictive():
    model = build("set_data_predictive", N)
    with model:
        idata = pm.sample(step=pms.HMCECS(rng=0), draws=100, tune=100, chains=1, random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
        X_new = np.array([[0.0, 0.0], [1.0, 1.0], [-1.0, 2.0]])
        pm.set_data({"X": X_new, "y": np.zeros(3)})
        pred = pm.sample_posterior_predictive(idata, random_seed=2, progressbar=False)
    obs = pred.posterior_predictive["obs"]
    assert obs.shape[-1] == 3
    expected = 0.5 + X_new @ [1.0, 0.5]
    np.testing.assert_allclose(obs.mean(("chain", "draw")).values, expected, atol=0.3)


SAMPLE = dict(chains=1, progressbar=False, compute_convergence_checks=False)


def test_hmcecs_defaults_on_noncentred_hierarchical_model_keep_m_small():
    # Measured: with the Taylor proxy in θ, m = 1000 rows of the non-centred hierarchical logistic
    # model (20 groups) had σ̂² ≈ 40 (τz is curved in θ = (μ, log τ, z)) and an ESS of 3 of 600
    # draws for μ_a, so the default raised m to most of the rows and pointed to NUTS. Its rows are
    # affine in φ = (μ + τz, b), and the proxy in η is exact in φ's curvature (test_row_free.py):
    # σ̂² ≈ 10⁻⁴ at m = 1000 (σ̂² ∝ 1/m: 10⁻³ at 100), so the default keeps its floor, silently.
    model = build("hierarchical_noncentred", N)
    with model, warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        step = pms.HMCECS(rng=0)
    assert step.subsample_size == PERTURBED_FLOOR
    # its posterior in θ is curved (τz): the mass matrix adapts from the Laplace start, and PyMC's
    # "experimental" warning for its dense adaptation does not reach the user, who did not ask for it
    assert step.mass_matrix == "laplace_adapt"
    # and its step size aims at 0.9 (CURVED_TARGET_ACCEPT), a GLM's at PyMC's 0.8 (below)
    assert step.inner.target_accept == 0.9
    assert not [w for w in record if "pymc_subsample" in w.filename], [str(w.message) for w in record]
    assert not [w for w in record if "QuadPotentialFullAdapt" in str(w.message)]
    # on a GLM the default stays at its floor (σ̂² ≪ 1 there), silently, with the fixed Laplace metric
    with build("logistic", N), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        step = pms.HMCECS(rng=0)
    assert step.subsample_size == PERTURBED_FLOOR and step.mass_matrix == "laplace"
    assert step.inner.target_accept == 0.8
    assert not [w for w in record if "pymc_subsample" in w.filename], [str(w.message) for w in record]


def test_auto_subsample_size_is_chosen_again_at_the_chains_warmup_draws():
    # crossed effects with groups of a few rows: the set-up chooses m and the exact rows at Laplace
    # draws around θ* (measured: 170 and 636 of 20,000), the chain again at its own warm-up draws
    # (66 and 1,113)
    model = build("crossed_effects", N)
    with model:
        step = pms.HMCECS(subsample_size="auto", rng=0)
        setup, setup_exact = step.subsample_size, step.exact_rows.copy()
        idata = pm.sample(step=step, draws=200, tune=200, random_seed=1, **SAMPLE)
    assert step.subsample_size != setup and not np.array_equal(step.exact_rows, setup_exact)
    assert float(idata.sample_stats["loglik_var"].mean()) < step.target_variance
    # every chain starts again from the set-up's choice (PyMC calls reset_tuning per chain)
    step.reset_tuning()
    assert step.subsample_size == setup and step.num_blocks == min(100, setup)
    np.testing.assert_array_equal(step.exact_rows, setup_exact)


def test_adapted_mh_proposal_keeps_a_scale_the_user_fixed():
    # the non-centred model's Laplace covariance is replaced after 100 warm-up draws; with
    # adapt_scale=False the user's scale stays, only the covariance changes
    model = build("hierarchical_noncentred", N)
    with model:
        step = pms.SubsampleMH(rng=0, scale=0.3, adapt_scale=False)
        laplace = step.proposal_chol.copy()
        idata = pm.sample(step=step, draws=5, tune=120, random_seed=1, **SAMPLE)
    assert not np.allclose(step.proposal_chol, laplace)
    assert step.proposal_changed_at == 100  # where adapted_thin's window of draws starts
    np.testing.assert_allclose(idata.sample_stats["scale"].values, 0.3)
