"""The lift and lower passes of the rewrite pipeline (see `innergraph.convert`)."""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph

from innergraph.convert import PIPELINE_LIFTS, PIPELINE_LOWERS, lift, lower
from innergraph.fold import unfold_inner_graphs

__all__ = ["lift_native", "lower_consumers"]


def lift_native(fgraph: FunctionGraph) -> int:
    """Unfold folded functions and lift PyTensor's own control-flow nodes, to a fixpoint.

    Afterwards every body is nodes of the graph: the outer rewriter reaches them.
    """
    total = 0
    while changed := unfold_inner_graphs(fgraph, reason="innergraph_lift") + lift(fgraph, PIPELINE_LIFTS):
        total += changed
    return total


def lower_consumers(fgraph: FunctionGraph) -> int:
    """Convert the in-graph consumers the pipeline lifted back into PyTensor's own nodes."""
    return lower(fgraph, PIPELINE_LOWERS)
