"""Loop-invariant code motion for loops.

A body subexpression of a loop that reads only constants, closed nested
functions and params bound to invariant arguments (non-sequences) computes the
same value at every step. The largest such subexpressions the rest of the body
uses move out of the loop: each becomes a new non-sequence whose argument is the
subexpression applied to the outer arguments, where MergeOptimizer then shares
it with the outer graph. Work that only the lazy branches of a conditional in
the body read stays inside (hoisting it would compute it eagerly); branches of
an in-graph conditional are separate bodies, never reached by this walk.
"""

from __future__ import annotations

from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.conditional.op import IfElse as NativeIfElse

from innergraph.core.fold import always_computed
from innergraph.core.graph import is_function, scope_toposort
from innergraph.core.instantiate import substitute
from innergraph.rewriting.push_out import fold_constant_work
from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer
from innergraph.protocol.slots import Meaning

__all__ = ["applies", "hoist_invariants"]


def applies(sig: Signature) -> bool:
    """Whether work may move out of ``sig``'s bodies: an eager loop (`innergraph.protocol.slots.Capabilities`)."""
    return sig.capabilities.loop and not sig.capabilities.lazy


def _invariant_targets(outputs: list[Variable], invariant_params: set[Variable]) -> list[Variable]:
    """The largest invariant subexpressions (reading some param) that the body uses."""
    invariant: set[Variable] = set()
    reads_param: set[Variable] = set()
    eager = always_computed(outputs)
    users: list[Apply] = []
    for node in scope_toposort(outputs):
        leafs_ok = all(v in invariant or isinstance(v, Constant) or is_function(v) or v in invariant_params for v in node.inputs)
        if leafs_ok and node in eager and not isinstance(node.op, NativeIfElse):
            invariant.update(node.outputs)
            if any(v in invariant_params or v in reads_param for v in node.inputs):
                reads_param.update(node.outputs)
        else:
            users.append(node)
    used = {v for n in users for v in n.inputs} | set(outputs)
    return [v for v in dict.fromkeys(v for n in scope_toposort(outputs) for v in n.outputs) if v in reads_param and v in used]


def hoist_invariants(fgraph: FunctionGraph) -> int:
    """Move loop-invariant work out of every loop of ``fgraph``; return how many changed.

    Each body of a loop is analysed on its own: work reading only invariant
    params of that body (`Meaning.INVARIANT`) moves out and becomes a new
    invariant argument of that body (the consumer's invariant kind for it alone).
    """
    changed = 0
    placeholders: dict[Variable, Variable] = {}  # one per target: loops sharing a body share the new one
    analysed: dict[tuple[tuple[Variable, ...], frozenset[Variable]], list[Variable]] = {}  # ... and one analysis
    for sig in consumers(fgraph):
        if not applies(sig):
            continue
        slots = list(sig.slots)
        replace: dict[int, dict[Variable, Variable]] = {}
        for b in range(sig.n_bodies):
            kind = sig.form.kind_for(Meaning.INVARIANT, (b,))
            if kind is None:
                continue
            bound = {p: s.args[0] for s in sig.having(Meaning.INVARIANT) for bb, p in s.params if bb == b}
            outputs = [v for s in sig.slots for bb, v in s.outputs if bb == b]
            key = (tuple(outputs), frozenset(bound))
            if key not in analysed:
                analysed[key] = _invariant_targets(outputs, set(bound))
            targets = analysed[key]
            if not targets:
                continue
            outer = fold_constant_work(substitute(targets, bound), stop=set(bound.values()))
            new = [placeholders.setdefault(t, t.type()) for t in targets]
            slots += [Slot(kind, (o,), ((b, p),)) for o, p in zip(outer, new, strict=True)]
            replace[b] = dict(zip(targets, new, strict=True))
        if replace:
            replace_consumer(fgraph, sig, slots, replace=replace, reason="hoist_invariants")
            changed += 1
    return changed
