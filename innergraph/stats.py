"""`graph_stats`: the same figures for vanilla PyTensor graphs and in-graph ones.

Terms
-----
outer node
    A node the linker executes (visible, not an inner-graph node).
hidden node
    A node that belongs to a body: an unfolded body in the graph, a folded `Body`,
    or the inner ``fgraph`` of PyTensor's own Scan / OpFromGraph. Nested bodies
    count too; a body shared by several consumers counts once.
body
    A distinct function variable, `Body`, or native inner ``fgraph``.
consumer
    A node whose Op runs a body; counted per kind (`consumer_kind`), nested ones
    included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pytensor.graph.basic import Apply, Constant, NominalVariable, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.fold import visible_nodes
from innergraph.graph import InnerGraph, is_function, scope_leaves, scope_toposort
from innergraph.types import Body

__all__ = ["CONSUMER_KINDS", "consumer_kind", "graph_stats"]

#: The consumer kinds always reported, even when zero.
CONSUMER_KINDS = ("scan", "ifelse", "call", "loop")


def consumer_kind(op: Any) -> str | None:
    """The consumer kind of an Op (``"scan"``, ``"ifelse"``, ``"call"``...) or None."""
    kind = getattr(type(op), "kind", None)
    if isinstance(kind, str):
        return kind
    from pytensor.compile.builders import OpFromGraph
    from pytensor.ifelse import IfElse
    from pytensor.scan.op import Scan

    for cls, name in ((Scan, "scan"), (IfElse, "ifelse"), (OpFromGraph, "call")):
        if isinstance(op, cls):
            return name
    return None


def graph_stats(graph: FunctionGraph | Any) -> dict[str, Any]:
    """Count nodes, bodies and consumers of a graph, vanilla or in-graph.

    Parameters
    ----------
    graph
        A `FunctionGraph`, or a compiled function (its ``maker.fgraph`` is used).

    Returns
    -------
    dict
        ``outer_nodes``, ``hidden_nodes``, ``bodies``, ``consumers`` (a dict by
        kind), ``unused_outputs`` (consumer outputs nobody uses) and
        ``unused_params`` (params a body never reads), plus ``total_nodes``.
    """
    fgraph = graph.maker.fgraph if hasattr(graph, "maker") else graph
    outer = list(visible_nodes(fgraph))
    counter = _Counter()
    counter.scope(outer, fgraph.clients, hidden=False)
    for node in fgraph.apply_nodes:  # unfolded bodies reached only through inner-graph nodes
        if isinstance(node.op, InnerGraph):
            counter.function(node.outputs[0])
    consumers = {k: 0 for k in CONSUMER_KINDS}
    consumers.update(counter.consumers)
    return {
        "outer_nodes": len(outer),
        "hidden_nodes": len(counter.hidden),
        "total_nodes": len(outer) + len(counter.hidden),
        "bodies": counter.bodies,
        "consumers": consumers,
        "unused_outputs": counter.unused_outputs,
        "unused_params": counter.unused_params,
    }


class _Counter:
    """Walks every scope once and accumulates the figures."""

    def __init__(self) -> None:
        self.seen: set[Any] = set()
        self.hidden: set[Apply] = set()
        self.bodies = 0
        self.unused_outputs = 0
        self.unused_params = 0
        self.consumers: Counter[str] = Counter()

    def scope(self, nodes: Iterable[Apply], clients: Any, hidden: bool) -> None:
        for node in nodes:
            if isinstance(node.op, InnerGraph):
                continue
            if hidden:
                self.hidden.add(node)  # a node shared by two bodies is one node
            kind = consumer_kind(node.op)
            if kind is None:
                continue
            self.consumers[kind] += 1
            self.unused_outputs += sum(not clients.get(o) for o in node.outputs)
            for inp in node.inputs:
                if is_function(inp):
                    self.function(inp)
            inner = getattr(node.op, "fgraph", None)
            if isinstance(inner, FunctionGraph):
                self.native(inner)

    def function(self, var: Variable) -> None:
        body = var.data if isinstance(var, Constant) else None
        key = body if isinstance(body, Body) else var
        if key in self.seen:
            return
        self.seen.add(key)
        outputs: Sequence[Variable] = body.outputs if body is not None else var.owner.inputs
        n_params = len(var.type.param_types)
        self.bodies += 1
        read = {v.id for v in scope_leaves(outputs) if isinstance(v, NominalVariable)}
        self.unused_params += n_params - len(read)
        nodes = scope_toposort(outputs)
        self.scope(nodes, _clients(nodes, outputs), hidden=True)

    def native(self, fgraph: FunctionGraph) -> None:
        if fgraph in self.seen:
            return
        self.seen.add(fgraph)
        self.bodies += 1
        self.unused_params += sum(not fgraph.clients.get(i) for i in fgraph.inputs)
        self.scope(fgraph.toposort(), fgraph.clients, hidden=True)


def _clients(nodes: Sequence[Apply], outputs: Sequence[Variable]) -> dict[Variable, list[Any]]:
    clients: dict[Variable, list[Any]] = {}
    for node in nodes:
        for i, v in enumerate(node.inputs):
            clients.setdefault(v, []).append((node, i))
    for k, out in enumerate(outputs):
        clients.setdefault(out, []).append(("output", k))
    return clients
