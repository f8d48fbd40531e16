"""HMC with energy-conserving subsampling (Dang, Quiroz, Kohn, Tran & Villani 2019).

One iteration (Algorithm 1) is a Gibbs sweep over (u, θ):

1. u | θ: propose a new block of the subsample and accept it with the ratio of
   estimated likelihoods (eq. 3.5), pseudo-marginal style;
2. θ | u: one step of PyMC's own NUTS (or HMC) on the subsampled potential
   −Û(θ) = log p(θ) + log L̂(θ; u), the same estimate in the dynamics and in the
   acceptance (eqs. 3.6-3.7).

Estimators: ``"perturbed"`` uses L̂ = exp(ℓ̂ − σ̂²/2) (eq. 4.5) and targets a
perturbed posterior within O(1/(n m²)) of the true one (eq. 4.6);
``"signed"`` uses the unbiased block-Poisson estimator (eq. 5.1) on |L̂| and is
simulation-consistent after weighting draws by the ``sign`` stat
(:func:`pymc_subsample.diagnostics.sign_weighted`, eq. 5.3).
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.step_methods.hmc.quadpotential import QuadPotentialFullAdapt
from pymc.step_methods.state import dataclass_state

from pymc_subsample.diagnostics.progress import StatColumn, compact
from pymc_subsample.diagnostics.run_checks import drift_check, mean_check
from pymc_subsample.kernels.potential import SubsampledPotential
from pymc_subsample.kernels.subsample_update import (
    accept_log_ratio,
    draw_signed,
    propose_block,
    propose_block_of_rest,
    propose_signed_groups,
)
from pymc_subsample.kernels.tuning import (
    choose_block_poisson,
    choose_exact_rows,
    choose_subsample_size,
    difference_deviations,
    laplace_draws,
    pilot_differences,
)
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, pass_progress
from pymc_subsample.pymc_protocol import step_state
from pymc_subsample.step_methods.base import (
    BASE_KWARGS,
    SubsampleStep,
    SubsampleStepState,
    check_size,
    warn_poor,
)
from pymc_subsample.step_methods.inner_hmc import INNER_HMC_STATS, InnerHMC
from pymc_subsample.subsample.batch import Batch, Subsample
from pymc_subsample.subsample.indices import block_slices

__all__ = ["HMCECS"]

#: warm-up draws at which the signed estimator re-chooses λ and a from the chain's own draws
#: (doubling, so a chain that starts far from θ* is re-tuned as it moves towards the mode)
SIGNED_RETUNE_AT = (25, 50, 100, 200, 400, 800)
# measured: the pilot alone asked for m = 12,919 of 10⁶ rows on a non-centred model, or all 20,000
# rows of a Bambi (1|group) model, whose chains need 1000
#: warm-up draws after which subsample_size="auto" (and the default) choose m again at the chain's
#: own last RETUNE_WINDOW draws: the set-up pilot's Laplace draws in θ fall where a curved posterior
#: (a non-centred μ + τz) has no mass, and ask for far more rows than the chain needs
SIZE_RETUNE_AT = (50, 150)
RETUNE_WINDOW = 25
#: at most this many rows (and a quarter of N) are candidates for the rows computed exactly in every
#: estimate (``subsample_size="auto"`` and the default): the scores of more would cost memory, and a
#: model that needs more exact rows than this needs full-data NUTS
MAX_EXACT_CANDIDATES = 20_000

@dataclass_state
class HMCECSState(SubsampleStepState):
    inner: Any
    subsample: Any
    current: Any
    current_theta: Any
    started: bool = False
    warmup_thetas: Any = None
    warmup_signs: Any = None
    warmup_warned: bool = False


# measured: a non-centred hierarchical model with the proxy in θ had σ̂² ≈ 40 at m = 1000 and an
# ESS of 3, hence a floor the "auto" choice may raise
DEFAULT_SUBSAMPLE_SIZE = 1000  # the default's floor (perturbed) and size (signed), see the docstring
# "auto" warns when m ≥ N/4: a leapfrog step then costs the m rows' ℓ, its reverse pass and the
# proxy's directional derivatives (≥ 3 passes over m rows), more than full-data NUTS's one pass
AUTO_TOO_LARGE = 4
#: the inner sampler's mass matrix (HMCECS's ``mass_matrix``)
MASS_MATRICES = ("auto", "laplace", "laplace_adapt", "adapt")
# measured on crossed effects with 121 parameters: the chain left the posterior soon after PyMC's
# adapted matrix took over (σ_b from 0.8 to 0.001, log posterior from −59,700 to −4·10⁶, σ̂² from 0.2
# to 10⁸), whether or not rows were computed exactly; with the Laplace matrix fixed, or a first
# window of 2d draws, σ̂² stayed at 0.05-0.24 and σ_b at 0.8-0.9
#: "auto" adapts a dense mass matrix only below this many parameters: after its first window of 75
#: warm-up draws, PyMC's dense adaptation drops the Laplace start and estimates the covariance from
#: the draws since then alone, singular while they are fewer than the parameters and noisy for long
#: after (its next window is 150 draws), which can drive a chain out of the posterior
DENSE_ADAPT_MAX_DIM = 75
# measured on the non-centred hierarchical logistic regression of the zoo (N = 20,000, 20 groups,
# 12 seeds × 2000 draws): 0.9 gave 0-5 divergent draws where 0.8 gave 2-28 (one chain in 29 stuck
# for 500 draws in a tail, μ_a's ESS 4), 1.3× the leapfrog steps per draw and 1.5× the ESS of μ_a
# and τ_a: more ESS per gradient
#: the inner sampler's dual-averaging target by default: PyMC's 0.8, and 0.9 on a curved posterior
#: (rows affine in a non-linear φ(θ), a non-centred μ + τ z[g]), whose metric, adapted where the
#: posterior's mass is, is too wide in its tails: the higher target gives fewer divergences and
#: more ESS per gradient there
TARGET_ACCEPT, CURVED_TARGET_ACCEPT = 0.8, 0.9


def _auto_too_large_message(m, n, order, exact=0):
    return (
        f"HMCECS (subsample_size='auto' or the default) chose m = {m} of N = {n} rows"
        + (f" and {exact} rows computed exactly" if exact else "") + ": only so many keep "
        "σ̂² near its "
        f"target, because the order-{order} Taylor proxy at the centre θ* fits the rows poorly across the "
        "posterior (typical of hierarchical models whose group scales can approach zero, or of small N). "
        "Each leapfrog step then costs several full-data gradients, so full-data NUTS (pm.sample() "
        "without step=) will be faster and exact (measured on a 20-group hierarchical model with "
        "20,000 rows: NUTS 68 s; HMCECS unfinished after 18 min). Otherwise pass a center nearer the "
        "posterior mode, use proxy_order=2, or reparametrise the model."
    )


@step_state(HMCECSState)
class HMCECS(InnerHMC, SubsampleStep):
    r"""HMC-ECS step method: pass to ``pm.sample(step=pms.HMCECS(...))``.

    Parameters
    ----------
    vars : list, optional
        All free variables of the model (the default).
    subsample_size : int, "auto" or None
        m. ``"auto"`` picks m so that σ̂² ≈ ``target_variance`` (Dang et al. 2019 §3.1) at Laplace draws
        near the centre, then again after 50 and 150 warm-up draws at the chain's own last 25
        draws (the kernel is fixed after warm-up); the choice is in ``self.subsample_size``. None (default):
        perturbed, the larger of min(N, 1000) and the "auto" choice, i.e. 1000 rows unless
        more are needed to keep σ̂² at its target (fewer would hardly save time: a leapfrog
        step at m ≤ 1000 is dominated by fixed per-call costs, ``benchmarks/README.md``;
        more saves a chain whose σ̂² would be far above 1, as on a non-centred hierarchical model
        with the proxy in θ). With "auto" and the
        default, rows whose proxy error dominates σ̂² at those draws (the rows of small groups)
        are computed exactly in every estimate when that takes fewer rows per estimate than a
        larger m (``self.exact_rows``; m then subsamples the other rows, eqs. 4.1-4.3 on them);
        these rows are found by a pass over all N rows, made at set-up where the pilot asks for more
        than the floor, and by each chain's warm-up (or at its end, after fewer than 50 draws).
        Signed: min(N, 1000). A
        warning says when the final choice (at the end of warm-up) is m ≥ N/4, where full-data NUTS
        is faster. For
        ``estimator="signed"`` m is the mini-batch size of each Poisson factor.
    num_blocks : int
        G: one of G blocks of u is refreshed per iteration (ρ ≈ 1 − 1/G, §3.3). For the
        signed estimator max(1, round(λ/G)) of the λ groups are refreshed.
    estimator : {"perturbed", "signed"}
    proxy_order : {0, 1, 2}
        Order of the Taylor control variates (eq. 4.4).
    center : dict, array or None
        θ*; None: the default centre of :class:`~pymc_subsample.step_methods.base.SubsampleStep`
        (the MAP of a random 20,000-row subset refined by full-data Newton steps, or full-data
        L-BFGS when N ≤ 40,000), not ``pms.find_map``.
    inner : {"nuts", "hmc"}
        PyMC's NUTS, or HMC with a fixed ``trajectory_length`` (default 1.2 on the
        Laplace-whitened scale, §6.3) and jittered step size.
    target_accept : float or None
        Dual-averaging target of the inner sampler. None (default): 0.8, or 0.9 where the
        posterior in θ is curved (rows affine in a non-linear row-free φ(θ), as for ``"auto"``
        below), whose tails the adapted metric's step size overshoots (``CURVED_TARGET_ACCEPT``).
    mass_matrix : {"auto", "laplace", "laplace_adapt", "adapt"}
        ``"laplace"``: the precision −(∇²log p(θ*) + Σ_k H_k(θ*)) at the centre, fixed;
        ``"laplace_adapt"``: PyMC's dense adaptation during tuning, started from the Laplace
        covariance; ``"adapt"``: PyMC's diagonal adaptation from its own default.
        ``"auto"`` (default): ``"laplace_adapt"`` where the rows are affine in a non-linear
        row-free φ(θ) (a non-centred ``μ + τ z[g]``: the posterior in θ is curved, and the fixed
        Laplace metric takes much deeper trees than the adapted one), with a first adaptation
        window of 2d draws from 75 parameters on (PyMC's window of 75 draws gives a singular
        matrix beyond: :data:`DENSE_ADAPT_MAX_DIM`); else ``"laplace"`` (on GLMs, the Bambi form,
        StudentT and the centred hierarchical model the Laplace metric is near exact, and
        adapting it gains no ESS/s: ``benchmarks/README.md``).
    target_variance : float
        Target of σ̂² (perturbed, ``subsample_size="auto"``) or of Var log|L̂| (signed).
    **kwargs
        ``rng``, ``chunk_size``; others go to the inner NUTS/HMC.

    Notes
    -----
    ``is_exact`` is False for ``"perturbed"`` (bias O(1/(n m²)), eq. 4.6) and True for
    ``"signed"`` after sign weighting.
    """

    name = "hmcecs"
    row_free_proxy = True
    stats_dtypes_shapes = {
        **INNER_HMC_STATS,
        "subsample_accept": (np.float64, []),
        "loglik_var": (np.float64, []),
        "n_loglik_evals": (np.int64, []),
        "n_grad_evals": (np.int64, []),
        "sign": (np.int64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        subsample_size=None,
        num_blocks=100,
        estimator="perturbed",
        proxy_order=2,
        center=None,
        inner="nuts",
        trajectory_length=None,
        target_accept=None,
        mass_matrix="auto",
        model=None,
        target_variance=1.0,
        **kwargs,
    ):
        _check_choice("estimator", estimator, ("perturbed", "signed"))
        _check_choice("inner", inner, ("nuts", "hmc"))
        _check_choice("mass_matrix", mass_matrix, MASS_MATRICES)
        if estimator == "signed" and proxy_order != 2:
            # With order < 2, Σq has no curvature, so |L̂| = exp(Σq)·Π|(d̂ − a)/λ| grows
            # polynomially in the tails instead of decaying: the signed target is improper.
            raise ValueError(
                "The signed estimator needs proxy_order=2: with lower orders |L̂| does not decay "
                "away from the centre and the chain drifts into the tails. Use proxy_order=2 or "
                "estimator='perturbed'."
            )
        if target_variance <= 0:
            raise ValueError(f"target_variance must be positive; got {target_variance!r}.")
        self._requested = (subsample_size, num_blocks)
        base_kwargs = {k: kwargs.pop(k) for k in BASE_KWARGS if k in kwargs}
        self.estimator = estimator
        super().__init__(vars, model=model, center=center, proxy_order=proxy_order, **base_kwargs)
        self.is_exact = estimator == "signed"
        self.target_variance = float(target_variance)
        precision = self.target.laplace_precision()
        self._laplace_chol = np.linalg.cholesky(np.linalg.inv(precision))
        self.started = False
        self._configure_subsampling(subsample_size, num_blocks, precision)
        view = self.target.glm
        curved = view is not None and view.phi is not None
        if target_accept is None:
            target_accept = CURVED_TARGET_ACCEPT if curved else TARGET_ACCEPT
        if mass_matrix == "auto":
            # measured at N = 20,000: on a curved posterior the fixed Laplace metric took trees of
            # depth 7 where the adapted one takes 3, 37-55× the ESS/s; elsewhere adapting it cost
            # 0.66-1.27× the ESS/s (benchmarks/README.md)
            mass_matrix = "laplace" if not curved else "laplace_adapt"
            if curved and self.tall.ndim >= DENSE_ADAPT_MAX_DIM and "potential" not in kwargs:
                # PyMC's dense adaptation with a first window of 2d draws, which estimate a d × d matrix
                mass_matrix = "adapt"
                cov = np.linalg.inv(precision)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "QuadPotentialFullAdapt is an experimental",
                                            UserWarning)
                    kwargs["potential"] = QuadPotentialFullAdapt(
                        self.tall.ndim, self.proxy.center, 0.5 * (cov + cov.T), 10,
                        adaptation_window=2 * self.tall.ndim, rng=self.rng.spawn(1)[0])
        self.mass_matrix = mass_matrix
        self.inner = self._make_inner(inner, mass_matrix, precision, trajectory_length, target_accept,
                                      kwargs)
        self.subsample = None  # drawn with the chain's rng at its first step
        self.current = None
        self.current_theta = None
        self.warmup_thetas, self.warmup_signs, self.warmup_warned = [], [], False
        self._size_warned = False

    def check_arguments(self, n_rows):
        subsample_size, num_blocks = self._requested
        if subsample_size is not None:
            check_size(subsample_size, "subsample_size", n_rows, allow=("auto",))
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, (int, np.integer)) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive integer; got {num_blocks!r}.")

    # ------------------------------------------------------------------ set-up
    def _configure_subsampling(self, subsample_size, num_blocks, precision):
        n = self.tall.n_rows
        minimum = 10
        if subsample_size is None:
            if self.estimator == "signed":
                subsample_size = min(n, DEFAULT_SUBSAMPLE_SIZE)
            else:
                subsample_size, minimum = "auto", min(n, DEFAULT_SUBSAMPLE_SIZE)
        if self.estimator == "signed" or subsample_size == "auto":
            # a fixed seed: the same model and settings give the same m and λ in every run
            setup_rng = np.random.default_rng(0)
            thetas = laplace_draws(setup_rng, self.proxy.center, precision, 20)
            # mean_d: the signed estimator's a; var_d: m (both estimators) and λ
            mean_d, var_d = pilot_differences(setup_rng, self.target, thetas, min(n, 2000))
        # chosen again during warm-up (perturbed only: the signed estimator's λ and a depend on m and
        # have their own warm-up re-tuning, _retune_signed)
        self._auto_minimum = minimum if subsample_size == "auto" and self.estimator == "perturbed" else None
        exact = np.zeros(0, dtype=int)
        # whether the pass over all N rows that picks the rows computed exactly
        # (_choose_exact_and_size) was made; only "auto" with the perturbed estimator makes it
        self._rows_scored = True
        if subsample_size == "auto" and self.estimator == "perturbed":
            # at θ* and the Laplace draws around it, where the chain will be after warm-up
            self._setup_points = np.vstack([self.proxy.center, thetas])
            subsample_size = choose_subsample_size(n, var_d, self.target_variance, minimum=minimum)
            # at the floor, which exact rows cannot lower, the pass would only find rows of large
            # error that the pilot's 2,000 missed: the chain's re-tuning (SIZE_RETUNE_AT, or
            # stop_tuning after a shorter warm-up) makes it at its own draws before any draw is kept
            self._rows_scored = subsample_size > minimum
            if self._rows_scored:
                exact, subsample_size = self._choose_exact_and_size(self._setup_points, subsample_size)
            # measured at 10⁶ rows, zoo GLMs: warm set-up 14-27 full-gradient passes with the pass
            # at set-up, 4-10 without (two benchmark rounds on one machine)
        elif subsample_size == "auto":
            subsample_size = choose_subsample_size(n, var_d, self.target_variance, minimum=minimum)
        self._setup_exact, self._setup_scored = exact, self._rows_scored
        self._requested_blocks = num_blocks
        self._setup_size = int(subsample_size)
        self._set_size(self._setup_size)
        self.lam, self.a = 1, 0.0
        self.potential = SubsampledPotential(self.target, self.estimator, a=0.0, lam=1)
        self._set_exact(exact)
        if self.estimator == "signed":
            self._set_block_poisson(mean_d, var_d)
            # every chain starts again from these (reset_tuning); its warm-up re-tunes its own
            self._setup_block_poisson = self._block_poisson

    def _choose_exact_and_size(self, thetas, m_uniform, keep=None):
        """The rows to compute exactly in every estimate and m for the others, at ``thetas``.

        Rows whose Taylor proxy error d_k is large where the chain goes (the rows of a small group,
        whose η moves far under the posterior while the proxy is fixed at θ*) dominate σ² (eq. 4.3),
        and a uniform subsample holds them rarely (m = 1000 of 10⁵ rows misses a group of 46 rows
        63% of the time), so m must grow until it holds them often enough. Computed exactly, they
        add no variance; the rest are subsampled (:meth:`SubsampledTarget.perturbed_with_exact`),
        so that a few exact rows can replace a much larger m. The number of
        exact rows minimises the rows per estimate (:func:`choose_exact_rows`); where none is worth
        it, m is ``m_uniform``, the choice from pilot subsamples (:func:`choose_subsample_size`).
        ``keep``: rows that stay exact (during warm-up the set only grows, so that the estimator
        does not switch rows back and forth between chosen points).
        """
        # measured on crossed effects with groups of 30-41,607 rows: σ² ≤ 1 at θ* and the Laplace
        # draws with 206 exact rows and m = 1000, against m ≈ 6,000 with every row subsampled
        n = self.tall.n_rows
        rng = np.random.default_rng(len(thetas))  # its own stream: the pilot's draws stay as they were
        mean_d, _ = pilot_differences(rng, self.target, thetas, min(n, 2000))
        candidates = max(1, min(n // 4, MAX_EXACT_CANDIDATES))
        rows, squares, totals = difference_deviations(self.target, thetas, mean_d, DEFAULT_CHUNK_SIZE,
                                                      candidates, partial(pass_progress, self.tall))
        if keep is not None and keep.size:
            # the kept rows first: their squares leave the totals before any other row is chosen
            first = np.isin(rows, keep)
            extra = np.setdiff1d(keep, rows)
            squares = np.concatenate([squares[first], squares[~first]])
            rows = np.concatenate([rows[first], rows[~first]])
            e, m = choose_exact_rows(n, squares, totals, self.target_variance, minimum=self._auto_minimum,
                                     at_least=int(first.sum()), extra=extra.size)
            return np.union1d(rows[:e], keep), m  # extra ⊂ keep
        e, m = choose_exact_rows(n, squares, totals, self.target_variance, minimum=self._auto_minimum)
        return (np.sort(rows[:e]), m) if e else (rows[:0], m_uniform)

    def _set_exact(self, rows):
        """Compute the rows ``rows`` exactly in every estimate; subsample the others."""
        self.exact_rows = np.asarray(rows, dtype=int)
        self._exact_batch = Batch(self.tall.gather(self.exact_rows), rows=self.exact_rows)
        self.potential.n_exact = self.exact_rows.size
        self.potential.n_rest = self.tall.n_rows - self.exact_rows.size

    def _draw_rest(self, size):
        """``size`` rows uniform over the rows not computed exactly (ω_k = 1/n_R, eq. 4.2): uniform
        over all rows, those in E drawn again (no array of the other N − e rows is kept).
        """
        n, exact = self.tall.n_rows, self.exact_rows
        idx = self.rng.integers(0, n, size=size)
        if exact.size:
            while True:
                hit = np.isin(idx, exact)
                if not hit.any():
                    break
                idx[hit] = self.rng.integers(0, n, size=int(hit.sum()))
        return idx

    def _set_size(self, m):
        self.subsample_size = int(m)
        self.num_blocks = int(min(self._requested_blocks, self.subsample_size))
        self._blocks = block_slices(self.subsample_size, self.num_blocks)

    def _retune_size(self):
        """subsample_size="auto": choose m again at the chain's last warm-up draws (SIZE_RETUNE_AT).

        During warm-up only, like :meth:`_retune_signed`: after it the kernel is fixed, so the
        chain targets the perturbed posterior of that m. The warning that m is so large that
        full-data NUTS is faster comes from the last choice (or at the end of a shorter warm-up).
        """
        recent = np.asarray(self.warmup_thetas[-RETUNE_WINDOW:]) if self.warmup_thetas else self._setup_points
        rng = np.random.default_rng(len(self.warmup_thetas))
        _, var_d = pilot_differences(rng, self.target, recent, min(self.tall.n_rows, 2000))
        m = choose_subsample_size(self.tall.n_rows, var_d, self.target_variance, minimum=self._auto_minimum)
        exact, m = self._choose_exact_and_size(recent, m, keep=self.exact_rows)
        self._rows_scored = True
        if m != self.subsample_size or not np.array_equal(exact, self.exact_rows):
            self._set_exact(exact)
            self._set_size(m)
            self.subsample = self._draw_subsample()
            self.current = None
        if len(self.warmup_thetas) == SIZE_RETUNE_AT[-1]:
            self._warn_if_size_too_large()

    def _warn_if_size_too_large(self):
        n = self.tall.n_rows
        too_large = (self.subsample_size + self.exact_rows.size) * AUTO_TOO_LARGE >= n
        if self._auto_minimum is not None and too_large and not self._size_warned:
            self._size_warned = True
            warn_poor(_auto_too_large_message(self.subsample_size, n, self.proxy.order, self.exact_rows.size))

    def _set_block_poisson(self, mean_d, var_d):
        """λ, a (Dang et al. 2019 eq. 5.1) from pilot differences; the potential reads them at each call."""
        self._use_block_poisson(*choose_block_poisson(
            self.tall.n_rows, self.subsample_size, mean_d, var_d, self.target_variance))

    def _use_block_poisson(self, lam, a, expected_loglik_var, prob_negative):
        self.expected_loglik_var, self.prob_negative = expected_loglik_var, prob_negative
        self._kappa = max(1, int(round(lam / self.num_blocks)))
        self.lam, self.a = lam, a
        self.potential.lam, self.potential.a = lam, a

    @property
    def _block_poisson(self):
        return self.lam, self.a, self.expected_loglik_var, self.prob_negative

    def _retune_signed(self):
        """Re-choose λ and a at the chain's recent warm-up draws, then redraw u.

        The set-up pilot uses Laplace draws around θ*; when θ* is far from where the chain
        goes, a = D̄ − λ is wrong there and the signs' predicted probability of being negative
        far too small. During warm-up only (the kernel is fixed after it, so the chain stays
        Markov) λ and a follow the chain's own draws.
        """
        # measured: θ* 4 posterior sd off gave 43% negative signs against a predicted 3·10⁻²²
        recent = np.asarray(self.warmup_thetas[-20:])
        rng = np.random.default_rng(len(self.warmup_thetas))
        mean_d, var_d = pilot_differences(rng, self.target, recent, min(self.tall.n_rows, 2000))
        self._set_block_poisson(mean_d, var_d)
        self.subsample = self._draw_subsample()
        self.current = None
        negative = float(np.mean(np.asarray(self.warmup_signs[-25:]) < 0))
        if negative > 0.2 and not self.warmup_warned:
            self.warmup_warned = True
            warn_poor(
                f"HMCECS (signed): {negative:.0%} of the last warm-up estimates were negative before "
                f"re-tuning λ = {self.lam}, a = {self.a:.4g} at the chain's own draws. If this persists "
                "after warm-up, sign-weighted means will be very noisy: pass a center nearer the "
                "posterior mode, or raise subsample_size."
            )

    def _draw_subsample(self):
        if self.estimator == "signed":
            return draw_signed(self.rng, self.tall, self.lam, self.subsample_size)
        if self.exact_rows.size:
            return Subsample.with_exact(self.tall, self._exact_batch, self._draw_rest(self.subsample_size))
        idx = self.rng.integers(0, self.tall.n_rows, size=self.subsample_size)
        return Subsample.gather(self.tall, idx)

    def _propose_subsample(self):
        if self.estimator == "signed":
            return propose_signed_groups(self.rng, self.tall, self.subsample, self._kappa)
        if self.exact_rows.size:
            return propose_block_of_rest(self.rng, self.tall, self.subsample, self._blocks, self._draw_rest,
                                         self.exact_rows.size)
        return propose_block(self.rng, self.tall, self.subsample, self._blocks)

    # -------------------------------------------------------------- sampling
    def astep(self, q0):
        evaluated_before = self.potential.n_rows_evaluated
        if not self.started:
            # Each chain starts from a Laplace draw around θ*, as Dang et al. 2019 §6.5 starts at θ*:
            # far from θ* the control variates are poor, σ̂² is huge, and the signed estimator's
            # a (set near θ*) makes |L̂| meaningless, so a chain started at PyMC's default
            # initial point may never reach the posterior. Only the first tuning draw changes.
            self.started = True
            self.subsample = self._draw_subsample()
            jitter = self._laplace_chol @ self.rng.standard_normal(self.tall.ndim)
            q0 = RaveledVars((self.proxy.center + jitter).astype(q0.data.dtype), q0.point_map_info)
        theta = q0.data
        if self.tune and self.estimator == "signed" and len(self.warmup_thetas) in SIGNED_RETUNE_AT:
            self._retune_signed()
        if self.tune and self._auto_minimum is not None and len(self.warmup_thetas) in SIZE_RETUNE_AT:
            self._retune_size()
        if self.current is None or not np.array_equal(self.current_theta, theta):
            self.current = self.potential.estimate(theta, self.subsample)
            self.current_theta = np.array(theta, copy=True)
        # 1. u | θ (eq. 3.5)
        proposal = self._propose_subsample()
        proposed = self.potential.estimate(theta, proposal)
        accepted, subsample_accept = accept_log_ratio(self.rng, proposed.value - self.current.value)
        if accepted:
            self.subsample, self.current = proposal, proposed
        # 2. θ | u: PyMC's NUTS/HMC on the subsampled Hamiltonian (eqs. 3.6-3.7)
        self.potential.subsample = self.subsample
        before_inner = self.potential.n_rows_evaluated
        self.potential.record_trajectory(theta, self.current)
        q_new, (inner_stats,) = self.inner.astep(q0)
        grad_rows = self.potential.n_rows_evaluated - before_inner
        loglik_var = self.current.loglik_var  # σ̂² at θ^(j-1) with the accepted u^(j)
        # The inner sampler evaluated the estimate at every point of its trajectory, the state
        # it returns included: reuse it (value, σ̂², sign at (θ^(j), u^(j)), eq. 5.3) for the next
        # subsample update instead of another pass over the rows.
        self.current = self.potential.recorded(q_new.data)
        if self.current is None:
            self.current = self.potential.estimate(q_new.data, self.subsample)
        self.current_theta = np.array(q_new.data, copy=True)
        stats = self._inner_stats(inner_stats)
        stats.setdefault("tree_depth", 0)
        stats.update(
            subsample_accept=subsample_accept,
            loglik_var=loglik_var,
            n_loglik_evals=self.potential.n_rows_evaluated - evaluated_before,
            n_grad_evals=grad_rows,
            sign=self.current.sign,
        )
        if self.tune:  # the retuning's points, and the drift check's reference (run_checks)
            self.warmup_thetas.append(np.array(q_new.data, dtype=float))
        if self.tune and self.estimator == "signed":
            self.warmup_signs.append(self.current.sign)
        return q_new, [stats]

    # ------------------------------------------------------ tuning and checks
    def reset_tuning(self):
        super().reset_tuning()
        self.warmup_thetas, self.warmup_signs, self.warmup_warned = [], [], False
        if self._auto_minimum is not None:  # each chain chooses m (and E) again from the set-up's choice
            self._set_size(self._setup_size)
            self._set_exact(self._setup_exact)
            self._rows_scored = self._setup_scored
        if self.estimator == "signed":  # and re-tunes λ and a from the set-up's (_retune_signed)
            self._use_block_poisson(*self._setup_block_poisson)

    def stop_tuning(self):
        if self._auto_minimum is not None and not self._rows_scored:
            # a warm-up shorter than SIZE_RETUNE_AT[0] (or none): the pass over all rows that the
            # set-up left to the chain, at its last draws or at the set-up's points
            self._retune_size()
        super().stop_tuning()
        self._warn_if_size_too_large()  # a warm-up shorter than SIZE_RETUNE_AT[-1]

    # ---------------------------------------------------------------- progress bar
    def progress_columns(self):
        """σ̂², subsample acceptance, inner step size and divergences (and the sign, signed)."""
        columns = [
            StatColumn("loglik_var", "σ̂²", compact),
            StatColumn("subsample_accept", "u-acc", "{:.2f}"),
            StatColumn("step_size", "step", "{:.3g}"),
            StatColumn("divergences", "div", "{:.0f}"),
        ]
        if self.estimator == "signed":
            columns.append(StatColumn("sign", "sign", "{:+.0f}"))
        return columns

    def progress_failing(self, stats):
        """Red bar once the chain has a divergence after warm-up, as PyMC's NUTS."""
        return stats.get("divergences", 0) > 0

    ess_remedy = ("Increase subsample_size (or use subsample_size='auto') so that σ̂² is near 1, and "
                  "check that the centre is near the posterior mode.")

    def _variance_remedy(self):
        text = _variance_remedy_text(self._auto_minimum is not None, self.estimator)
        if self.mass_matrix == "laplace_adapt" and self.tall.ndim >= DENSE_ADAPT_MAX_DIM:
            # measured: the chain left the posterior once PyMC's adapted matrix took over
            text = (f"mass_matrix='laplace_adapt' adapts a dense {self.tall.ndim} × {self.tall.ndim} "
                    "matrix from PyMC's first window of 75 warm-up draws, a singular estimate that can "
                    "carry the chain where the Taylor proxy fails: use the default mass_matrix ('auto') "
                    "or 'laplace'. " + text)
        return text

    def run_checks(self):
        """ESS, mean σ̂², subsample acceptance and (signed) sign fraction after warm-up."""
        target = max(self.target_variance, 1.0)
        checks = super().run_checks() + [
            mean_check(
                "variance", "loglik_var", lambda v: v > 3 * target,
                "HMCECS: the log-likelihood estimator's variance σ̂² averages {value:.3g}, far above "
                f"its target {self.target_variance:g}; the posterior may be biased and mixing slow. "
                + self._variance_remedy()),
            mean_check(
                "accept", "subsample_accept", lambda v: v < 0.05,
                "HMCECS: only {value:.1%} of subsample updates were accepted; the chain on u is sticky. "
                "Increase num_blocks (more correlated proposals) or subsample_size."),
        ]
        warmup = self.warmup_thetas or []
        drift = drift_check(
            "HMCECS", warmup[-max(50, len(warmup) // 4):],
            "Compare with full-data NUTS on a subset of the rows (pms.compare); a longer warm-up (tune=) "
            "or subsample_size='auto' (the default) tunes the estimator where the chain goes.")
        if drift is not None:
            checks.append(drift)
        if self.estimator == "signed":
            # the mean sign s̄ = 2 P(positive) − 1, so P(positive) < 0.6 ⇔ s̄ < 0.2
            checks.append(mean_check(
                "sign", "sign", lambda v: v < 0.2,
                "HMCECS: the mean sign of the signed likelihood estimates is {value:.2f} (below 0.2, i.e. "
                "under 60% positive); sign-weighted estimates will be very noisy. Increase "
                "subsample_size or target a smaller target_variance."))
        return checks


def _variance_remedy_text(auto, estimator):
    if estimator == "perturbed" and not auto:
        # a fixed m subsamples every row, those with a large proxy error (small groups) too
        return ("Increase subsample_size, or use the default subsample_size (None) or 'auto', which "
                "computes exactly the rows whose Taylor proxy error is large (e.g. the rows of small "
                "groups); or pass a center closer to the posterior mode.")
    return ("Run a longer warm-up (tune), so that m and the rows computed exactly are chosen again at "
            "the chain's own draws, or pass a center closer to the posterior mode; if σ̂² stays high, "
            "full-data NUTS (pm.sample() without step=) is the safer sampler.")


def _check_choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}; got {value!r}.")
