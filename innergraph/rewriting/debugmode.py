"""What PyTensor's ``DebugMode`` needs: the hidden variables left out of its records.

Terms
-----
equivalence tracker
    The feature ``DebugMode`` attaches to the graph it rewrites
    (``pytensor.compile.debug.debugmode._VariableEquivalenceTracker``, reachable as
    ``fgraph.equivalence_tracker``). It records every variable the graph ever held
    (``all_variables_ever``) and, for each variable a rewrite put in, the variables
    it replaced (``reasons``). ``DebugMode``'s linker evaluates *all* of them, the
    replaced ones included, and checks that each replacement computes the value of
    what it replaced.
runnable variable
    One the outer function could compute: every leaf it depends on (through the
    nodes' current inputs) is a graph input or a constant, and no inner-graph node
    lies on the way. Body nodes read params, which no storage holds; an unfolded
    consumer reads an inner-graph node's output, which never runs.

innergraph imports body nodes while it rewrites (lifting, unfolding) and folds them
away before linking, so the tracker has seen variables no linker may run:
``DebugMode`` then failed in ``map_storage`` (``assert isinstance(r, Constant)``
on a param). `forget_hidden` removes them from the tracker once the pipeline has
folded the bodies. A replacement of a forgotten variable keeps being checked
against what that one replaced: lifting a native Scan and lowering it back
(``native -> consumer -> native``) is checked as ``native -> native``, so
``DebugMode`` verifies innergraph's round trip numerically.
"""

from __future__ import annotations

from typing import Any

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.graph import InnerGraph

__all__ = ["forget_hidden"]

Reason = tuple[str, Variable, str, str]  # (rewrite, replaced variable, its graph, the new graph)


def forget_hidden(fgraph: FunctionGraph) -> int:
    """Drop the variables the outer function cannot run from ``fgraph``'s equivalence tracker; return how many.

    A no-op (0) for graphs without one (every mode but ``DebugMode``).
    """
    tracker = getattr(fgraph, "equivalence_tracker", None)
    if tracker is None:
        return 0
    runnable = _Runnable(fgraph)
    everything: list[Variable] = tracker.all_variables_ever
    kept = [v for v in everything if runnable(v)]
    reasons: dict[Variable, list[Reason]] = tracker.reasons
    for v in kept:
        if any(not runnable(r) for _, r, _, _ in reasons.get(v, ())):
            reasons[v] = _through_hidden(reasons, v, runnable)
    tracker.all_variables_ever = kept
    return len(everything) - len(kept)


class _Runnable:
    """``runnable(v)``: whether the outer function could compute ``v`` (memoized)."""

    def __init__(self, fgraph: FunctionGraph):
        self.inputs = set(fgraph.inputs)
        self.memo: dict[Variable, bool] = {}

    def __call__(self, var: Variable) -> bool:
        stack = [var]
        while stack:
            v = stack[-1]
            if v in self.memo:
                stack.pop()
                continue
            node = v.owner
            if node is None:
                self.memo[v] = v in self.inputs or isinstance(v, Constant)
                stack.pop()
            elif isinstance(node.op, InnerGraph):
                self.memo[v] = False
                stack.pop()
            else:
                todo = [i for i in node.inputs if i not in self.memo]
                if todo:
                    stack.extend(todo)
                    continue
                ok = all(self.memo[i] for i in node.inputs)
                self.memo.update(dict.fromkeys(node.outputs, ok))
                stack.pop()
        return self.memo[var]


def _through_hidden(reasons: dict[Variable, list[Reason]], new: Variable, runnable: Any) -> list[Reason]:
    """``reasons[new]`` with each replaced variable that cannot run replaced by what it replaced, recursively."""
    found: list[Reason] = []
    seen: set[Variable] = set()

    def visit(var: Variable, reason: str | None, new_graph: str | None) -> None:
        for why, old, old_graph, graph in reasons.get(var, ()):
            why = why if reason is None else f"{why}, then {reason}"
            graph = graph if new_graph is None else new_graph
            if runnable(old):
                found.append((why, old, old_graph, graph))
            elif old not in seen:
                seen.add(old)
                visit(old, why, graph)

    visit(new, None, None)
    return found
