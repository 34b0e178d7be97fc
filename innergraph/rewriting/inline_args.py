"""Constant and duplicate arguments, settled right after lifting.

PyTensor's first Scan pass (``scan_eqopt1``, 0.05) starts by inlining a Scan's
constant non-sequences into its inner graph and merging its duplicate inputs
(``scan_input_and_output_cleanup0``); the inner graph is then rewritten — every
canonicalize and stabilize rewrite included — when the Scan compiles it. Lifting
happens at 0.04, so without this pass a body reached canonicalize with such a
constant still a param, and `innergraph.rewriting.args.merge_arguments` inlined it
only at 1.56, after the last pass that could use its value: lowered bodies skip
canonicalize and stabilize (`innergraph.lifting.rules.already_rewritten`).

What that lost, found on pymc-extras' Kalman filters (measured in `design/benchmarks.md`
as of commit 455bc04):
rewrites that read a constant's *value* through PyTensor's assumption system. A
selection matrix ``S = eye(4)[:, :3]`` passed as a non-sequence keeps
``dot(x, S)`` a matrix product unless ``selection_dot_to_indexing`` sees ``S`` as
a constant, which turns it into ``x[:, :3]``. On the VARMAX model's NUTS function
the missing rewrites cost 8 ``Dot`` nodes per step of the two loops and 10 more
nodes in all than vanilla PyTensor.

`inline_lifted_arguments` (``innergraph_inline_args``, 0.042) runs
`merge_arguments` once over the freshly lifted graph. It answers to the tags of
the PyTensor rewrites it stands in for (``scan_inline_invariant_constants``,
``scan_merge_duplicate_inputs``).
"""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

from innergraph.rewriting.args import merge_arguments
from innergraph.protocol.signature import FORMS, sharing_rebuilt_functions

__all__ = ["inline_lifted_arguments"]


def inline_lifted_arguments(fgraph: FunctionGraph) -> int:
    """Inline constant and merge duplicate arguments of every consumer; return how many changed."""
    if not any(type(node.op) in FORMS for node in fgraph.apply_nodes):
        return 0  # most graphs: no consumer, and no toposort spent finding it out
    with sharing_rebuilt_functions():
        changed = merge_arguments(fgraph)
    if changed > 1:  # consumers of one body rebuilt alike now read one function
        MergeOptimizer().rewrite(fgraph)
    return changed
