"""Forwarding: a body output that is just a param (or a constant) becomes the outer argument.

* a call output that returns an argument's param is that argument, and one that
  returns a constant is that constant (a gradient's pullback often does);
* a conditional output whose branches both return params bound to the same
  outer variable, or the same constant, is that variable or constant;
* a Scan state passed through unchanged: an untraced sit-sot is its initial
  value and a sit-sot its initial value repeated (their param, if still read,
  becomes a non-sequence); a mit-mot output tap that writes back what the same
  input tap read is dropped (it writes nothing new), and a mit-mot left with no
  output taps is its initial buffer, its taps become sequences over it. Traced
  states of while loops are left alone: their traces end where the loop stopped.
"""

from __future__ import annotations

import pytensor.tensor as pt
from typing import Any

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.rewriting.signature import Signature, Slot, consumers, replace_consumer

__all__ = ["forward_params"]


def _forward(sig: Signature, slot: Slot, bound: dict[tuple[int, Variable], Variable]) -> tuple[list[Slot], Variable | None] | None:
    """The slots replacing ``slot`` and the variable its result becomes, or None if unchanged."""
    if slot.kind == "out":  # calls and conditionals
        args = {o[1] if isinstance(o[1], Constant) else bound.get(o) for o in slot.outputs}
        if len(args) == 1 and None not in args:
            return [], slot.results[0].type.filter_variable(args.pop())
        return None
    if slot.kind == "untraced" or (slot.kind == "sit_sot" and not sig.is_while):  # a while loop's traces end where it stopped
        if slot.outputs[0][1] is not slot.params[0][1]:
            return None
        arg: Any = slot.args[0]
        init = arg if slot.kind == "untraced" else arg[0]
        value = arg if slot.kind == "untraced" else pt.alloc(init, arg.shape[0], *(init.shape[i] for i in range(init.ndim)))
        return [Slot("non_seq", (init,), slot.params)], slot.results[0].type.filter_variable(value)
    if slot.kind == "mit_mot" and not sig.is_while:
        taps = dict(zip(slot.in_taps, (v for _, v in slot.params)))
        kept = [(t, o, ty) for t, o, ty in zip(slot.out_taps, slot.outputs, slot.output_types, strict=True) if taps.get(t) is not o[1]]
        if len(kept) == len(slot.out_taps):
            return None
        if kept:
            return [slot.with_(out_taps=tuple(t for t, _, _ in kept), outputs=tuple(o for _, o, _ in kept), output_types=tuple(ty for *_, ty in kept))], None
        buffer: Any = slot.args[0]
        low = min(slot.in_taps)
        seqs = [Slot("seq", (buffer[t - low :],), (p,)) for t, p in zip(slot.in_taps, slot.params)]
        return seqs, buffer
    return None


def forward_params(fgraph: FunctionGraph) -> int:
    """Forward pass-through outputs of every consumer; return how many changed."""
    changed = 0
    for sig in consumers(fgraph):
        bound = {p: s.args[0] for s in sig.slots if s.kind in ("arg", "then_arg", "else_arg") for p in s.params}
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
        if forwarded or len(slots) != len(sig.slots) or any(a is not b for a, b in zip(slots, sig.slots)):
            if not any(s.results for s in slots):
                fgraph.replace_all([(r, v) for r, v in forwarded.items() if r in fgraph.clients], reason="forward_params")
            else:
                replace_consumer(fgraph, sig, slots, forwarded=forwarded, reason="forward_params")
            changed += 1
    return changed
