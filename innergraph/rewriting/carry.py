"""Carried cotangents: a mit-mot whose buffer nobody reads becomes a carried state.

Terms
-----
mit-mot
    A Scan state with several input taps and output taps over one outer buffer:
    PyTensor's gradient of a traced state. Tap ``k`` of step ``t`` is row
    ``t + k - min(in_taps)`` of the buffer, read before the step and written
    after it. The initial buffer holds the *outside contributions* (the
    cotangent the rest of the graph sends to each step's value); the loop
    accumulates into it.
carried cotangent
    The common form has one output tap ``k`` and one input tap ``k - 1`` below
    it: step ``t`` writes row ``t + k``, which step ``t + 1`` reads at tap ``k - 1``.
    The value read at tap ``k - 1`` is then carried from one step to the next
    (the initial row ``k - 1`` before the first step; taps further below make it
    a mit-sot over the initial rows ``0 .. k - 1``), and the input taps
    ``i >= k`` read rows no step has written yet: the outside contributions,
    initial rows ``t + i``. So the mit-mot is an untraced sit-sot over initial
    row ``k - 1`` plus one sequence per tap ``i >= k`` over the initial buffer
    from row ``i`` on, and when nothing reads the buffer after the loop, the
    loop neither allocates nor returns it (PyTensor issue #1687).
final-position read
    A read of the buffer after the loop that selects only its last row
    (`innergraph.rewriting.lengths.last_row_reads`), where the graph proves the
    buffer holds ``n_steps + k`` rows (`innergraph.rewriting.lengths.length_offset`:
    PyTensor's gradient allocates it so). Its last row, ``n_steps - 1 + k``, is
    the last one the loop writes, the carried value's final value (the initial row
    ``k - 1`` when the loop runs no step): such reads become reads of the carried
    state's result. This is how the cotangent of an initial value is read
    (``buffer[::-1][:1]``, canonicalized to ``buffer[:-2:-1]``). In a loop nested
    in a body, the buffer and ``n_steps`` are often params of the enclosing
    consumer (its loop-invariant motion hoisted the allocation out of the body):
    the proof then follows them to that consumer's arguments (`enclosing_bindings`).
carried trace
    With several taps below ``k`` the carried state is a mit-sot over a fresh
    buffer of ``n_steps + k`` rows whose rows are the mit-mot buffer's rows
    ``0 .. n_steps + k - 1``, row for row; when the mit-mot buffer provably has
    exactly that many rows, the two buffers are equal and any read of the one is a
    read of the other.
unread buffer
    A state buffer longer than its taps that nothing reads after the loop
    (`innergraph.stats`). A carried state whose final value nobody reads is not
    one: it costs one value, not one per step.

Taps are compared after shifting them so the oldest input tap is 0
(`innergraph.protocol.signature.mit_mot_taps_from_zero`), the form the loops
are built in. While loops are left alone (no gradient builds one).
"""

from __future__ import annotations

from typing import Any

import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.utils import expand_empty

from innergraph.core.graph import body_of, scope_toposort
from innergraph.rewriting.args import inlined_row
from innergraph.rewriting.lengths import final_row_reads, length_offset
from innergraph.rewriting.outer import rows_of
from innergraph.protocol.signature import Signature, Slot, consumers, mit_mot_taps_from_zero, replace_consumer
from innergraph.protocol.slots import Meaning

__all__ = ["carried_form", "carry_cotangents", "enclosing_bindings"]


class _Scopes:
    """Each consumer body's nodes, found on first need after each change (most loops are not nested: never asked)."""

    def __init__(self, fgraph: FunctionGraph):
        self.fgraph = fgraph
        self._found: list[tuple[Signature, int, Variable, set[Apply]]] | None = None

    def changed(self) -> None:
        self._found = None

    def holding(self, node: Apply) -> list[tuple[Signature, int]] | None:
        """The (consumer, body index) pairs whose body holds ``node``; None if a reader of such a body is no consumer seen here."""
        if self._found is None:
            self._found = [
                (sig, b, function, set(scope_toposort(list(body_of(function).outputs))))
                for sig in consumers(self.fgraph)
                for b, function in enumerate(sig.form.functions(sig.node))
            ]
        held = [(sig, b, function) for sig, b, function, nodes in self._found if node in nodes]
        for _, _, function in held:
            readers = {client for client, _ in self.fgraph.clients.get(function, [])}
            if not readers <= {sig.node for sig, _, f in held if f is function}:
                return None  # a binding we cannot see: prove nothing
        return [(sig, b) for sig, b, _ in held]


