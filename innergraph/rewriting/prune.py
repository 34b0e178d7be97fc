"""Remove the dead outputs and unused params of calls.

A call whose outputs nobody reads, or whose body never reads a param, is rebuilt
with a smaller body and fewer arguments. Calls whose gradient overrides fix their
signature (a lifted `OpFromGraph` with ``pullback``/``pushforward`` or an explicit
connection pattern) are left alone: their owner does not allow it.
"""

from __future__ import annotations

from pytensor.graph.basic import NominalVariable, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.graph import InnerGraph, body_of, param, scope_leaves
from innergraph.instantiate import substitute
from innergraph.ops.call import Call
from innergraph.types import InnerGraphType

__all__ = ["prune_calls"]


def prune_calls(fgraph: FunctionGraph) -> int:
    """Shrink every prunable call of ``fgraph``; return how many changed."""
    changed = 0
    for node in [n for n in fgraph.toposort() if isinstance(n.op, Call)]:
        op = node.op
        if op.n_functions != 1 or op.connection is not None or node not in fgraph.apply_nodes:
            continue
        function, *args = node.inputs
        live = [k for k, out in enumerate(node.outputs) if fgraph.clients.get(out)]
        if not live:
            continue
        body = body_of(function)
        outputs = [body.outputs[k] for k in live]
        read = sorted({v.id for v in scope_leaves(outputs) if isinstance(v, NominalVariable)})
        if len(live) == len(node.outputs) and len(read) == len(args):
            continue
        types = [body.param_types[i] for i in read]
        renumber: dict[Variable, Variable] = {
            param(i, body.param_types[i]): param(j, t) for j, (i, t) in enumerate(zip(read, types))
        }
        new_body = substitute(outputs, renumber)
        new_type = InnerGraphType(types, [body.type.output_types[k] for k in live])
        new_function = InnerGraph(new_type).make_node(*new_body).outputs[0]
        new = Call().make_node(new_function, *(args[i] for i in read))
        fgraph.replace_all([(node.outputs[k], out) for k, out in zip(live, new.outputs, strict=True)], reason="prune_calls")
        changed += 1
    return changed
