"""`graph_stats`: the same figures for vanilla PyTensor graphs and in-graph ones.

Terms
-----
outer node
    A node the linker executes (visible, not an inner-graph node). A `LinkArgument`
    (a constant the Numba linker passes as an argument,
    `innergraph.rewriting.link_arguments`) is not one: the linker drops it.
hidden node
    A node that belongs to a body: an unfolded body in the graph, a folded `Body`,
    or the inner ``fgraph`` of PyTensor's own Scan / OpFromGraph. Nested bodies
    count too; a body shared by several consumers counts once.
body
    A distinct function variable, `Body`, or native inner ``fgraph``.
consumer
    A node whose Op runs a body; counted per kind (`consumer_kind`), nested ones
    included. PyTensor 3.3's own kernels are not: a fused elementwise loop
    (``FusedElemwise``), an elementwise node with native scalar inputs
    (``ScalarizedElemwise``), a scalarized read, reduction or join, an Op with its
    core shape. They are ``FinalizedOpFromGraph`` subclasses made after every rewrite
    for the linker, which runs each as one node; counted as calls, an innergraph graph
    whose numbers are scalar arguments (`innergraph.rewriting.link_arguments`) would
    count three hidden nodes and one body per scalarized node that vanilla, numbers
    baked in, does not have.
unread buffer
    A loop output that is a state's whole buffer (a mit-mot, mit-sot or sit-sot
    trace) longer than the rows its taps need, which nothing reads after the loop:
    the loop allocates and fills it for nobody (PyTensor issue #1687).
dead output
    Any other consumer output nobody reads. An untraced state's final value that
    nobody reads is neither: the loop carries that value anyway, at the cost of
    one value, not one per step; nor is a state's buffer that holds only the rows
    its taps need (a circular buffer after PyTensor's save-memory pass: a mit-sot
    carried with its window).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, cast

from pytensor.graph.basic import Apply, Constant, NominalVariable, Variable
from pytensor.graph.fg import AbstractFunctionGraph, FunctionGraph

from innergraph.core.fold import visible_nodes
from innergraph.core.graph import InnerGraph, is_function, scope_leaves, scope_toposort
from innergraph.core.types import Body
from innergraph.ops.link_argument import LinkArgument
from innergraph.protocol.slots import form_of

__all__ = ["CONSUMER_KINDS", "consumer_kind", "graph_stats", "unread_buffers"]

#: The consumer kinds always reported, even when zero.
CONSUMER_KINDS = ("scan", "ifelse", "call", "loop")


def consumer_kind(op: Any) -> str | None:
    """The consumer kind of an Op (``"scan"``, ``"ifelse"``, ``"call"``...) or None.

    A consumer registered with `innergraph.protocol.slots.register_consumer` whose class sets
    no ``kind`` is ``"other"``: its bodies are counted like any consumer's.
    """
    kind = getattr(type(op), "kind", None)
    if isinstance(kind, str):
        return kind
    from pytensor.compile.builders import FinalizedOpFromGraph, OpFromGraph

    if isinstance(op, FinalizedOpFromGraph):
        return None  # one of PyTensor's kernels (module docstring): a node, not a body's consumer
    from pytensor.conditional.op import IfElse, LazyIfElse
    from pytensor.scan.op import Scan


    for cls, name in ((Scan, "scan"), (IfElse, "ifelse"), (LazyIfElse, "ifelse"), (OpFromGraph, "call")):
        if isinstance(op, cls):
            return name
    return "other" if form_of(op) is not None else None


def unread_buffers(graph: FunctionGraph | Any) -> list[tuple[Apply, int]]:
    """The unread buffers of a graph (nested scopes included), as ``(loop node, output index)``.

    Parameters
    ----------
    graph
        A `FunctionGraph`, or a compiled function (its ``maker.fgraph`` is used).
    """
    return _count(graph).unread


def _count(graph: FunctionGraph | Any) -> _Counter:
    fgraph = graph.maker.fgraph if hasattr(graph, "maker") else graph
    counter = _Counter()
    counter.outer = [node for node in visible_nodes(fgraph) if not isinstance(node.op, LinkArgument)]
    counter.scope(counter.outer, fgraph.clients, hidden=False)
    for node in fgraph.apply_nodes:  # unfolded bodies reached only through inner-graph nodes
        if isinstance(node.op, InnerGraph):
            counter.function(node.outputs[0])
    return counter


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
        kind), ``dead_outputs`` and ``unread_buffers`` (see the module
        docstring; ``dead_outputs_by_kind`` splits the first by consumer
        kind), ``unused_outputs`` (their sum: consumer outputs nobody
        uses that cost something) and ``unused_params`` (params a body never
        reads), plus ``total_nodes``.
    """
    counter = _count(graph)
    outer = counter.outer
    consumers = {k: 0 for k in CONSUMER_KINDS}
    consumers.update(counter.consumers)
    return {
        "outer_nodes": len(outer),
        "hidden_nodes": len(counter.hidden),
        "total_nodes": len(outer) + len(counter.hidden),
        "bodies": counter.bodies,
        "consumers": consumers,
        "unused_outputs": counter.dead_outputs + counter.unread_buffers,
        "dead_outputs": counter.dead_outputs,
        "dead_outputs_by_kind": dict(counter.dead_by_kind),
        "unread_buffers": counter.unread_buffers,
        "unused_params": counter.unused_params,
    }


