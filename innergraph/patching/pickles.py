"""What a pickled graph keeps of innergraph: only what it still holds.

A compiled function pickles its whole `FunctionGraph`, features included, and
both remember more than the graph: its ``clients`` an empty entry for each
variable pruned, `History` the replacements since its last
checkpoint, `DestroyHandler` and `ShapeFeature` entries (its caches) for
variables and nodes that rewrites removed, `MergeFeature` the constants it has seen... When innergraph
compiled the function, those memories include the in-graph forms the pipeline
went through (lifted consumers, inner-graph nodes, folded bodies), so a function
whose graph holds only PyTensor's Ops would still need innergraph to load.

Terms
-----
stale entry
    An entry of a feature's state (a key, an element, a history record) about a
    variable or node that is no longer in the graph and *mentions* innergraph: an
    innergraph Op or type, or a folded `Body`, anywhere among its ancestors
    (inner graphs of PyTensor's own Ops included).

While innergraph is installed, pickling a `FunctionGraph` first drops its
features' stale entries (`forget_innergraph`; registered with `copyreg`, undone by
`uninstall`). PyTensor's lazy `ShapeFeature` keeps only caches, keyed by node and
variable: a stale entry is dropped like any other, and the feature infers that
shape again if it is ever asked. Nothing the running
function reads is touched: stale entries are memories of rewriting, which is over.
What the graph itself holds (consumers, folded bodies) pickles as it is, through
`innergraph_pickle`, and loads without installing innergraph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytensor.graph.basic import AbstractApply, Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph, Output
from pytensor.graph.op import HasInnerGraph, Op
from pytensor.graph.type import Type
from pytensor.misc.ordered_set import OrderedSet

__all__ = ["forget_innergraph", "reduce_function_graph"]

_PACKAGE = __name__.rsplit(".", 2)[0] + "."  # "innergraph." (or "pytensor.innergraph." in a patched PyTensor): this module is <package>.patching.pickles


def reduce_function_graph(fgraph: FunctionGraph) -> str | tuple[Any, ...]:
    """``copyreg`` reducer of `FunctionGraph`: the default one, after `forget_innergraph`."""
    forget_innergraph(fgraph)
    return object.__reduce_ex__(fgraph, 2)


def forget_innergraph(fgraph: FunctionGraph) -> int:
    """Drop the stale entries of ``fgraph``'s features; return how many were dropped."""
    mentions = _Mentions()
    live_vars, live_nodes = fgraph.variables, fgraph.apply_nodes
    outputs = fgraph.outputs

    def stale(obj: Any) -> bool:
        if isinstance(obj, Variable):
            return obj not in live_vars and mentions(obj)
        if isinstance(obj, Apply):
            return obj not in live_nodes and not _output_marker(obj, outputs) and mentions.node(obj)
        if isinstance(obj, tuple | frozenset):
            return any(stale(x) for x in obj)
        node, var = getattr(obj, "node", None), getattr(obj, "var", None)  # a History record
        return (isinstance(node, Apply) and stale(node)) or (isinstance(var, Variable) and stale(var))

    dropped = _scrub(fgraph.clients, stale, depth=0)  # pruned variables keep an empty entry
    for feature in list(getattr(fgraph, "_features", [])):
        count = sum(_scrub(value, stale, depth=2) for name, value in vars(feature).items() if name != "fgraph")
        if count and hasattr(feature, "stale_droot"):
            feature.stale_droot = True  # DestroyHandler recomputes its roots on demand
        dropped += count
    return dropped


def _output_marker(node: Apply, outputs: list[Variable]) -> bool:
    """Whether ``node`` is the graph's dummy ``Output`` client of one of its ``outputs``.

    Those clients are in no ``apply_nodes``, yet live: PyTensor's Numba Scan
    conversion looks them up (``FunctionGraph.get_output_client``) when it loads
    a pickled Scan whose inner outputs mention innergraph (an in-graph conditional).
    """
    idx = getattr(node.op, "idx", None)
    return isinstance(node.op, Output) and isinstance(idx, int) and idx < len(outputs) and outputs[idx] is node.inputs[0]


def _scrub(container: Any, stale: Callable[[Any], bool], depth: int) -> int:
    """Remove stale keys, elements and records from ``container`` (in place), recursively."""
    if isinstance(container, dict):
        gone = [k for k, v in container.items() if stale(k) or stale(v)]
        for k in gone:
            del container[k]
        return len(gone) + sum(_scrub(v, stale, depth) for v in container.values())
    if isinstance(container, set | OrderedSet):
        gone = [x for x in container if stale(x)]
        for x in gone:
            container.discard(x)
        return len(gone)
    if isinstance(container, list):
        kept = [x for x in container if not stale(x)]
        count = len(container) - len(kept)
        container[:] = kept
        return count + sum(_scrub(x, stale, depth) for x in kept)
    if depth and hasattr(container, "__dict__") and not isinstance(container, Variable | Apply | FunctionGraph | Op | Type):
        return sum(_scrub(v, stale, depth - 1) for v in vars(container).values())  # PyTensor's AssocList
    return 0


class _Mentions:
    """Whether a variable's or node's graph mentions innergraph (memoized, iterative)."""

    def __init__(self) -> None:
        self.known: dict[Any, bool] = {}

    def __call__(self, var: Variable) -> bool:
        return self._walk(var)

    def node(self, node: Apply) -> bool:
        return self._walk(node)

    def _walk(self, start: Any) -> bool:
        stack: list[tuple[Any, bool]] = [(start, False)]
        while stack:
            item, expanded = stack.pop()
            if item in self.known:
                continue
            children = _children(item)
            if expanded or not children:
                own = _own_mention(item)
                self.known[item] = own or any(self.known.get(c, False) for c in children)
                continue
            stack.append((item, True))
            stack.extend((c, False) for c in children if c not in self.known)
        return self.known[start]


def _children(item: Any) -> list[Any]:
    if isinstance(item, Variable):
        return [item.owner] if item.owner is not None else []
    if isinstance(item, AbstractApply):  # a node, or a node of a native Op's frozen inner graph
        inner = list(item.op.inner_outputs) if isinstance(item.op, HasInnerGraph) else []
        return list(item.inputs) + inner
    return []


def _own_mention(item: Any) -> bool:
    if isinstance(item, Variable):
        data = item.data if isinstance(item, Constant) else None
        return _is_innergraph(item.type) or _is_innergraph(data)
    return isinstance(item, AbstractApply) and _is_innergraph(item.op)


def _is_innergraph(obj: Any) -> bool:
    return obj is not None and type(obj).__module__.startswith(_PACKAGE)
