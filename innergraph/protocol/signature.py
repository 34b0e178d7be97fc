"""A consumer node seen as slots, and the one helper that rebuilds it from slots.

Terms
-----
slot
    One binding of a consumer: the outer inputs it reads (``args``), the body
    params they bind (``params``), the body outputs it returns (``outputs``) and
    the consumer outputs it produces (``results``). Params and outputs are tagged
    with the body they belong to (a conditional has two). A Scan has one slot per
    sequence, state (mit-mot, mit-sot, sit-sot, untraced sit-sot), nit-sot and
    non-sequence, plus one for its ``until`` condition; a call one per argument
    and per output; a conditional one per branch argument and per output (whose
    outputs are one per branch).
signature
    A consumer node as its slots (`Signature`). A rewrite makes a new slot list —
    drops a slot, adds one whose param is a fresh variable, replaces a param by a
    value in a body — and `rebuild` makes the consumer node that has exactly
    those slots: it renumbers params, builds the new functions and the new Op.

Every rewrite of `innergraph.rewriting` that changes a consumer's signature goes
through `rebuild`; each consumer only declares, with `innergraph.protocol.slots.register_consumer`,
how to split a node into slots, how to make a node from ordered slots and what
each kind of slot means (`Form`). No rewrite reads a consumer's class or kind name:
they read meanings (`Signature.meaning`) and capabilities (`Signature.capabilities`).
The declarations live in `innergraph.protocol.slots` (this module re-exports them), the
forms of innergraph's own consumers next to each consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from pytensor.graph.basic import Apply, Constant, NominalVariable, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.fold import fold_function
from innergraph.core.graph import InnerGraph, body_of, is_function, param, scope_leaves
from innergraph.core.instantiate import substitute
from innergraph.protocol.slots import FORMS, Capabilities, Form, Meaning, Slot, form_of
from innergraph.core.types import Body, InnerGraphType

__all__ = [
    "FORMS",
    "Form",
    "Meaning",
    "SCAN_STATES",
    "Signature",
    "Slot",
    "consumers",
    "mit_mot_taps_from_zero",
    "rebuild",
    "remembering_consumer_order",
    "replace_consumer",
    "sharing_rebuilt_functions",
    "signature",
]


@dataclass(frozen=True)
class Signature:
    """A consumer node as slots: ``node``, its ``header`` inputs (n_steps, condition) and ``slots``."""

    node: Apply
    header: tuple[Variable, ...]
    slots: tuple[Slot, ...]
    form: Form

    @property
    def n_bodies(self) -> int:
        return self.form.n_bodies

    @property
    def kind(self) -> str | None:
        """The consumer's own name (``"scan"``, ``"call"``, ``"ifelse"``), for statistics only."""
        return getattr(self.node.op, "kind", None)

    @property
    def capabilities(self) -> Capabilities:
        """What the consumer is (loop, lazy, counted)."""
        return self.form.capabilities

    def meaning(self, slot: Slot) -> Meaning:
        """What ``slot`` is."""
        return self.form.meaning(slot)

    def having(self, *meanings: Meaning) -> list[Slot]:
        """The slots of any of ``meanings``, in order."""
        return [s for s in self.slots if self.form.meaning(s) in meanings]

    @property
    def bodies(self) -> list[Body]:
        """The consumer's bodies, in body-index order."""
        return [body_of(f) for f in self.form.functions(self.node)]

    @property
    def is_while(self) -> bool:
        """Whether the consumer is a loop with a condition."""
        return any(self.form.meaning(s) is Meaning.CONDITION for s in self.slots)


def _ordered(slots: Sequence[Slot], kinds: Sequence[str]) -> list[Slot]:
    rank = {k: i for i, k in enumerate(kinds)}
    return sorted((s for s in slots if s.kind in rank), key=lambda s: rank[s.kind])


def _by_kind(slots: Sequence[Slot]) -> dict[str, list[Slot]]:
    groups: dict[str, list[Slot]] = {}
    for s in slots:
        groups.setdefault(s.kind, []).append(s)
    return groups


#: Functions `rebuild` made in the current `sharing_rebuilt_functions` block, by what they were made from.
_rebuilt: ContextVar[dict[Any, Variable] | None] = ContextVar("innergraph_rebuilt_functions", default=None)


@contextmanager
def sharing_rebuilt_functions() -> Iterator[None]:
    """Within the block, `rebuild` makes one function per distinct (body, slots, replacement).

    Consumers that share a body and change their signature the same way (the
    calls of one helper dropping the same dead output, say) then share the new
    function at once instead of each building a copy that MergeOptimizer merges
    later: every copy would cost a shape inference when it is imported.
    """
    token = _rebuilt.set({})
    try:
        yield
    finally:
        _rebuilt.reset(token)


