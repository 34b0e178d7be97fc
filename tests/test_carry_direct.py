"""`innergraph.rewriting.carry` called directly, fast (issue 47's mutation run).

`tests/test_reverse.py` and `tests/test_checkpoint_carry.py` reach the carried
cotangents through PyTensor's gradients, compiled under several linkers. These tests
build the mit-mots themselves: native Scans with the taps asked for (a step linear in
its taps and its row), lifted, over buffers whose length the graph proves (``zeros(n +
k)`` with rows written in) or does not, in FunctionGraphs that are never compiled but by
the py linker without rewrites. They call `carried_form`, `enclosing_bindings` and the
pass `carry_cotangents`, and compare the pass's count and the slots it leaves with
literal ones, the new slots' arguments with the graphs they should be
(`equal_computations`), and the values after the pass with a NumPy loop. Loops nested
in a call, a conditional's branches, a for-loop's and a while loop's step are built
from explicit params, so that their buffers and step counts are the enclosing
consumer's params (as loop-invariant motion leaves a gradient's); taps of 300 and
three carries reach what taps of 1 and 2 cannot tell apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.op import ScanInfo
from pytensor.scan.utils import expand_empty

import innergraph
from innergraph.core.build import inner_graph
from innergraph.core.fold import fold_function
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.ops.scan import Scan
from innergraph.protocol.conversion import lift_graph
from innergraph.protocol.signature import Signature, Slot, consumers
from innergraph.protocol.slots import Meaning
from innergraph.rewriting import carry
from innergraph.rewriting.carry import carried_form, carry_cotangents, enclosing_bindings
from innergraph.testing.rewrites import rewritten
from typed import call, ifelse

PY = Mode(linker="py", optimizer="None")
X: Any = pt.dvector("x")
B: Any = pt.dvector("b")
N: Any = X.shape[0]
XV = np.array([0.5, -1.0, 2.0, 0.25, 1.5])
BV = np.linspace(-1.0, 1.0, 9)
WEIGHTS = (0.5, -0.25, 0.125, 0.75)


# ---- loops built here


def mit_mot_op(
    in_taps: Sequence[int], out_taps: Sequence[int], n_seqs: int = 1, n_nit_sot: int = 0, as_while: bool = False, rows: int = 0
) -> NativeScan:
    """A native Scan of one mit-mot with these taps: out tap ``j`` writes ``(j + 1) * total``, ``total`` = 0.25 + the rows
    + ``WEIGHTS[i % 4]`` times in tap ``i``; each nit-sot is ``total``; the loop never stops early (``as_while``). Its
    buffer is a vector, or a matrix of rows of ``rows`` elements."""
    seqs = [pt.dscalar(f"s{i}") for i in range(n_seqs)]
    taps = [pt.tensor(f"m{t}", shape=(None,) if rows else (), dtype="float64") for t in in_taps]
    total = pt.add(pt.constant(0.25), *seqs, *(tap * WEIGHTS[i % 4] for i, tap in enumerate(taps)))
    outputs = [total * (j + 1) for j in range(len(out_taps))] + [total + 0.0 for _ in range(n_nit_sot)]
    outputs += [pt.gt(total, np.inf)] if as_while else []
    info = ScanInfo(
        n_seqs=n_seqs,
        mit_mot_in_slices=(tuple(in_taps),),
        mit_mot_out_slices=(tuple(out_taps),),
        mit_sot_in_slices=(),
        sit_sot_in_slices=(),
        n_nit_sot=n_nit_sot,
        n_untraced_sit_sot=0,
        n_non_seqs=0,
        as_while=as_while,
    )
    return NativeScan([*seqs, *taps], outputs, info)


def numpy_loop(
    in_taps: Sequence[int], out_taps: Sequence[int], rows: Sequence[np.ndarray], buffer: np.ndarray, steps: int | None = None
) -> tuple[np.ndarray, list[Any]]:
    """`mit_mot_op`'s loop in NumPy (``steps``: the rows' length by default): the buffer after it, and the totals (its nit-sot)."""
    buffer = np.array(buffer, dtype="float64")
    low, totals = min(in_taps), []  # totals: floats, or rows
    for t in range(len(rows[0]) if steps is None else steps):
        total = 0.25 + sum(float(r[t]) for r in rows) + sum(WEIGHTS[i % 4] * buffer[t + tap - low] for i, tap in enumerate(in_taps))
        for j, tap in enumerate(out_taps):
            buffer[t + tap - low] = (j + 1) * total
        totals.append(total)
    return buffer, totals


def loop(in_taps: Sequence[int], out_taps: Sequence[int], buffer: Any, sequences: Sequence[Any] = (X,), steps: Any = N, **kwargs: Any) -> list[Any]:
    """The native loop's outputs (the buffer, then each nit-sot) over ``buffer``, ``steps`` steps."""
    op = mit_mot_op(in_taps, out_taps, n_seqs=len(sequences), **kwargs)
    outputs = op(steps, *sequences, buffer, *[steps] * op.info.n_nit_sot)
    return list(outputs) if isinstance(outputs, list | tuple) else [outputs]


