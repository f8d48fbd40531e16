"""Group effects a[g_k] in η as blocks of the set-up's Jacobian (model/one_hot.py), and the prior's
Hessian at many coordinates from vectorised gradients (model/differences.py)."""

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.model.chunks import chunked_sum
from pymc_subsample.model.one_hot import PointLayout


def _crossed_poisson(n=3000, groups=(7, 5), seed=0, also_direct=False, centred=True):
    """log μ_k = a[g_k] + c[h_k] + b x_k + log exposure_k: two crossed group effects and an offset."""
    rng = np.random.default_rng(seed)
    g, h = rng.integers(0, groups[0], n), rng.integers(0, groups[1], n)
    x, exposure = rng.normal(size=n), rng.uniform(0.5, 2.0, n)
    y = rng.poisson(exposure * np.exp(0.3 * x + 0.2))
    with pm.Model() as model:
        g_, h_, x_ = pm.Data("g", g), pm.Data("h", h), pm.Data("x", x)
        log_exposure = pm.Data("log_exposure", np.log(exposure))
        if centred:
            a = pm.Normal("a", 0, 1, shape=groups[0])
        else:
            tau = pm.HalfNormal("tau", 1)
            a = pm.Deterministic("a", tau * pm.Normal("z", 0, 1, shape=groups[0]))
        c = pm.Normal("c", 0, 1, shape=groups[1])
        b = pm.Normal("b", 0, 1)
        eta = a[g_] + c[h_] + b * x_ + log_exposure
        if also_direct:  # a read outside a[g]: its coordinates are no block
            eta = eta + a[0] * x_
        pm.Poisson("y", mu=pm.math.exp(eta), observed=pm.Data("y_obs", y))
    return model


def _blocks(view, phi=False):
    return [(block.start, block.stop) for block in view.layout(phi=phi).blocks]


def test_group_blocks_are_found_where_each_row_reads_one_entry():
    tall = pms.TallModel(_crossed_poisson())
    view = tall.regression_view
    assert view is not None and view.phi is None
    assert _blocks(view) == [(0, 7), (7, 12)]  # a and c; b (coordinate 12) is dense
    assert view.layout().points.shape[0] == 1 + 1 + 2  # 0, b's unit vector, two indicators

    direct = pms.TallModel(_crossed_poisson(also_direct=True)).regression_view
    assert _blocks(direct) == [(7, 12)]  # a is also read as a[0]: not a block

    noncentred = pms.TallModel(_crossed_poisson(centred=False))
    view = noncentred.regression_view
    assert view.phi is not None
    view.phi.value(noncentred.initial_theta)
    assert len(_blocks(view, phi=True)) == 2  # a = τz and c, as pieces of φ