def _value_key(value: Variable) -> Any:
    """A constant by its type and data (inlined constants are fresh objects), else itself."""
    return (value.type, value.signature()) if isinstance(value, Constant) else value


def rebuild(
    sig: Signature,
    slots: Sequence[Slot],
    replace: Mapping[int, Mapping[Variable, Variable]] | None = None,
    fold: bool | None = None,
    same_as: Mapping[int, Any] | None = None,
) -> tuple[Apply, dict[Variable, Variable]]:
    """The consumer node with exactly ``slots``, and old results -> new results.

    Parameters
    ----------
    sig
        The signature the slots come from (its op is the template for flags).
    slots
        The slots of the new node, in any order; their params may be the body's
        params or fresh variables (new params), their outputs any variables of
        the body's scope.
    replace
        Per body, variables to substitute in every output first (a param by
        another param or a constant, a subexpression by a new param).
    fold
        Whether the new functions are folded constants rather than inner-graph
        nodes (whose body nodes join the graph when the node is imported). By
        default, as the consumer's own functions are.
    same_as
        Per body, a key that stands for the new function: the caller vouches that
        bodies given equal keys become alpha-equivalent, so within
        `sharing_rebuilt_functions` the first one's new function serves them all
        (bodies that differ only in the constants ``replace`` turns into params).
    """
    form = sig.form
    functions = []
    memo = _rebuilt.get()
    old_functions = form.functions(sig.node)
    folded = all(isinstance(f, Constant) for f in old_functions) if fold is None else fold
    for b in range(form.n_bodies):
        ps = [v for s in _ordered(slots, form.param_order) for bb, v in s.params if bb == b]
        outs = [(v, t) for s in _ordered(slots, form.output_order) for (bb, v), t in zip(s.outputs, s.output_types, strict=True) if bb == b]
        body_replace = tuple(replace[b].items()) if replace and replace.get(b) else ()
        if same_as is not None and b in same_as:
            key: tuple[Any, ...] = ("same as", same_as[b], folded)
        else:
            key = (tuple(ps), tuple(outs), tuple((k, _value_key(v)) for k, v in body_replace), folded)
        if memo is not None and key in memo:
            functions.append(memo[key])
            continue
        _check_params_kept(sig, b, [v for v, _ in outs], ps, dict(body_replace))
        new_outs = _renumbered([v for v, _ in outs], dict(body_replace), ps)
        ftype = InnerGraphType([v.type for v in ps], [t for _, t in outs])
        function = InnerGraph(ftype).make_node(*new_outs).outputs[0]
        if folded:
            function = fold_function(function)
        functions.append(function)
        if memo is not None:
            memo[key] = function
    args = [a for s in _ordered(slots, form.arg_order) for a in s.args]
    node = form.make(sig.node.op, sig.header, functions, _by_kind(slots), args)
    old = [r for s in _ordered(slots, form.result_order) for r in s.results]
    return node, dict(zip(old, node.outputs, strict=True))


def _check_params_kept(
    sig: Signature, body: int, outputs: list[Variable], ps: Sequence[Variable], replace: Mapping[Variable, Variable]
) -> None:
    """Refuse a rebuild whose outputs still read a param of a dropped slot.

    Renumbering would turn such a param into another slot's (params are interned by
    position and type): a wrong number rather than an error. A rewrite that drops a
    slot must first make sure nothing else in the body reads its param.
    """
    kept = set(ps)
    stray = [
        v for v in scope_leaves(outputs, stop=replace.keys()) if isinstance(v, NominalVariable) and v not in kept and v not in replace
    ]
    if stray:
        raise RuntimeError(
            f"innergraph: rebuilding {sig.node.op} (body {body}) would leave {stray} read, the params of slots it "
            "drops; the rewrite must keep those slots"
        )


def _renumbered(outputs: list[Variable], replace: dict[Variable, Variable], ps: Sequence[Variable]) -> list[Variable]:
    """``outputs`` with ``replace`` substituted, then ``ps`` renumbered to params ``0..n-1``.

    When the replacement values are leaves (a param, a fresh param, a constant: what
    the rewrites pass), the two maps compose into one substitution, so the body's
    nodes are copied once instead of twice (and not at all when nothing moves).
    """
    renumber = {v: param(j, v.type) for j, v in enumerate(ps)}
    if any(v.owner is not None for v in replace.values()):
        return substitute(substitute(outputs, replace), renumber)
    combined = {k: renumber.get(v, v) for k, v in replace.items()}
    combined.update((p, q) for p, q in renumber.items() if p not in combined and p is not q)
    return substitute(outputs, combined) if combined else outputs


