"""Dead outputs and params of every consumer.

A slot is live when one of its results is used, when it is required (a loop's
condition, `Meaning.CONDITION`), or when a live slot's body outputs read one of its
params. That is a reachability walk to a fixpoint, so states that only feed
each other die together. Dead slots are dropped with the shared `rebuild`.
"""

from __future__ import annotations

from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.graph import scope_leaves
from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer

__all__ = ["live_slots", "remove_dead_slots"]


Leaves = dict[tuple[Variable, ...], list[Variable]]


def live_slots(fgraph: FunctionGraph, sig: Signature, leaves: Leaves | None = None) -> list[Slot]:
    """The slots of ``sig`` that some use of the consumer's results needs.

    ``leaves`` memoizes the walk of a body from a set of its outputs: K loops over one
    body (issue 22's shared step) walk it once, not K times.
    """
    leaves = {} if leaves is None else leaves
    live = [
        sig.form.is_required(s) or any(fgraph.clients.get(r) for r in s.results) for s in sig.slots
    ]
    while True:
        outputs = [(b, v) for s, on in zip(sig.slots, live) if on for b, v in s.outputs]
        read: set[tuple[int, Variable]] = set()
        for b in range(sig.n_bodies):
            key = tuple(v for bb, v in outputs if bb == b)
            if key not in leaves:
                leaves[key] = scope_leaves(list(key))
            read.update((b, leaf) for leaf in leaves[key])
        grown = [on or any(p in read for p in s.params) for s, on in zip(sig.slots, live)]
        if grown == live:
            return [s for s, on in zip(sig.slots, live) if on]
        live = grown


def remove_dead_slots(fgraph: FunctionGraph) -> int:
    """Drop the dead slots of every consumer of ``fgraph``; return how many changed."""
    changed = 0
    leaves: Leaves = {}
    for sig in consumers(fgraph):  # each has a used output: a FunctionGraph drops a node whose last client goes
        live = live_slots(fgraph, sig, leaves)
        if len(live) < len(sig.slots):
            replace_consumer(fgraph, sig, live, reason="remove_dead_slots")
            changed += 1
    return changed
