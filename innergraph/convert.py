"""Lift PyTensor's own control-flow nodes into the in-graph form, and lower them back.

Terms
-----
lift
    Replace a native node (PyTensor's Scan, IfElse or OpFromGraph) by an
    in-graph consumer reading a function variable whose body is a private
    copy of the native inner graph. Native inner graphs are built over
    ``NominalVariable(i, t)`` inputs already (``construct_nominal_fgraph``), so the
    copy is the body as it is.
lower
    Replace an in-graph consumer by the native node it stands for. The native Op
    is built once per body (`Body.cache`), so consumers that share a merged body
    share one native Op — and one compilation.

Both are rule tables keyed by Op class (`LIFTERS`, `LOWERERS`): a new consumer
family registers its rules next to its Op, no central function changes.
`PIPELINE_LIFTS` / `PIPELINE_LOWERS` say which rules the rewrite pipeline applies
by itself: Scan is lifted and lowered around PyTensor's Scan passes. An in-graph
IfElse is never lowered (it would lose its laziness), nor a call (it would lose
its shared, compiled-once body); so PyTensor's own IfElse and OpFromGraph are
not lifted by the pipeline either — PyTensor's tests (and users) inspect them in
compiled graphs. `lift`/`lower` convert them on request, and `ifelse`, `call` and
`op_from_graph` build the in-graph forms directly.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any

import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.ifelse import IfElse as NativeIfElse
from pytensor.scan.op import Scan as NativeScan

from innergraph.build import inner_graph
from innergraph.fold import fold_scope
from innergraph.graph import InnerGraph, body_of, param, scope_toposort
from innergraph.instantiate import copy_scope, instantiate
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse, ifelse
from innergraph.ops.scan import Scan, native_scan
from innergraph.types import InnerGraphType

__all__ = ["LIFTERS", "LOWERERS", "lift", "lift_graph", "lower", "lower_graph"]

Rule = Callable[[Op, Sequence[Variable]], list[Variable] | None]  # None: not lifted

#: Lift rules: native Op class -> (op, inputs) -> outputs of the in-graph form.
LIFTERS: dict[type, Rule] = {}
#: Lower rules: consumer class -> (op, inputs) -> outputs of the native form.
LOWERERS: dict[type, Rule] = {}
#: The Op classes the rewrite pipeline lifts and lowers by itself.
PIPELINE_LIFTS: set[type] = set()
PIPELINE_LOWERS: set[type] = set()


def _rewrite_graph(
    outputs: Sequence[Variable], rules: dict[type, Rule], only: Container[Apply] | None = None
) -> list[Variable]:
    memo: dict[Variable, Variable] = {}
    for node in scope_toposort(outputs):
        inputs = [memo.get(v, v) for v in node.inputs]
        rule = rules.get(type(node.op))
        lifted = rule(node.op, inputs) if rule is not None and (only is None or node in only) else None
        if lifted is not None:
            new_outputs = lifted
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


def lift(fgraph: FunctionGraph, only: Container[type] | None = None) -> int:
    """Lift the native nodes of ``fgraph`` (of the classes in ``only``, default all)."""
    return _rewrite_fgraph(fgraph, _subset(LIFTERS, only), "innergraph.lift")


def lower(fgraph: FunctionGraph, only: Container[type] | None = None) -> int:
    """Lower the consumers of ``fgraph`` (of the classes in ``only``, default all), nested first."""
    return _rewrite_fgraph(fgraph, _subset(LOWERERS, only), "innergraph.lower")


def _subset(rules: dict[type, Rule], only: Container[type] | None) -> dict[type, Rule]:
    return rules if only is None else {k: v for k, v in rules.items() if k in only}


def _rewrite_fgraph(fgraph: FunctionGraph, rules: dict[type, Rule], reason: str) -> int:
    count = 0
    declined: set[Any] = set()
    while True:  # new nodes (a lifted body's nested scans) are handled in the next round
        todo = [n for n in fgraph.toposort() if type(n.op) in rules and n not in declined]
        if not todo:
            return count
        for node in todo:
            if node in fgraph.apply_nodes and node not in declined:
                new = rules[type(node.op)](node.op, node.inputs)
                if new is None:
                    declined.add(node)
                    continue
                fgraph.replace_all(list(zip(node.outputs, new, strict=True)), reason=reason, import_missing=True)
                count += 1


def _lift_scan(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    native: NativeScan = op
    body = lift_graph(copy_scope(native.inner_outputs))
    param_types = [v.type for v in native.inner_inputs]
    assert all(v is param(i, t) for i, (v, t) in enumerate(zip(native.inner_inputs, param_types))), (
        f"{native}: PyTensor's Scan no longer builds its inner graph over NominalVariable(i) inputs"
    )
    function_type = InnerGraphType(param_types, [o.type for o in body])
    function = InnerGraph(function_type).make_node(*body).outputs[0]
    return Scan.like(native).make_node(function, *inputs).outputs


def _lower_scan(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    consumer: Scan = op
    lowered = Scan(consumer.layout, **{**consumer.flags(), "mode": already_rewritten(consumer.mode)})
    return native_scan(body_of(inputs[0]), lowered).make_node(*inputs[1:]).outputs


_already_rewritten: dict[int, tuple[Any, Any]] = {}


def already_rewritten(mode: Any) -> Any:
    """``mode`` for compiling a lowered body: without canonicalize and stabilize.

    The pipeline rewrote the body with the outer graph (canonicalize and stabilize
    reached its nodes) before lowering it; compiling the native Scan would run them
    over it again. ``None`` and ``"FAST_RUN"`` stand for what PyTensor's Scan makes of
    them (``Mode("cvm", "fast_run")``); ``"FAST_COMPILE"`` is kept as it is. One Mode
    object per original mode, so lowered Scans still share one native Op per body.
    """
    from pytensor.compile.mode import Mode, get_mode

    if mode == "FAST_COMPILE":
        return mode
    cached = _already_rewritten.get(id(mode))
    if cached is None or cached[0] is not mode:
        base = Mode("cvm", "fast_run") if mode in (None, "FAST_RUN") else get_mode(mode)
        cached = _already_rewritten[id(mode)] = (mode, base.excluding("canonicalize", "stabilize"))
    return cached[1]
