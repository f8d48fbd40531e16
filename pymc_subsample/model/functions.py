"""The compiled functions of one model graph, by key and by the mode they were compiled in.

Every TallModel of a model graph shares one :class:`CompiledFunctions` (:mod:`~pymc_subsample.model.kept`):
a second set-up of the same graph in a process compiles nothing again.
"""

from __future__ import annotations

from pymc_subsample.model.compile import compile_function, compile_python, current_mode

__all__ = ["CompiledFunctions"]


class CompiledFunctions:
    """Compiled functions by key, one table per compile mode (a step's ``compile_kwargs`` may ask for
    another mode than PyTensor's default, and a function compiled in one mode is not the other's).
    """

    def __init__(self):
        self._by_mode = {}

    @property
    def current(self) -> dict:
        """The functions compiled in the current compile mode
        (:func:`~pymc_subsample.model.compile.current_mode`), by key.
        """
        return self._by_mode.setdefault(current_mode(), {})

    def kept(self, key, make):
        """``make()`` under ``key`` in the current mode, made once: ``key`` must name everything the
        function depends on besides the model's graph.
        """
        functions = self.current
        if key not in functions:
            functions[key] = make()
        return functions[key]

    def compile(self, key, build, python=False):
        """Compile ``build() -> (inputs, outputs)`` once per key; graphs are built lazily. ``python``:
        on PyTensor's Python linker, for functions called a few times at set-up (nothing compiled).
        """
        def make():
            inputs, outputs = build()
            return compile_python(inputs, outputs) if python else compile_function(inputs, outputs)

        return self.kept(key, make)

    def all(self) -> list:
        """Every function compiled, in every mode."""
        return [f for functions in self._by_mode.values() for f in functions.values()]