class _Counter:
    """Walks every scope once and accumulates the figures."""

    def __init__(self) -> None:
        self.seen: set[Any] = set()
        self.outer: list[Apply] = []
        self.hidden: set[Apply] = set()
        self.bodies = 0
        self.dead_outputs = 0
        self.unread: list[tuple[Apply, int]] = []
        self.dead_by_kind: Counter[str] = Counter()
        self.unread_buffers = 0
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
            self.count_unused(node, clients)
            for inp in node.inputs:
                if is_function(inp):
                    self.function(inp)
            for inner in _native_inner_graphs(node.op):
                self.native(inner)

    def count_unused(self, node: Apply, clients: Any) -> None:
        kinds = _output_kinds(node)
        for i, (out, (kind, buffer, rows)) in enumerate(zip(node.outputs, kinds, strict=True)):
            if clients.get(out):
                continue
            if kind == "untraced" or kind == "state" and _fits(buffer, rows):
                continue  # carried anyway: one value, or the rows its taps need (a circular buffer)
            if kind == "state":
                self.unread_buffers += 1
                self.unread.append((node, i))
            else:
                self.dead_outputs += 1
                self.dead_by_kind[consumer_kind(node.op) or "other"] += 1

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

    def native(self, fgraph: AbstractFunctionGraph) -> None:
        if fgraph in self.seen:
            return
        self.seen.add(fgraph)
        self.bodies += 1
        self.unused_params += sum(not fgraph.clients.get(i) for i in fgraph.inputs)
        self.scope(fgraph.toposort(), fgraph.clients, hidden=True)


def _native_inner_graphs(op: Any) -> list[AbstractFunctionGraph]:
    """The inner graphs of a native Op (frozen since PyTensor 3.3): a Scan's or an OpFromGraph's, a ``LazyIfElse``'s two branches."""
    from pytensor.graph.op import HasMultipleInnerGraph

    if not isinstance(op, HasMultipleInnerGraph):
        return []
    return [g for g in op.inner_graphs.values() if isinstance(g, AbstractFunctionGraph)]


def _clients(nodes: Sequence[Apply], outputs: Sequence[Variable]) -> dict[Variable, list[Any]]:
    clients: dict[Variable, list[Any]] = {}
    for node in nodes:
        for i, v in enumerate(node.inputs):
            clients.setdefault(v, []).append((node, i))
    for k, out in enumerate(outputs):
        clients.setdefault(out, []).append(("output", k))
    return clients


def _scan_info(op: Any) -> Any:
    """The `ScanInfo` of a native or in-graph Scan, else None."""
    info = getattr(op, "info", None)
    layout = getattr(op, "layout", None)
    found = info if info is not None else getattr(layout, "info", None)
    return found if hasattr(found, "mit_mot_in_slices") else None


def _output_kinds(node: Apply) -> list[tuple[str, Variable | None, int]]:
    """Per output of ``node``: ``("state", buffer, rows its taps need)``, ``("untraced", ...)`` or ``("other", ...)``."""
    info = _scan_info(node.op)
    if info is None:
        return [("other", None, 0)] * len(node.outputs)
    first = 1 if is_function(node.inputs[0]) else 0  # the in-graph Scan's function comes before n_steps
    buffers = node.inputs[first + 1 + info.n_seqs :]
    taps = [*info.mit_mot_in_slices, *info.mit_sot_in_slices, *info.sit_sot_in_slices]
    kinds: list[tuple[str, Variable | None, int]] = []
    for i, in_taps in enumerate(taps):
        out_taps = info.mit_mot_out_slices[i] if i < info.n_mit_mot else (0,)
        rows = max(*in_taps, *out_taps) - min(in_taps) + 1 if i >= info.n_mit_mot else -1  # a mit-mot's is never short
        kinds.append(("state", buffers[i], rows))
    kinds += [("other", None, 0)] * info.n_nit_sot
    kinds += [("untraced", None, 0)] * info.n_untraced_sit_sot
    return kinds


def _fits(buffer: Variable | None, rows: int) -> bool:
    """Whether ``buffer`` is known to hold no more than ``rows`` rows (a circular buffer after save-memory)."""
    if buffer is None or rows < 0:
        return False
    length = getattr(buffer.type, "shape", (None,))[0] if getattr(buffer.type, "ndim", 0) else None
    if length is None:
        from pytensor.tensor.basic import get_scalar_constant_value
        from pytensor.tensor.exceptions import NotScalarConstantError

        try:
            length = int(get_scalar_constant_value(cast(Any, buffer).shape[0]))
        except (NotScalarConstantError, ValueError, TypeError):
            return False
    return length <= rows
