"""Rows affine in a row-free φ(θ), not in θ (a non-centred a = μ + τz read as a[g]): the Taylor proxy
in η (RowFreeTaylorProxy) is exact in φ's non-linearity, and its sums, rows and gradients agree."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from zoo import build

from pymc_subsample.control_variates.center import find_center
from pymc_subsample.control_variates.taylor import RowFreeTaylorProxy, TaylorProxy
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.model.one_hot import is_row_gather
from pymc_subsample.model.row_free import lift_row_free_into_gathers, row_free_frontier
from pymc_subsample.model.tall import TallModel

N = 4_000


@pytest.fixture(scope="module")
def noncentred():
    tall = TallModel(build("hierarchical_noncentred", N))
    center = find_center(tall)  # the posterior mode: the Laplace draws below need it
    return tall, SubsampledTarget(tall, center), SubsampledTarget(tall, center, glm=False)


def test_frontier_is_the_group_effects_and_the_slope(noncentred):
    tall, target, _ = noncentred
    view = target.glm
    assert view is not None and view.phi is not None and view.links == ["logit"]
    frontier = row_free_frontier(view.eta_rows, tall.theta, tall.batch_inputs)
    sizes = sorted(int(np.prod(np.shape(v))) for v in view.phi.split(view.phi.value(target.center)))
    assert len(frontier) == 2 and sizes == [1, 20]  # b and a = μ + τ z over 20 groups
    # a centred model is affine in θ itself: no φ
    assert TallModel(build("hierarchical_centred", N)).regression_view.phi is None


def test_proxy_sums_rows_and_gradients_agree(noncentred):
    tall, target, generic = noncentred
    proxy = target.proxy
    assert isinstance(proxy, RowFreeTaylorProxy) and isinstance(generic.proxy, TaylorProxy)
    rng = np.random.default_rng(1)
    everything = tall.row_slice(0, N)
    for scale in (0.05, 0.5):
        theta = target.center + rng.normal(scale=scale, size=tall.ndim)
        q = proxy.rows_value(theta, everything)
        total, grad = proxy.sum_value_and_grad(theta)
        # Σ_k q_k from the rows equals the O(r²) sum; the rows' gradients sum to its gradient
        assert q.sum() == pytest.approx(total, rel=1e-10)
        # the value alone (NumPy and the Python linker: the set-up's checks of pilot points) is the same
        assert proxy.sum_value(theta) == pytest.approx(total, rel=1e-12)
        assert generic.proxy.sum_value(theta) == generic.proxy.sum_value_and_grad(theta)[0]
        q_rows, q_grads = proxy.rows_value_and_grad(theta, everything)
        np.testing.assert_allclose(q_rows, q, rtol=1e-12)
        np.testing.assert_allclose(q_grads.sum(axis=0), grad, rtol=1e-9, atol=1e-8)
        # the gradient against central differences of the sum
        eps = 1e-6
        fd = [(proxy.sum_value_and_grad(theta + eps * e)[0] - proxy.sum_value_and_grad(theta - eps * e)[0])
              / (2 * eps) for e in np.eye(tall.ndim)]
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-4)
        # the estimator's differences are the model's rows minus these q_k
        ll = tall.loglik_rows(theta, everything)
        np.testing.assert_allclose(target.differences(theta, everything), ll - q, rtol=1e-10, atol=1e-10)


def test_proxy_equals_the_model_at_the_center_to_second_order(noncentred):
    """Σℓ_k, its gradient and Hessian at θ* (θ-space, for the Laplace precision) equal the model's."""
    tall, target, generic = noncentred
    proxy = target.proxy
    assert proxy.loglik_sum == pytest.approx(generic.proxy.loglik_sum, rel=1e-12)
    batch = tall.gather(np.arange(0, N, 10))
    view = target.glm
    total, grad, hess = view.sums(target.center, batch)
    rows, grads = tall.loglik_rows_and_grads(target.center, batch)
    assert total == pytest.approx(rows.sum(), rel=1e-12)
    np.testing.assert_allclose(grad, grads.sum(axis=0), rtol=1e-9, atol=1e-9)
    hessians = tall.rows_hessians(target.center, batch)
    np.testing.assert_allclose(hess, hessians.sum(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(proxy.hess_sum, generic.proxy.hess_sum, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(proxy.grad_sum, generic.proxy.grad_sum, rtol=1e-9, atol=1e-8)
    # along v, q in η matches ℓ to second order: the difference shrinks as |v|³
    v = np.random.default_rng(2).normal(size=tall.ndim)
    gaps = [abs(tall.loglik_rows(target.center + h * v, batch).sum()
                - proxy.rows_value(target.center + h * v, batch).sum()) for h in (1e-2, 5e-3)]
    assert 5.0 < gaps[0] / gaps[1] < 11.0


def test_proxy_in_eta_has_far_smaller_differences_than_in_theta(noncentred):
    """The reason for it: at Laplace draws, θ-Taylor's σ̂² (m = 1000) is orders of magnitude larger,
    through τz's curvature in θ (measured at N = 20,000: 12 and 7·10³ against 2·10⁻⁵ and 19)."""
    tall, target, generic = noncentred
    rng = np.random.default_rng(3)
    cov = np.linalg.inv(target.laplace_precision())
    everything = tall.row_slice(0, N)
    ratios = []
    for _ in range(8):
        theta = rng.multivariate_normal(target.center, cov)
        ratios.append(np.var(generic.differences(theta, everything))
                      / np.var(target.differences(theta, everything)))
    assert np.median(ratios) > 30.0, ratios


def test_steps_with_an_accept_step_take_the_proxy_in_eta():
    """HMCECS and SubsampleMH take the proxy in η; SGLD (no accept step) keeps the proxy in θ on such a
    model: with the proxy in η its tuned step size grew 500× and its chains diverged on the curved
    posterior (SubsampleStep.row_free_proxy)."""
    import pymc_subsample as pms

    with build("hierarchical_noncentred", N):
        hmcecs, mh, sgld = pms.HMCECS(rng=0), pms.SubsampleMH(rng=0), pms.SGLD(rng=0)
    for step in (hmcecs, mh):
        assert isinstance(step.proxy, RowFreeTaylorProxy) and step.target.glm.phi is not None
    assert type(sgld.proxy) is TaylorProxy and sgld.target.glm is None


def test_row_free_scalings_move_before_the_gather_and_nothing_else_does():
    """σ·z[g] + μ → (σ·z + μ)[g] with the same values; an operand that reads a row (x·z[g]) or is
    not a scalar (w·z[g], w a vector of θ) keeps the gather where it was."""
    theta = pt.vector("theta")
    g, x = pt.lvector("g"), pt.vector("x")
    mu, sigma, z, w = theta[0], pt.exp(theta[1]), theta[2:7], theta[7:]
    lifted, row_read, vector_read = lift_row_free_into_gathers(
        [mu + sigma * z[g], x * z[g] + sigma, w[g] * z[g]], [g, x])
    assert is_row_gather(lifted.owner)  # the outermost op is now the gather
    assert not is_row_gather(row_read.owner.inputs[0].owner) and row_read.owner.inputs[0].owner.inputs[0] is x
    assert vector_read.owner.op == (w[g] * z[g]).owner.op
    before = pytensor.function([theta, g, x], [mu + sigma * z[g], x * z[g] + sigma, w[g] * z[g]])
    after = pytensor.function([theta, g, x], [lifted, row_read, vector_read])
    rng = np.random.default_rng(0)
    args = rng.normal(size=12), rng.integers(0, 5, 40), rng.normal(size=40)
    for a, b in zip(before(*args), after(*args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-14)