def written(offset: int) -> Any:
    """A buffer of ``n + offset`` rows, ``b``'s first rows written in from row 1 (the outside contributions), 0.5 in row 0."""
    zeros = pt.zeros((N + offset,))
    return pt.inc_subtensor(pt.set_subtensor(zeros[1:], B[: N + offset - 1])[0], 0.5)


def written_value(offset: int, b: np.ndarray = BV) -> np.ndarray:
    """`written`'s buffer for ``XV`` and ``b``."""
    buffer = np.zeros(len(XV) + offset)
    buffer[1:] = b[: len(XV) + offset - 1]
    buffer[0] += 0.5
    return buffer


def carried(outputs: Sequence[Any], inputs: Sequence[Variable] = (X, B)) -> tuple[FunctionGraph, int]:
    """``outputs`` with their native loops lifted, after `carry_cotangents`; and its count."""
    return rewritten(carry_cotangents, list(inputs), lift_graph(list(outputs)))


def evaluate(fgraph: FunctionGraph, *values: Any) -> list[np.ndarray]:
    fn = pytensor.function(fgraph.inputs, fgraph.outputs, mode=PY, on_unused_input="ignore")
    return [np.asarray(v) for v in cast(list[Any], fn(*values))]


def slot_kinds(fgraph: FunctionGraph) -> list[list[str]]:
    """Each consumer's slot kinds, inputs before users."""
    return [[s.kind for s in sig.slots] for sig in consumers(fgraph)]


def one_signature(outputs: Sequence[Any]) -> tuple[FunctionGraph, Signature]:
    """The graph of ``outputs`` lifted (one loop), functions unfolded, and its loop's signature."""
    fgraph, _ = rewritten(lambda fg: 0, [X, B], lift_graph(list(outputs)))
    (sig,) = consumers(fgraph)
    return fgraph, sig


def buffer_of(slot: Slot) -> Any:
    """A mit-mot slot's buffer (its one argument), to be indexed."""
    return slot.args[0]


def close(got: Any, want: Any) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


# ---- carried_form


def test_a_sit_sots_gradient_form_is_one_carry_and_one_sequence():
    """Taps (0, 1) -> (1,): a carry over row 0 read at tap 0, written at tap 1, then the rows from 1 as a sequence."""
    buffer = written(1)
    _, sig = one_signature(loop((0, 1), (1,), buffer))
    seq, mit_mot = sig.slots
    got = carried_form(sig, mit_mot, sig.header[0])
    assert got is not None
    state, rest = got
    assert (state.kind, rest.kind) == ("untraced", "seq")
    assert equal_computations([*state.args, *rest.args], [buffer_of(mit_mot)[0], buffer_of(mit_mot)[1:]])
    assert state.params == (mit_mot.params[0],) and rest.params == (mit_mot.params[1],)
    assert state.outputs == mit_mot.outputs and state.output_types == mit_mot.output_types
    (result,) = state.results
    assert result is not mit_mot.results[0] and result.owner is None and result.type == state.args[0].type
    assert (state.in_taps, state.out_taps, rest.results) == ((), (), ())


