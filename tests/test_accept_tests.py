"""The registry of SubsampleMH's accept tests: every registered test object has the one interface,
decides a move on a NumPy model of the rows (no PyMC), and a name or argument the registry cannot
use is refused before any set-up."""

import math
import types

import numpy as np
import pytest
from conftest import logistic_data, logistic_model

import pymc_subsample as pms
from pymc_subsample.kernels.mh_tests import (
    ACCEPT_TESTS,
    AcceptOptions,
    AcceptTest,
    Estimate,
    Move,
    accept_test_class,
    make_accept_test,
)

STATS = {"accept", "batch_size", "looks", "n_loglik_evals", "loglik_var"}


class GaussianRows:
    """ℓ_k(θ) = −(y_k − x_k θ)²/2 in one dimension, with the order-1 Taylor proxy at θ* = 0: the
    duck-typed target an accept test reads (``SubsampledTarget`` and its tall model)."""

    def __init__(self, n=400, seed=0):
        rng = np.random.default_rng(seed)
        self.x, self.y = rng.normal(size=n), rng.normal(size=n)
        self.n_rows, self.ndim, center = n, 1, np.zeros(1)
        self.tall = self
        self.proxy = types.SimpleNamespace(order=1, center=center, sum_value_and_grad=self._proxy_sum)

    def gather(self, idx):  # a batch: one array per row leaf
        return self.x[idx], self.y[idx]

    def row_slice(self, start, stop):
        return self.x[start:stop], self.y[start:stop]

    def loglik_rows(self, theta, batch):
        x, y = batch
        return -0.5 * (y - x * theta[0]) ** 2

    def _proxy_rows(self, theta, batch):
        x, y = batch
        return -0.5 * y**2 + x * y * theta[0]

    def differences(self, theta, rows):
        return self.loglik_rows(theta, rows) - self._proxy_rows(theta, rows)

    def _proxy_sum(self, theta):
        return float(np.sum(self._proxy_rows(theta, (self.x, self.y)))), None


def _options(**kwargs):
    return AcceptOptions(**{
        "subsample_size": 20, "error": 0.05, "num_blocks": 4, "control_variates": True, "proxy_order": 1,
        "range_bound": "empirical", "importance_probs": None, "chunk_size": 100} | kwargs)


def _move(target, theta, theta_p, number=1):
    return Move(target, np.array([theta]), np.array([theta_p]), 0.0, 0.0, number)


def _loglik(target, theta):
    return float(np.sum(target.loglik_rows(np.array([theta]), (target.x, target.y))))


def test_the_registry_names_every_test_of_the_step():
    names = ["pseudo-marginal", "austerity", "confidence", "barker", "two-sample", "exact"]
    assert list(ACCEPT_TESTS) == names
    for name, cls in ACCEPT_TESTS.items():
        assert cls.name == name and issubclass(cls, AcceptTest) and accept_test_class(name) is cls
    assert [name for name, cls in ACCEPT_TESTS.items() if cls.is_exact] == ["exact"]


@pytest.mark.parametrize("name", list(ACCEPT_TESTS))
def test_every_registered_test_has_the_interface_and_decides_clear_moves(name):
    target = GaussianRows()
    error = 0.5 if name == "barker" else 0.05  # above Barker's floor 8.4/√(N − 1): no warning
    test = make_accept_test(name, target.n_rows, _options(error=error)).prepare(target, None)
    assert isinstance(test, ACCEPT_TESTS[name]) and isinstance(test.subsample_size, int)
    rng = np.random.default_rng(1)
    # the mode is x·y/x·x; a move 10 posterior sds away from it changes log L by ≈ −50
    mode = float(target.x @ target.y / (target.x @ target.x))
    far = mode + 10.0 / math.sqrt(target.x @ target.x)
    assert _loglik(target, mode) - _loglik(target, far) > 40
    for theta, theta_p, expected in [(far, mode, True), (mode, far, False)]:
        current = None
        for number in (1, 2):  # a kept estimate is carried into the next move
            accept, stats, current = test.decide(rng, 0.5, _move(target, theta, theta_p, number), current)
            assert accept is expected, (name, theta, theta_p)
            assert set(stats) == STATS and stats["batch_size"] >= 1 and stats["n_loglik_evals"] >= 1
            # one mini-batch for a test of one subsample; a sequential test reads at most its
            # batches' rows (two samples: two per look), so that its rows bound its looks
            looks, rows = stats["looks"], stats["batch_size"]
            assert looks == 1 if name in ("pseudo-marginal", "exact") else 1 <= looks <= rows
            assert 0.0 <= stats["accept"] <= 1.0
            assert current is None or isinstance(current, Estimate)
            if current is not None:  # the estimate follows the chain
                np.testing.assert_array_equal(current.theta, [theta_p if accept else theta])


