"""Hand PyTensor's native Ops to a linker that cannot run innergraph's consumers.

Terms
-----
hand over
    Just before linking (`innergraph.patching.linker.schedule`), replace every
    consumer the target linker cannot run (`innergraph.core.dispatch.runs`) by the
    native node it stands for: an in-graph IfElse by PyTensor's IfElse over the
    instantiated branches, a `Call` by an `OpFromGraph`, an in-graph Scan by the
    very native Scan the consumer runs in the Python-thunk linkers
    (`innergraph.ops.scan.native_scan`, same body, same mode).
nested first
    A consumer's body may hold consumers of its own. A JIT linker converts a body
    with the same dispatch as the outer graph (inside a native Op, or inside a
    consumer it does run), so every body reachable from the graph is handed over
    first, innermost bodies first, into a *new* folded `Body` (nothing a user
    built is mutated); then the consumer reading it is lowered or rebuilt.
    PyTensor's own Ops with an inner graph (a Scan the pipeline lowered, an
    `OpFromGraph`) may hold consumers too: such a node is lifted
    (`innergraph.lifting.rules.LIFTERS`) and handed over like a consumer, so its native
    form comes back with the consumers inside lowered. A native node that cannot
    be lifted (an `OpFromGraph` subclass, an in-place one) is left as it is.

The graph is already folded and has been through the in-place rewrites: the
replacements introduce no destroyer (a native IfElse is built with
``as_view=False``), so the `DestroyHandler`'s orderings stay valid.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import HasInnerGraph
from pytensor.link.basic import Linker

from innergraph.lifting.rules import LIFTERS, LOWERERS
from innergraph.core.dispatch import runs
from innergraph.core.fold import fold_function
from innergraph.core.graph import is_function, scope_toposort
from innergraph.core.types import Body, is_folded, is_rewritten, mark_rewritten
from innergraph.ops.scan import Scan, native_scan

__all__ = ["HANDOVER_RULES", "hand_over", "unsupported_consumers"]

Rule = Callable[[Any, Sequence[Variable]], list[Variable]]


def _run_scan_natively(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    """The native Scan the in-graph Scan runs anyway (same body, same mode): the same numbers."""
    consumer: Scan = op
    body: Body = inputs[0].data  # type: ignore[attr-defined]
    return list(native_scan(body, consumer).make_node(*inputs[1:]).outputs)  # a JIT linker's own Scan


#: How a consumer class is handed over, where it differs from `innergraph.lifting.rules.LOWERERS`.
HANDOVER_RULES: dict[type, Rule] = {Scan: _run_scan_natively}


def unsupported_consumers(linker: Linker) -> set[type]:
    """The consumer classes (`LOWERERS`' keys) that ``linker`` cannot run."""
    return {cls for cls in LOWERERS if not runs(linker, cls, family=cls)}


def hand_over(fgraph: FunctionGraph, linker: Linker) -> int:
    """Lower, in a folded ``fgraph``, the consumers ``linker`` cannot run, nested first.

    Returns how many nodes of ``fgraph`` were replaced (lowered, or rebuilt over a
    body in which something was lowered). A no-op for the thunk linkers and for a
    JIT linker whose dispatch implements every consumer.
    """
    if not any(_may_hold_consumers(node) for node in fgraph.apply_nodes):
        return 0
    lower = unsupported_consumers(linker)
    if not lower:
        return 0
    handover = _HandOver(lower)
    count = 0
    for node in fgraph.toposort():
        if node not in fgraph.apply_nodes or not _may_hold_consumers(node):
            continue
        new = handover.node(node, list(node.inputs))
        if new is None:
            continue
        pairs = [(old, _fit(old, n)) for old, n in zip(node.outputs, new, strict=True)]
        fgraph.replace_all(pairs, reason="innergraph.hand_over", import_missing=True)
        count += 1
    return count


class _HandOver:
    """One hand-over: the consumer classes to lower, and the bodies already handed over."""

    def __init__(self, lower: Collection[type]):
        self.lower = lower
        self.bodies: dict[int, tuple[Constant, Constant]] = {}  # id(old constant) -> (old, new)
        self.holding: dict[int, tuple[Any, bool]] = {}  # id(native op or body) -> (it, holds a consumer to lower)

    def node(self, node: Apply, inputs: list[Variable]) -> list[Variable] | None:
        """``node``'s outputs handed over, or ``None`` when nothing changes."""
        op, op_class = node.op, type(node.op)
        if isinstance(op, HasInnerGraph) and op_class in LIFTERS and self.holds(op):
            lifted = LIFTERS[op_class](node.op, inputs)
            if lifted is not None and lifted[0].owner is not None:
                consumer = lifted[0].owner
                folded = [fold_function(v) if is_function(v) else v for v in consumer.inputs]
                return self.node(consumer, folded) or list(consumer.outputs)
        if op_class in LOWERERS:
            inputs = [self.function(v) if is_folded(v) and self.holds(v.data) else v for v in inputs]
            if op_class in self.lower:
                return HANDOVER_RULES.get(op_class, LOWERERS[op_class])(node.op, inputs)
        if all(a is b for a, b in zip(inputs, node.inputs, strict=True)):
            return None
        return node.clone_with_new_inputs(inputs, strict=False).outputs

    def function(self, constant: Constant) -> Constant:
        """A folded function whose body has been handed over (``constant`` if nothing changed)."""
        known = self.bodies.get(id(constant))
        if known is not None and known[0] is constant:
            return known[1]
        body: Body = constant.data
        outputs = self.scope(body.outputs)
        new = constant
        if any(a is not b for a, b in zip(outputs, body.outputs, strict=True)):
            handed = Body(body.type, outputs)
            if is_rewritten(body):
                mark_rewritten(handed)
            new = Constant(constant.type, handed, name=constant.name)
        self.bodies[id(constant)] = (constant, new)
        return new

    def holds(self, owner: Any) -> bool:
        """Whether a native Op's inner graph or a `Body` holds, at any depth, a consumer to lower."""
        known = self.holding.get(id(owner))
        if known is not None and known[0] is owner:
            return known[1]
        self.holding[id(owner)] = (owner, False)  # no cycles, but stay finite
        outputs = owner.outputs if isinstance(owner, Body) else owner.inner_outputs
        result = any(self._node_holds(node) for node in scope_toposort(outputs))
        self.holding[id(owner)] = (owner, result)
        return result

    def _node_holds(self, node: Apply) -> bool:
        if type(node.op) in self.lower:
            return True
        if isinstance(node.op, HasInnerGraph) and self.holds(node.op):
            return True
        return any(is_folded(v) and self.holds(v.data) for v in node.inputs)

    def scope(self, outputs: Sequence[Variable]) -> list[Variable]:
        memo: dict[Variable, Variable] = {}
        for node in scope_toposort(outputs):
            new = self.node(node, [memo.get(v, v) for v in node.inputs])
            if new is not None:
                memo.update((old, _fit(old, n)) for old, n in zip(node.outputs, new, strict=True))
        return [memo.get(o, o) for o in outputs]


def _may_hold_consumers(node: Apply) -> bool:
    return type(node.op) in LOWERERS or isinstance(node.op, HasInnerGraph)


def _fit(old: Variable, new: Variable) -> Variable:
    """``new`` as a variable of ``old``'s type (a native Op may infer a broader static shape)."""
    return new if new.type == old.type else old.type.filter_variable(new, allow_convert=True)
