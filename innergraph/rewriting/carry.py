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
unread buffer
    A state buffer longer than its taps that nothing reads after the loop
    (`innergraph.stats`). A carried state whose final value nobody reads is not
    one: it costs one value, not one per step.

Taps are compared after shifting them so the oldest input tap is 0
(`innergraph.rewriting.signature.mit_mot_taps_from_zero`), the form the loops
are built in. While loops are left alone (no gradient builds one).
"""

from __future__ import annotations

from typing import Any

from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.utils import expand_empty

from innergraph.rewriting.signature import Signature, Slot, consumers, mit_mot_taps_from_zero, replace_consumer
from innergraph.slots import Meaning

__all__ = ["carried_form", "carry_cotangents"]


def carried_form(sig: Signature, slot: Slot, n_steps: Variable) -> list[Slot] | None:
    """The slots standing for mit-mot ``slot`` as a carried state, or None if it has another form.

    The state comes first: an untraced sit-sot when the only input tap below the
    output tap ``k`` is ``k - 1``, else a mit-sot over the initial rows ``0 .. k - 1``
    (in a fresh buffer of ``n_steps`` more rows, as `pytensor.scan` lays one out,
    so PyTensor's save-memory pass shrinks it when nothing reads it). Its result
    is a fresh variable nobody reads. Then one sequence per input tap ``i >= k``.
    The slots are of the kinds ``sig``'s consumer declares for a carry, a trace and
    a sequence (`innergraph.slots.Form.kind_for`); None if it declares none.
    """
    form = sig.form
    carry, trace_kind, sequence = (form.kind_for(m, slot.bodies) for m in (Meaning.CARRY, Meaning.TRACE, Meaning.SEQUENCE))
    if carry is None or trace_kind is None or sequence is None:
        return None
    in_taps, out_taps = mit_mot_taps_from_zero(slot.in_taps, slot.out_taps)
    if len(out_taps) != 1:
        return None
    (k,) = out_taps
    below = [t for t in in_taps if t < k]
    if not below:
        return None  # nothing carried: a per-step output
    buffer: Any = slot.args[0]
    by_tap = dict(zip(in_taps, slot.params, strict=True))
    state: Slot
    if below == [k - 1]:
        initial = buffer[k - 1]
        state = Slot(carry, (initial,), (by_tap[k - 1],), slot.outputs, slot.output_types, (initial.type(),))
    else:
        trace = expand_empty(buffer[:k], n_steps)
        params = tuple(by_tap[t] for t in below)
        taps = tuple(t - k for t in below)
        state = Slot(trace_kind, (trace,), params, slot.outputs, slot.output_types, (trace.type(),), taps)
    contributions = [Slot(sequence, (buffer[t:],), (by_tap[t],)) for t in in_taps if t >= k]
    return [state, *contributions]


def _unread(fgraph: FunctionGraph, result: Variable) -> bool:
    return not fgraph.clients.get(result)


def carry_cotangents(fgraph: FunctionGraph) -> int:
    """Make unread mit-mot buffers carried states; return how many consumers changed."""
    changed = 0
    for sig in consumers(fgraph):
        if not sig.capabilities.counted or sig.is_while:
            continue
        new = _carried(fgraph, sig)
        if new is not None:
            replace_consumer(fgraph, sig, new, reason="carry_cotangents")
            changed += 1
    return changed


def _carried(fgraph: FunctionGraph, sig: Signature) -> list[Slot] | None:
    slots: list[Slot] = []
    found = False
    for slot in sig.slots:
        is_buffer = sig.meaning(slot) is Meaning.BUFFER
        carried = carried_form(sig, slot, sig.header[0]) if is_buffer and _unread(fgraph, slot.results[0]) else None
        if carried is None:
            slots.append(slot)
        else:
            slots += carried
            found = True
    return slots if found else None
