"""The lift, lower and fold passes of the rewrite pipeline (see `innergraph.lifting.rules`)."""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

from innergraph.lifting.rules import PIPELINE_LIFTS, PIPELINE_LOWERS, lift, lower
from innergraph.rewriting.debugmode import forget_hidden
from innergraph.core.fold import fold_inner_graphs, folded_bodies, unfold_inner_graphs
from innergraph.core.graph import is_function
from innergraph.core.interning import intern_folded
from innergraph.core.types import mark_rewritten
from innergraph.rewriting.args import outline_constants
from innergraph.rewriting.remerge import merge_fully
from innergraph.protocol.signature import sharing_rebuilt_functions

__all__ = ["fold_bodies", "lift_native", "lower_consumers", "mark_lifted", "was_lifted"]

#: The attribute of a graph ``lift_native`` ran on: its bodies were rewritten with the outer graph.
#: An attribute, not a set of graphs, so that a pickled compiled function's graph keeps it
#: (``FunctionGraph`` pickles its ``__dict__``): a loaded function is linked as it was.
_LIFTED = "_innergraph_lifted"


def mark_lifted(fgraph: FunctionGraph) -> None:
    """Record that a lift pass ran on ``fgraph``: its bodies go through the pipeline with it."""
    setattr(fgraph, _LIFTED, True)


def was_lifted(fgraph: FunctionGraph) -> bool:
    """Whether ``lift_native`` (or another lift pass) ran on ``fgraph`` (or on the graph it was pickled from)."""
    return vars(fgraph).get(_LIFTED, False) is True


def lift_native(fgraph: FunctionGraph) -> int:
    """Unfold folded functions and lift PyTensor's own control-flow nodes, to a fixpoint.

    Afterwards every body is nodes of the graph: the outer rewriter reaches them.
    When more than one body came in, they are merged at once, so that the passes
    before PyTensor's next merge (shape inference, ``useless``) see each distinct
    body once rather than once per consumer.
    """
    mark_lifted(fgraph)
    total = 0
    while changed := unfold_inner_graphs(fgraph, reason="innergraph_lift") + lift(fgraph, PIPELINE_LIFTS):
        total += changed
    if total > 1:
        merge_fully(fgraph)  # MergeOptimizer alone can leave a body's copies of a constant's users unmerged
    return total


def lower_consumers(fgraph: FunctionGraph) -> int:
    """Convert the in-graph consumers the pipeline lifted back into PyTensor's own nodes."""
    return lower(fgraph, PIPELINE_LOWERS)


def fold_bodies(fgraph: FunctionGraph) -> int:
    """Fold the bodies visible consumers read; in a lifted graph, mark them rewritten.

    The bodies of a graph ``lift_native`` ran on went through every pass between
    lifting and folding with the outer graph, so compiling them later leaves those
    passes out (`innergraph.protocol.runtime.pipeline_passes`). In such a graph the large
    constants of call and branch bodies become arguments as their bodies are folded,
    and so do the small constants that alone tell bodies apart
    (`innergraph.rewriting.args`): no later pass could use their values.
    """
    changed = _fold_bodies(fgraph) if _has_functions(fgraph) else 0
    forget_hidden(fgraph)  # no body node is imported from here on: DebugMode's linker must not run those it saw
    return changed


def _has_functions(fgraph: FunctionGraph) -> bool:
    """Whether a node of ``fgraph`` reads a function variable or one is an output: else there is nothing to fold."""
    return any(is_function(v) for node in fgraph.apply_nodes for v in node.inputs) or any(map(is_function, fgraph.outputs))


def _fold_bodies(fgraph: FunctionGraph) -> int:
    if not was_lifted(fgraph):
        return fold_inner_graphs(fgraph, reason="innergraph_fold")
    with sharing_rebuilt_functions():
        outlined = outline_constants(fgraph)
        changed = outlined + fold_inner_graphs(fgraph, reason="innergraph_fold")
    if outlined:  # bodies that now differ only in arguments: equal, one constant each
        MergeOptimizer().rewrite(fgraph)
    for _, body in folded_bodies(fgraph.outputs):
        mark_rewritten(body)
    intern_folded(fgraph)  # an equal body an earlier compilation made final brings what it compiled
    return changed
