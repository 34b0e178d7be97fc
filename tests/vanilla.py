"""Vanilla PyTensor for the tests' references: built, compiled and first called with innergraph uninstalled.

``mode.excluding("innergraph")`` is not vanilla: innergraph's patches stay applied, and a
native Scan or OpFromGraph compiles its inner graph with its own mode, which the exclusion
does not reach. A reference says "vanilla" only when it comes from here. A graph built with
innergraph's own builders (``innergraph.scan``/``ifelse``/``call``) cannot be compiled
uninstalled: a reference is built with PyTensor's own constructs, inside ``build``.

Where a test means "innergraph installed, its rewrites excluded" (its consumers run as
they were built), it says so by name: ``..._rewrites_excluded`` or ``IN_GRAPH``.
"""

from collections.abc import Callable, Sequence
from typing import Any

import pytensor

import innergraph

Build = Callable[[], tuple[Sequence[Any], Any]]


def vanilla_function(build: Build, mode: Any = None, *, first_call: Sequence[Any] | None = None, **kwargs: Any) -> Any:
    """``pytensor.function(*build(), mode=mode, **kwargs)``, built and compiled with innergraph uninstalled.

    ``first_call``: arguments of a first call inside the block too (Numba and OpFromGraph
    compile their code at the first call).
    """
    with innergraph.uninstalled():
        inputs, outputs = build()
        fn = pytensor.function(list(inputs), outputs, mode=mode, **kwargs)
        if first_call is not None:
            fn(*first_call)
    return fn


def vanilla_values(build: Build, values: Sequence[Any], mode: Any = None, **kwargs: Any) -> Any:
    """What vanilla's function of ``build()`` returns on ``values`` (built, compiled and called uninstalled)."""
    with innergraph.uninstalled():
        inputs, outputs = build()
        return pytensor.function(list(inputs), outputs, mode=mode, **kwargs)(*values)
