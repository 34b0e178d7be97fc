"""Pickling patch: a pickled `FunctionGraph` forgets the in-graph forms it went through.

Registers `innergraph.patching.pickles.reduce_function_graph` for `FunctionGraph` in
``copyreg.dispatch_table`` (PyTensor's own class, which pickles its ``__dict__``),
so a compiled function whose graph holds only PyTensor's Ops pickles without
any reference to innergraph and loads in a process that never imports it.
"""

from __future__ import annotations

import copyreg

from pytensor.graph.fg import FunctionGraph

from innergraph.patching.pickles import forget_innergraph, reduce_function_graph
from innergraph.core.hooks import ItemPatch, installed

__all__ = ["before_pickle", "patches"]


def before_pickle(fgraph: FunctionGraph) -> None:
    """Drop ``fgraph``'s stale entries while innergraph is installed (a patched ``FunctionGraph.__getstate__`` calls it)."""
    if installed():
        forget_innergraph(fgraph)


def patches() -> list[ItemPatch]:
    return [ItemPatch(copyreg.dispatch_table, FunctionGraph, reduce_function_graph)]
