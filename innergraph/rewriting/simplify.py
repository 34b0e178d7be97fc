"""The consumer rewrites, run together to a fixpoint.

Each rewrite can expose work for another: hoisting leaves a non-sequence unread
(dead), forwarding turns a state into a non-sequence (maybe duplicate or
constant), merging loops makes shared sequences duplicates, dropping a dead
reader of a trace can leave only its last step read (untracing). MergeOptimizer runs
between rounds so that equal outer computations (a hoisted subexpression and the
outer graph's own) are one variable, which is how the rewrites decide equality.
PyTensor's ``ShapeFeature`` infers shapes on demand (since 3.3), so the body nodes
the rewrites import cost no shape inference unless a pass asks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

from innergraph.rewriting.args import merge_arguments, pass_nested_large_constants
from innergraph.rewriting.batch_loops import batch_loops
from innergraph.rewriting.carry import carry_cotangents
from innergraph.rewriting.carry_from_zero import carry_from_zero
from innergraph.rewriting.dce import remove_dead_slots
from innergraph.rewriting.duplicates import merge_duplicate_slots
from innergraph.rewriting.forward import forward_params
from innergraph.rewriting.licm import hoist_invariants
from innergraph.rewriting.merge_loops import merge_loops
from innergraph.rewriting.push_out import push_out_dot_sums, push_out_per_step_outputs, push_out_sequence_work
from innergraph.protocol.signature import FORMS, remembering_consumer_order, sharing_rebuilt_functions
from innergraph.rewriting.untrace import untrace_final_states

__all__ = ["CONSUMER_REWRITES", "simplify_consumers"]

#: The rewrites `simplify_consumers` runs, in this order, each round, with the tags of
#: PyTensor's Scan rewrites they stand in for: a mode that excludes one of those tags
#: (``mode.excluding("scan_pushout_seqs_ops")``) excludes the rewrite here too
#: (`innergraph.rewriting.db.ConsumerRewritesDB`).
CONSUMER_REWRITES: tuple[tuple[Callable[[FunctionGraph], int], tuple[str, ...]], ...] = (
    (forward_params, ()),
    (merge_arguments, ("scan_merge_duplicate_inputs", "scan_inline_invariant_constants")),
    (pass_nested_large_constants, ()),
    (batch_loops, ("scan_merge",)),
    (hoist_invariants, ("scan_pushout", "scan_pushout_nonseqs_ops", "scan_push_out_non_seq")),
    (push_out_per_step_outputs, ()),
    (push_out_sequence_work, ("scan_pushout", "scan_pushout_seqs_ops", "scan_push_out_seq")),
    (untrace_final_states, ("scan_sit_sot_to_untraced",)),
    (push_out_dot_sums, ("scan_pushout", "scan_pushout_add", "scan_push_out_add", "more_mem")),
    (carry_cotangents, ("scan_sit_sot_to_untraced",)),
    (carry_from_zero, ("scan_sit_sot_to_untraced",)),
    (merge_duplicate_slots, ("scan_merge_inouts",)),
    (remove_dead_slots, ("scan_remove_unused",)),
    (merge_loops, ("scan_merge",)),
)

MAX_ROUNDS = 8


def simplify_consumers(fgraph: FunctionGraph, rewrites: Sequence[Callable[[FunctionGraph], int]] | None = None) -> int:
    """Run ``rewrites`` (all of `CONSUMER_REWRITES` by default) until none changes anything.

    Returns the number of changes.
    """
    if rewrites is None:
        rewrites = [rewrite for rewrite, _ in CONSUMER_REWRITES]
    if not rewrites or not any(type(node.op) in FORMS for node in fgraph.apply_nodes):
        return 0  # most graphs: nothing to do, and no toposort spent finding it out
    total = 0
    with remembering_consumer_order() as graph_changed:
        for _ in range(MAX_ROUNDS):
            changed = 0
            with sharing_rebuilt_functions():
                for rewrite in rewrites:
                    if made := rewrite(fgraph):
                        graph_changed()
                    changed += made
            if not changed:
                break
            MergeOptimizer().rewrite(fgraph)
            graph_changed()
            total += changed
    return total
