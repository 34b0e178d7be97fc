"""The lift and lower passes, as graph rewriters (see `innergraph.convert`)."""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter

from innergraph.convert import lift, lower

__all__ = ["LiftNative", "LowerConsumers"]


class LiftNative(GraphRewriter):
    """Convert PyTensor's own control-flow nodes into the in-graph form."""

    def apply(self, fgraph: FunctionGraph) -> int:
        return lift(fgraph)

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        pass


class LowerConsumers(GraphRewriter):
    """Convert in-graph consumers back into PyTensor's own nodes."""

    def apply(self, fgraph: FunctionGraph) -> int:
        return lower(fgraph)

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        pass
