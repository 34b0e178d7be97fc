"""Pass work a lazy branch shares with the outer graph into the branch as an argument.

A branch body is built with leaf-only capture, so it recomputes everything it needs.
When the outer graph computes some of that anyway, the branch should receive the
value instead. A body node has an *outer twin* when its op applied to its inputs'
twins (params twin with their arguments, constants with themselves) is a node the
outer function computes on every call (`innergraph.core.fold.always_computed`: visible,
and not inside a branch of PyTensor's own lazy ``IfElse``). The largest twinned
subexpressions the body uses become new params, their twins new arguments, so
nothing the outer function would not compute anyway is moved out of a branch.
"""

from __future__ import annotations

from typing import Any

from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.build import inner_graph
from innergraph.core.fold import always_computed, visible_in_order
from innergraph.core.graph import body_of, params, scope_toposort
from innergraph.core.instantiate import substitute
from innergraph.ops.ifelse import IfElse

__all__ = ["share_branch_work"]


def _twins(function: Variable, args: list[Variable], index: dict[Any, Apply]) -> dict[Variable, Variable]:
    body = body_of(function)
    twin: dict[Variable, Variable] = dict(zip(params(body.param_types), args, strict=True))
    for node in scope_toposort(body.outputs):
        inputs = [v if isinstance(v, Constant) else twin.get(v) for v in node.inputs]
        if any(v is None for v in inputs):
            continue
        found = index.get((node.op, tuple(inputs)))
        if found is not None:
            twin.update(zip(node.outputs, found.outputs, strict=True))
    return twin


def _hoisted(function: Variable, args: list[Variable], index: dict[Any, Apply]) -> tuple[Variable, list[Variable]] | None:
    """The branch with its twinned subexpressions passed in, or None if there are none."""
    body = body_of(function)
    twin = _twins(function, args, index)
    # in the body's node order: new params must not be numbered by hash order
    used = dict.fromkeys([*(v for n in scope_toposort(body.outputs) for v in n.inputs), *body.outputs])
    hoist = [v for v in used if v in twin and v.owner is not None and not _inside_twinned(v, twin, body.outputs)]
    if not hoist:
        return None
    outer = [twin[v] for v in hoist]
    new_params = [v.type(name=f"shared{i}") for i, v in enumerate(hoist)]
    dummies = [t(name=f"a{i}") for i, t in enumerate(body.param_types)]
    replace: dict[Variable, Variable] = dict(zip(params(body.param_types), dummies))
    replace.update(zip(hoist, new_params))
    closure = inner_graph(substitute(body.outputs, replace), [*dummies, *new_params], capture="leaves")
    return closure.function, [*args, *outer, *closure.captured]


def _inside_twinned(var: Variable, twin: dict[Variable, Variable], outputs: Any) -> bool:
    """Whether every use of ``var`` is by a twinned node (then only that node is hoisted)."""
    users = [n for n in scope_toposort(outputs) if var in n.inputs]
    return bool(users) and var not in outputs and all(all(o in twin for o in n.outputs) for n in users)


def share_branch_work(fgraph: FunctionGraph) -> int:
    """Apply the rewrite to every visible in-graph IfElse; return how many changed."""
    if not any(isinstance(n.op, IfElse) for n in fgraph.apply_nodes):
        return 0  # most graphs: no conditional, and no walk of the graph spent finding it out
    visible = visible_in_order(fgraph)  # an order that depends on the graph alone
    computed = always_computed(fgraph.outputs)
    index: dict[Any, Apply] = {}
    for n in visible:
        if n in computed:
            index.setdefault((n.op, tuple(n.inputs)), n)
    changed = 0
    for node in [n for n in visible if isinstance(n.op, IfElse)]:
        cond, then_fn, else_fn, then_args, else_args = node.op.split(node.inputs)
        new_then = _hoisted(then_fn, then_args, index) or (then_fn, then_args)
        new_else = _hoisted(else_fn, else_args, index) or (else_fn, else_args)
        if new_then[0] is then_fn and new_else[0] is else_fn:
            continue
        new = IfElse(len(new_then[1])).make_node(cond, new_then[0], new_else[0], *new_then[1], *new_else[1])
        fgraph.replace_all(list(zip(node.outputs, new.outputs, strict=True)), reason="share_branch_work")
        changed += 1
    return changed