def test_each_input_tap_from_the_output_tap_up_is_a_sequence():
    """Taps (0, 1, 2) -> (1,): a carry over row 0, then the rows from 1 and the rows from 2, each a sequence."""
    _, sig = one_signature(loop((0, 1, 2), (1,), written(2)))
    mit_mot = sig.slots[1]
    got = carried_form(sig, mit_mot, sig.header[0])
    assert got is not None
    assert [s.kind for s in got] == ["untraced", "seq", "seq"]
    buffer = buffer_of(mit_mot)
    assert equal_computations([s.args[0] for s in got], [buffer[0], buffer[1:], buffer[2:]])
    assert [s.params for s in got] == [(p,) for p in mit_mot.params]


def test_taps_are_shifted_to_start_at_zero():
    """Taps (-1, 0) -> (0,) are taps (0, 1) -> (1,): the same slots."""
    buffer = written(1)
    _, sig = one_signature(loop((-1, 0), (0,), buffer))
    got = carried_form(sig, sig.slots[1], sig.header[0])
    assert got is not None
    assert [s.kind for s in got] == ["untraced", "seq"]
    assert equal_computations([got[0].args[0], got[1].args[0]], [buffer_of(sig.slots[1])[0], buffer_of(sig.slots[1])[1:]])


def test_a_two_tap_mit_sots_gradient_form_is_two_carries_and_one_sequence():
    """Taps (0, 1, 2) -> (1, 2), output taps in either order: carries over rows 0 and 1 (output taps 1 and 2), then the rows from 2."""
    for out_taps in ((1, 2), (2, 1)):
        _, sig = one_signature(loop((0, 1, 2), out_taps, written(2)))
        mit_mot = sig.slots[1]
        got = carried_form(sig, mit_mot, sig.header[0])
        assert got is not None
        assert [s.kind for s in got] == ["untraced", "untraced", "seq"]
        buffer = buffer_of(mit_mot)
        assert equal_computations([s.args[0] for s in got], [buffer[0], buffer[1], buffer[2:]])
        assert [s.params for s in got] == [(mit_mot.params[0],), (mit_mot.params[1],), (mit_mot.params[2],)]
        by_tap = dict(zip(out_taps, mit_mot.outputs, strict=True))
        assert [s.outputs for s in got[:2]] == [(by_tap[1],), (by_tap[2],)]


def test_taps_below_the_output_tap_that_skip_one_make_a_trace():
    """Taps (0, 1, 2) -> (2,): a mit-sot over rows 0 and 1 at taps (-2, -1) in a buffer of ``n`` more rows; (0, 2) -> (2,):
    tap (-2,) over rows 0 and 1; then the rows from 2 as a sequence."""
    for in_taps, taps, params in (((0, 1, 2), (-2, -1), 2), ((0, 2), (-2,), 1)):
        _, sig = one_signature(loop(in_taps, (2,), written(2)))
        mit_mot = sig.slots[1]
        got = carried_form(sig, mit_mot, sig.header[0])
        assert got is not None
        trace, rest = got
        assert (trace.kind, trace.in_taps, rest.kind) == ("mit_sot", taps, "seq")
        buffer = buffer_of(mit_mot)
        assert equal_computations([trace.args[0], rest.args[0]], [expand_empty(buffer[:2], sig.header[0]), buffer[2:]])
        assert trace.params == mit_mot.params[:params] and rest.params == mit_mot.params[params:]
        assert trace.outputs == mit_mot.outputs and trace.results[0] is not mit_mot.results[0]


def test_forms_that_are_not_carried():
    """No input tap below the output tap (a per-step output), two output taps not one above an input tap each, output
    taps that write back the rows read (PyTensor's gradient's (-1, 0) -> (-1, 0), here (0, 1) -> (0, 1), whose
    output tap 0 has no input tap below it): None."""
    cases = (((0,), (0,)), ((1,), (0,)), ((0, 1), (1, 2)), ((0, 2, 3), (1, 3)), ((0, 1, 2), (0, 2)), ((0, 1), (0, 1)))
    for in_taps, out_taps in cases:
        _, sig = one_signature(loop(in_taps, out_taps, written(3)))
        assert carried_form(sig, sig.slots[1], sig.header[0]) is None, (in_taps, out_taps)


