"""Lift PyTensor's own control-flow nodes into the in-graph form, and lower them back.

Terms
-----
lift
    Replace a native node (PyTensor's Scan today; IfElse and OpFromGraph next)
    by an in-graph consumer reading a function variable whose body is a private
    copy of the native inner graph. Native inner graphs are built over
    ``NominalVariable(i, t)`` inputs already (``construct_nominal_fgraph``), so the
    copy is the body as it is.
lower
    Replace an in-graph consumer by the native node it stands for. The native Op
    is built once per body (`Body.cache`), so consumers that share a merged body
    share one native Op — and one compilation.

Both are rule tables keyed by Op class (`LIFTERS`, `LOWERERS`): a new consumer
family registers its rules next to its Op, no central function changes.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any

from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.scan.op import Scan as NativeScan

from innergraph.fold import fold_scope
from innergraph.graph import InnerGraph, body_of, param, scope_toposort
from innergraph.instantiate import copy_scope
from innergraph.ops.scan import Scan, native_scan
from innergraph.types import InnerGraphType

__all__ = ["LIFTERS", "LOWERERS", "lift", "lift_graph", "lower", "lower_graph"]

Rule = Callable[[Op, Sequence[Variable]], list[Variable]]

#: Lift rules: native Op class -> (op, inputs) -> outputs of the in-graph form.
LIFTERS: dict[type, Rule] = {}
#: Lower rules: consumer class -> (op, inputs) -> outputs of the native form.
LOWERERS: dict[type, Rule] = {}


def _rewrite_graph(
    outputs: Sequence[Variable], rules: dict[type, Rule], only: Container[Apply] | None = None
) -> list[Variable]:
    memo: dict[Variable, Variable] = {}
    for node in scope_toposort(outputs):
        inputs = [memo.get(v, v) for v in node.inputs]
        rule = rules.get(type(node.op))
        if rule is not None and (only is None or node in only):
            new_outputs = rule(node.op, inputs)
        elif any(a is not b for a, b in zip(inputs, node.inputs, strict=True)):
            new_outputs = node.clone_with_new_inputs(inputs, strict=True).outputs
        else:
            continue
        memo.update(zip(node.outputs, new_outputs, strict=True))
    return [memo.get(o, o) for o in outputs]


def lift_graph(outputs: Sequence[Variable], only: Container[Apply] | None = None) -> list[Variable]:
    """``outputs`` with the native nodes of one scope lifted (all, or those in ``only``).

    Nothing is mutated: nodes downstream of a lifted node are rebuilt, the rest shared.
    The new consumers read their functions folded, like every graph built outside
    the rewrite pipeline (see ``design/architecture.md``).
    """
    return fold_scope(_rewrite_graph(outputs, LIFTERS, only))


def lower_graph(outputs: Sequence[Variable]) -> list[Variable]:
    """``outputs`` with every consumer of one scope lowered to its native node."""
    return _rewrite_graph(outputs, LOWERERS)


def lift(fgraph: FunctionGraph) -> int:
    """Lift every native node of ``fgraph`` (nested ones included); return how many."""
    return _rewrite_fgraph(fgraph, LIFTERS, "innergraph.lift")


def lower(fgraph: FunctionGraph) -> int:
    """Lower every consumer of ``fgraph`` (nested ones first); return how many."""
    return _rewrite_fgraph(fgraph, LOWERERS, "innergraph.lower")


def _rewrite_fgraph(fgraph: FunctionGraph, rules: dict[type, Rule], reason: str) -> int:
    count = 0
    while True:  # new nodes (a lifted body's nested scans) are handled in the next round
        todo = [n for n in fgraph.toposort() if type(n.op) in rules]
        if not todo:
            return count
        for node in todo:
            if node in fgraph.apply_nodes:
                new = rules[type(node.op)](node.op, node.inputs)
                fgraph.replace_all(list(zip(node.outputs, new, strict=True)), reason=reason, import_missing=True)
                count += 1


def _lift_scan(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    native: NativeScan = op
    body = lift_graph(copy_scope(native.inner_outputs))
    param_types = [v.type for v in native.inner_inputs]
    assert all(v is param(i, t) for i, (v, t) in enumerate(zip(native.inner_inputs, param_types)))
    function_type = InnerGraphType(param_types, [o.type for o in body])
    function = InnerGraph(function_type).make_node(*body).outputs[0]
    return Scan.like(native).make_node(function, *inputs).outputs


def _lower_scan(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    consumer: Scan = op
    return native_scan(body_of(inputs[0]), consumer).make_node(*inputs[1:]).outputs


LIFTERS[NativeScan] = _lift_scan
LOWERERS[Scan] = _lower_scan
