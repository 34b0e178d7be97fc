"""Lazy shapes for the hidden nodes the consumer rewrites import.

Terms
-----
param-bound node
    A node, other than an inner-graph node, that reads a body's param (a
    ``NominalVariable`` that is not an input of the graph) or the output of a
    param-bound node. Its value exists only inside a body, so it is hidden: no
    node the outer function executes can read it. (An inner-graph node's output
    is a closed function, which is not param-bound.) The converse does not hold:
    a body node computing from constants alone is hidden but not param-bound,
    and keeps PyTensor's shape inference.
lazy shape
    The shape PyTensor's ``ShapeFeature`` gives a node it cannot infer:
    ``Shape_i(i)(out)`` for each dimension the type leaves open (its
    ``default_infer_shape``). Always true, only less informative than an
    ``infer_shape``'s, and cheap: no broadcast-shape graph per ``Elemwise``.
lowered scope
    The nodes of a body that the lowering pass (``innergraph_lower``, 1.59)
    turns into a native node's inner graph: every scope a loop consumer of
    `innergraph.conversion.PIPELINE_LOWERS` reads, nested scopes included.

Why: the consumer rewrites (`innergraph.rewriting.simplify`) build new bodies,
and each new node gets a shape inference when the outer graph imports it; on
PyMC's CustomDist GARCH that was most of ``push_out_sequence_work``'s time. No
pass between them and the lowering reads a shape of a hidden node, and the
lowering removes the loop bodies from the graph. So while the consumer rewrites
run (`lazy_hidden_shapes`), param-bound nodes get lazy shapes; when they end,
those still in the graph outside a lowered scope (a call's or a conditional's
body, which canonicalize's successors still rewrite) get PyTensor's own
inference after all, inputs first. Only the ``ShapeFeature`` instance of the
graph being rewritten is touched, and only for the block.

Visible nodes keep PyTensor's shapes, but one whose outputs' types fix every
dimension gets them without an ``infer_shape`` call: ``ShapeFeature.set_shape``
turns each static dimension into the constant of its length whatever the
inference returned, so the result is the same (on the GARCH models, the pushed-out
row-wise work, vectors of the series' static length: about 4 ms of the
CustomDist GARCH's compilation).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pytensor.graph.basic import Apply, NominalVariable, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.conversion import PIPELINE_LOWERS
from innergraph.graph import InnerGraph, is_function

__all__ = ["lazy_hidden_shapes"]


class _ParamBound:
    """Which variables of one graph are param-bound (memoized; nodes are asked in import order)."""

    def __init__(self, fgraph: FunctionGraph):
        self._inputs = set(fgraph.inputs)
        self._known: dict[Variable, bool] = {}

    def node(self, node: Apply) -> bool:
        """Whether ``node`` is param-bound (its inputs' answers are memoized on the way)."""
        if isinstance(node.op, InnerGraph):
            return False
        return any(self.variable(v) for v in node.inputs)

    def variable(self, var: Variable) -> bool:
        known = self._known.get(var)
        if known is not None:
            return known
        stack = [var]  # iterative: a variable imported before the block may sit on a long chain
        while stack:
            top = stack[-1]
            if top in self._known:
                stack.pop()
                continue
            owner = top.owner
            if owner is None:
                self._known[top] = isinstance(top, NominalVariable) and top not in self._inputs
                stack.pop()
                continue
            pending = [v for v in owner.inputs if v not in self._known]
            if pending and not isinstance(owner.op, InnerGraph):
                stack.extend(pending)
                continue
            stack.pop()
            bound = self.node(owner)
            for out in owner.outputs:
                self._known[out] = bound
        return self._known[var]


def _lazy_on_import(feature: Any, bound: _ParamBound, lazy: list[Apply]) -> Any:
    """``feature.on_import``, giving param-bound nodes lazy shapes (recorded in ``lazy``)."""
    infer = type(feature).on_import

    def on_import(fgraph: FunctionGraph, node: Apply, reason: Any) -> None:
        if node.outputs[0] in feature.shape_of:  # a revert
            infer(feature, fgraph, node, reason)
            return
        if not bound.node(node):  # visible: PyTensor's shapes, which a static type fixes without inferring
            if not _static(node):
                infer(feature, fgraph, node, reason)
                return
            for r in node.inputs:
                feature.init_r(r)
            for r in node.outputs:
                feature.set_shape(r, r.type.shape)  # each dimension the constant ``set_shape`` makes of a static one
            return
        for r in node.inputs:
            feature.init_r(r)
        for r, shape in zip(node.outputs, feature.default_infer_shape(fgraph, node, ()), strict=True):
            feature.set_shape(r, shape)
        lazy.append(node)

    return on_import


def _static(node: Apply) -> bool:
    """Whether every output of ``node`` is a tensor whose type fixes its whole shape.

    PyTensor's ``ShapeFeature.set_shape`` gives such a dimension the constant of its
    static length whatever ``infer_shape`` returned, so the inference (a
    broadcast-shape graph per ``Elemwise``) can be skipped with the same result.
    """
    return all(isinstance(getattr(r.type, "shape", None), tuple) and None not in r.type.shape for r in node.outputs)


def _outside_lowered_scopes(fgraph: FunctionGraph) -> list[Apply]:
    """The graph's nodes outside every lowered scope, inputs before the nodes reading them."""
    order: list[Apply] = []
    seen: set[Apply] = set()
    stack: list[tuple[Apply, bool]] = [(v.owner, False) for v in reversed(fgraph.outputs) if v.owner is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        lowered = type(node.op) in PIPELINE_LOWERS
        for v in reversed(node.inputs):
            if v.owner is not None and v.owner not in seen and not (lowered and is_function(v)):
                stack.append((v.owner, False))
    return order


def _infer_again(fgraph: FunctionGraph, feature: Any, lazy: list[Apply]) -> None:
    """PyTensor's own shapes for the lazily shaped nodes that outlive the lowering, inputs first."""
    remaining = {node for node in lazy if node in fgraph.apply_nodes}
    if not remaining:
        return
    infer = type(feature).on_import
    for node in _outside_lowered_scopes(fgraph):
        if node in remaining:
            for r in node.outputs:
                feature.shape_of.pop(r, None)
            infer(feature, fgraph, node, "lazy_hidden_shapes")


@contextmanager
def lazy_hidden_shapes(fgraph: FunctionGraph) -> Iterator[None]:
    """In this block, param-bound nodes ``fgraph`` imports get lazy shapes (see the module docstring).

    When the block ends, those still in the graph outside a lowered scope are
    given PyTensor's own inference. Does nothing when the graph has no shape
    feature (or its ``on_import`` is already replaced: blocks do not nest).
    """
    feature = getattr(fgraph, "shape_feature", None)
    if feature is None or "on_import" in vars(feature):
        yield
        return
    lazy: list[Apply] = []
    feature.on_import = _lazy_on_import(feature, _ParamBound(fgraph), lazy)
    try:
        yield
    finally:
        del feature.on_import
        _infer_again(fgraph, feature, lazy)
