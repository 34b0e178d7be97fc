"""Fold inner-graph nodes into constants, so hidden subgraphs leave the outer graph.

Terms
-----
visible node
    A node the outer function executes: reachable from the graph outputs without
    passing through an inner-graph node's inputs.
hidden node
    Every other node of the graph: it belongs to some body. Hidden nodes are
    rewritten with the outer graph but never executed or destroyed by it.
always-computed node
    A node of a scope that every evaluation of the scope runs: one not reached
    only through a branch of PyTensor's own ``IfElse``, which the VM evaluates
    lazily (for the outer function, a visible node that every call runs).
folding
    Replacing a function variable that a *visible* consumer reads by a `Constant`
    whose data is the `Body`. An inner-graph node over a closed body is a
    compile-time constant, so this is ordinary constant folding, done once
    rewriting of bodies is over. Afterwards the hidden nodes are unreachable and
    `FunctionGraph` prunes them: no linker ever sees them.

Why fold instead of only filtering the schedule: PyTensor's CVM and lazy VM look
up ``var.owner`` for every input of a scheduled node, so a consumer cannot read a
variable whose owner is not scheduled. See ``design/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.conditional.op import IfElse as LazyIfElse

from innergraph.core.errors import FreeVariableError, ParamError
from innergraph.core.graph import InnerGraph, body_of, is_function, scope_toposort, verify_closed
from innergraph.core.instantiate import NodeTable, copy_scope, substitute
from innergraph.core.types import Body, is_folded

__all__ = [
    "always_computed",
    "fold_function",
    "fold_inner_graphs",
    "fold_scope",
    "folded_bodies",
    "folded_in_order",
    "has_inner_graphs",
    "reachable",
    "unfold_inner_graphs",
    "visible_in_order",
    "visible_nodes",
]


def has_inner_graphs(fgraph: FunctionGraph) -> bool:
    """Whether ``fgraph`` still contains an unfolded inner-graph node."""
    return any(isinstance(node.op, InnerGraph) for node in fgraph.apply_nodes)


def visible_nodes(fgraph: FunctionGraph) -> set[Apply]:
    """The nodes the outer function executes (inner-graph nodes excluded)."""
    return set(visible_in_order(fgraph))


def visible_in_order(fgraph: FunctionGraph) -> list[Apply]:
    """`visible_nodes` in the order a walk from the outputs (in input order) finds them.

    The order depends on the graph alone, never on hashes or ids: a rewrite that
    iterates over visible nodes (and replaces some) does so through this.
    """
    return reachable(fgraph.outputs, lambda node: node.inputs)


def always_computed(outputs: Sequence[Variable]) -> set[Apply]:
    """The nodes of ``outputs``' scope that every evaluation runs: none only reached through a lazy branch.

    PyTensor's own ``IfElse`` evaluates only the branch it takes (in the VM); the
    walk follows its condition alone. For the outer function pass
    ``fgraph.outputs``; for a body, its outputs.
    """
    return set(reachable(outputs, lambda node: node.inputs[:1] if isinstance(node.op, LazyIfElse) else node.inputs))


def reachable(outputs: Sequence[Variable], follow: Callable[[Apply], Sequence[Variable]]) -> list[Apply]:
    """The nodes reached from ``outputs`` through ``follow(node)``, inner-graph nodes excluded, in the order found."""
    seen: dict[Apply, None] = {}
    stack = [o.owner for o in reversed(outputs) if o.owner is not None]
    while stack:
        node = stack.pop()
        if node in seen or isinstance(node.op, InnerGraph):
            continue
        seen[node] = None
        stack.extend(v.owner for v in reversed(follow(node)) if v.owner is not None)
    return list(seen)


def fold_inner_graphs(fgraph: FunctionGraph, reason: str = "fold_inner_graphs") -> int:
    """Fold every function variable read by a visible node; return how many.

    Idempotent: a graph without inner-graph nodes is left untouched.
    """
    if not has_inner_graphs(fgraph):
        return 0
    replacements: dict[Variable, Variable] = {}
    for node in visible_in_order(fgraph):
        for var in node.inputs:
            if is_function(var) and not isinstance(var, Constant) and var not in replacements:
                body = body_of(var)
                _check_still_closed(body, reason)
                replacements[var] = Constant(var.type, body, name=var.name)
    fgraph.replace_all(list(replacements.items()), reason=reason, import_missing=True)
    return len(replacements)


def _check_still_closed(body: Body, reason: str) -> None:
    try:
        verify_closed(body.type, body.outputs)
    except (FreeVariableError, ParamError) as err:
        raise AssertionError(
            f"A rewrite broke the closure of a body before {reason}: {err}. This is an "
            "innergraph bug (a rewrite combined nodes of different bodies); please report it."
        ) from err


def folded_bodies(outputs: Iterable[Variable]) -> list[tuple[Constant, Body]]:
    """Each distinct folded body reachable from ``outputs``, outer ones first."""
    found: dict[Body, Constant] = {}
    stack = [list(outputs)]
    while stack:
        for node in scope_toposort(stack.pop()):
            for var in node.inputs:
                if not is_function(var):
                    continue
                if isinstance(var, Constant) and var.data not in found:
                    found[var.data] = var
                    stack.append(list(var.data.outputs))
                elif var.owner is not None and isinstance(var.owner.op, InnerGraph):
                    stack.append(list(var.owner.inputs))
    return [(c, b) for b, c in found.items()]


def folded_in_order(fgraph: FunctionGraph) -> list[Constant]:
    """The folded functions that nodes of ``fgraph`` read, in the order they entered the graph.

    ``fgraph.clients`` keeps that order (``fgraph.apply_nodes`` is a set, whose
    order follows ids): unfolding them in it gives the same graph on every run.
    """
    return [
        var for var, uses in fgraph.clients.items() if uses and is_folded(var)
    ]


def fold_function(function: Variable) -> Variable:
    """``function`` folded into a `Constant` holding its `Body` (unchanged if folded)."""
    if isinstance(function, Constant):
        return function
    return Constant(function.type, body_of(function), name=function.name)


def fold_scope(outputs: Sequence[Variable]) -> list[Variable]:
    """``outputs`` with every nested (unfolded) function variable of this scope folded."""
    replace: dict[Variable, Variable] = {}
    for node in scope_toposort(outputs):
        for var in node.inputs:
            owner = var.owner
            if owner is not None and isinstance(owner.op, InnerGraph) and var not in replace:
                replace[var] = fold_function(var)
    return substitute(outputs, replace) if replace else list(outputs)


def unfold_inner_graphs(fgraph: FunctionGraph, reason: str = "unfold_inner_graphs") -> int:
    """Unfold every folded function that a node of ``fgraph`` reads; return how many.

    Each folded body becomes an inner-graph node over a private copy of its nodes,
    so the rewriter sees and rewrites it (the `Body` itself is never mutated).
    Bodies nested in unfolded ones are unfolded too. The copies are made through a
    `NodeTable` of ``fgraph``: a node that an equal node of the graph or of an
    earlier copy already computes is not copied again, so what `MergeOptimizer`
    would merge after the import (bodies built separately reading the same params,
    the same small constants) is shared from the start.
    """
    total = 0
    table = NodeTable(fgraph)
    while True:
        replacements: dict[Variable, Variable] = {}
        for var in folded_in_order(fgraph):
            body = var.data
            outputs = copy_scope(body.outputs, table=table)
            op = InnerGraph(body.type)
            replacements[var] = table.node(op, outputs, partial(op.make_node, *outputs)).outputs[0]
        if not replacements:
            return total
        fgraph.replace_all(list(replacements.items()), reason=reason, import_missing=True)
        total += len(replacements)
