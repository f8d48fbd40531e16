"""``pms.FireflyMC``: Firefly Monte Carlo, exact MCMC that reads a few rows per iteration.

Maclaurin & Adams (IJCAI 2014). Each row k has a brightness
z_k ∈ {0, 1}; the augmented target π(θ) ∏_k B_k(θ) ∏_{z_k=1} (L_k − B_k)/B_k has the posterior
as its θ-marginal for any lower bounds 0 < B_k ≤ L_k. One iteration is a Gibbs sweep:

1. z | θ: implicit brightness update (§3.2), a Metropolis-Hastings flip proposal for every
   bright row and for a Binomial(N, q) set of dark rows (:mod:`pymc_subsample.kernels.firefly`);
2. θ | z: PyMC's own NUTS (or HMC) on log π + Σ_k log B_k (collapsed, O(d²)) + the bright
   rows' log((L_k − B_k)/B_k), as HMCECS runs PyMC's NUTS on its subsampled potential.

The bounds are collapsible (:mod:`pymc_subsample.control_variates.firefly_bounds`): the
Jaakkola-Jordan bound tightened at the centre θ* for logistic regression, or the user's.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from pymc.step_methods.state import dataclass_state

from pymc_subsample.control_variates.firefly_bounds import (
    CollapsibleBound,
    SlackBound,
    check_family,
    check_slack,
    collapse_bound,
    glm_row_reader,
    resolve_bound,
    row_coefficients,
    row_loglik,
)
from pymc_subsample.diagnostics.progress import StatColumn
from pymc_subsample.diagnostics.run_checks import RunCheck
from pymc_subsample.kernels import firefly as kernel
from pymc_subsample.kernels.tuning import laplace_draws
from pymc_subsample.model.glm import linear_predictor_model
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    BASE_KWARGS,
    SubsampleStep,
    SubsampleStepState,
    pymc_model,
    warn_poor,
)
from pymc_subsample.step_methods.inner_hmc import INNER_HMC_STATS, InnerHMC, check_inner_keywords

__all__ = ["FireflyMC", "FireflyState"]

PILOT_ROWS = 2000  # rows and Laplace draws of the set-up pilot that chooses q
PILOT_DRAWS = 20
SLACK_FACTOR = 50.0  # "auto" slack ε = 50 × the tight bound's mean bright probability ...
MAX_AUTO_SLACK = 0.02  # ... at most 2% of the rows bright for the slack alone
MIN_PROPOSED = 64  # q ≥ 64/N: some dark rows are examined every iteration whatever the pilot says


@dataclass_state
class FireflyState(SubsampleStepState):
    inner: Any
    bright: Any
    started: bool = False
    bound_warned: bool = False


@step_state(FireflyState)
class FireflyMC(InnerHMC, SubsampleStep):
    r"""Firefly Monte Carlo step method: pass to ``pm.sample(step=pms.FireflyMC(...))``.

    Parameters
    ----------
    vars : list, optional
        All free variables of the model (the default).
    bound : CollapsibleBound, optional
        The lower bound log B_k(η) = a_k + b_k η + c_k η² ≤ ℓ_k(η) (see
        :mod:`pymc_subsample.control_variates.firefly_bounds` for the interface). None: the
        Jaakkola-Jordan bound tight at the centre (logistic regression); other likelihoods
        need a bound, else a ValueError.
    slack : float in [0, 1) or "auto"
        ε: the bound used is (1 − ε)·B_k, a lower bound that is never tight (``SlackBound``).
        A tight bound (ε = 0, the MAP-tuned bound of Maclaurin & Adams) puts a zero of the
        θ | z density through the point of contact, which HMC cannot cross; ε > 0 fills it at
        the cost of about εN more bright rows. "auto": 50 times the tight bound's mean
        P(z_k = 1 | θ) on a pilot at Laplace draws, at most 0.02.
    proposal_rate : float in (0, 1] or "auto"
        q, the probability that a dark row is proposed to become bright at each iteration
        (Maclaurin & Adams §3.2); each iteration reads about qN dark rows. "auto": the 99%
        quantile of the odds (L_k − B_k)/B_k over a pilot of 2000 rows at 20 draws from the
        Laplace approximation, at least 64/N: rows whose odds stay below q get a fresh z_k
        at every iteration (see :mod:`pymc_subsample.kernels.firefly`).
    inner : {"nuts", "hmc"}
        PyMC's NUTS, or HMC with ``trajectory_length`` (default 1.2 on the Laplace scale).
    target_accept : float
        Dual-averaging target of the inner sampler.
    max_bright_fraction : float in (0, 1]
        Warn when the mean fraction of bright rows exceeds it (default 0.2): the bound is
        too loose for subsampling to pay off.
    center : dict, array or None
        θ*, where the default bound is tight; None: the default centre of
        :class:`~pymc_subsample.step_methods.base.SubsampleStep`.
    model : pm.Model or TallModel, optional
    **kwargs
        ``rng``, ``chunk_size``, ``client``; others go to the inner NUTS/HMC.

    Notes
    -----
    ``is_exact`` is True: the θ-marginal of the augmented target is the posterior for any
    valid bound; the bound only sets the cost (the number of bright rows). The mass matrix is
    the Laplace precision at θ*. Each chain starts from a Laplace draw around θ* with every
    row dark. A run that meets a row with log B_k > ℓ_k (a user bound that is not a bound)
    warns once per chain: the draws are then not exact.

    Stats: the inner sampler's (``diverging``, ``energy``, ``step_size``,
    ``acceptance_rate``, ``n_steps``, ``tree_depth``, …), ``n_bright`` (bright rows during
    this iteration's θ-update), ``n_proposed`` (dark rows examined by the brightness update),
    ``n_loglik_evals`` (row likelihood evaluations this iteration: bright and examined rows in
    the brightness update plus the bright rows at every point of the θ-trajectory) and
    ``n_grad_evals`` (the latter part).
    """

    name = "firefly"
    is_exact = True
    stats_dtypes_shapes = {
        **INNER_HMC_STATS,
        "n_bright": (np.int64, []),
        "n_proposed": (np.int64, []),
        "n_loglik_evals": (np.int64, []),
        "n_grad_evals": (np.int64, []),
    }

    def __init__(self, vars=None, *, bound=None, slack="auto", proposal_rate="auto", inner="nuts",
                 target_accept=0.8, trajectory_length=None, max_bright_fraction=0.2, center=None, model=None,
                 **kwargs):
        if inner not in ("nuts", "hmc"):
            raise ValueError(f"inner must be 'nuts' or 'hmc'; got {inner!r}.")
        check_inner_keywords("FireflyMC", kwargs)
        if bound is not None and not isinstance(bound, CollapsibleBound):
            resolve_bound(None, bound)  # the TypeError that says what a bound must be
        if slack != "auto":
            slack = check_slack(slack)
        if proposal_rate != "auto" and not _is_probability(proposal_rate):
            raise ValueError(
                f"proposal_rate must be 'auto' or a probability in (0, 1]; got {proposal_rate!r}.")
        if not _is_probability(max_bright_fraction):
            raise ValueError(f"max_bright_fraction must be in (0, 1]; got {max_bright_fraction!r}.")
        self._model, self._bound_arg = pymc_model(model), bound
        base_kwargs = {k: kwargs.pop(k) for k in BASE_KWARGS if k in kwargs}
        # proxy_order=2: the target's one pass gives Σ H_k(θ*) for the Laplace mass matrix
        super().__init__(vars, model=model, center=center, proxy_order=2, **base_kwargs)
        # the rows' log-likelihood (η, y) ↦ (ℓ, ∂ℓ/∂η) of the GLM family: the kernels take the function
        self.row_loglik = partial(row_loglik, self.glm.family)
        precision = self.target.laplace_precision()
        self._laplace_chol = np.linalg.cholesky(np.linalg.inv(precision))
        self.max_bright_fraction = float(max_bright_fraction)
        self.bound, self.slack, self.expected_bright_fraction, auto_rate = self._choose_bound(
            resolve_bound(self.glm.family, bound), slack, precision)
        self.proposal_rate = auto_rate if proposal_rate == "auto" else float(proposal_rate)
        if self.expected_bright_fraction > self.max_bright_fraction:
            warn_poor(self._loose_message(f"{self.expected_bright_fraction:.1%}", "expected from a pilot"))
        chunk = {"chunk_size": base_kwargs["chunk_size"]} if "chunk_size" in base_kwargs else {}
        self.collapsed = collapse_bound(self.glm, self.bound, self.proxy.center, **chunk)
        self.potential = kernel.FireflyPotential(self.row_loglik, self.tall.prior_value_and_grad,
                                                 self.collapsed, self.tall.theta.dtype)
        self._read_rows = glm_row_reader(self.glm, self.bound, self.proxy.center)
        self.inner = self._make_inner(inner, "laplace", precision, trajectory_length, target_accept, kwargs)
        self.bright = kernel.init(self.tall.ndim).bright
        self.started = False
        self.bound_warned = False

    def check_arguments(self, n_rows):
        """The likelihood must be one of the GLM families, and have a bound, before any set-up."""
        check_family(self._model, self._bound_arg)

    def check_model(self, tall):
        """The GLM view (η affine in θ), before the centre's full passes."""
        self.glm = linear_predictor_model(tall)

    # ------------------------------------------------------------------ set-up
    def _choose_bound(self, bound, slack, precision):
        """Slack ε, the final bound, its mean P(z_k = 1 | θ) and q, from a pilot at Laplace draws.

        The pilot (2000 rows, 20 draws, fixed seed: the same model gives the same choices) gives
        p̄, the mean bright probability under the tight bound. "auto" slack: ε = 50 p̄ (at most
        0.02), which fills the bound's zero over the posterior's spread of η_k (see
        ``SlackBound``) at about 50 times the tight bound's bright rows. q: the 99% quantile of
        the odds (L_k − B_k)/B_k under the final bound, at least 64/N.
        """
        n = self.tall.n_rows
        rng = np.random.default_rng(0)
        batch = self.tall.gather(np.sort(rng.choice(n, size=min(n, PILOT_ROWS), replace=False)))
        y, eta_center = self.glm.observed(batch), self.glm.eta(self.proxy.center, batch)
        etas = [self.glm.eta(theta, batch) for theta in laplace_draws(rng, self.proxy.center, precision,
                                                                       PILOT_DRAWS)]

        def odds(b):
            a_, b_, c_ = row_coefficients(b, eta_center, y)
            return np.exp(np.concatenate([kernel.bright_log_odds(self.row_loglik, e, y, a_, b_, c_)[0]
                                          for e in etas]))

        if slack == "auto":
            tight = odds(bound)
            slack = min(SLACK_FACTOR * float(np.mean(tight / (1.0 + tight))), MAX_AUTO_SLACK)
        if slack > 0:
            bound = SlackBound(bound, slack)
        final = odds(bound)
        rate = float(np.clip(np.quantile(final, 0.99), min(1.0, MIN_PROPOSED / n), 1.0))
        return bound, float(slack), float(np.mean(final / (1.0 + final))), rate

    def _loose_message(self, fraction, how):
        return (f"FireflyMC: {fraction} of the rows are bright ({how}), above max_bright_fraction = "
                f"{self.max_bright_fraction:.0%}: the bound is too loose for subsampling to pay off, and "
                "full-data NUTS (pm.sample() without step=) will be faster. Pass a center nearer the "
                "posterior mode (the default bound is tight there) or a tighter bound=.")

    # -------------------------------------------------------------- sampling
    def astep(self, q0):
        if not self.started:
            # start near θ*, where the MAP-tuned bound is tight and few rows are bright
            self.bright = kernel.init(self.tall.ndim).bright
            q0 = self._start_near_center(q0)
        before = self.potential.n_rows_evaluated
        # 1. z | θ (Maclaurin & Adams §3.2)
        theta = np.asarray(q0.data, dtype=float)
        state, info = kernel.step(self.rng, kernel.FireflyState(self.bright), theta, self.proposal_rate,
                                  self.tall.n_rows, self.row_loglik, self._read_rows)
        self.bright = self.potential.bright = state.bright
        if info.bound_excess > 0 and not self.bound_warned:
            self.bound_warned = True
            warn_poor(
                f"FireflyMC: the bound {type(self.bound).__name__} is above the likelihood on some rows "
                f"(log B_k − ℓ_k up to {info.bound_excess:.3g}), so it is not a lower bound and the draws "
                "are not exact. Fix its coefficients(eta_center, y) so that a + bη + cη² ≤ ℓ(η) for every "
                "η. Warned once per chain.")
        # 2. θ | z: PyMC's NUTS/HMC on the bright-row potential
        q_new, (inner_stats,) = self.inner.astep(q0)
        grad_rows = self.potential.n_rows_evaluated - before
        stats = self._inner_stats(inner_stats)
        stats.update(n_bright=self.bright.size, n_proposed=info.n_proposed,
                     n_loglik_evals=info.n_examined + grad_rows, n_grad_evals=grad_rows)
        return q_new, [stats]

    # ------------------------------------------------------ tuning and checks
    def progress_columns(self):
        return [StatColumn("n_bright", "bright", "{:.0f}"), StatColumn("step_size", "step", "{:.3g}"),
                StatColumn("divergences", "div", "{:.0f}")]

    ess_remedy = ("Check that the centre is near the posterior mode (few bright rows), raise "
                  "proposal_rate so that brightness mixes faster, or run more draws.")

    def run_checks(self):
        """ESS and the mean bright fraction after warm-up."""
        n = self.tall.n_rows

        def bright_fraction(thetas, stats):
            values = np.asarray(stats.get("n_bright", []), dtype=float)
            return float(values.mean()) / n if values.size else float("nan")

        return super().run_checks() + [RunCheck(
            "bright", bright_fraction, lambda v: bool(np.isfinite(v) and v > self.max_bright_fraction),
            self._loose_message("{value:.1%}", "mean after warm-up"))]


def _is_probability(value) -> bool:
    """A number in (0, 1] (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float, np.number))
            and 0 < value <= 1)
