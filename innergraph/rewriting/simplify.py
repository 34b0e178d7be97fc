"""The consumer rewrites, run together to a fixpoint.

Each rewrite can expose work for another: hoisting leaves a non-sequence unread
(dead), forwarding turns a state into a non-sequence (maybe duplicate or
constant), merging loops makes shared sequences duplicates, dropping a dead
reader of a trace can leave only its last step read (untracing). MergeOptimizer runs
between rounds so that equal outer computations (a hoisted subexpression and the
outer graph's own) are one variable, which is how the rewrites decide equality.
"""

from __future__ import annotations

from collections.abc import Callable

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

from innergraph.rewriting.args import merge_arguments, pass_nested_large_constants
from innergraph.rewriting.dce import remove_dead_slots
from innergraph.rewriting.forward import forward_params
from innergraph.rewriting.licm import hoist_invariants
from innergraph.rewriting.merge_loops import merge_loops
from innergraph.rewriting.push_out import push_out_per_step_outputs
from innergraph.rewriting.signature import FORMS, sharing_rebuilt_functions
from innergraph.rewriting.untrace import untrace_final_states

__all__ = ["CONSUMER_REWRITES", "simplify_consumers"]

#: The rewrites `simplify_consumers` runs, in this order, each round.
CONSUMER_REWRITES: tuple[Callable[[FunctionGraph], int], ...] = (
    forward_params,
    merge_arguments,
    pass_nested_large_constants,
    hoist_invariants,
    push_out_per_step_outputs,
    untrace_final_states,
    remove_dead_slots,
    merge_loops,
)

MAX_ROUNDS = 8


def simplify_consumers(fgraph: FunctionGraph) -> int:
    """Run `CONSUMER_REWRITES` until none changes anything; return the number of changes."""
    if not any(type(node.op) in FORMS for node in fgraph.apply_nodes):
        return 0  # most graphs: nothing to do, and no toposort spent finding it out
    total = 0
    for _ in range(MAX_ROUNDS):
        changed = 0
        with sharing_rebuilt_functions():
            for rewrite in CONSUMER_REWRITES:
                changed += rewrite(fgraph)
        if not changed:
            break
        MergeOptimizer().rewrite(fgraph)
        total += changed
    return total