@pytest.mark.parametrize("centred", [True, False])
def test_sums_with_group_blocks_equal_the_dense_jacobian(centred):
    """Σℓ, Σ∇ℓ, ΣH (in θ) and Σf, A, B (in φ) through the blocks' bincounts equal the products over
    the full Jacobian (η at every unit vector), with an offset in η and two crossed groups."""
    tall = pms.TallModel(_crossed_poisson(centred=centred))
    view = tall.regression_view
    theta = tall.initial_theta + np.random.default_rng(1).normal(scale=0.3, size=tall.ndim)
    checks = [(False, view.sums, tall.ndim)]
    if view.phi is not None:
        view.phi.value(theta)
        checks.append((True, view.phi_sums, view.phi.size))
    for phi, sums, n in checks:
        assert view.layout(phi=phi).blocks
        with_blocks = chunked_sum(tall, sums, theta, chunk_size=1000)
        view._layouts[phi] = PointLayout(n, [], tall.batch_inputs)
        dense = chunked_sum(tall, sums, theta, chunk_size=1000)
        for a, b in zip(with_blocks, dense, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


def _group_effects_in_mean_and_scale(n=3000, seed=0):
    """y_k ~ Normal(a[g_k] + b x_k, exp(c[h_k] + s)): each η reads its own block and dense coordinate,
    so every cross product between the mean's and the scale's η pairs a block with zeros."""
    rng = np.random.default_rng(seed)
    g, h, x = rng.integers(0, 6, n), rng.integers(0, 4, n), rng.normal(size=n)
    y = rng.normal(0.3 * x + 0.1 * g, np.exp(0.2 * h - 0.5))
    with pm.Model() as model:
        g_, h_, x_ = pm.Data("g", g), pm.Data("h", h), pm.Data("x", x)
        a, c = pm.Normal("a", 0, 1, shape=6), pm.Normal("c", 0, 1, shape=4)
        b, s = pm.Normal("b", 0, 1), pm.Normal("s", 0, 1)
        pm.Normal("y", mu=a[g_] + b * x_, sigma=pm.math.exp(c[h_] + s), observed=pm.Data("y_obs", y))
    return model


def test_blocks_read_by_different_etas_give_the_dense_jacobian_sums():
    """Products skipped where an η reads neither the block nor the coordinate (the mean's η reads no
    c, the scale's no a or b) leave Σ H_k as over the full Jacobian, cross terms included."""
    tall = pms.TallModel(_group_effects_in_mean_and_scale())
    view = tall.regression_view
    assert _blocks(view) == [(0, 6), (6, 10)]
    theta = tall.initial_theta + np.random.default_rng(1).normal(scale=0.3, size=tall.ndim)
    with_blocks = chunked_sum(tall, view.sums, theta, chunk_size=1000)
    view._layouts[False] = PointLayout(tall.ndim, [], tall.batch_inputs)
    dense = chunked_sum(tall, view.sums, theta, chunk_size=1000)
    assert np.abs(dense[2][:6, 6:]).min() > 1e-3  # the a-c cross terms are there to get wrong
    for a, b in zip(with_blocks, dense, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


def _varying_slopes_as_a_matrix(n=3000, groups=6, centred=True, seed=0):
    """η_k = β[g_k] · (1, x_k), β a (groups, 2) matrix: centred, or μ + z σ (a piece of φ)."""
    rng = np.random.default_rng(seed)
    g, x = rng.integers(0, groups, n), rng.normal(size=n)
    y = rng.random(n) < 1 / (1 + np.exp(-(0.3 + 0.5 * x)))
    with pm.Model(coords={"group": np.arange(groups), "coef": ["intercept", "slope"]}) as model:
        g_, x_ = pm.Data("g", g), pm.Data("x", x)
        if centred:
            beta = pm.Normal("beta", 0, 1, dims=("group", "coef"))
        else:
            mu, sd = pm.Normal("mu", 0, 1, dims="coef"), pm.HalfNormal("sd", 1, dims="coef")
            beta = pm.Deterministic("beta", mu + pm.Normal("z", 0, 1, dims=("group", "coef")) * sd,
                                    dims=("group", "coef"))
        design = pm.math.stack([pm.math.ones_like(x_), x_], axis=1)
        pm.Bernoulli("y", logit_p=(beta[g_] * design).sum(axis=1), observed=pm.Data("y_obs", y))
    return model


@pytest.mark.parametrize("centred", [True, False])
def test_a_matrix_of_group_effects_is_one_block_per_column(centred):
    """β[g] with J columns (C order): J blocks of stride J sharing the index, in θ (centred) or in φ
    (β = μ + zσ); the sums through them, the columns' cross terms included, equal the dense ones."""
    tall = pms.TallModel(_varying_slopes_as_a_matrix(centred=centred))
    view = tall.regression_view
    theta = tall.initial_theta + np.random.default_rng(1).normal(scale=0.3, size=tall.ndim)
    phi = view.phi is not None
    assert phi is not centred
    if phi:
        view.phi.value(theta)
    n, sums = (view.phi.size, view.phi_sums) if phi else (tall.ndim, view.sums)
    blocks = view.layout(phi=phi).blocks
    assert [(b.start, b.stop, b.offset, b.stride) for b in blocks] == [(0, 12, 0, 2), (0, 12, 1, 2)]
    assert blocks[0].shares_owners(blocks[1])
    with_blocks = chunked_sum(tall, sums, theta, chunk_size=1000)
    view._layouts[phi] = PointLayout(n, [], tall.batch_inputs)
    dense = chunked_sum(tall, sums, theta, chunk_size=1000)
    hessian = dense[2]
    assert np.abs(np.diag(hessian[0:12:2, 1:12:2])).min() > 1e-3  # a group's intercept-slope terms
    for a, b in zip(with_blocks, dense, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("d", [10, 100])
def test_prior_hessian_is_the_analytic_one_below_and_above_the_vectorised_size(d):
    """z ~ N(0, s) has ∇² log p = −diag(1/s²); from d = 64 on the 2d gradients come from a few
    vectorised calls."""
    from pymc_subsample.model.differences import VECTORISED_MIN_D

    s = np.linspace(0.5, 3.0, d)
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        z = pm.Normal("z", 0, s, shape=d)
        pm.Normal("y", z.sum(), 1, observed=pm.Data("y_obs", rng.normal(size=200)))
    tall = pms.TallModel(model)
    hess = tall.prior_hessian(rng.normal(size=d))
    np.testing.assert_allclose(hess, -np.diag(1 / s**2), rtol=1e-7, atol=1e-7)
    assert ("prior_gradients" in tall._functions) == (d >= VECTORISED_MIN_D)
    assert d < VECTORISED_MIN_D or tall._functions["prior_gradients"] is not None


def test_a_range_read_anywhere_else_is_no_block():
    """Graphs written by hand: θ[0:3][g] is a block; not when θ[1] (an overlapping slice) or the
    gathered vector itself (x.sum()) is also read, nor where the index reads θ."""
    import pytensor.tensor as pt

    from pymc_subsample.model.one_hot import find_one_hot_blocks

    theta, g, x = pt.vector("theta", shape=(5,)), pt.lvector("g"), pt.vector("x")
    a = theta[0:3].reshape((3,))
    sources = [(theta, 0, 5)]

    def blocks(eta):
        return [(b.start, b.stop) for b in find_one_hot_blocks([eta], sources, [g, x])]

    assert blocks(a[g] + theta[3] * x) == [(0, 3)]
    assert blocks(a[g] + theta[1] * x) == []  # an overlapping slice
    assert blocks(a[g] + a.sum() * x) == []  # the vector itself
    piece = theta[0:3]
    assert blocks(piece.reshape((3,))[g] + piece.sum() * x) == []  # the slice under the reshape
    assert blocks(theta[0:3][g] + theta[0:3].sum()) == []  # the same range, another slice node
    assert blocks(a[g + pt.cast(theta[4], "int64")] * x) == []  # an index that reads θ


def test_phi_jacobian_and_contracted_hessian_at_many_groups_equal_one_call_per_point():
    """From 64 coordinates on, Dφ (r reverse passes) and Σ_i c_i ∇²φ_i (2d of them) come from one
    vectorised call each: the same numbers as one call per unit vector or per point."""
    from zoo import hierarchical_noncentred

    from pymc_subsample.model.differences import central_hessian

    tall = pms.TallModel(hierarchical_noncentred(2000, groups=80))
    phi = tall.regression_view.phi
    theta = tall.initial_theta + np.random.default_rng(2).normal(scale=0.3, size=tall.ndim)
    phi.value(theta)
    assert phi.size >= 64 and tall.ndim >= 64
    jac = phi.jacobian(theta)
    assert phi._vectorised_fns["jacobian"] is not None
    np.testing.assert_allclose(jac, np.stack([phi.vjp(theta, e) for e in np.eye(phi.size)]), atol=1e-12)
    weights = np.random.default_rng(3).normal(size=phi.size)
    hess = phi.contracted_hessian(theta, weights)
    assert phi._vectorised_fns["hessian"] is not None
    np.testing.assert_allclose(hess, central_hessian(lambda t: phi.vjp(t, weights), theta), atol=1e-8)


def test_each_eta_reads_the_coordinates_of_its_own_parameters_only():
    """The layout's coordinates read per η, from η's graph (:func:`coordinates_read`): the linear
    model's mean η reads α and β, its scale η σ alone; a source read whole reads all of it."""
    import pytensor.tensor as pt

    from pymc_subsample.model.one_hot import coordinates_read

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 1)
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", alpha + pm.Data("x", x) @ beta, sigma, observed=x @ [1.0, -1.0] + rng.normal(size=500))
    tall = pms.TallModel(model)
    view = tall.regression_view
    names = [None] * tall.ndim
    for name, index in tall.theta_to_point(np.arange(tall.ndim, dtype=float)).items():
        for i in np.ravel(index).astype(int):
            names[i] = name
    reads = view.layout().reads
    assert [name for name, read in zip(names, reads[0]) if read] == ["alpha", "beta", "beta"]
    assert [name for name, read in zip(names, reads[1]) if read] == ["sigma_log__"]
    theta = pt.vector("theta")
    whole = coordinates_read([theta[1:3].sum(), (theta * 2).sum()], [(theta, 0, 4)], 4)
    np.testing.assert_array_equal(whole, [[False, True, True, False], [True] * 4])


def test_a_computed_and_negative_group_index_gives_the_dense_jacobian_sums():
    """a[g − 7] (each row's entry counted from the end: a graph of the data, not a data column) and
    c[h] (the column itself): the blocks' owners are the entries PyMC reads, and the sums equal the
    products over the full Jacobian."""
    rng = np.random.default_rng(2)
    n = 2000
    g, h, x = rng.integers(0, 7, n), rng.integers(0, 5, n), rng.normal(size=n)
    with pm.Model() as model:
        g_, h_, x_ = pm.Data("g", g), pm.Data("h", h), pm.Data("x", x)
        a, c = pm.Normal("a", 0, 1, shape=7), pm.Normal("c", 0, 1, shape=5)
        b = pm.Normal("b", 0, 1)
        eta = a[g_ - 7] + c[h_] + b * x_
        pm.Poisson("y", mu=pm.math.exp(eta), observed=pm.Data("y_obs", rng.poisson(np.exp(0.3 * x))))
    tall = pms.TallModel(model)
    view = tall.regression_view
    layout = view.layout()
    assert _blocks(view) == [(0, 7), (7, 12)]
    batch = tall.gather(np.arange(50))
    np.testing.assert_array_equal(layout.owners(batch)[0], g[:50])
    np.testing.assert_array_equal(layout.owners(batch)[1], h[:50])
    theta = tall.initial_theta + rng.normal(scale=0.3, size=tall.ndim)
    with_blocks = chunked_sum(tall, view.sums, theta, chunk_size=700)
    view._layouts[False] = PointLayout(tall.ndim, [], tall.batch_inputs)
    dense = chunked_sum(tall, view.sums, theta, chunk_size=700)
    for got, expected in zip(with_blocks, dense, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-9)


def test_coordinates_no_eta_reads_have_no_point_and_zero_sums():
    """A centred hierarchical model's μ_a and τ_a are read by the prior alone: the layout has no
    point for them (0, b's and σ's unit vectors, a's indicator), and its sums equal those over every
    coordinate's unit vector (zero in their rows and columns)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from zoo import hierarchical_centred

    tall = pms.TallModel(hierarchical_centred(3000))
    view = tall.regression_view
    names = {}
    for name, index in tall.theta_to_point(np.arange(tall.ndim, dtype=float)).items():
        for i in np.ravel(index).astype(int):
            names[i] = name
    layout = view.layout()
    assert sorted(names[i] for i in layout.dense) == ["b", "sigma_log__"]
    assert layout.points.shape[0] == 1 + 2 + 1
    theta = tall.initial_theta + np.random.default_rng(2).normal(scale=0.3, size=tall.ndim)
    kept = chunked_sum(tall, view.sums, theta, chunk_size=1000)
    view._layouts[False] = PointLayout(tall.ndim, [], tall.batch_inputs)
    every = chunked_sum(tall, view.sums, theta, chunk_size=1000)
    for a, b in zip(kept, every, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)
    hyper = [i for i, name in names.items() if name in ("mu_a", "tau_a_log__")]
    assert not kept[1][hyper].any() and not kept[2][hyper].any()
