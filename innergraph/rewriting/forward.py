"""Forwarding: a body output that is just a param (or a constant) becomes the outer argument.

* an output (`Meaning.OUTPUT`: a call's, a conditional's) whose every body
  returns a param bound to the same outer variable, or the same constant, is that
  variable or constant (a gradient's pullback often returns a constant);
* a carried state passed through unchanged: a carry is its initial value and a
  single-tap trace its initial value repeated (their params, if still read,
  become an invariant argument); a buffer's output tap that writes back what the
  same input tap read is dropped (it writes nothing new), and a buffer left with no
  output taps is its initial buffer, its taps become sequences over it. Traces and
  buffers of loops with a condition are left alone: their traces end where the
  loop stopped.
"""

from __future__ import annotations

import pytensor.tensor as pt
from typing import Any

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer
from innergraph.protocol.slots import Meaning

__all__ = ["forward_params"]


def _forward(sig: Signature, slot: Slot, bound: dict[tuple[int, Variable], Variable]) -> tuple[list[Slot], Variable | None] | None:
    """The slots replacing ``slot`` and the variable its result becomes, or None if unchanged."""
    meaning = sig.meaning(slot)
    if meaning is Meaning.OUTPUT:
        args = {o[1] if isinstance(o[1], Constant) else bound.get(o) for o in slot.outputs}
        if len(args) == 1 and None not in args:
            return [], slot.results[0].type.filter_variable(args.pop())
        return None
    single_trace = meaning is Meaning.TRACE and slot.in_taps == (-1,) and not sig.is_while  # a while loop's traces end where it stopped
    if meaning is Meaning.CARRY or single_trace:
        invariant = sig.form.kind_for(Meaning.INVARIANT, slot.bodies)
        (b_out, out), = slot.outputs
        if invariant is None or not any(b == b_out and p is out for b, p in slot.params):
            return None
        arg: Any = slot.args[0]
        init = arg if meaning is Meaning.CARRY else arg[0]
        value = arg if meaning is Meaning.CARRY else pt.alloc(init, arg.shape[0], *(init.shape[i] for i in range(init.ndim)))
        return [Slot(invariant, (init,), slot.params)], slot.results[0].type.filter_variable(value)
    sequence = sig.form.kind_for(Meaning.SEQUENCE, slot.bodies)
    if meaning is Meaning.BUFFER and not sig.is_while and sequence is not None:
        taps = dict(zip(slot.in_taps, (v for _, v in slot.params)))
        kept = [(t, o, ty) for t, o, ty in zip(slot.out_taps, slot.outputs, slot.output_types, strict=True) if taps.get(t) is not o[1]]
        if len(kept) == len(slot.out_taps):
            return None
        if kept:
            return [slot.with_(out_taps=tuple(t for t, _, _ in kept), outputs=tuple(o for _, o, _ in kept), output_types=tuple(ty for *_, ty in kept))], None
        buffer: Any = slot.args[0]
        low = min(slot.in_taps)
        seqs = [Slot(sequence, (buffer[t - low :],), (p,)) for t, p in zip(slot.in_taps, slot.params)]
        return seqs, buffer
    return None


def forward_params(fgraph: FunctionGraph) -> int:
    """Forward pass-through outputs of every consumer; return how many changed."""
    changed = 0
    for sig in consumers(fgraph):
        bound = {p: s.args[0] for s in sig.slots if not sig.capabilities.loop and sig.meaning(s) is Meaning.INVARIANT for p in s.params}
        slots: list[Slot] = []
        forwarded: dict[Variable, Variable] = {}
        for slot in sig.slots:
            new = _forward(sig, slot, bound)
            if new is None:
                slots.append(slot)
                continue
            replacement, value = new
            slots += replacement
            if value is not None:
                forwarded[slot.results[0]] = value
        # (slots change in number only where a result is forwarded: an output, a buffer made sequences)
        if forwarded or any(a is not b for a, b in zip(slots, sig.slots)):
            if not any(s.results for s in slots):
                fgraph.replace_all([(r, v) for r, v in forwarded.items() if r in fgraph.clients], reason="forward_params")
            else:
                replace_consumer(fgraph, sig, slots, forwarded=forwarded, reason="forward_params")
            changed += 1
    return changed
