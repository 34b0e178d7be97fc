"""Whether a body rewritten with the outer graph still holds constant folding it would get alone.

A body the pipeline lifted is rewritten together with the outer graph (canonicalize
and stabilize reach its nodes there), so compiling it leaves those passes out
(`innergraph.lifting.rules.already_rewritten`, `innergraph.protocol.runtime.body_rewriter`).
That is only equivalent to vanilla PyTensor, which rewrites every inner graph on
its own, when every decision those passes took over the body's nodes comes out
the same in the shared graph. Constant folding's does not always: an Op may
decline to be folded because of its clients (`Alloc.do_constant_folding` declines
when a client could absorb the allocation or works in place on it), and in the
shared graph a constant-only expression is one node for every scope that computes
it (merged), with the clients of all of them. A zero matrix ``Alloc(0.0, 2, 2)``
that one body reads through ``ExtractDiag`` and another uses as an
``IncSubtensor`` buffer is then folded in neither; the first body keeps a zero
*expression* where, alone, it would hold a zero *constant* that canonicalize's
algebra (``local_0_dot_x``, ``local_mul_zero``, ``local_useless_inc_subtensor``)
removes with everything it multiplies. Specialize, which the compile still runs,
folds it later, but has none of that algebra.

Terms
-----
hidden fold
    A node of a body whose inputs are all constants and that the body's own
    graph would let constant folding fold (``op.do_constant_folding`` asked with
    the clients the node has inside the body, the body's outputs counting as
    outputs). Canonicalize and stabilize fold every such node of a graph they
    rewrite, so a body that holds one was not rewritten as it would be alone: a
    client elsewhere blocked the fold, or a rewrite after stabilize (a consumer
    rewrite inlining a constant argument) made it.

`has_hidden_fold` answers for a `Body`, once per body (``body.cache``). A lowered
body with a hidden fold is compiled with canonicalize (the pass that folds it and
holds the zero algebra; `innergraph.lifting.rules.already_rewritten`), a rewritten body
of the Python-thunk linkers with the whole rewriter
(`innergraph.protocol.runtime.body_rewriter`); all others keep the shortened rewrite.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import Output
from pytensor.graph.traversal import io_toposort

from innergraph.core.types import Body

__all__ = ["has_hidden_fold", "hidden_folds"]

_KEY = "hidden folds"


class _OutputClient:
    """Stands for the ``Output`` node a `FunctionGraph` gives each of its outputs."""

    def __init__(self, index: int):
        self.op = Output(index)


class _BodyClients:
    """The part of a `FunctionGraph` ``do_constant_folding`` reads: ``clients``, within one body."""

    def __init__(self, nodes: Iterable[Apply], outputs: Iterable[Variable]):
        self.clients: dict[Variable, list[tuple[Any, int]]] = {}
        for node in nodes:
            for i, v in enumerate(node.inputs):
                self.clients.setdefault(v, []).append((node, i))
        for i, v in enumerate(outputs):
            self.clients.setdefault(v, []).append((_OutputClient(i), 0))


def hidden_folds(outputs: Iterable[Variable]) -> list[Apply]:
    """The nodes between ``outputs`` and the params that constant folding would fold in this graph alone."""
    outputs = list(outputs)
    nodes = io_toposort([], outputs)
    candidates = [n for n in nodes if n.inputs and all(isinstance(v, Constant) for v in n.inputs)]
    if not candidates:
        return []
    graph = _BodyClients(nodes, outputs)
    return [n for n in candidates if n.op.do_constant_folding(graph, n)]


def has_hidden_fold(body: Body) -> bool:
    """Whether ``body`` holds a hidden fold (computed once per body)."""
    found = body.cache.get(_KEY)
    if found is None:
        found = body.cache[_KEY] = bool(hidden_folds(body.outputs))
    return bool(found)
