"""Per-step outputs computed after the loop, vectorized.

A nit-sot output (one value per step, fed back nowhere) whose expression reads
only values that are still known after the loop can be computed outside it, for
all steps at once (`pytensor.graph.replace.vectorize_graph`): sequences (row
``t``), non-sequences, constants, and mit-mot input taps whose slot no later
step overwrites (tap ``k`` of a state whose output taps are all ``> k`` reads
row ``t + k - min(in_taps)`` of the state's final buffer). The loop does less
work, and a state whose buffer only fed that output is now read by the outer
graph instead of being an unused result. Only outputs that read a state tap are
moved: those reading only sequences and non-sequences are the domain of
PyTensor's own ``scan_push_out_seq`` (its tests check what it leaves in the loop).
"""

from __future__ import annotations

from typing import Any, cast

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import vectorize_graph

from innergraph.graph import is_function, scope_leaves
from innergraph.rewriting.signature import Signature, consumers, replace_consumer

__all__ = ["push_out_per_step_outputs"]


def _after_loop_values(sig: Signature) -> dict[Variable, Variable]:
    """Param -> the outer variable holding its value at every step (leading axis = step)."""
    n_steps: Any = sig.header[0]
    values: dict[Variable, Variable] = {}
    for slot in sig.slots:
        if slot.kind == "seq":
            seq: Any = slot.args[0]
            values[slot.params[0][1]] = seq[:n_steps]
        elif slot.kind == "non_seq":
            values[slot.params[0][1]] = slot.args[0]
        elif slot.kind == "mit_mot":
            low, trace = min(slot.in_taps), cast(Any, slot.results[0])
            for tap, (_, p) in zip(slot.in_taps, slot.params, strict=True):
                if all(o > tap for o in slot.out_taps):
                    values[p] = trace[tap - low : tap - low + n_steps]
    return values


def push_out_per_step_outputs(fgraph: FunctionGraph) -> int:
    """Compute pushable nit-sot outputs of every loop outside it; return how many loops changed."""
    changed = 0
    for sig in consumers(fgraph):
        if sig.kind != "scan" or sig.is_while:
            continue
        values = _after_loop_values(sig)
        state_taps = {p for s in sig.slots if s.kind == "mit_mot" for _, p in s.params if p in values}
        pushed = {}
        for slot in sig.slots:
            if slot.kind != "nit_sot" or slot.args[0] is not sig.header[0] or not fgraph.clients.get(slot.results[0]):
                continue
            (_, out), = slot.outputs
            leaves = scope_leaves([out])
            if any(is_function(v) or not (isinstance(v, Constant) or v in values) for v in leaves) or not state_taps & set(leaves):
                continue
            new = vectorize_graph(out, {p: values[p] for p in leaves if p in values})
            pushed[slot.results[0]] = slot.results[0].type.filter_variable(new)
        if pushed:
            kept = [s for s in sig.slots if not (s.kind == "nit_sot" and s.results[0] in pushed)]
            replace_consumer(fgraph, sig, kept, forwarded=pushed, reason="push_out_per_step_outputs")
            changed += 1
    return changed
