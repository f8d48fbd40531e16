"""The private names PyMC 6.4's step protocol reads, written in this module only.

PyMC reads a few underscore-prefixed attributes of a step method and of a ``logp_dlogp_func``.
Only this module writes them: the step methods use the public-named adapters below, which
delegate to public methods. If PyMC renames one of these names, only this file changes
(``tests/test_compile.py`` checks that no other module of the package uses them, and that the
installed PyMC still reads each where it is listed below). It imports nothing, and sits beside the
layers rather than in one; the kernels, which know nothing of PyMC, never import it
(``tests/test_layers.py``).

Names PyMC reads, and what it does with them:

``_state_class`` (set by :func:`step_state`)
    On a step method: the ``@dataclass_state`` class of the step's mutable per-chain state.
    ``WithSamplingState.sampling_state`` builds it from the step's attributes of the same names,
    and its setter writes them back. ``pm.sample`` takes the state once before the first chain
    and restores it before each chain that runs in sequence, and the Zarr backend stores it.
    If it is missing, PyMC's default ``DataClassState`` holds no field, so nothing is reset.

``_raveled_inputs``, ``_extra_vars_shared``, ``_pytensor_function`` (:class:`PotentialForPyMC`)
    On a potential: PyMC's NUTS and HMC accept any ``logp_dlogp_func=`` that has these names, in
    place of the ``ValueGradFunction`` they would compile from the model.
    ``GradientSharedStep.__init__`` passes ``_extra_vars_shared`` to ``ArrayStepShared`` as the
    step's shared variables. ``CpuLeapfrogIntegrator`` reads ``_pytensor_function`` once and
    calls it with the raveled position vector q when ``_raveled_inputs`` is true (with one
    array per variable otherwise), and takes ``(logp, dlogp)`` from it. It also reads the
    public ``dtype``.

``_progressbar_config``, ``_make_progressbar_update_functions`` (:class:`ProgressBarForPyMC`)
    On a step method: ``MCMCProgressBarManager`` calls ``_progressbar_config(chains)`` once for the bar's rich
    columns and their initial values per chain. It calls
    ``_make_progressbar_update_functions()`` once for one function per stats dict of a draw.
    Each function maps the stats of a chain's latest draw to that chain's fields of the bar.
    PyMC's ``BlockedStep`` declares both as static methods and ``CompoundStep`` calls them on the
    instance, so here they are ordinary methods.
"""

from __future__ import annotations

__all__ = ["PotentialForPyMC", "ProgressBarForPyMC", "step_state"]


def step_state(state_class):
    """Class decorator: ``state_class`` is the per-chain state PyMC saves and restores for the step.

    Parameters
    ----------
    state_class : type
        A ``@dataclass_state`` subclass of ``pymc.step_methods.compound.StepMethodState``.
        Its fields name attributes of the step.

    Returns
    -------
    callable
        The decorator. It sets PyMC's ``_state_class`` on the class and returns the class.

    Examples
    --------
    >>> @step_state(SubsampleStepState)  # doctest: +SKIP
    ... class SubsampleStep(ArrayStepShared): ...
    """

    def decorate(cls):
        cls._state_class = state_class
        return cls

    return decorate


class PotentialForPyMC:
    """PyMC's ``logp_dlogp_func`` protocol over the public method ``logp_dlogp(q)``.

    A subclass defines ``logp_dlogp(q)``, which returns ``(logp, dlogp)`` at the raveled q as
    arrays of the subclass's ``dtype``. PyMC's own NUTS and HMC then run on it unchanged, with
    ``pm.NUTS(logp_dlogp_func=potential, ...)``.
    """

    #: PyMC's leapfrog integrator passes one raveled vector q, not one array per variable
    _raveled_inputs = True
    #: no shared variables of the model feed the potential; PyMC gives this dict to the step as
    #: its ``shared`` variables, which it sets for each point
    _extra_vars_shared: dict = {}

    def logp_dlogp(self, q):
        """(logp, dlogp) at the raveled q (subclasses)."""
        raise NotImplementedError

    @property
    def _pytensor_function(self):
        """What PyMC's ``CpuLeapfrogIntegrator`` calls with q: :meth:`logp_dlogp` itself.

        A property, not a method that calls :meth:`logp_dlogp`: the integrator reads it once and
        calls it at every leapfrog step, so no call is added per step.
        """
        return self.logp_dlogp


class ProgressBarForPyMC:
    """PyMC's progress-bar hooks over the public methods ``progressbar_config(n_chains)`` and
    ``progressbar_update_functions()``: the base of
    ``pymc_subsample.diagnostics.progress.ProgressBarMixin``, which a step class lists before PyMC's
    step class (that one has static versions of the hooks).
    """

    def _progressbar_config(self, n_chains=1):
        return self.progressbar_config(n_chains)

    def _make_progressbar_update_functions(self):
        return self.progressbar_update_functions()
