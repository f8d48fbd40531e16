"""Firefly's brightness update alone (``kernels.firefly``: ``init``, ``step``): its stationary law at
fixed θ is the product over rows of P(z_k = 1 | θ) = odds_k/(1 + odds_k), checked by a chi-square
test over the 2^N states of a few rows, with nothing of PyMC."""

import numpy as np
from scipy import stats

from pymc_subsample.kernels import firefly

#: odds (L_k − B_k)/B_k of five rows: below and above the proposal rate, so that both the accept
#: step's min(1, ·) and its correction matter
ODDS = np.array([0.2, 0.5, 1.0, 2.0, 4.0])
RATE = 0.5


def row_loglik(eta, y):
    """ℓ_k = y_k: each row's log-likelihood stored as its observation (η is not used)."""
    return y, np.zeros_like(y)


def read(idx, theta):
    """Rows whose bound is log B_k = 0 and ℓ_k = log(1 + odds_k), so that e^{r_k} − 1 = odds_k."""
    y = np.log1p(ODDS[idx])
    zero = np.zeros(idx.size)
    return zero, y, zero, zero, zero, lambda keep: (zero[keep], np.zeros((int(keep.sum()), 1)))


def test_the_brightness_update_leaves_the_product_of_bernoullis_invariant():
    rng = np.random.default_rng(0)
    state, theta, n = firefly.init(1), np.zeros(1), ODDS.size
    samples, thin = 10_000, 5  # 5 updates apart: every row's chain forgets (|λ₂| ≤ 0.375 per update)
    counts = np.zeros(2**n, dtype=int)
    for i in range(samples * thin):
        state, info = firefly.step(rng, state, theta, RATE, n, row_loglik, read)
        assert info.bound_excess == 0.0 and info.n_examined >= info.n_proposed
        if i % thin == thin - 1:
            counts[np.sum(2 ** state.bright.idx)] += 1
    p = ODDS / (1 + ODDS)
    bright = (np.arange(2**n)[:, None] >> np.arange(n)) & 1  # state s: row k bright where bit k of s is
    expected = samples * np.prod(np.where(bright, p, 1 - p), axis=1)
    assert expected.min() >= 5  # the chi-square approximation holds
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_a_broken_bound_is_reported_and_every_row_read_is_counted():
    rng = np.random.default_rng(1)

    def broken(idx, theta):
        eta, y, a, b, c, jacobian = read(idx, theta)
        return eta, y - 2.0, a, b, c, jacobian  # ℓ_k − log B_k < 0 on every row

    state, info = firefly.step(rng, firefly.init(1), np.zeros(1), 1.0, ODDS.size, row_loglik, broken)
    assert info.n_proposed == info.n_examined == ODDS.size  # q = 1: every dark row proposed
    assert info.bound_excess == np.max(2.0 - np.log1p(ODDS))
    assert state.bright.size == 0  # a row whose bound is above its likelihood never turns bright
