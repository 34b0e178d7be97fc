"""Untracing: a state whose trace is only read at its last step keeps no trace.

A single-tap trace (`Meaning.TRACE`, a Scan's sit-sot) is *traced*: the loop writes every step's value into
an outer buffer. When the only reads of that buffer are ``trace[-1]`` (the
final value, which is all most loops return), the state becomes an untraced
sit-sot: the loop carries the value from step to step and returns the last one,
and the buffer, its allocation and the indexing go away: the slot becomes the
consumer's carry kind (`Meaning.CARRY`) for the same bodies. A trace nothing
reads after the loop (an *unread forward trace*: a state that only feeds the
others, such as a filter's mean when only its log-likelihood is returned, or
a forward loop whose gradient recomputes its values) is untraced the same way.

PyTensor does the same after lowering, node by node: ``scan_reduce_trace`` first
shrinks the buffer to one row, then ``scan_sit_sot_to_untraced`` rebuilds the
Scan, and each rebuild constructs a new native Op. Here the consumer is rebuilt
over a function shared by every consumer of the same body
(`innergraph.protocol.signature.sharing_rebuilt_functions`), so K loops over
one body cost one new body, and the native passes find nothing left to do.

Only counted loops (`innergraph.protocol.slots.Capabilities.counted`) with no
condition change. While loops are left alone: their traces end where the loop stopped, and the
last row is the last step's value only when the buffer was not over-allocated.
"""

from __future__ import annotations

from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import get_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.subtensor import Subtensor

from innergraph.rewriting.outer import first_row
from innergraph.protocol.signature import Slot, consumers, replace_consumer
from innergraph.protocol.slots import Meaning

__all__ = ["last_step_reads", "untrace_final_states"]


def last_step_reads(fgraph: FunctionGraph, trace: Variable) -> list[Variable] | None:
    """The ``trace[-1]`` variables reading ``trace`` (none when nothing reads it), or None if anything else reads it."""
    reads = []
    for client, _ in fgraph.clients.get(trace, []):
        op = getattr(client, "op", None)
        if not isinstance(op, Subtensor) or len(op.idx_list) != 1 or isinstance(op.idx_list[0], slice):
            return None
        try:
            if get_scalar_constant_value(client.inputs[1]) != -1:
                return None
        except NotScalarConstantError:
            return None
        reads.append(client.outputs[0])
    return reads


def untrace_final_states(fgraph: FunctionGraph) -> int:
    """Make sit-sot states read only at their last step untraced; return how many consumers changed."""
    changed = 0
    for sig in consumers(fgraph):
        if not sig.capabilities.counted or sig.is_while:
            continue
        slots: list[Slot] = []
        finals: dict[Variable, Variable] = {}  # each trace[-1] read -> a stand-in for the new untraced result
        untraced = False
        for slot in sig.slots:
            carry = sig.form.kind_for(Meaning.CARRY, slot.bodies)
            single_trace = sig.meaning(slot) is Meaning.TRACE and slot.in_taps == (-1,) and carry is not None
            reads = last_step_reads(fgraph, slot.results[0]) if single_trace else None
            if reads is None or carry is None:
                slots.append(slot)
                continue
            initial = first_row(slot.args[0])
            stand_in = initial.type()
            slots.append(slot.with_(kind=carry, args=(initial,), results=(stand_in,)))
            finals.update(dict.fromkeys(reads, stand_in))
            untraced = True
        if untraced:
            replace_consumer(fgraph, sig, slots, forwarded=finals, reason="untrace_final_states")
            changed += 1
    return changed