@pytest.mark.parametrize("name", ["austerity", "two-sample"])
def test_the_t_tests_take_the_printed_level_at_every_look(name):
    """``per_look=True`` is El hanchi 2019 Algorithm 1 as printed (benchmarks/mh_error_rates.py)."""
    import dataclasses

    test = make_accept_test(name, 400, _options())
    assert test.per_look is False and dataclasses.replace(test, per_look=True).per_look is True


@pytest.mark.parametrize(
    "options, match",
    [
        ({"test": "t-test"}, "Unknown test 't-test'; choose one of 'pseudo-marginal', 'austerity', "
                             "'confidence', 'barker', 'two-sample', 'exact'"),
        ({"test": ["austerity"]}, "Unknown test"),
        ({"test": "austerity", "error": None}, "allowed only for test='barker'"),
        ({"test": "confidence", "range_bound": 3.0}, "range_bound must be a callable"),
        ({"num_blocks": 500}, "num_blocks must be"),
        ({"test": "two-sample", "importance_probs": np.ones(5)}, "importance_probs must be"),
    ],
)
def test_a_name_or_argument_the_registry_cannot_use_is_refused_before_set_up(monkeypatch, options, match):
    from pymc_subsample.model import tall as tall_module

    def no_set_up(*args, **kwargs):
        raise AssertionError("set-up started before the accept test was configured")

    monkeypatch.setattr(tall_module.TallModel, "__init__", no_set_up)
    X, y = logistic_data(100, 2)
    with logistic_model(X, y), pytest.raises(ValueError, match=match):
        pms.SubsampleMH(**options)


@pytest.mark.parametrize(
    "family, kwargs, match",
    [
        ("poisson", {}, r"needs a bound.*poisson_log rows have no finite bound on \|∂\^3f/∂η\^3\|"),
        ("studentt", {}, r"needs a bound.*not a GLM whose family the package knows"),
        ("normal", {"control_variates": False}, r"normal_identity rows have no finite bound on \|∂\^1f"),
        ("poisson", {"range_bound": "glm"}, r"needs a bound.*poisson_log rows have no finite bound"),
    ],
)
def test_confidence_without_a_derivable_bound_is_refused_before_set_up(monkeypatch, family, kwargs, match):
    """A GLM whose family tabulates finite derivative bounds gets range_bound='glm'; elsewhere the
    ValueError asks for a range_bound before any set-up."""
    import pymc as pm

    from pymc_subsample.model import tall as tall_module

    def no_set_up(*args, **kwargs):
        raise AssertionError("set-up started before the accept test was configured")

    monkeypatch.setattr(tall_module.TallModel, "__init__", no_set_up)
    X, y = logistic_data(100, 2)
    with pm.Model():
        eta = pm.math.dot(X, pm.Normal("beta", 0, 1, shape=2))
        if family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
        elif family == "studentt":
            pm.StudentT("y", nu=4, mu=eta, sigma=1.0, observed=y)
        else:
            pm.Normal("y", mu=eta, sigma=1.0, observed=y)
        with pytest.raises(ValueError, match=match):
            pms.SubsampleMH(test="confidence", **kwargs)


def test_use_proxy_is_refused_with_the_name_control_variates():
    X, y = logistic_data(100, 2)
    with logistic_model(X, y), pytest.raises(TypeError, match="use_proxy is named control_variates"):
        pms.SubsampleMH(test="austerity", use_proxy=False)