def replace_consumer(
    fgraph: FunctionGraph,
    sig: Signature,
    slots: Sequence[Slot],
    *,
    reason: str,
    replace: Mapping[int, Mapping[Variable, Variable]] | None = None,
    forwarded: Mapping[Variable, Variable] | None = None,
    fold: bool | None = None,
    same_as: Mapping[int, Any] | None = None,
) -> None:
    """Rebuild ``sig``'s node with ``slots`` and replace its results in ``fgraph``.

    ``forwarded`` maps results of dropped slots to the outer variables that now
    stand for them (which may read the node's other results); ``fold`` and
    ``same_as`` are as for `rebuild`.
    """
    node, mapping = rebuild(sig, slots, replace, fold, same_as)
    pairs = [(old, new) for old, new in mapping.items() if old is not new]
    if forwarded:  # forwarded values may read results of the old node: read the new one's
        values = substitute(list(forwarded.values()), mapping)
        pairs += list(zip(forwarded.keys(), values, strict=True))
    fgraph.replace_all([(o, n) for o, n in pairs if o in fgraph.clients], reason=reason)


#: Scan's state kinds (slot kind names of `innergraph.ops.scan_slots`).
SCAN_STATES = ("mit_mot", "mit_sot", "sit_sot", "untraced")


def mit_mot_taps_from_zero(in_taps: tuple[int, ...], out_taps: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A mit-mot's taps shifted so that its oldest input tap is 0: the same loop.

    Scan reads and writes tap ``k`` of a mit-mot at row ``step + k - min(in_taps)``
    of its buffer, so shifting every in and out tap by one amount changes nothing
    at run time. Every backend is tested on the form PyTensor's gradients build,
    and one of them is wrong off it: PyTensor 3.0.7's JAX Scan conversion offsets
    the out taps by their *own* minimum (``ScanInfo.normalized_mit_mot_out_slices``),
    so in taps ``(-1, 0)`` with out taps ``(0,)`` — what dropping a write-back tap
    leaves of PyTensor's ``(-1, 0) -> (-1, 0)`` — wrote one row too early under
    JAX (``design/rewrites.md``, *Mit-mot taps start at 0*). With the oldest in
    tap at 0 both offsets agree whenever no output is written before the oldest
    row read, which no Scan gradient does.
    """
    low = min(in_taps)
    if low == 0:
        return in_taps, out_taps
    return tuple(t - low for t in in_taps), tuple(t - low for t in out_taps)


#: Consumer node -> (what its signature was made from, the signature).
_signatures: WeakKeyDictionary[Apply, tuple[tuple[Any, ...], Signature | None]] = WeakKeyDictionary()


def signature(node: Apply) -> Signature | None:
    """``node`` as slots, or None if it is no consumer or its signature is fixed.

    Memoized per node while its inputs and its bodies stay the same (every rewrite
    round asks for every consumer's signature).
    """
    form = form_of(node.op)
    if form is None:
        return None
    made_from = tuple(body_of(v) if is_function(v) else v for v in node.inputs)
    cached = _signatures.get(node)
    if cached is not None and all(a is b for a, b in zip(cached[0], made_from, strict=True)):
        return cached[1]
    split = form.split(node)
    sig = None if split is None else Signature(node, split[0], tuple(split[1]), form)
    _signatures[node] = (made_from, sig)
    return sig


#: Within `remembering_consumer_order`: graph -> its consumer nodes, inputs before users.
_orders: ContextVar[dict[FunctionGraph, list[Apply]] | None] = ContextVar("innergraph_consumer_orders", default=None)


@contextmanager
def remembering_consumer_order() -> Iterator[Callable[[], None]]:
    """Within the block, `consumers` orders a graph's consumers once; call the yielded function after a change.

    The consumer rewrites each walk every consumer, and most find nothing to do:
    ordering them is a toposort of the whole graph, which the caller, knowing when
    a rewrite changed the graph, need not repeat in between.
    """
    orders: dict[FunctionGraph, list[Apply]] = {}
    token = _orders.set(orders)
    try:
        yield orders.clear
    finally:
        _orders.reset(token)


def consumers(fgraph: FunctionGraph) -> Iterator[Signature]:
    """The signatures of ``fgraph``'s rebuildable consumers, inputs before users.

    Each is made when it is reached, so rewrites may replace earlier ones meanwhile;
    nodes a rewrite already removed are skipped.
    """
    orders = _orders.get()
    found = orders.get(fgraph) if orders is not None else None
    if found is None:
        found = [node for node in fgraph.apply_nodes if type(node.op) in FORMS]
        if len(found) > 1:  # order them; a lone consumer (most graphs) needs no toposort
            found = [node for node in fgraph.toposort() if type(node.op) in FORMS]
        if orders is not None:
            orders[fgraph] = found
    for node in found:
        if node in fgraph.apply_nodes:
            sig = signature(node)
            if sig is not None:
                yield sig