def test_a_form_without_a_carry_a_trace_or_a_sequence_kind_carries_nothing():
    """The slots are of the kinds the consumer declares; a form lacking any of the three gives None."""
    _, sig = one_signature(loop((0, 1), (1,), written(1)))
    assert carried_form(sig, sig.slots[1], sig.header[0]) is not None
    for meaning in (Meaning.CARRY, Meaning.TRACE, Meaning.SEQUENCE):
        kinds = tuple(k for k in sig.form.kinds if k.meaning is not meaning)
        lacking = dataclasses.replace(sig, form=dataclasses.replace(sig.form, kinds=kinds))
        assert carried_form(lacking, sig.slots[1], sig.header[0]) is None, meaning


# ---- the pass


def test_an_unread_buffer_becomes_a_carry_and_a_sequence():
    """Only the loop's per-step output is read: one consumer changed, the mit-mot gone, the numbers NumPy's."""
    buffer, totals = loop((0, 1), (1,), written(1), n_nit_sot=1)
    fgraph, changed = carried([totals])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "untraced", "nit_sot"]]
    _, want = numpy_loop((0, 1), (1,), [XV], written_value(1))
    (got,) = evaluate(fgraph, XV, BV)
    close(got, want)
    assert carry_cotangents(fgraph) == 0  # nothing left: the count of the pass over its own result


def test_a_buffer_read_at_its_final_position_becomes_a_carry():
    """``buffer[-1]`` and ``buffer[::-1][0]`` read the carry's final value; the numbers NumPy's, for 0 to 5 steps."""
    buffer = loop((0, 1), (1,), written(1))[0]
    fgraph, changed = carried([buffer[-1], buffer[::-1][0] * 2.0])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "untraced"]]
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Scan)]
    assert fgraph.outputs[0] is node.outputs[0]  # the final value itself
    for steps in range(6):
        want, _ = numpy_loop((0, 1), (1,), [XV[:steps]], written_value(1)[: steps + 1])
        got = evaluate(fgraph, XV[:steps], BV)
        close(got, [want[-1], want[-1] * 2.0])


def test_a_carry_with_two_contributions_per_step():
    """Taps (0, 1, 2) -> (1,) over ``n + 2`` rows, read at its last row: the numbers NumPy's, for 0 to 5 steps."""
    buffer = loop((0, 1, 2), (1,), written(2), n_nit_sot=1)
    fgraph, changed = carried([buffer[1]])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "seq", "untraced", "nit_sot"]]
    for steps in range(6):
        _, want = numpy_loop((0, 1, 2), (1,), [XV[:steps]], written_value(2)[: steps + 2])
        close(evaluate(fgraph, XV[:steps], BV)[0], want)


def test_two_carries_read_at_their_final_rows():
    """Taps (0, 1, 2) -> (1, 2): the last row is output tap 2's final value, the one before output tap 1's; single rows and
    slices of both (stacked), for 0 to 5 steps."""
    buffer = loop((0, 1, 2), (1, 2), written(2))[0]
    reads = [buffer[-1], buffer[-2], buffer[-2:], buffer[::-1][:2], buffer[:-3:-1]]
    fgraph, changed = carried(reads)
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "untraced", "untraced"]]
    for steps in range(6):
        want, _ = numpy_loop((0, 1, 2), (1, 2), [XV[:steps]], written_value(2)[: steps + 2])
        got = evaluate(fgraph, XV[:steps], BV)
        for g, w in zip(got, [want[-1], want[-2], want[-2:], want[::-1][:2], want[:-3:-1]], strict=True):
            close(g, w)


