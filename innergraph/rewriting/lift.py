"""The lift and lower passes, as graph rewriters (see `innergraph.convert`)."""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter

from innergraph.convert import PIPELINE_LIFTS, PIPELINE_LOWERS, lift, lower
from innergraph.fold import unfold_inner_graphs

__all__ = ["LiftNative", "LowerConsumers"]


class LiftNative(GraphRewriter):
    """Unfold folded functions and lift PyTensor's own control-flow nodes, to a fixpoint.

    Afterwards every body is nodes of the graph: the outer rewriter reaches them.
    """

    def apply(self, fgraph: FunctionGraph) -> int:
        total = 0
        while changed := unfold_inner_graphs(fgraph, reason="innergraph_lift") + lift(fgraph, PIPELINE_LIFTS):
            total += changed
        return total

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        pass


class LowerConsumers(GraphRewriter):
    """Convert in-graph consumers back into PyTensor's own nodes."""

    def apply(self, fgraph: FunctionGraph) -> int:
        return lower(fgraph, PIPELINE_LOWERS)

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        pass
