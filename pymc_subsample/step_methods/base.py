"""Common machinery of the subsampling step methods.

Each step method is a thin PyMC ``ArrayStepShared`` over kernels that are plain
functions: it owns a :class:`TallModel`, the centre θ* and a :class:`TaylorProxy`,
and keeps every piece of mutable per-chain state (tuning, the current subsample,
counters) as fields of a ``@dataclass_state`` class, named for PyMC by
:func:`~pymc_subsample.pymc_protocol.step_state`, so PyMC resets it between
chains sampled in sequence and tuning never leaks from one chain to the next.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pymc as pm
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state

from pymc_subsample.control_variates.center import find_center
from pymc_subsample.control_variates.taylor import check_proxy_order
from pymc_subsample.diagnostics.progress import ProgressBarMixin
from pymc_subsample.diagnostics.run_checks import RunCheck, RunMonitor, ess_check
from pymc_subsample.estimators.target import SubsampledTarget
from pymc_subsample.model.chunks import DEFAULT_CHUNK_SIZE, remembered_passes, setup_display
from pymc_subsample.model.compile import compile_mode
from pymc_subsample.model.rows import deterministics_over_rows
from pymc_subsample.model.tall import TallModel, observation_axis_length
from pymc_subsample.pymc_protocol import step_state

__all__ = [
    "BASE_KWARGS",
    "SubsampleStepState",
    "SubsampleStep",
    "check_size",
    "resolve_center",
    "warn_poor",
]

#: keyword arguments of :class:`SubsampleStep` that subclasses with their own ``**kwargs`` pass on
BASE_KWARGS = ("rng", "chunk_size", "client", "progressbar", "compile_kwargs")


def requested_mode(compile_kwargs) -> object:
    """The PyTensor mode a step's ``compile_kwargs`` asks for (None: PyTensor's default)."""
    if compile_kwargs is None:
        return None
    unknown = set(compile_kwargs) - {"mode"}
    if unknown:
        raise ValueError(
            "compile_kwargs takes only 'mode' (a PyTensor mode such as 'NUMBA' or 'C'); "
            f"got {sorted(unknown)}."
        )
    return compile_kwargs.get("mode")


def as_one_setup(init):
    """Run a step's ``__init__`` as one set-up: its functions compiled in the mode of its
    ``compile_kwargs``, and its full passes shown on one progress display (:func:`setup_display`).
    """

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        mode = requested_mode(kwargs.get("compile_kwargs"))
        with ExitStack() as stack:
            stack.enter_context(setup_display(f"{type(self).__name__} set-up"))
            if mode is not None:  # else an enclosing __init__'s choice (a subclass's) stands
                self.compile_mode = mode
                stack.enter_context(compile_mode(mode))
            return init(self, *args, **kwargs)

    return wrapped


#: this package's folder: warnings about the user's model point at the user's line, not at ours
PACKAGE_DIR = str(Path(__file__).resolve().parents[1])


def warn_deterministics_over_rows(tall):
    """Warn, with the remedy, where the model has Deterministics computed from its rows: PyMC computes
    them from all N rows at every draw, so a subsampling step's draws cost a full pass each.
    """
    # measured (zoo model deterministic_potential, μ = Xβ of length N): HMCECS 62 s at 10⁵ rows and
    # 529 s at 10⁶ for 500 + 500 draws, against 0.3 ms a leapfrog step
    names = deterministics_over_rows(tall.model, tall.leaves)
    if names:
        listed = ", ".join(repr(name) for name in names)
        warnings.warn(
            f"pm.Deterministic {listed} is computed from the model's {tall.n_rows:,} rows: PyMC evaluates it "
            "on all of them and stores the result at every draw, whatever the step method, so each draw "
            "costs a full pass over the data. Pass var_names with the other variables to pm.sample to leave "
            "it out of the trace, and compute it afterwards from the posterior with "
            "pm.compute_deterministics.",
            UserWarning,
            skip_file_prefixes=(PACKAGE_DIR,),  # the user's line that made the step
        )


class RequestedModeMixin:
    """Every ``__init__`` and ``step`` of a subclass compiles in the step's requested mode; each
    ``__init__`` is one set-up (:func:`as_one_setup`).
    """

    compile_mode = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            cls.__init__ = as_one_setup(cls.__init__)

    def step(self, point):
        if self.compile_mode is None:
            return super().step(point)
        with compile_mode(self.compile_mode):  # a function compiled on first use
            return super().step(point)


@dataclass_state
class SubsampleStepState(StepMethodState):
    """Fields every subsampling step carries; subclasses add theirs."""

    tune: bool


@step_state(SubsampleStepState)
class SubsampleStep(RequestedModeMixin, ProgressBarMixin, ArrayStepShared):
    """Base class: model → tall model → centre → one :class:`SubsampledTarget`, plus PyMC plumbing.

    The columns each subclass adds to PyMC's progress bar are its ``_progress_columns`` (or its
    ``progress_columns()``), see :mod:`pymc_subsample.diagnostics.progress`.

    Parameters
    ----------
    vars : list, optional
        Must be all of the model's free variables (or None).
    model : pm.Model or TallModel, optional
        A ``TallModel`` is used as it is, so that several steps on one model share its analysis
        and compiled functions.
    center : dict, array or None
        θ* of the control variates: a point (dict of value variables), a flat
        unconstrained vector, or None for the default centre: the MAP of a random 20,000-row
        subset refined by Newton steps with the full-data gradient and the subset's scaled Hessian
        to within 0.05 posterior sds of the mode (full-data L-BFGS when N ≤ 40,000, an exact
        Newton step or L-BFGS when those steps fail), see ``find_center``.
    proxy_order : {0, 1, 2}
    chunk_size : int
        Rows per chunk of the full-data passes at set-up.
    rng : seed or Generator, optional
        Set by ``pm.sample`` from ``random_seed`` for each chain.
    client : distributed.Client, optional
        Runs the full-data passes of a model with ``pms.Data`` on a Dask cluster (default: the
        active client, if any).
    progressbar : bool
        Show PyMC's progress bar over the chunks of the set-up's long full-data passes (10 or more
        chunks); ``pm.sample(progressbar=False)`` cannot reach a step built before it, so pass
        ``progressbar=False`` here too.
    compile_kwargs : dict, optional
        ``{"mode": ...}``: the PyTensor mode the step's functions are compiled in ("NUMBA", the
        default, "C", "FAST_COMPILE" or a ``Mode``).

    Notes
    -----
    No ``initial_point`` argument, unlike PyMC's own steps: those size their arrays from it, and
    the tall model has PyMC's initial point already. ``pm.sample`` passes one only to the steps
    it chooses itself, and it never chooses these (:meth:`competence`).
    """

    is_exact: bool = False
    # measured: SGLD's tuned step size grew 500× with the proxy in η (0.15 against 2.7·10⁻⁴ in
    # whitened units on the non-centred model), and its Langevin steps then diverged on that curved
    # posterior in one run of three
    #: whether the step takes the Taylor proxy in η where the rows are affine in a non-linear row-free
    #: φ(θ) (``RowFreeTaylorProxy``); HMCECS and SubsampleMH, where it is tested. SG keeps the proxy in
    #: θ there: with the better proxy its tuned step size grows so large that its Langevin steps, with
    #: no accept step, can diverge on that curved posterior
    row_free_proxy = False

    def __init__(
        self,
        vars=None,
        *,
        model=None,
        center=None,
        proxy_order=2,
        chunk_size=DEFAULT_CHUNK_SIZE,
        rng=None,
        client=None,
        progressbar=True,
        compile_kwargs=None,
    ):
        if not isinstance(model, TallModel):
            model = pm.modelcontext(model)
        proxy_order = check_proxy_order(proxy_order)
        # cheap checks first: a wrong argument must not cost the user the set-up time
        self.check_arguments(model.n_rows if isinstance(model, TallModel) else observation_axis_length(model))
        self.tall = model if isinstance(model, TallModel) else TallModel(model, vars)
        self.tall.client, self.tall.progressbar = client, bool(progressbar)
        self.check_model(self.tall)
        warn_deterministics_over_rows(self.tall)
        self.tall.setup_prior_compiled = self.compiles_prior(self.tall)
        self.target = centred_target(self.tall, center, proxy_order, chunk_size,
                                     glm="auto" if self.row_free_proxy else "affine")
        self.proxy = self.target.proxy
        self.tune = True
        super().__init__(self.tall.value_vars, shared={}, rng=rng)
        # post-warm-up checks: a fresh RunMonitor per chain, made when tuning stops (PyMC calls
        # stop_tuning at draw `tune` in every chain, in sequential and in parallel sampling)
        self.monitor = None

    def compiles_prior(self, tall) -> bool:
        """Whether the set-up calls the model's compiled prior
        (:meth:`~pymc_subsample.model.tall.TallModel.prior_function`): True where the step's sampling
        calls that function anyway, so that it is compiled once, in the set-up; False (the default)
        calls the prior on PyTensor's Python linker, nothing compiled for the chains' processes to
        compile again.
        """
        return False

    #: what to change when the ESS check fails (subclasses say it for their own knobs)
    ess_remedy = "Run more draws, or use a step method that mixes faster."

    def run_checks(self) -> list[RunCheck]:
        """The checks this step runs on its post-warm-up draws (subclasses add their own)."""
        return [ess_check(type(self).__name__, self.ess_remedy)]

    def step(self, point):
        """One PyMC step; after warm-up, θ and the stats are recorded and checked (warn once each)."""
        new_point, stats = super().step(point)
        if not self.tune:
            if self.monitor is None:  # tune=False set by hand, without stop_tuning
                self.monitor = RunMonitor(self.run_checks())
            # θ raveled in the order of var_names, as DictToArrayBijection.map ravels it (the monitor
            # copies it)
            theta = np.concatenate([np.ravel(new_point[name]) for name in self.var_names])
            self.monitor.record(theta, stats[0])
        return new_point, stats

    def check_arguments(self, n_rows: int):
        """Validate the step's own arguments against N before any set-up (subclasses extend)."""

    def check_model(self, tall):
        """Checks that need the tall model but not the centre, before any full pass (subclasses)."""

    @staticmethod
    def competence(var, has_grad):
        """Never chosen automatically: subsampling changes the target, so it is opt-in."""
        return Competence.INCOMPATIBLE

    def setup_chain(self, rng, tune, draws):
        """PyMC 6 calls this before each chain: the chain's generator, and no checks carried over."""
        super().setup_chain(rng, tune, draws)
        self.monitor = None

    def stop_tuning(self):
        self.tune = False
        self.monitor = RunMonitor(self.run_checks())


