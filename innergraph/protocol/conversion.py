"""The engine of lifting and lowering: rule tables keyed by Op class, and the passes applying them.

Terms
-----
rule
    ``rule(op, inputs) -> outputs`` (or None: not converted): the in-graph form of
    a native node (a *lift* rule, in `LIFTERS`) or the native form of a consumer
    (a *lower* rule, in `LOWERERS`).

This module knows no consumer: `innergraph.lifting.rules` registers the rules of
innergraph's own (Scan, IfElse, Call, OpFromGraph), and every name here is
re-exported there. A consumer module that needs to lift a graph (the in-graph
Scan's derivatives) imports `lift_graph` from here, so no consumer imports
`innergraph.lifting.rules`, which imports the consumers.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from contextvars import ContextVar
from typing import Any

from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op

from innergraph.core.fold import fold_scope
from innergraph.core.graph import scope_toposort

__all__ = [
    "LIFTERS",
    "LOWERERS",
    "PIPELINE_LIFTS",
    "PIPELINE_LOWERS",
    "Rule",
    "compiling_mode",
    "lift",
    "lift_graph",
    "lifted_bodies",
    "lower",
    "lower_graph",
]

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
    the rewrite pipeline (see ``design/architecture.md``). Within `lift` (a lift rule
    lifting a body's nested nodes), the rules are those `lift` was given.
    """
    return fold_scope(_rewrite_graph(outputs, _active_lifters.get() or LIFTERS, only))


def lower_graph(outputs: Sequence[Variable]) -> list[Variable]:
    """``outputs`` with every consumer of one scope lowered to its native node."""
    return _rewrite_graph(outputs, LOWERERS)


def lift(fgraph: FunctionGraph, only: Container[type] | None = None, rules: dict[type, Rule] | None = None) -> int:
    """Lift the native nodes of ``fgraph`` (of the classes in ``only``, default all).

    ``rules`` adds or replaces rules of `LIFTERS` for this call (the pipeline's own
    `OpFromGraph` policy). The bodies lifted meanwhile lift their nested nodes with
    the same rules.
    """
    chosen = _subset({**LIFTERS, **(rules or {})}, only)
    token = _active_lifters.set(chosen)
    try:
        return _rewrite_fgraph(fgraph, chosen, "innergraph.lift")
    finally:
        _active_lifters.reset(token)


def lower(fgraph: FunctionGraph, only: Container[type] | None = None) -> int:
    """Lower the consumers of ``fgraph`` (of the classes in ``only``, default all), nested first."""
    return _rewrite_fgraph(fgraph, _subset(LOWERERS, only), "innergraph.lower")


def _subset(rules: dict[type, Rule], only: Container[type] | None) -> dict[type, Rule]:
    return rules if only is None else {k: v for k, v in rules.items() if k in only}


#: Native Scan Op -> the function its body became, within one `_rewrite_fgraph`.
lifted_bodies: ContextVar[dict[Any, Variable] | None] = ContextVar("innergraph_lifted_bodies", default=None)


#: The mode compiling the graph a pass converts (PyTensor's active mode, `compiling_mode`).
_compiling: ContextVar[Any] = ContextVar("innergraph_compiling_mode", default=None)


def compiling_mode() -> Any:
    """The mode compiling the graph being converted: PyTensor's active mode in a pass, else the default mode.

    A rule reads it for what the native form must reproduce (the rewrites a lowered
    Scan's inner graph still needs, whether a Scan's own mode differs from it).
    """
    from pytensor.compile.mode import get_mode
    from pytensor.configdefaults import config

    mode = _compiling.get()
    return get_mode(config.mode) if mode is None else mode


#: The rules `lift` applies, so that the nested nodes of the bodies it lifts follow them too.
_active_lifters: ContextVar[dict[type, Rule] | None] = ContextVar("innergraph_active_lifters", default=None)


def _rewrite_fgraph(fgraph: FunctionGraph, rules: dict[type, Rule], reason: str) -> int:
    from pytensor.graph.rewriting.basic import get_active_mode

    token = lifted_bodies.set({})
    mode_token = _compiling.set(get_active_mode(fgraph))
    try:
        return _rewrite_nodes(fgraph, rules, reason)
    finally:
        _compiling.reset(mode_token)
        lifted_bodies.reset(token)


def _rewrite_nodes(fgraph: FunctionGraph, rules: dict[type, Rule], reason: str) -> int:
    count = 0
    declined: set[Any] = set()
    while True:  # new nodes (a lifted body's nested scans) are handled in the next round
        if not any(type(n.op) in rules and n not in declined for n in fgraph.apply_nodes):
            return count  # a look at the node set, not a sort of it (most graphs have nothing to convert)
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