def enclosing_bindings(scopes: _Scopes, node: Apply) -> list[dict[Variable, Variable]]:
    """For each consumer body holding ``node``: its params bound to invariant arguments -> those arguments.

    An invariant argument (a non-sequence, a call's argument) is the param's value
    at every evaluation of the body, so a length proved from the argument holds for
    the param. Empty when ``node`` is in no body (the outer graph), or when a body
    holding it is read by something other than the consumers found (every binding
    must be seen for a proof to hold).
    """
    bindings: list[dict[Variable, Variable]] = []
    held = scopes.holding(node)
    if held is None:
        return bindings
    for sig, b in held:
        bound: dict[Variable, Variable] = {}
        for slot in sig.slots:
            if sig.meaning(slot) is Meaning.INVARIANT:
                bound.update((p, slot.args[0]) for body, p in slot.params if body == b)
        bindings.append(bound)
    return bindings


def carried_form(sig: Signature, slot: Slot, n_steps: Variable) -> list[Slot] | None:
    """The slots standing for mit-mot ``slot`` as carried state, or None if it has another form.

    With output taps ``O`` (largest ``k``) the states come first: one carry (an
    untraced sit-sot) per output tap ``o``, over initial row ``o - 1`` and read at
    input tap ``o - 1``, when every input tap below ``k`` is one below an output tap
    and every output tap one above an input tap (the row a step writes at tap ``o``
    is read by the next step at tap ``o - 1``: every gradient of a sit-sot, ``(0, 1)
    -> (1,)``, and of a mit-sot with taps ``-2, -1``, ``(0, 1, 2) -> (1, 2)``); else,
    with one output tap, a mit-sot over the initial rows ``0 .. k - 1`` (in a fresh
    buffer of ``n_steps`` more rows, as `pytensor.scan` lays one out, so PyTensor's
    save-memory pass shrinks it when nothing reads it). Their results are fresh
    variables. Then one sequence per input tap ``i >= k``. The slots are of the
    kinds ``sig``'s consumer declares for a carry, a trace and a sequence
    (`innergraph.protocol.slots.Form.kind_for`); None if it declares none.
    """
    form = sig.form
    carry, trace_kind, sequence = (form.kind_for(m, slot.bodies) for m in (Meaning.CARRY, Meaning.TRACE, Meaning.SEQUENCE))
    if carry is None or trace_kind is None or sequence is None:
        return None
    in_taps, out_taps = mit_mot_taps_from_zero(slot.in_taps, slot.out_taps)
    k = max(out_taps)
    below = [t for t in in_taps if t < k]
    if not below:
        return None  # nothing carried: a per-step output
    buffer: Any = slot.args[0]
    by_tap = dict(zip(in_taps, slot.params, strict=True))
    produced = dict(zip(out_taps, zip(slot.outputs, slot.output_types, strict=True), strict=True))
    states: list[Slot]
    if set(below) == {o - 1 for o in out_taps} and set(out_taps) <= set(in_taps):
        states = []
        for o in sorted(out_taps):
            initial = rows_of(buffer, o - 1)
            output, output_type = produced[o]
            states.append(Slot(carry, (initial,), (by_tap[o - 1],), (output,), (output_type,), (initial.type(),)))
    elif len(out_taps) == 1:
        trace = expand_empty(buffer[:k], n_steps)
        params = tuple(by_tap[t] for t in below)
        taps = tuple(t - k for t in below)
        states = [Slot(trace_kind, (trace,), params, slot.outputs, slot.output_types, (trace.type(),), taps)]
    else:
        return None
    contributions = [Slot(sequence, (rows_of(buffer, slice(t, None)),), (by_tap[t],)) for t in in_taps if t >= k]
    return [*states, *contributions]