def pymc_model(model) -> pm.Model:
    """The PyMC model a step's ``model`` argument names: a :class:`TallModel`'s own, else the given
    one or the one on the context stack.
    """
    return model.model if isinstance(model, TallModel) else pm.modelcontext(model)


def centred_target(tall, center, proxy_order, chunk_size, glm) -> SubsampledTarget:
    """The step's :class:`SubsampledTarget` at θ* (:func:`resolve_center`), the set-up's full passes
    remembered meanwhile: the centre's last pass serves the proxy's sums
    (:func:`~pymc_subsample.model.chunks.remembered_passes`).
    """
    with remembered_passes(tall):
        return SubsampledTarget(tall, resolve_center(tall, center, chunk_size), proxy_order,
                                chunk_size=chunk_size, glm=glm)


def resolve_center(tall, center, chunk_size=DEFAULT_CHUNK_SIZE) -> np.ndarray:
    """θ* as a flat vector from a point, a vector, or None (the default centre of ``find_center``)."""
    if center is None:
        return find_center(tall, chunk_size=chunk_size)
    if isinstance(center, dict):
        return tall.point_to_theta({**tall.initial_point, **center})
    theta = np.asarray(center, dtype=float)
    if theta.shape != (tall.ndim,):
        raise ValueError(
            f"center must be a point (dict of value variables) or a vector of length {tall.ndim}; "
            f"got shape {theta.shape}."
        )
    return theta


def warn_poor(message: str):
    """A diagnostic that looks poor warns; it never stops the user's run."""
    warnings.warn(message, UserWarning, stacklevel=3)


def check_positive(value, name, integer=False):
    """A positive finite number (or integer), else a ValueError that names the argument."""
    ok = not isinstance(value, bool) and (isinstance(value, (int, np.integer)) if integer else
                                          isinstance(value, (int, float, np.number)))
    if not ok or not np.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive finite number"
        raise ValueError(f"{name} must be {kind}; got {value!r}.")
    return int(value) if integer else float(value)


def check_size(value, name, n_rows, *, allow=()):
    """An integer in 1..N (or one of the strings in ``allow``), else a ValueError that says so."""
    if isinstance(value, str) and value in allow:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= n_rows:
        extra = f" or one of {allow}" if allow else ""
        raise ValueError(
            f"{name} must be an integer between 1 and the number of rows N = {n_rows}{extra}; "
            f"got {value!r}."
        )
    return int(value)
