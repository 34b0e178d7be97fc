"""Linker patch: the schedule leaves hidden subgraphs out of thunk creation.

Every PyTensor linker (``py``, ``c|py``, ``c``, ``vm``, ``cvm``, ``numba`` and the
other JIT linkers) asks `Linker.schedule` for the nodes to run before it
allocates storage or makes thunks. The patched schedule first folds the function
variables that visible consumers read (`innergraph.core.fold`); the hidden subgraphs
then are unreachable, `FunctionGraph` prunes them, and no linker allocates
storage or makes a thunk for them. For a graph compiled through PyTensor's
rewrite database the fold has already run (before the in-place rewrites) and this
is a no-op scan of the nodes.

Before that it loads what innergraph needs for this kind of linker and PyTensor
itself loads only on demand (`innergraph.core.dispatch.ON_DEMAND`): the Numba and JAX implementations of the
consumers, and the patch of DebugMode's check of reverted rewrites. Last, it hands
PyTensor's native Ops to a linker that cannot run innergraph's consumers
(`innergraph.lifting.handover`: decided from the linker's conversion dispatch, once
innergraph's own implementations for it have loaded).
"""

from __future__ import annotations


from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.link.basic import Linker

from innergraph.core.dispatch import load_on_demand
from innergraph.core.fold import fold_inner_graphs
from innergraph.core.hooks import Patch, installed
from innergraph.lifting.handover import hand_over
from innergraph.patching import on_import
from innergraph.patching.on_import import ImportHook

__all__ = ["patches", "prepare_schedule", "schedule"]

_original_schedule = Linker.schedule

def schedule(self: Linker, fgraph: FunctionGraph) -> list[Apply]:
    """`Linker.schedule`, after folding inner-graph nodes out of ``fgraph``."""
    prepare_schedule(self, fgraph)
    return _original_schedule(self, fgraph)


def prepare_schedule(linker: Linker, fgraph: FunctionGraph) -> None:
    """What innergraph does before ``linker`` schedules ``fgraph`` (a patched PyTensor's `Linker.schedule` calls it)."""
    if not installed():
        return

    load_on_demand(type(linker))
    fold_inner_graphs(fgraph, reason="Linker.schedule")
    hand_over(fgraph, linker)


def patches() -> list[Patch | ImportHook]:
    # The import hook first: installing it may import a backend, whose registrations
    # `install` then applies with the other late patches (`innergraph.patching.on_import`).
    return [*on_import.patches(), Patch(Linker, "schedule", schedule)]