def test_three_carries_read_at_their_final_rows():
    """Taps (0, 1, 2, 3) -> (1, 2, 3), a mit-sot of taps -3, -2, -1's gradient: carries over rows 0, 1 and 2, read at the
    last three rows (output taps 3, 2 and 1), alone and as one slice; the numbers NumPy's, for 0 to 4 steps."""
    in_taps, out_taps = (0, 1, 2, 3), (1, 2, 3)
    _, sig = one_signature(loop(in_taps, out_taps, written(3)))
    got = carried_form(sig, sig.slots[1], sig.header[0])
    assert got is not None
    buffer = buffer_of(sig.slots[1])
    assert equal_computations([s.args[0] for s in got], [buffer[0], buffer[1], buffer[2], buffer[3:]])
    assert [s.params for s in got] == [(p,) for p in sig.slots[1].params]
    out = loop(in_taps, out_taps, written(3))[0]
    fgraph, changed = carried([out[-1], out[-2], out[-3], out[-3:]])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "untraced", "untraced", "untraced"]]
    for steps in range(5):
        want, _ = numpy_loop(in_taps, out_taps, [XV[:steps]], written_value(3)[: steps + 3])
        got_values = evaluate(fgraph, XV[:steps], BV)
        for g, w in zip(got_values, [want[-1], want[-2], want[-3], want[-3:]], strict=True):
            close(g, w)


def test_taps_beyond_the_small_ints():
    """Taps (0, 300) -> (300,) over ``n + 300`` rows: a trace (taps (-300,)) read whole. The offset proved and the
    output tap are equal ints, not one cached object."""
    buffer = pt.inc_subtensor(pt.zeros((N + 300,))[:2], B[:2])
    out = loop((0, 300), (300,), buffer)[0]
    fgraph, changed = carried([out])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "mit_sot"]]
    start = np.zeros(len(XV) + 300)
    start[:2] = BV[:2]
    want, _ = numpy_loop((0, 300), (300,), [XV], start)
    close(evaluate(fgraph, XV, BV)[0], want)


def test_a_constant_matrix_buffers_carry_is_not_inlined():
    """Over a constant matrix of zeros only the contributions are inlined: the carry's initial row is a constant with
    equal elements too, but its param changes each step."""
    buffer = pt.constant(np.zeros((len(XV) + 1, 3)))
    totals = loop((0, 1), (1,), buffer, n_nit_sot=1, rows=3)[1]
    fgraph, changed = carried([totals])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "untraced", "nit_sot"]]
    _, want = numpy_loop((0, 1), (1,), [XV], np.zeros((len(XV) + 1, 3)))
    close(evaluate(fgraph, XV, BV)[0], np.array(want))


def test_a_trace_is_read_whole():
    """Taps (0, 1, 2) -> (2,): the carried trace is the buffer itself, row for row, so any read of it is one of the trace."""
    buffer = loop((0, 1, 2), (2,), written(2))[0]
    fgraph, changed = carried([buffer, buffer[1:].sum()])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "mit_sot"]]
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Scan)]
    assert fgraph.outputs[0] is node.outputs[0]
    want, _ = numpy_loop((0, 1, 2), (2,), [XV], written_value(2))
    got = evaluate(fgraph, XV, BV)
    close(got[0], want)
    close(got[1], want[1:].sum())


def test_buffers_of_unproved_length_or_read_elsewhere_are_left():
    """A buffer one row shorter or longer than ``n + k``, of unknown length, or read at a row the carry does not end in
    (beside its final one): nothing changes."""
    cases = [
        (written(0), lambda b: [b[-1]]),
        (written(2), lambda b: [b[-1]]),
        (B, lambda b: [b[-1]]),
        (written(1), lambda b: [b[-1], b[0]]),
        (written(1), lambda b: [b[-2:]]),
        (written(1), lambda b: [b.sum()]),
    ]
    for buffer, reads in cases:
        out = loop((0, 1), (1,), buffer)[0]
        fgraph, changed = carried(reads(out))
        assert changed == 0
        assert slot_kinds(fgraph) == [["seq", "mit_mot"]]
    # two carries: the row before the last two is no carry's
    out = loop((0, 1, 2), (1, 2), written(2))[0]
    fgraph, changed = carried([out[-3:]])
    assert (changed, slot_kinds(fgraph)) == (0, [["seq", "mit_mot"]])


