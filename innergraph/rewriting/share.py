"""Share one native Op instance between nodes whose native inner graphs are equal.

PyTensor compiles a native Scan's inner graph once per Op *instance*. Lowering
gives consumers that merged one body one native Op, but PyTensor's later Scan
passes (save-memory at 1.61, in-place at 50.5) rebuild the Op of each node they
touch, so equal bodies would compile again. This pass, run after them, makes
nodes with equal Ops share one instance.

"Equal" is stricter than native Scan equality (which compares the layout, flags
and the frozen inner graph): the key adds ``destroy_map``, ``mode`` and ``strict``,
and the node's outer input types, because the Numba Scan takes in-place decisions
from them.
"""

from __future__ import annotations

from typing import Any

from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan

from innergraph.ops.scan import mark_shared

__all__ = ["share_native_ops"]


def _key(node: Apply) -> tuple[Any, ...]:
    op = node.op
    destroy = tuple(sorted((k, tuple(v)) for k, v in op.destroy_map.items()))
    return (op, destroy, id(op.mode), op.strict, tuple(v.type for v in node.inputs))


def share_native_ops(fgraph: FunctionGraph) -> int:
    """Give nodes with equal native Scan Ops one Op instance; return how many changed."""
    if sum(isinstance(node.op, NativeScan) for node in fgraph.apply_nodes) < 2:
        return 0  # nothing to share: a look at the node set, not a sort of it
    representative: dict[tuple[Any, ...], NativeScan] = {}
    replacements = []
    for node in fgraph.toposort():
        if not isinstance(node.op, NativeScan):
            continue
        rep = representative.setdefault(_key(node), node.op)
        if rep is not node.op:
            replacements.append((node, mark_shared(rep)))
    for node, rep in replacements:
        new = rep.make_node(*node.inputs)
        fgraph.replace_all(list(zip(node.outputs, new.outputs, strict=True)), reason="share_native_ops")
    return len(replacements)
