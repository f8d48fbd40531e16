"""Observed variables of different lengths, their rows stacked on one axis (model/stacked.py)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_subsample as pms
from pymc_subsample import TallModel
from pymc_subsample.control_variates.center import find_center
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.model.compile import PYTHON_LINKER_ARRAYS

N1, N2 = 300, 120


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=N1), rng.normal(size=(N2, 2))
    y1 = 1.0 + 0.5 * x1 + rng.normal(size=N1)
    y2 = rng.poisson(np.exp(0.3 + x2 @ [0.5, -0.2]))
    return x1, y1, x2, y2


def _two_data_sets(as_data):
    """A Normal regression on N1 rows and a Poisson one on N2 rows of 2 columns, sharing b."""
    x1, y1, x2, y2 = _data()
    with pm.Model() as model:
        a, c = pm.Normal("a", 0, 2), pm.Normal("c", 0, 2)
        b = pm.Normal("b", 0, 2, shape=2)
        s = pm.HalfNormal("s", 2)
        if as_data:  # pm.Data, no static length; else numpy, whose size PyMC writes into the graph
            x1, y1, x2, y2 = (pm.Data(n, v) for n, v in zip(["x1", "y1", "x2", "y2"], [x1, y1, x2, y2]))
        pm.Normal("first", a + b[0] * x1, s, observed=y1)
        pm.Poisson("second", pm.math.exp(c + pt.dot(x2, b)), observed=y2)
    return model


def _own_rows(model, theta_point):
    """Each observed variable's per-row log-density from PyMC's own graph, in model order."""
    terms = model.compile_fn(model.logp(vars=model.observed_RVs, sum=False), inputs=model.value_vars,
                             mode=PYTHON_LINKER_ARRAYS,
                             point_fn=False)(*[theta_point[v.name] for v in model.value_vars])
    return np.concatenate(terms)


@pytest.mark.usefixtures("python_linker")
@pytest.mark.parametrize("as_data", [pytest.param(True, marks=pytest.mark.heavy), False])
def test_stacked_rows_equal_each_data_sets_own_rows_and_the_estimator_gradient_differences(as_data):
    model = _two_data_sets(as_data)
    tall = TallModel(model)
    assert tall.n_rows == N1 + N2
    assert tall.data_set_rows == {"first": (0, N1), "second": (N1, N1 + N2)}
    rng = np.random.default_rng(1)
    theta = tall.initial_theta + rng.normal(scale=0.3, size=tall.ndim)
    full = _own_rows(model, tall.theta_to_point(theta))
    idx = rng.permutation(N1 + N2)[:200]  # rows of both data sets, mixed, in no order
    np.testing.assert_allclose(tall.loglik_rows(theta, tall.gather(idx)), full[idx], rtol=0, atol=1e-10)
    total, grad = tall.loglik_sum_value_and_grad(theta, tall.row_slice(0, N1 + N2))
    assert total == pytest.approx(full.sum(), rel=1e-12)
    center = find_center(tall)
    batch = tall.gather(idx[:60])
    values = []
    # the differences written in each data set's η (the regression view, each row's f switched by
    # its data set's mask) and the generic graph through the model's rows: one estimate
    for glm in ("auto", False):
        target = SubsampledTarget(tall, center, glm=glm)
        assert (target.glm is not None) == (glm == "auto")
        value, grad, _ = target.perturbed(theta, batch)
        values.append(value)
        for j in range(tall.ndim):
            e = np.zeros(tall.ndim)
            e[j] = 1e-5
            fd = (target.perturbed(theta + e, batch)[0] - target.perturbed(theta - e, batch)[0]) / 2e-5
            assert grad[j] == pytest.approx(fd, rel=1e-4, abs=1e-4), (glm, j, grad[j], fd)
    assert values[0] == pytest.approx(values[1], rel=1e-10)
    assert target.proxy.sum_value_and_grad(theta)[0] == pytest.approx(
        SubsampledTarget(tall, center).proxy.sum_value_and_grad(theta)[0], rel=1e-10)


def test_rows_streamed_from_disk_are_not_stacked(tmp_path):
    x1, y1, x2, y2 = _data()
    np.save(tmp_path / "y1.npy", y1)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        pm.Normal("first", a, 1, observed=pms.Data("y1", tmp_path / "y1.npy"))
        pm.Poisson("second", pm.math.exp(a), observed=y2)
    with pytest.raises(ValueError, match="stacked data sets must be in memory"):
        TallModel(model)


def test_row_sized_free_variable_of_one_data_set_is_refused():
    x1, y1, x2, y2 = _data()
    with pm.Model() as model:
        z = pm.Normal("z", 0, 1, shape=N2)  # one latent per row of the second data set
        pm.Normal("first", 0, 1, observed=y1)
        pm.Poisson("second", pm.math.exp(z), observed=y2)
    with pytest.raises(ValueError, match="Free variable .z. has length N = 120"):
        TallModel(model)


def test_observed_variables_of_one_length_share_their_rows_unstacked():
    x1, y1, _, _ = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        pm.Normal("first", a * x1, 1, observed=y1)
        pm.Normal("again", a * x1, 2, observed=y1)
    tall = TallModel(model)
    assert tall.n_rows == N1 and tall.data_set_rows is None