def test_two_loops_are_counted_and_a_while_loop_is_left():
    """A while loop's mit-mot stays (no gradient builds one); the counted loops before and after it change: 2."""
    first = loop((0, 1), (1,), written(1))[0]
    middle = loop((0, 1), (1,), pt.inc_subtensor(written(1)[0], first[-1]), as_while=True)[0]
    last = loop((0, 1), (1,), pt.inc_subtensor(written(1)[0], middle[-1]))[0]
    fgraph, changed = carried([last[-1]])
    assert changed == 2
    assert slot_kinds(fgraph) == [["seq", "seq", "untraced"], ["seq", "mit_mot", "until"], ["seq", "seq", "untraced"]]
    want, _ = numpy_loop((0, 1), (1,), [XV], written_value(1))
    for _ in range(2):
        buffer = written_value(1)
        buffer[0] += want[-1]
        want, _ = numpy_loop((0, 1), (1,), [XV], buffer)
    close(evaluate(fgraph, XV, BV)[0], want[-1])


def test_a_constant_zero_buffers_contributions_are_inlined_at_once():
    """Over a constant buffer of zeros the contributions are rows of zeros: no sequence is made, its param is 0 in the
    body. A sequence of zeros the loop had before stays (it is not the pass's to inline)."""
    zeros = pt.constant(np.zeros(len(XV)))
    totals = loop((0, 1), (1,), pt.constant(np.zeros(len(XV) + 1)), sequences=(X, zeros), n_nit_sot=1)[1]
    fgraph, changed = carried([totals])
    assert changed == 1
    assert slot_kinds(fgraph) == [["seq", "seq", "untraced", "nit_sot"]]
    (sig,) = consumers(fgraph)
    assert sig.slots[1].args[0] is zeros  # the loop's own zeros, not inlined
    _, want = numpy_loop((0, 1), (1,), [XV], np.zeros(len(XV) + 1))
    close(evaluate(fgraph, XV, BV)[0], want)


def test_the_pass_leaves_calls_alone():
    """A call is no counted loop: 0."""
    out = call(lambda v: v * 2.0, X)
    fgraph, changed = carried([out])
    assert changed == 0 and slot_kinds(fgraph) == [["arg", "out"]]


# ---- loops in bodies


def nested_loop(buffer: Any, steps: Any) -> Any:
    """A loop without sequences over ``buffer`` for ``steps`` steps, lifted, its buffer's last row."""
    out = loop((0, 1), (1,), buffer, sequences=(), steps=steps)[0]
    return lift_graph([out[-1]])[0]


def test_a_loop_in_a_call_body_is_proved_through_the_calls_arguments():
    """The buffer and the step count are the call's params, bound to ``zeros(n + 1)`` and ``n``: carried; bound to
    ``zeros(n + 2)``: left."""
    for extra, count in ((1, 1), (2, 0)):
        out = call(nested_loop, pt.inc_subtensor(pt.zeros((N + extra,))[1:], B[: N + extra - 1]), N)
        fgraph, changed = carried([out])
        assert changed == count
        inner = [s for s in consumers(fgraph) if isinstance(s.node.op, Scan)]
        assert [[s.kind for s in sig.slots] for sig in inner] == [["seq", "untraced"] if count else ["mit_mot"]]
        for steps in range(4):
            want, _ = numpy_loop((0, 1), (1,), [], np.r_[0.0, BV[: steps + extra - 1]], steps)
            close(evaluate(fgraph, XV[:steps], BV)[0], want[-1])


