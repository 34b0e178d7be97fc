"""Elemwise fusion one scope at a time.

PyTensor's ``elemwise_fusion`` builds a multi-output ``Composite`` from *sibling*
nodes. Run over a graph where two bodies share nodes, it would build one node
that reads params of both and break closure (see ``design/architecture.md``), so
innergraph folds bodies before it. This rewrite then fuses each folded body on
its own: a private copy of the body, its nested bodies first (each fused in its
own scope), replaced in the graph by a new constant. It is registered with the
tags of PyTensor's fusion, so it runs exactly when fusion does. A body fusion
cannot change — at most one elementwise node, not a ``Composite`` and not read by a
reduction, and no nested body — is kept as it is, without the copy.
"""

from __future__ import annotations

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar import Composite
from pytensor.tensor.elemwise import CAReduce, Elemwise

from innergraph.core import compat
from innergraph.core.fold import fold_inner_graphs, folded_in_order
from innergraph.core.graph import is_function, params, scope_toposort
from innergraph.core.instantiate import private_fgraph, substitute
from innergraph.core.interning import intern_body
from innergraph.core.types import Body, is_rewritten, mark_rewritten

__all__ = ["fuse_bodies", "fuse_body"]


def fuse_body(body: Body, memo: dict[Body, Body] | None = None) -> Body:
    """A copy of ``body`` with elemwise fusion applied inside it (and its nested bodies).

    Cached on ``body`` per fusion rewriter: a body interned across compilations
    (`innergraph.core.interning`) is fused once per process, and a fused copy of a
    rewritten body is itself interned.
    """
    memo = {} if memo is None else memo
    if body in memo:
        return memo[body]
    fusion = compat.scope_safe_fusion()
    key = ("fused", fusion, is_rewritten(body))  # an interned body was fused by an earlier compilation
    known = body.cache.get(key)
    if known is None:
        known = body.cache[key] = _fused(body, fusion, memo)
    memo[body] = known
    return known


def _fused(body: Body, fusion: object, memo: dict[Body, Body]) -> Body:
    if not _fusion_may_apply(body):
        return body
    fgraph = private_fgraph(body)
    fold_inner_graphs(fgraph, reason="fuse_body")
    _fuse_folded(fgraph, memo)
    fusion.rewrite(fgraph)  # type: ignore[attr-defined]
    outputs = substitute(fgraph.outputs, dict(zip(fgraph.inputs, params(body.param_types), strict=True)))
    fused = Body(body.type, outputs)
    if is_rewritten(body):
        fused = intern_body(mark_rewritten(fused))
    # Fusion is idempotent: a body compiled later runs the fusion pass again over its
    # nested bodies, which are fused copies already (two fusions per nested body before).
    fused.cache.setdefault(("fused", fusion, is_rewritten(fused)), fused)
    return fused


def _fusion_may_apply(body: Body) -> bool:
    """Whether PyTensor's fusion rewrites could change ``body`` (conservatively: True if unsure).

    They fuse two or more elementwise nodes (chained, or siblings sharing an input),
    a reduction of an elementwise result, or rewrite a ``Composite``.
    """
    nodes = scope_toposort(body.outputs)
    elemwise = [n for n in nodes if isinstance(n.op, Elemwise)]
    if len(elemwise) > 1 or any(isinstance(n.op.scalar_op, Composite) for n in elemwise):
        return True
    if any(is_function(v) for n in nodes for v in n.inputs):
        return True
    return any(isinstance(n.op, CAReduce) and any(v.owner in elemwise for v in n.inputs) for n in nodes)


def _fuse_folded(fgraph: FunctionGraph, memo: dict[Body, Body]) -> int:
    replacements: dict[Variable, Variable] = {}
    for var in folded_in_order(fgraph):
        fused = fuse_body(var.data, memo)
        if fused is not var.data:
            replacements[var] = Constant(var.type, fused, name=var.name)
    fgraph.replace_all(list(replacements.items()), reason="fuse_bodies", import_missing=True)
    return len(replacements)


def fuse_bodies(fgraph: FunctionGraph) -> int:
    """Fuse elemwise chains inside every folded body of ``fgraph``, one scope at a time."""
    return _fuse_folded(fgraph, {})