def _unread(fgraph: FunctionGraph, result: Variable) -> bool:
    return not fgraph.clients.get(result)


def carry_cotangents(fgraph: FunctionGraph) -> int:
    """Make mit-mot buffers unread after the loop, or read only at their final position, carried states.

    Returns how many consumers changed.
    """
    changed = 0
    scopes = _Scopes(fgraph)
    for sig in consumers(fgraph):
        if not sig.capabilities.counted or sig.is_while:
            continue
        found = _carried(fgraph, sig, scopes)
        if found is not None:
            slots, forwarded = found
            slots, inlined = _inline_constant_rows(sig, slots)
            replace_consumer(fgraph, sig, slots, forwarded=forwarded, replace=inlined, reason="carry_cotangents")
            scopes.changed()
            changed += 1
    return changed


def _inline_constant_rows(sig: Signature, slots: list[Slot]) -> tuple[list[Slot], dict[int, dict[Variable, Variable]]]:
    """``slots`` without the new sequences whose rows are one small constant, and what their params become.

    Carrying a cotangent whose outside contributions are a constant zero buffer makes
    such a sequence (rows of that buffer); `innergraph.rewriting.args.inlined_row`
    inlines its row now rather than in the next round of the consumer rewrites.
    """
    kept: list[Slot] = []
    inlined: dict[int, dict[Variable, Variable]] = {}
    for slot in slots:
        values = None if slot in sig.slots or sig.meaning(slot) is not Meaning.SEQUENCE else inlined_row(sig, slot)
        if values is None:
            kept.append(slot)
            continue
        for b, p in slot.params:
            inlined.setdefault(b, {})[p] = values[p]
    return kept, inlined


def _read_results(
    fgraph: FunctionGraph, sig: Signature, slot: Slot, carried: list[Slot], scopes: _Scopes
) -> dict[Variable, Variable] | None:
    """What the reads of a read mit-mot buffer become once it is ``carried``, or None if they cannot."""
    in_taps, out_taps = mit_mot_taps_from_zero(slot.in_taps, slot.out_taps)
    k = max(out_taps)
    result = slot.results[0]
    offset = length_offset(slot.args[0], sig.header[0])
    if offset is None:  # a nested loop: its buffer and step count may be the enclosing consumer's params
        bindings = enclosing_bindings(scopes, sig.node)
        offset = length_offset(slot.args[0], sig.header[0], bindings) if bindings else None
    if offset != k:
        return None  # the last rows are not provably the last ones written
    if sig.meaning(carried[0]) is Meaning.TRACE:
        return {result: carried[0].results[0]}  # the same rows: the carried trace is the buffer
    # the state of output tap o ends in row n_steps - 1 + o: row k - o from the end
    finals = {k - o: state.results[0] for o, state in zip(sorted(out_taps), carried, strict=False)}
    reads = final_row_reads(fgraph, result, rows=k + 1, minimum=k)
    if reads is None:
        return None
    values: dict[Variable, Variable] = {}
    for read, rows in reads.items():
        picked = [rows] if isinstance(rows, int) else list(rows)
        if any(r not in finals for r in picked):
            return None
        values[read] = finals[rows] if isinstance(rows, int) else pt.stack([finals[r] for r in picked])
    return values


def _carried(fgraph: FunctionGraph, sig: Signature, scopes: _Scopes) -> tuple[list[Slot], dict[Variable, Variable]] | None:
    slots: list[Slot] = []
    forwarded: dict[Variable, Variable] = {}
    found = False
    for slot in sig.slots:
        carried = carried_form(sig, slot, sig.header[0]) if sig.meaning(slot) is Meaning.BUFFER else None
        if carried is not None and not _unread(fgraph, slot.results[0]):
            reads = _read_results(fgraph, sig, slot, carried, scopes)
            carried = None if reads is None else carried
            forwarded.update(reads or {})
        if carried is None:
            slots.append(slot)
        else:
            slots += carried
            found = True
    return (slots, forwarded) if found else None