def test_enclosing_bindings_are_each_bodys_invariant_arguments():
    """In a call body: the params -> the call's arguments; in the outer graph: none; in a loop's body: only its
    non-sequences (not its sequence's param)."""
    out = call(nested_loop, pt.zeros((N + 1,)), N)
    fgraph, _ = rewritten(lambda fg: 0, [X, B], [out])
    scopes = carry._Scopes(fgraph)
    (outer,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Call)]
    (inner,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Scan)]
    ((bound,),) = [enclosing_bindings(scopes, inner.node)]
    assert bound == {p: s.args[0] for s in outer.slots for _, p in s.params}
    assert len(bound) == 2
    assert enclosing_bindings(scopes, outer.node) == []

    def step(row: Any, acc: Any, buffer: Any, steps: Any) -> Any:
        return acc + row * nested_loop(buffer, steps)

    total = innergraph.scan(step, sequences=[X], outputs_info=[pt.constant(0.0, dtype="float64")], non_sequences=[pt.zeros((N + 1,)), N], return_updates=False)
    fgraph, changed = carried([total[-1]])
    assert changed == 1
    scopes = carry._Scopes(fgraph)
    inner_loop, outer_loop = consumers(fgraph)
    ((bound,),) = [enclosing_bindings(scopes, inner_loop.node)]
    assert set(bound.values()) == {s.args[0] for s in outer_loop.slots if outer_loop.meaning(s) is Meaning.INVARIANT}
    assert len(bound) == 2


def test_a_loops_carried_state_binds_nothing():
    """In a counted loop's body, a nested loop whose step count is the loop's carried state (counting down from ``n``,
    over a buffer of ``n + 1`` rows) is left: the state's initial value ``n`` proves nothing about its later values. With
    the count a loop-invariant argument instead, the nested loop is carried."""
    row, acc, steps, buffer = pt.dscalar("row"), pt.dscalar("acc"), pt.lscalar("steps"), pt.dvector("buffer")
    step = inner_graph([acc + row * nested_loop(buffer, steps), steps - 1], [row, acc, steps, buffer], capture="leaves")
    acc_final, _ = cast(list[Any], ForiLoop(1, 2)(fold_function(step.function), N, X, pt.constant(0.0, dtype="float64"), N, written(1)))
    fgraph, changed = carried([acc_final])
    assert changed == 0
    (outer,) = [s for s in consumers(fgraph) if isinstance(s.node.op, ForiLoop)]
    assert [s.kind for s in outer.slots] == ["seq", "carry", "carry", "arg"]
    assert [s.kind for s in next(consumers(fgraph)).slots] == ["mit_mot"]
    want = 0.0
    for t in range(len(XV)):
        last, _ = numpy_loop((0, 1), (1,), [], written_value(1), len(XV) - t)
        want += XV[t] * last[-1]
    close(evaluate(fgraph, XV, BV)[0], want)

    fixed = inner_graph([acc + row * nested_loop(buffer, steps)], [row, acc, steps, buffer], capture="leaves")
    out = ForiLoop(1, 1)(fold_function(fixed.function), N, X, pt.constant(0.0, dtype="float64"), N, written(1))
    fgraph, changed = carried([out])
    assert changed == 1
    last, _ = numpy_loop((0, 1), (1,), [], written_value(1), len(XV))
    close(evaluate(fgraph, XV, BV)[0], XV.sum() * last[-1])


def test_each_branchs_loop_is_proved_through_its_own_arguments():
    """A conditional's two bodies have params of one index and type, which are one variable: the then branch's loop
    over ``n + 1`` rows is carried, the else branch's over ``n + 2`` rows is not; each reads its own arguments."""
    buffer, steps = pt.dvector("buffer"), pt.lscalar("steps")
    then_c = inner_graph([nested_loop(buffer, steps)], [buffer, steps], capture="leaves")
    else_c = inner_graph([nested_loop(buffer, steps) * 2.0], [buffer, steps], capture="leaves")
    functions = [fold_function(then_c.function), fold_function(else_c.function)]
    out = IfElse(2)(pt.lt(B[0], 0.0), *functions, written(1), N, written(2), N)
    fgraph, changed = carried([out])
    assert changed == 1
    (branch,) = [s for s in consumers(fgraph) if isinstance(s.node.op, IfElse)]
    assert [s.kind for s in branch.slots] == ["then_arg", "then_arg", "else_arg", "else_arg", "out"]
    assert [s.param(0) for s in branch.slots[:2]] == [s.param(1) for s in branch.slots[2:4]]  # the premise: one variable
    loops = [[s.kind for s in sig.slots] for sig in consumers(fgraph) if isinstance(sig.node.op, Scan)]
    assert sorted(loops) == [["mit_mot"], ["seq", "untraced"]]  # the values say which
    for b0 in (-1.0, 1.0):
        values = np.r_[b0, BV[1:]]
        last, _ = numpy_loop((0, 1), (1,), [], written_value(1 if b0 < 0 else 2, values), len(XV))
        close(evaluate(fgraph, XV, values)[0], last[-1] * (1.0 if b0 < 0 else 2.0))


