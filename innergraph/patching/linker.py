"""Linker patch: the schedule leaves hidden subgraphs out of thunk creation.

Every PyTensor linker (``py``, ``c|py``, ``c``, ``vm``, ``cvm``, ``numba`` and the
other JIT linkers) asks `Linker.schedule` for the nodes to run before it
allocates storage or makes thunks. The patched schedule first folds the function
variables that visible consumers read (`innergraph.fold`); the hidden subgraphs
then are unreachable, `FunctionGraph` prunes them, and no linker allocates
storage or makes a thunk for them. For a graph compiled through PyTensor's
rewrite database the fold has already run (before the in-place rewrites) and this
is a no-op scan of the nodes.

For the Numba linker it also loads innergraph's Numba implementations, which
PyTensor itself only imports once a Numba function is linked; for DebugMode's
linker, the patch of DebugMode's check of reverted rewrites
(`innergraph.patching.debugmode`).
"""

from __future__ import annotations

from typing import Any

from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.link.basic import Linker

from innergraph.fold import fold_inner_graphs
from innergraph.patching import Patch

__all__ = ["patches", "schedule"]

_original_schedule = Linker.schedule


def schedule(self: Linker, fgraph: FunctionGraph) -> list[Apply]:
    """`Linker.schedule`, after folding inner-graph nodes out of ``fgraph``."""
    if _is_numba(self):
        import innergraph.backends.numba  # noqa: F401  (registers the dispatches)
    elif _is_debugmode(self):
        import innergraph.patching.debugmode  # noqa: F401  (patches DebugMode's check of reverts)
    fold_inner_graphs(fgraph, reason="Linker.schedule")
    return _original_schedule(self, fgraph)


def _is_numba(linker: Any) -> bool:
    return type(linker).__name__ == "NumbaLinker"


def _is_debugmode(linker: Any) -> bool:
    return type(linker).__module__ == "pytensor.compile.debug.debugmode"


def patches() -> list[Patch]:
    return [Patch(Linker, "schedule", schedule)]
