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
    (the initial row ``k - 1`` before the first step), and the input taps
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

from innergraph.rewriting.signature import Signature, Slot, consumers, mit_mot_taps_from_zero, replace_consumer

__all__ = ["carried_form", "carry_cotangents"]


def _is_mit_mot(slot: Slot) -> bool:
    """The one local predicate on slot kinds here (a re-pointing at merge is one line)."""
    return slot.kind == "mit_mot"


def carried_form(slot: Slot) -> list[Slot] | None:
    """The slots standing for mit-mot ``slot`` as a carried state, or None if it has another form.

    The untraced slot comes first; its result is a fresh variable nobody reads.
    """
    in_taps, out_taps = mit_mot_taps_from_zero(slot.in_taps, slot.out_taps)
    if len(out_taps) != 1:
        return None
    (k,) = out_taps
    below = [t for t in in_taps if t < k]
    if below != [k - 1]:
        return None
    buffer: Any = slot.args[0]
    by_tap = dict(zip(in_taps, slot.params, strict=True))
    initial = buffer[k - 1]
    carried = Slot(
        "untraced",
        (initial,),
        (by_tap[k - 1],),
        slot.outputs,
        slot.output_types,
        (initial.type(),),
    )
    contributions = [Slot("seq", (buffer[t:],), (by_tap[t],)) for t in in_taps if t >= k]
    return [carried, *contributions]


def _unread(fgraph: FunctionGraph, result: Variable) -> bool:
    return not fgraph.clients.get(result)


def carry_cotangents(fgraph: FunctionGraph) -> int:
    """Make unread mit-mot buffers carried states; return how many consumers changed."""
    changed = 0
    for sig in consumers(fgraph):
        if sig.kind != "scan" or sig.is_while:
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
        carried = carried_form(slot) if _is_mit_mot(slot) and _unread(fgraph, slot.results[0]) else None
        if carried is None:
            slots.append(slot)
        else:
            slots += carried
            found = True
    return slots if found else None
