"""A Scan with ``until`` whose traces are read only at their last step becomes a while loop.

Terms
-----
until-scan
    An in-graph Scan with a condition (``pytensor.scan(..., until=...)``): a
    do-while loop bounded by ``n_steps`` — each step runs the body, then stops
    when the condition holds or after ``n_steps`` steps. Its traces end where
    the loop stopped, so ``trace[-1]`` is the final state (the initial one when
    no step ran).
final-state read
    ``trace[-1]``: the only read of a trace this rewrite accepts (PR #191 of the
    design discussions: "replace trace[-1] by the final state").

An until-scan whose slots are only invariant arguments, untraced states and
single-tap traces read only at ``[-1]`` (no sequence, no per-step output, no
multi-tap trace or buffer) is the loop `innergraph.ops.loop.WhileLoop` computes
with a true pre-condition (``do_while``), ``max_steps = n_steps`` and the
post-condition ``not until``: it carries its states instead of writing them
into buffers, and under Numba it is one generated function with the body
inline (`innergraph.backends.numba_generated`). The step body is the Scan's body
with its params renumbered (states then arguments) and ``invert(until)`` as its
last output: nothing is copied.

*And back where a backend needs it*: the rewrite runs only when the linker being
compiled runs a `WhileLoop` as it is (`innergraph.core.dispatch.runs`: a JIT linker
with a conversion registered for it). Under a linker without one (JAX today)
the Scan is left alone and the lowering pass turns it into PyTensor's own Scan,
as before. Under PyTensor's thunk linkers (``py``, ``cvm``, ``vm``, ``c|py``) it
is not applied either: there a while loop calls its compiled bodies from a
Python loop, while PyTensor's Scan steps in C (``design/loops.md`` has the
numbers); ``INNERGRAPH_UNTIL_TO_WHILE=always`` applies it under every linker
that can run it (the tests use it to compare values under ``py`` and ``cvm``).

It runs as ``innergraph_until_to_while`` (``optdb`` 1.565, tags ``fast_run``,
``innergraph``, ``scan_until_to_while``) after the consumer rewrites have left the
Scan's signature as small as they can and before the lowering pass. It is on by
default under Numba and JAX: the while loop's steady call measured 0.87-1.01x the
Scan's on the until-scan benchmark cases (``design/loops.md``, "Until-scans as while
loops by default"); ``mode.excluding("scan_until_to_while")`` keeps the Scan.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.type import TensorType

from innergraph.core.dispatch import linker_being_compiled, load_on_demand, runs
from innergraph.core.fold import fold_function
from innergraph.core.graph import InnerGraph, param
from innergraph.core.instantiate import substitute
from innergraph.ops.loop import WhileLoop
from innergraph.ops.scan import Scan
from innergraph.rewriting.outer import first_row
from innergraph.protocol.signature import Signature, Slot, consumers
from innergraph.rewriting.untrace import last_step_reads
from innergraph.protocol.slots import Meaning
from innergraph.core.types import InnerGraphType

__all__ = ["ENV_FLAG", "until_scans_to_while_loops", "while_loop_of"]

#: ``always``: convert under every linker that runs a `WhileLoop` (thunk linkers included).
ENV_FLAG = "INNERGRAPH_UNTIL_TO_WHILE"


def _wanted(fgraph: FunctionGraph) -> bool:
    """Whether the linker being compiled should run until-scans as while loops."""
    linker = linker_being_compiled(fgraph)
    if linker is None:
        return False
    load_on_demand(type(linker))  # innergraph's Numba/JAX implementations, if any
    if not runs(linker, WhileLoop):
        return False
    from pytensor.link.basic import JITLinker

    return isinstance(linker, JITLinker) or os.environ.get(ENV_FLAG, "") == "always"


def _convertible(fgraph: FunctionGraph, sig: Signature) -> dict[Slot, list[Variable]] | None:
    """Per traced state, its final-state reads; None if ``sig`` is no until-scan this rewrite takes."""
    if not isinstance(sig.node.op, Scan) or not sig.is_while:
        return None
    reads: dict[Slot, list[Variable]] = {}
    for slot in sig.slots:
        meaning = sig.meaning(slot)
        if meaning in (Meaning.INVARIANT, Meaning.CONDITION):
            continue
        if meaning not in (Meaning.TRACE, Meaning.CARRY) or not isinstance(slot.args[0].type, TensorType):
            return None
        if meaning is Meaning.TRACE:
            if slot.in_taps != (-1,):
                return None
            last = last_step_reads(fgraph, slot.results[0])
            if last is None and fgraph.clients.get(slot.results[0]):
                return None
            reads[slot] = last or []
    return reads


def while_loop_of(sig: Signature) -> tuple[WhileLoop, list[Variable]]:
    """The `WhileLoop` node computing until-scan ``sig``'s final states: its op and inputs.

    The states are the Scan's traced states then its untraced ones (its param
    order), its arguments the step body's own.
    """
    states = sig.having(Meaning.TRACE, Meaning.CARRY)
    (until,) = sig.having(Meaning.CONDITION)
    invariants = sig.having(Meaning.INVARIANT)
    old_params = [slot.params[0][1] for slot in [*states, *invariants]]
    renumber = {p: param(i, p.type) for i, p in enumerate(old_params)}
    outputs = [slot.outputs[0][1] for slot in states]
    new_outs = substitute([*outputs, until.outputs[0][1]], renumber)
    step_outs = [*new_outs[:-1], pt.invert(new_outs[-1])]
    carry_types = [p.type for p in old_params[: len(states)]]
    step_type = InnerGraphType([p.type for p in old_params], [o.type for o in step_outs])
    step_fn = InnerGraph(step_type).make_node(*step_outs).outputs[0]
    cond_type = InnerGraphType(carry_types, [pt.constant(np.True_).type])
    cond_fn = InnerGraph(cond_type).make_node(pt.constant(np.True_)).outputs[0]
    if isinstance(sig.form.functions(sig.node)[0], Constant):
        cond_fn, step_fn = fold_function(cond_fn), fold_function(step_fn)
    init = [_initial(s.args[0], t) if sig.meaning(s) is Meaning.TRACE else s.args[0] for s, t in zip(states, carry_types, strict=True)]
    op = WhileLoop(len(states), 0, len(invariants), do_while=True, bounded=True)
    return op, [cond_fn, step_fn, sig.header[0], *init, *(s.args[0] for s in invariants)]


def _initial(buffer: Variable, row_type: TensorType) -> Variable:
    """A traced state's initial value, for a carry of ``row_type``, from its buffer (`first_row`, broadcast to a row).

    `WhileLoop.make_node` converts it to the carry's type (as it does every argument).
    """
    written = first_row(buffer)
    if written.type != row_type:  # a write broadcasts: [[1.]] into every column of the row
        written = pt.broadcast_to(written, pt.shape(buffer)[1:])
    return written


def _replacements(sig: Signature, reads: dict[Slot, list[Variable]], finals: Sequence[Variable]) -> list[tuple[Variable, Variable]]:
    states = sig.having(Meaning.TRACE, Meaning.CARRY)
    pairs = []
    for slot, final in zip(states, finals, strict=True):
        olds = reads.get(slot, []) if sig.meaning(slot) is Meaning.TRACE else list(slot.results)
        pairs += [(old, final) for old in olds]  # replace_all converts final to old's type (FunctionGraph.replace)
    return pairs


def until_scans_to_while_loops(fgraph: FunctionGraph) -> int:
    """Turn every until-scan of ``fgraph`` read only at its final states into a `WhileLoop`; how many."""
    if not any(isinstance(node.op, Scan) for node in fgraph.apply_nodes) or not _wanted(fgraph):
        return 0
    changed = 0
    for sig in consumers(fgraph):  # each made when reached: an earlier conversion may have replaced its inputs
        reads = _convertible(fgraph, sig)
        if reads is None:
            continue
        op, inputs = while_loop_of(sig)
        finals = op(*inputs)
        finals = [finals] if isinstance(finals, Variable) else list(finals)
        pairs = [(o, n) for o, n in _replacements(sig, reads, finals) if o in fgraph.clients]
        fgraph.replace_all(pairs, reason="innergraph_until_to_while")
        changed += 1
    return changed
