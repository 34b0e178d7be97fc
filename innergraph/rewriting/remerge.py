"""Merging to the end: MergeOptimizer, then the merges it dropped.

Terms
-----
pending node
    A node PyTensor's ``MergeFeature`` found equal to a *seen* node (its
    candidate) and scheduled to be replaced by it. A pending node is not itself
    seen: no later node is ever compared with it.
dropped merge
    A pending node whose candidate left the graph before its turn came.
    ``MergeOptimizer`` skips the scheduled pair (the candidate is gone), and
    nothing schedules the node again: ``MergeFeature.on_change_input`` reprocesses
    only seen nodes. The node stays a duplicate for good.

How a merge is dropped (PyTensor 3.0.7): bodies lifted from several Scans bring
their own copies of one constant (``0.5``, ``0.0``). In a body, a seen node ``N =
f(c2)`` has pending duplicates ``B = f(c2)``. ``MergeFeature.process_atomic``
schedules the merge of ``c2`` into an equal older constant ``c1`` once per node
that reads ``c2`` (a merged constant is never marked seen), so the constant merge
also comes *after* the pending pairs and, the schedule being a stack, runs first.
Replacing ``c2`` reprocesses ``N``, which now equals an older ``f(c1)`` and is
merged into it at once; ``B``'s pair then names a candidate that is gone. A plain
graph shows it: ``[exp(c2), expand_dims(c2) * x, expand_dims(c2) - x,
expand_dims(c1) + x]`` keeps two ``expand_dims(0.5)`` after ``MergeOptimizer``
(``tests/test_remerge.py``).

What it cost (found on pymc-extras' structural model, issue 21): nine duplicates
of ``expand_dims(0.5)`` and ``expand_dims(0.0)`` survived the lift's merge. Each
copy then met ``local_lift_transpose_through_dot``, which only lifts a transpose
through a ``Dot`` with one client, in a different state, and the two copies of
the Kalman gradient's ``AllocDiag(ExtractDiag(...))``, ``Dot`` and ``Composite``
chain came out of canonicalize in different forms that never merged again: the
gradient loop computed the chain twice per step.

`merge_fully` reschedules every pending node that is neither seen nor merged
after a run (in graph order, so the result does not depend on set order) and
runs ``MergeOptimizer`` again until nothing is scheduled.
"""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

__all__ = ["merge_fully"]


def merge_fully(fgraph: FunctionGraph) -> int:
    """Merge ``fgraph`` like ``MergeOptimizer``, dropped merges included; return how many reruns it took.

    A rerun that merges nothing ends it (a merge the validator refuses stays
    pending; ``MergeOptimizer`` forgets its refusals after each run).
    """
    MergeOptimizer().rewrite(fgraph)
    feature = fgraph.merge_feature  # attached by MergeOptimizer
    reruns = 0
    while any(node not in feature.nodes_seen for node in fgraph.apply_nodes):
        for node in fgraph.toposort():
            if node not in feature.nodes_seen:
                feature.process_node(fgraph, node)
        if not feature.scheduled:
            break
        before = len(fgraph.apply_nodes)
        MergeOptimizer().rewrite(fgraph)
        reruns += 1
        if len(fgraph.apply_nodes) == before:
            break
    return reruns
