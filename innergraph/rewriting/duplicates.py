"""Duplicate states and duplicate outputs of one consumer become one.

Terms
-----
duplicate outputs
    Two output slots of one consumer whose body outputs are the same variables
    (identity, after MergeOptimizer): two per-step outputs (nit-sots) of a loop
    with the same length, two outputs of a call, two outputs of a conditional
    whose branches return the same pair. The second one's result is the first's.
duplicate states
    Two state slots of one loop, of the same kind and taps, over the same initial
    value (identity), whose updates are the same function once the second
    state's params are read as the first's. By induction on the steps the two
    states then hold the same value at every step, so the second one's params
    read the first's, its result is the first's and its slot goes. Two loops
    merged side by side over one sequence and one initial value (the issue-24
    example) leave exactly this.

Equality of updates is decided on the canonical encoding (`innergraph.core.canonical`)
of the two updates after the substitution, which is exact for closed bodies and
linear in their size.
"""

from __future__ import annotations

from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.canonical import encode
from innergraph.core.instantiate import substitute
from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer
from innergraph.protocol.slots import Meaning
from innergraph.core.types import Body, InnerGraphType

__all__ = ["STATE_MEANINGS", "merge_duplicate_slots", "same_update"]

#: Slot meanings that carry a state from step to step.
STATE_MEANINGS = (Meaning.BUFFER, Meaning.TRACE, Meaning.CARRY)

#: Slot meanings that are outputs only.
OUTPUT_MEANINGS = (Meaning.PER_STEP_OUTPUT, Meaning.OUTPUT)


def _is_state(sig: Signature, slot: Slot) -> bool:
    return sig.meaning(slot) in STATE_MEANINGS


def _is_output(sig: Signature, slot: Slot) -> bool:
    return sig.meaning(slot) in OUTPUT_MEANINGS


def _state_key(slot: Slot) -> tuple:
    return (slot.kind, slot.in_taps, slot.out_taps, slot.args, slot.output_types)


def _output_key(slot: Slot) -> tuple:
    return (slot.kind, slot.args, slot.outputs, slot.output_types)


def same_update(sig: Signature, first: Slot, second: Slot) -> bool:
    """Whether ``second``'s update is ``first``'s once ``second``'s params are read as ``first``'s.

    Both updates are read with the identification applied to every param they
    reach, so states that read each other (``a' = f(a, b)``, ``b' = f(b, a)``) count.
    """
    identify = {p2: p1 for (_, p1), (_, p2) in zip(first.params, second.params, strict=True)}
    outs = substitute([v for _, v in first.outputs] + [v for _, v in second.outputs], identify)
    half = len(first.outputs)
    if all(a is b for a, b in zip(outs[:half], outs[half:], strict=True)):
        return True
    ftype = InnerGraphType(sig.bodies[0].param_types, first.output_types)
    return encode(Body(ftype, outs[:half])) == encode(Body(ftype, outs[half:]))


def _duplicates(sig: Signature) -> tuple[list[Slot], dict[Variable, Variable], dict[Variable, Variable]] | None:
    """The kept slots, param identifications and forwarded results, or None if no slot repeats another."""
    kept: list[Slot] = []
    identify: dict[Variable, Variable] = {}
    forwarded: dict[Variable, Variable] = {}
    seen: dict[tuple, list[Slot]] = {}
    for slot in sig.slots:
        twin = None
        if _is_output(sig, slot):
            twin = next(iter(seen.get(_output_key(slot), [])), None)
            seen.setdefault(_output_key(slot), []).append(slot)
        elif _is_state(sig, slot) and sig.n_bodies == 1:
            candidates = seen.setdefault(_state_key(slot), [])
            twin = next((c for c in candidates if same_update(sig, c, slot)), None)
            if twin is None:
                candidates.append(slot)
            else:
                identify.update((p2, p1) for (_, p1), (_, p2) in zip(twin.params, slot.params, strict=True))
        if twin is None:
            kept.append(slot)
        else:
            forwarded.update(zip(slot.results, twin.results, strict=True))
    if len(kept) == len(sig.slots):
        return None
    return kept, identify, forwarded


def merge_duplicate_slots(fgraph: FunctionGraph) -> int:
    """Make duplicate states and outputs of every consumer one; return how many consumers changed."""
    changed = 0
    for sig in consumers(fgraph):
        found = _duplicates(sig)
        if found is None:
            continue
        kept, identify, forwarded = found
        replace = {0: identify} if identify else None
        replace_consumer(fgraph, sig, kept, replace=replace, forwarded=forwarded, reason="merge_duplicate_slots")
        changed += 1
    return changed