def test_a_while_loops_step_body_reads_its_own_arguments():
    """A while loop's condition body reads a shared argument (``n + 2`` rows) at the index where its step body reads a
    step argument (the buffer, ``n + 1`` rows) of the same type, one variable: the loop in the step body is carried."""
    i, acc, buffer, steps, other = pt.lscalar("i"), pt.dscalar("acc"), pt.dvector("buffer"), pt.lscalar("steps"), pt.dvector("other")
    cond = inner_graph([pt.lt(i + pt.cast(other[0] * 0.0, "int64"), 2)], [i, acc, other], capture="leaves")
    following = [i + 1, acc + nested_loop(buffer, steps) + other[0]]
    step = inner_graph([*following, pt.lt(following[0], 2)], [i, acc, buffer, steps, other], capture="leaves")
    init = [pt.constant(0, dtype="int64"), pt.constant(0.0, dtype="float64")]
    _, acc_final = cast(list[Any], WhileLoop(2, 0, 2)(fold_function(cond.function), fold_function(step.function), *init, written(1), N, written(2)))
    fgraph, changed = carried([acc_final])
    assert changed == 1
    (loop_sig,) = [s for s in consumers(fgraph) if isinstance(s.node.op, WhileLoop)]
    assert [s.kind for s in loop_sig.slots] == ["carry", "carry", "step_arg", "step_arg", "arg", "cond", "post"]
    assert loop_sig.slots[2].param(1) is loop_sig.slots[4].param(0)  # the premise: one variable
    (inner,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Scan)]
    assert [s.kind for s in inner.slots] == ["seq", "untraced"]
    last, _ = numpy_loop((0, 1), (1,), [], written_value(1), len(XV))
    close(evaluate(fgraph, XV, BV)[0], 2 * (last[-1] + written_value(2)[0]))


def test_a_body_read_by_a_consumer_not_seen_proves_nothing():
    """The call's function also read by a call whose signature is fixed (an explicit connection pattern): no binding is
    certain, so the loop in the body is left."""
    out = call(nested_loop, pt.zeros((N + 1,)), N)
    fgraph, _ = rewritten(lambda fg: 0, [X, B], [out])
    (outer,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Call)]
    (inner,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Scan)]
    function = outer.node.inputs[0]
    fixed: Apply = Call(connection=((True, True),)).make_node(function, *outer.node.inputs[1:])
    fgraph.add_output(fixed.outputs[0])
    assert [s.node for s in consumers(fgraph)] == [inner.node, outer.node]
    assert enclosing_bindings(carry._Scopes(fgraph), inner.node) == []
    assert carry_cotangents(fgraph) == 0


def test_the_scopes_are_found_again_after_a_change():
    """`_Scopes` remembers each body's nodes until told of a change."""
    out = call(nested_loop, pt.zeros((N + 1,)), N)
    fgraph, _ = rewritten(lambda fg: 0, [X, B], [out])
    scopes = carry._Scopes(fgraph)
    (inner,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Scan)]
    assert scopes.holding(inner.node) is not None and len(cast(list[Any], scopes.holding(inner.node))) == 1
    assert carry_cotangents(fgraph) == 1
    (new,) = [s for s in consumers(fgraph) if isinstance(s.node.op, Scan)]
    assert scopes.holding(new.node) == []  # not yet seen
    scopes.changed()
    assert [b for _, b in cast(list[Any], scopes.holding(new.node))] == [0]
    assert not isinstance(new.node.inputs[1], Constant)
