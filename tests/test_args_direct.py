"""`innergraph.rewriting.args` called directly, fast (issue 47's mutation run).

The module's end-to-end tests (``tests/test_rewrites.py``, ``tests/test_carry_constant_rows.py``)
build loops with `innergraph.scan` and go through `check_rewrite`, which compiles. These
build consumer nodes from explicit params (calls, conditionals of two bodies, while loops,
for-loops with sequences) and call every piece: `argument_kinds`, `inline_constant`,
`invariant_row` (constants, slices of constants, allocations), `inlined_row`, and the passes
`merge_arguments`, `pass_large_constants`, `pass_nested_large_constants` and
`outline_constants` on FunctionGraphs, against literal slots and counts (each pass's
answer), the bodies they should give (`equal_computations`), identity where the module
returns a variable itself, and values run by the py linker without rewrites against
the graph before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply, Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import in2out
from pytensor.link.c.type import generic
from pytensor.tensor.random.type import RandomGeneratorType
from pytensor.tensor.rewriting.basic import constant_folding
from pytensor.tensor.subtensor import Subtensor
from pytensor.tensor.variable import TensorConstant

import innergraph
from innergraph.core.graph import body_of, scope_toposort
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.protocol.signature import Signature, Slot, consumers, sharing_rebuilt_functions, signature
from innergraph.protocol.slots import Meaning
from innergraph.rewriting import args
from innergraph.rewriting.args import (
    LARGE_CONSTANT,
    argument_kinds,
    inline_constant,
    inlined_row,
    invariant_row,
    merge_arguments,
    outline_constants,
    pass_large_constants,
    pass_nested_large_constants,
)
from consumer_nodes import K, call_node, evaluate, function, ifelse_node
from typed import one_tensor, param

D: Any = pt.dscalar().type
V: Any = pt.dvector().type
F32: Any = pt.fscalar().type
P0: Any = param(0, D)
P1: Any = param(1, D)
P2: Any = param(2, D)
P3: Any = param(3, D)
P4: Any = param(4, D)
A: Any = pt.dscalar("a")
B: Any = pt.dscalar("b")
C: Any = pt.dscalar("c")
N: Any = pt.lscalar("n")
XS: Any = pt.dvector("xs")
AV, BV, CV = 0.5, -1.25, 2.0


def f64(value: Any) -> Any:
    """A float64 constant (``pt.constant(2.0)`` is a float32)."""
    return pt.constant(np.asarray(value, dtype="float64"))


def big(first: float = 0.0, size: int = LARGE_CONSTANT + 1) -> Any:
    """A large constant (more than `LARGE_CONSTANT` elements): ``first, first + 1, ...``."""
    return f64(np.arange(size) + first)


def fori_node(outputs: Sequence[Any], n: Any, seqs: Sequence[Any], init: Sequence[Any], arguments: Sequence[Any]) -> Apply:
    """A for-loop of ``n`` steps whose step computes ``outputs`` (one per carry) from rows of ``seqs``, the carries and ``arguments``."""
    types = [s.type.clone(shape=s.type.shape[1:]) for s in seqs] + [v.type for v in [*init, *arguments]]
    return ForiLoop(len(seqs), len(init)).make_node(function(outputs, types), n, *seqs, *init, *arguments)


def while_node(cond: Any, step: Sequence[Any], init: Sequence[Any], cond_args: Sequence[Any], step_args: Sequence[Any], shared: Sequence[Any]) -> Apply:
    """A while loop: ``cond`` reads params (carries, cond_args, shared), ``step`` (carries, step_args, shared), its last output the condition."""
    cond_fn = function([cond], [v.type for v in [*init, *cond_args, *shared]])
    step_fn = function(step, [v.type for v in [*init, *step_args, *shared]])
    return WhileLoop(len(init), len(cond_args), len(step_args)).make_node(cond_fn, step_fn, *init, *cond_args, *step_args, *shared)


def sig_of(node: Apply) -> Signature:
    sig = signature(node)
    assert sig is not None
    return sig


def only(fg: FunctionGraph, op_type: type) -> Apply:
    (node,) = [n for n in fg.apply_nodes if isinstance(n.op, op_type)]
    return node


def outputs_of(fn: Variable) -> tuple[Variable, ...]:
    return body_of(fn).outputs


def graph(inputs: Sequence[Variable], outputs: Sequence[Variable]) -> FunctionGraph:
    return FunctionGraph(list(inputs), list(outputs), clone=False)


def rewritten(rewrite: Callable[[FunctionGraph], int], inputs: Sequence[Variable], outputs: Sequence[Variable], values: Sequence[Any]) -> tuple[FunctionGraph, int]:
    """``rewrite`` run on a graph of ``outputs``; its values before and after checked equal."""
    before = evaluate(inputs, outputs, values)
    fg = graph(inputs, outputs)
    count = rewrite(fg)
    after = evaluate(fg.inputs, fg.outputs, values)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    return fg, count


def constants_in(fn: Variable) -> list[Any]:
    """The constants a function's body reads in its own scope, and the ones it returns."""
    body = body_of(fn)
    found = [v for node in scope_toposort(body.outputs) for v in node.inputs if isinstance(v, Constant)]
    return found + [v for v in body.outputs if isinstance(v, Constant)]


def large_in(fn: Variable) -> list[Any]:
    return [v for v in constants_in(fn) if np.size(v.data) > LARGE_CONSTANT]


# ---- argument_kinds


def test_argument_kinds_are_each_bodys_own_invariant_kind():
    call = sig_of(call_node([P0 + 1.0], [A]))
    assert argument_kinds(call) == ["arg"]
    ifelse = sig_of(ifelse_node([P0 + 1.0], [A], [P0 * 2.0], [B]))
    assert argument_kinds(ifelse) == ["then_arg", "else_arg"]
    # loops keep their constants: no kinds, though each body has an invariant kind of its own
    fori = sig_of(fori_node([P0 + P1], N, [], [A], [B]))
    assert argument_kinds(fori) is None
    loop = sig_of(while_node(P0 < P1, [P0 + 1.0, P0 < 3.0], [A], [B], [], []))
    assert argument_kinds(loop) is None
    # a consumer with a body no invariant kind binds alone: None, not the other body's kind
    no_else = replace(ifelse.form, kinds=tuple(k for k in ifelse.form.kinds if k.name != "else_arg"))
    assert argument_kinds(replace(ifelse, form=no_else)) is None
    assert argument_kinds(replace(call, form=replace(call.form, kinds=()))) is None


# ---- inline_constant


def test_a_small_constant_is_inlined_as_each_params_type():
    p, q = param(0, V), param(3, V)
    slot = Slot("arg", (pt.constant(np.array([1.5, 2.5], dtype="float32")),), ((0, p), (1, q)))
    values = inline_constant(slot)
    assert values is not None and list(values) == [p, q]
    for par, value in values.items():
        assert isinstance(value, TensorConstant) and value.type.dtype == "float64" and value.type.shape == (2,)
        assert par.type.is_super(value.type)
        np.testing.assert_array_equal(value.data, [1.5, 2.5])
    assert values[p] is not values[q]
    # at the boundary: LARGE_CONSTANT elements are small, one more is large
    edge = f64(np.zeros(LARGE_CONSTANT))
    assert inline_constant(Slot("arg", (edge,), ((0, p),))) is not None
    assert inline_constant(Slot("arg", (f64(np.zeros(LARGE_CONSTANT + 1)),), ((0, p),))) is None


@pytest.mark.parametrize("meaning", [Meaning.SEQUENCE, Meaning.CARRY, Meaning.TRACE, Meaning.OUTPUT])
def test_only_an_invariant_constant_is_inlined(meaning):
    slot = Slot("x", (f64(2.0),), ((0, P0),))
    assert inline_constant(slot, meaning) is None
    assert inline_constant(slot, Meaning.INVARIANT) is not None


def test_inline_constant_refuses_what_is_no_small_fitting_constant():
    assert inline_constant(Slot("arg", (A,), ((0, P0),))) is None  # not a constant
    assert inline_constant(Slot("arg", (pt.exp(f64(1.0)),), ((0, P0),))) is None  # not folded yet
    # a constant the param's type cannot hold: each of the three exceptions
    int_param = param(0, pt.lscalar().type)
    assert inline_constant(Slot("arg", (f64(0.5),), ((0, int_param),))) is None  # TypeError (precision)
    assert inline_constant(Slot("arg", (Constant(generic, "abc"),), ((0, P0),))) is None  # ValueError (a string)
    rng_type = RandomGeneratorType()
    rng = Constant(rng_type, np.random.default_rng(0))
    assert inline_constant(Slot("arg", (rng,), ((0, param(0, rng_type)),))) is None  # AttributeError (no tensor)


# ---- invariant_row, its slices and allocations


def seq_slot(arg: Any, p: Any = P0) -> Slot:
    return Slot("seq", (arg,), ((0, p),))


def fori_sig(n: Any) -> Signature:
    """A for-loop's signature, for its header: `invariant_row` reads ``n_steps`` from it."""
    return sig_of(fori_node([P0 + P1], n, [XS], [A], []))


def test_the_row_of_a_constant_sequence_of_equal_rows():
    sig = fori_sig(pt.constant(4, dtype="int64"))
    row = invariant_row(sig, seq_slot(f64(np.full((4, 3), 2.5)), param(0, V)))
    assert isinstance(row, TensorConstant) and row.type.dtype == "float64"
    np.testing.assert_array_equal(row.data, [2.5, 2.5, 2.5])
    one = invariant_row(fori_sig(pt.constant(1, dtype="int64")), seq_slot(f64([7.0])))
    assert isinstance(one, TensorConstant) and float(one.data) == 7.0
    # a float32 constant's row, as the float64 param
    as_param = invariant_row(sig, seq_slot(pt.constant(np.full(5, 1.5, dtype="float32"))))
    assert isinstance(as_param, TensorConstant) and as_param.type == D and float(as_param.data) == 1.5


def test_a_constant_sequence_with_other_rows_or_too_few_has_no_row():
    four = fori_sig(pt.constant(4, dtype="int64"))
    assert invariant_row(four, seq_slot(f64([1.0, 2.0]))) is None
    assert invariant_row(four, seq_slot(f64([1.0, 1.0, 1.0, 2.0]))) is None
    assert invariant_row(four, seq_slot(f64([[1.0, 2.0]] * 3 + [[1.0, 3.0]]), param(0, V))) is None
    assert invariant_row(four, seq_slot(f64(np.full(3, 1.5)))) is None  # 3 rows for 4 steps
    assert invariant_row(four, seq_slot(f64(np.full(4, 1.5)))) is not None
    assert invariant_row(four, seq_slot(f64(2.0))) is None  # no rows at all
    # the step count is the first header input (`Capabilities.counted`), whatever follows it
    two = fori_sig(pt.constant(2, dtype="int64"))
    longer = replace(two, header=(*two.header, pt.constant(10, dtype="int64")))
    assert invariant_row(longer, seq_slot(f64(np.full(3, 1.5)))) is not None
    # with a symbolic length the constant's length is not checked, but there must be a row
    symbolic = fori_sig(N)
    assert invariant_row(symbolic, seq_slot(f64(np.full(3, 1.5)))) is not None
    assert invariant_row(symbolic, seq_slot(f64(np.zeros(0)))) is None


def test_the_row_of_a_slice_of_a_constant():
    c = f64(np.full((3, 2), -1.5))
    four = fori_sig(pt.constant(4, dtype="int64"))
    for sliced in (c[1:], c[1:3], c[:2]):
        row = invariant_row(four, seq_slot(sliced, param(0, V)))  # its length is not checked
        assert isinstance(row, TensorConstant)
        np.testing.assert_array_equal(row.data, [-1.5, -1.5])
    # no slice along time only: a row, an index pair, no index, a slice of no constant
    assert invariant_row(four, seq_slot(c[1])) is None
    assert invariant_row(four, seq_slot(c[1:, 0])) is None
    assert invariant_row(four, seq_slot(Subtensor(()).make_node(c).outputs[0], param(0, V))) is None
    assert invariant_row(four, seq_slot(pt.as_tensor(XS)[1:])) is None
    # the rows of the whole constant count, not only the slice's (a miss, never a wrong row)
    assert invariant_row(four, seq_slot(f64([5.0, 1.0, 1.0, 1.0])[1:])) is None


def test_the_row_of_an_allocation_along_time():
    sig = fori_sig(N)
    assert invariant_row(sig, seq_slot(pt.alloc(C, N))) is C  # the value itself, as the param
    vec = pt.dvector("vec")
    row = invariant_row(sig, seq_slot(pt.alloc(vec, N, 3), param(0, V)))
    assert row is not None and equal_computations([row], [one_tensor(pt.alloc(vec, 3))])
    first = pt.tensor("first", dtype="float64", shape=(1, 3))
    row = invariant_row(sig, seq_slot(pt.alloc(first, N, 3), param(0, V)))
    assert row is not None and equal_computations([row], [one_tensor(pt.alloc(first[0], 3))])
    one = pt.tensor("one", dtype="float64", shape=(1,))
    row = invariant_row(sig, seq_slot(pt.alloc(one, N)))
    assert row is not None and equal_computations([row], [one[0]])
    # a value of the sequence's rank whose first length may be more than one: no row
    open_rows = pt.dmatrix("open_rows")
    assert invariant_row(sig, seq_slot(pt.alloc(open_rows, N, 3), param(0, V))) is None
    # a row of another dtype than the param's
    assert invariant_row(sig, seq_slot(pt.alloc(C, N), param(0, F32))) is None
    # no allocation
    assert invariant_row(sig, seq_slot(XS)) is None
    assert invariant_row(sig, seq_slot(pt.exp(XS))) is None


def test_the_row_of_an_allocation_of_a_constant_is_a_constant():
    sig = fori_sig(N)
    row = invariant_row(sig, seq_slot(pt.alloc(f64(2.0), N, 3), param(0, V)))
    assert isinstance(row, TensorConstant)
    np.testing.assert_array_equal(row.data, [2.0, 2.0, 2.0])
    row = invariant_row(sig, seq_slot(pt.alloc(f64([[1.0, 2.0, 3.0]]), N, 3), param(0, V)))
    assert isinstance(row, TensorConstant)
    np.testing.assert_array_equal(row.data, [1.0, 2.0, 3.0])
    row = invariant_row(sig, seq_slot(pt.alloc(f64(4.0), N)))
    assert isinstance(row, TensorConstant) and row.type == D and float(row.data) == 4.0
    # a symbolic row length: an allocation of the constant, not a constant
    row = invariant_row(sig, seq_slot(pt.alloc(f64(2.0), N, K), param(0, V)))
    assert row is not None and not isinstance(row, Constant) and equal_computations([row], [one_tensor(pt.alloc(f64(2.0), K))])


def test_a_sequence_becomes_the_invariant_kind_of_a_counted_loop_only():
    fori = sig_of(fori_node([P0 + P1], N, [pt.alloc(C, N)], [A], []))
    (seq,) = fori.having(Meaning.SEQUENCE)
    assert args._invariant_row(fori, seq) == (C, "arg")
    assert inlined_row(fori, seq) is None  # a symbolic row: not inlined
    # not counted: a while loop's argument, though it is an allocation
    loop = sig_of(while_node(P0 < 3.0, [P0 + param(1, V).sum(), P0 < 3.0], [A], [], [], [pt.alloc(C, N)]))
    (shared,) = loop.having(Meaning.INVARIANT)
    assert args._invariant_row(loop, shared) is None
    # no invariant kind for the slot's bodies
    no_arg = replace(fori, form=replace(fori.form, kinds=tuple(k for k in fori.form.kinds if k.name != "arg")))
    assert args._invariant_row(no_arg, seq) is None
    # a sequence slot binding other than one param
    assert args._invariant_row(fori, seq.with_(params=())) is None
    assert args._invariant_row(fori, seq.with_(params=((0, P0), (0, P1)))) is None


def test_a_small_constant_row_is_inlined_at_once():
    fori = sig_of(fori_node([P0 + P1], N, [f64(np.full(5, 1.5))], [A], []))
    (seq,) = fori.having(Meaning.SEQUENCE)
    values = inlined_row(fori, seq)
    assert values is not None and list(values) == [seq.params[0][1]]
    (value,) = values.values()
    assert isinstance(value, TensorConstant) and float(value.data) == 1.5
    rows = f64(np.ones((5, LARGE_CONSTANT + 1)))
    large = sig_of(fori_node([param(0, rows.type.clone(shape=rows.type.shape[1:])).sum() + P1], N, [rows], [A], []))
    (seq,) = large.having(Meaning.SEQUENCE)
    assert inlined_row(large, seq) is None  # a large row stays an argument
    other = sig_of(fori_node([P0 + P1], N, [f64([1.0, 2.0, 1.0])], [A], []))
    assert inlined_row(other, other.having(Meaning.SEQUENCE)[0]) is None


def test_a_scans_sequence_slice_of_a_constant_becomes_a_non_sequence():
    seq = f64(np.full(6, 0.5))  # innergraph.scan reads it as seq[0:][:n]; constant folding leaves a slice of a constant
    out = innergraph.scan(lambda x, s: s + x, sequences=[seq], outputs_info=[A], n_steps=N, return_updates=False)
    fg = graph([A, N], [out])
    in2out(constant_folding).rewrite(fg)
    (sig,) = consumers(fg)
    (slot,) = sig.having(Meaning.SEQUENCE)
    found = args._invariant_row(sig, slot)
    assert found is not None and found[1] == "non_seq" and float(cast(Any, found[0]).data) == 0.5


# ---- merge_arguments


def test_duplicate_arguments_of_a_call_become_one_param():
    node = call_node([P0 * P1 + P2], [A, A, B])
    fg, count = rewritten(merge_arguments, [A, B], node.outputs, [AV, BV])
    assert count == 1
    new = only(fg, Call)
    assert new.inputs[1:] == [A, B]
    assert equal_computations(list(outputs_of(new.inputs[0])), [P0 * P0 + P1])
    assert merge_arguments(fg) == 0 and only(fg, Call) is new


def test_duplicates_merge_within_a_kind_only():
    # a conditional: the same variable as then_arg twice (merged) and as else_arg (kept)
    node = ifelse_node([P0 - P1], [A, A], [P0 * 3.0], [A])
    fg, count = rewritten(merge_arguments, [K, A], node.outputs, [1, AV])
    assert count == 1
    new = only(fg, IfElse)
    assert new.inputs[3:] == [A, A]
    assert equal_computations(list(outputs_of(new.inputs[1])), [P0 - P0])
    assert equal_computations(list(outputs_of(new.inputs[2])), [P0 * 3.0])
    assert evaluate(fg.inputs, fg.outputs, [0, AV])[0] == AV * 3.0


def test_duplicates_of_a_kind_binding_two_bodies_merge_in_both():
    """A while loop's shared arguments A, A and B, a condition argument A and a step argument A: only the shared A merge."""
    go = P0 + P1 - P2 * P3 + P4
    node = while_node(P0 < P1 * P2 * P3 + P4, [go, go < 3.0], [A], [A], [A], [A, A, B])
    fg, count = rewritten(merge_arguments, [A, B], node.outputs, [AV, 1.0])
    assert count == 1
    new = only(fg, WhileLoop)
    assert new.inputs[2:] == [A, A, A, A, B]  # carry, cond_arg, step_arg, shared A, shared B
    assert (new.op.n_cond_args, new.op.n_step_args) == (1, 1)
    assert equal_computations(list(outputs_of(new.inputs[0])), [P0 < P1 * P2 * P2 + P3])
    merged = P0 + P1 - P2 * P2 + P3
    assert equal_computations(list(outputs_of(new.inputs[1])), [merged, merged < 3.0])
    assert evaluate(fg.inputs, fg.outputs, [AV, 1.0])[0] == 3.0  # two steps: 0.5, 1.75, 3.0


def test_small_constant_arguments_are_inlined_and_large_ones_kept():
    b = big()
    node = call_node([P0 * P1 + param(2, b.type).sum()], [A, f64(2.5), b])
    fg, count = rewritten(merge_arguments, [A], node.outputs, [AV])
    assert count == 1
    new = only(fg, Call)
    assert new.inputs[1:] == [A, b]
    (out,) = outputs_of(new.inputs[0])
    assert equal_computations([out], [P0 * f64(2.5) + param(1, b.type).sum()])
    assert merge_arguments(fg) == 0


def test_a_constant_binding_two_bodies_is_inlined_in_both():
    node = while_node(P0 < P1 * 4.0, [P0 + P1, P0 < 10.0], [A], [], [], [f64(0.5)])
    fg, count = rewritten(merge_arguments, [A], node.outputs, [0.25])
    assert count == 1
    new = only(fg, WhileLoop)
    assert new.inputs[2:] == [A]
    assert equal_computations(list(outputs_of(new.inputs[0])), [P0 < f64(0.5) * 4.0])
    assert equal_computations(list(outputs_of(new.inputs[1])), [P0 + f64(0.5), P0 < 10.0])


def test_sequences_merge_become_invariant_or_are_inlined():
    """A for-loop of every case: a duplicate sequence, a small constant row, an allocation,
    a large constant row, other rows; a carry; duplicate arguments after it."""
    xs2 = pt.dvector("xs2")
    large = f64(np.ones((6, LARGE_CONSTANT + 1)))
    other = f64([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    seqs = [xs2, xs2, f64(np.full(6, 0.5)), pt.alloc(C, 6), large, other]
    ps = [param(i, D) for i in range(6)]
    ps[4] = param(4, V)
    carry, arg1, arg2 = param(6, D), param(7, D), param(8, D)
    step = carry + ps[0] * ps[1] + ps[2] * ps[3] + ps[4].sum() * 0.01 + ps[5] * arg1 * arg2
    types = [D, D, D, D, V, D, D, D, D]
    node = ForiLoop(6, 1).make_node(function([step], types), pt.constant(5, dtype="int64"), *seqs, A, B, B)
    fg, count = rewritten(merge_arguments, [xs2, C, A, B], node.outputs, [np.arange(6.0), CV, AV, BV])
    assert count == 1
    new = only(fg, ForiLoop)
    assert (new.op.n_seqs, new.op.n_carry) == (2, 1)
    seq_args, rest = new.inputs[2:4], new.inputs[4:]
    assert seq_args == [xs2, other] and rest[:2] == [A, C]
    assert isinstance(rest[2], TensorConstant) and rest[2].data.shape == (LARGE_CONSTANT + 1,)
    assert rest[3:] == [B]
    q = [param(i, t) for i, t in enumerate([D, D, D, D, V, D])]  # xs2, other, carry, C, large row, B
    expected = q[2] + q[0] * q[0] + f64(0.5) * q[3] + q[4].sum() * 0.01 + q[1] * q[5] * q[5]
    assert equal_computations(list(outputs_of(new.inputs[0])), [expected])
    assert merge_arguments(fg) == 0


def test_an_allocated_sequence_becomes_an_argument_without_dropping_a_slot():
    node = fori_node([P0 * P1], pt.constant(3, dtype="int64"), [pt.alloc(C, 3)], [A], [])
    fg, count = rewritten(merge_arguments, [A, C], node.outputs, [AV, CV])
    assert count == 1
    new = only(fg, ForiLoop)
    assert (new.op.n_seqs, new.inputs[2:]) == (0, [A, C])
    assert equal_computations(list(outputs_of(new.inputs[0])), [P1 * P0])


def test_a_loop_that_only_drops_its_last_arguments_is_rebuilt():
    """A for-loop's invariants are its last slots: dropping them leaves every kept slot where it was."""
    for last in (A, f64(0.75)):
        node = fori_node([P0 * P1 + P2], N, [], [A], [A, last])  # a duplicate, then a small constant
        fg, count = rewritten(merge_arguments, [A, N], node.outputs, [AV, 3])
        assert count == 1
        assert only(fg, ForiLoop).inputs[2:] == [A, A]


def test_merge_arguments_counts_consumers_and_leaves_the_others():
    first = call_node([P0 * P1], [A, A])
    plain = call_node([P0 - P1], [first.outputs[0], B])  # nothing to do
    last = call_node([P0 + P1], [plain.outputs[0], f64(3.0)])
    fg, count = rewritten(merge_arguments, [A, B], last.outputs, [AV, BV])
    assert count == 2
    assert plain in fg.apply_nodes
    assert merge_arguments(fg) == 0


def test_a_call_of_many_distinct_arguments_is_left_alone():
    many = [pt.dscalar(f"x{i}") for i in range(300)]
    node = call_node([sum(param(i, D) for i in range(300))], many)
    fg = graph(many, node.outputs)
    assert merge_arguments(fg) == 0
    assert node in fg.apply_nodes


# ---- pass_large_constants


def test_large_constants_of_a_call_become_arguments_in_first_use_order():
    b1, b2, b3 = big(0.0), big(100.0), big(200.0)
    small = f64(np.ones(LARGE_CONSTANT))
    node = call_node([(P0 * b2 + b1 * b2).sum() + (small * P0).sum() + b1.sum(), b3], [A])
    fg, count = rewritten(pass_large_constants, [A], node.outputs, [AV])
    assert count == 1
    new = only(fg, Call)
    assert new.inputs[1:] == [A, b2, b1, b3]
    q1, q2, q3 = (param(i, b1.type) for i in (1, 2, 3))
    assert equal_computations(list(outputs_of(new.inputs[0])), [(P0 * q1 + q2 * q1).sum() + (small * P0).sum() + q2.sum(), q3])
    assert not large_in(new.inputs[0])
    assert pass_large_constants(fg) == 0 and merge_arguments(fg) == 0


def test_large_constants_of_each_branch_become_that_branchs_arguments():
    shared, own = big(0.0), big(1.0)
    node = ifelse_node([(P0 * shared).sum()], [A], [(P0 * own).sum() + (P0 * shared).sum()], [B])
    fg, count = rewritten(pass_large_constants, [K, A, B], node.outputs, [1, AV, BV])
    assert count == 1
    new = only(fg, IfElse)
    then_args, else_args = new.op.split(new.inputs)[3:]
    assert list(then_args) == [A, shared] and list(else_args) == [B, own, shared]
    assert not large_in(new.inputs[1]) and not large_in(new.inputs[2])
    assert evaluate(fg.inputs, fg.outputs, [0, AV, BV]) == evaluate([K, A, B], node.outputs, [0, AV, BV])


def test_loops_keep_their_large_constants():
    b = big()
    loop = fori_node([P0 + (P1 * b).sum()], N, [], [A], [B])
    after = call_node([(P0 * b).sum()], [loop.outputs[0]])  # a call after a loop still changes
    fg, count = rewritten(pass_large_constants, [A, B, N], after.outputs, [AV, BV, 3])
    assert count == 1
    assert loop in fg.apply_nodes
    assert only(fg, Call).inputs[2] is b


def test_two_calls_count_two():
    b = big()
    first = call_node([(P0 * b).sum()], [A])
    second = call_node([(P0 - b).sum()], [first.outputs[0]])
    fg, count = rewritten(pass_large_constants, [A], second.outputs, [AV])
    assert count == 2
    assert pass_large_constants(fg) == 0


def test_nested_large_constants_move_only_in_bodies():
    outer_big, inner_big = big(0.0), big(300.0)
    inner = call_node([(P0 * inner_big).sum()], [P0])
    outer = call_node([inner.outputs[0] + (P0 * outer_big).sum()], [A], fold=False)  # its body nodes are in the graph
    fg, count = rewritten(pass_nested_large_constants, [A], outer.outputs, [AV])
    assert count == 1
    calls = [n for n in fg.apply_nodes if isinstance(n.op, Call)]
    assert outer in calls and len(calls) == 2
    (nested,) = [n for n in calls if n is not outer]
    assert nested.inputs[2] is inner_big and not large_in(nested.inputs[0])
    assert pass_nested_large_constants(fg) == 0
    assert pass_large_constants(fg) == 1  # now the outer call


# ---- outline_constants


def test_bodies_that_differ_in_constants_become_one_body():
    """``p * 2.5 + i`` for i = 1, 2: 2.5, the same in both, stays; i becomes an argument."""
    nodes = [call_node([P0 * f64(2.5) + f64(i)], [A]) for i in (1.0, 2.0)]
    outs = [n.outputs[0] for n in nodes]

    def outline_sharing(fg: FunctionGraph) -> int:
        with sharing_rebuilt_functions():
            return outline_constants(fg)

    fg, count = rewritten(outline_sharing, [A], outs, [AV])
    assert count == 2
    new = [o.owner for o in fg.outputs]
    assert all(isinstance(n.op, Call) and isinstance(n.inputs[0], Constant) for n in new)  # folded
    assert new[0].inputs[0] is new[1].inputs[0]  # one function
    assert [float(n.inputs[2].data) for n in new] == [1.0, 2.0] and [n.inputs[1] for n in new] == [A, A]
    assert equal_computations(list(outputs_of(new[0].inputs[0])), [P0 * f64(2.5) + P1])
    assert outline_constants(fg) == 0


def test_equal_constants_of_one_body_are_one_hole():
    nodes = [call_node([P0 * f64(i) + f64(i)], [A]) for i in (2.0, 3.0)]  # two constant objects each
    fg, count = rewritten(outline_constants, [A], [n.outputs[0] for n in nodes], [AV])
    assert count == 2
    for o, i in zip(fg.outputs, (2.0, 3.0), strict=True):
        assert len(o.owner.inputs) == 3 and float(o.owner.inputs[2].data) == i
        assert equal_computations(list(outputs_of(o.owner.inputs[0])), [P0 * P1 + P1])
    # x * 2 + 2 and x * 2 + 1 are two templates: nothing to do
    nodes = [call_node([P0 * f64(2.0) + f64(i)], [A]) for i in (2.0, 1.0)]
    fg, count = rewritten(outline_constants, [A], [n.outputs[0] for n in nodes], [AV])
    assert count == 0


def test_constants_that_are_not_only_read_elementwise_stay():
    # read by a dot product (whose type does not depend on the values): never a hole
    pv = param(0, V)
    ws = [f64([1.0, 2.0]), f64([3.0, 4.0])]
    nodes = [call_node([pt.dot(pv, w)], [XS]) for w in ws]
    fg, count = rewritten(outline_constants, [XS], [n.outputs[0] for n in nodes], [np.array([0.5, 2.0])])
    assert count == 0
    # read elementwise and by the dot product, in either order
    for make in (lambda w: pt.dot(pv * w, w), lambda w: (pt.dot(pv, w) * w).sum()):
        nodes = [call_node([make(w)], [XS]) for w in ws]
        fg, count = rewritten(outline_constants, [XS], [n.outputs[0] for n in nodes], [np.array([0.5, 2.0])])
        assert count == 0, make
    # only elementwise: one body
    nodes = [call_node([(pv * w).sum()], [XS]) for w in ws]
    assert rewritten(outline_constants, [XS], [n.outputs[0] for n in nodes], [np.array([0.5, 2.0])])[1] == 2
    # returned by the body: it keeps its type only as itself
    nodes = [call_node([P0 * f64(i), f64(i)], [A]) for i in (3.0, 4.0)]
    fg, count = rewritten(outline_constants, [A], [o for n in nodes for o in n.outputs], [AV])
    assert count == 0


def test_a_large_constant_is_outlined_alone_and_a_small_one_is_not():
    b = big()
    alone = call_node([(P0 * b).sum()], [A])
    small = call_node([P0 * f64(7.0)], [alone.outputs[0]])
    fg, count = rewritten(outline_constants, [A], small.outputs, [AV])
    assert count == 1
    assert small in fg.apply_nodes
    new = fg.outputs[0].owner.inputs[1].owner
    assert isinstance(new.op, Call) and new.inputs[1:] == [A, b] and isinstance(new.inputs[0], Constant)
    assert not large_in(new.inputs[0])


def test_one_function_read_by_two_consumers():
    fn = function([P0 * f64(2.0) + f64(1.0)], [D])
    other = call_node([P0 * f64(2.0) + f64(5.0)], [C])
    first, second = Call().make_node(fn, A), Call().make_node(fn, B)
    outs = [first.outputs[0], second.outputs[0], other.outputs[0]]
    fg, count = rewritten(outline_constants, [A, B, C], outs, [AV, BV, CV])
    assert count == 3
    assert [float(o.owner.inputs[2].data) for o in fg.outputs] == [1.0, 1.0, 5.0]


def test_a_conditional_outlines_the_branch_that_differs():
    nodes = [ifelse_node([P0 * f64(2.0)], [A], [P0 - f64(i)], [B]) for i in (1.0, 2.0)]
    fg, count = rewritten(outline_constants, [K, A, B], [n.outputs[0] for n in nodes], [0, AV, BV])
    assert count == 2
    for o, i in zip(fg.outputs, (1.0, 2.0), strict=True):
        node = o.owner
        then_args, else_args = node.op.split(node.inputs)[3:]
        assert list(then_args) == [A] and list(else_args)[0] is B and float(list(else_args)[1].data) == i
        assert equal_computations(list(outputs_of(node.inputs[1])), [P0 * f64(2.0)])
        assert equal_computations(list(outputs_of(node.inputs[2])), [P0 - P1])
    assert evaluate(fg.inputs, fg.outputs, [1, AV, BV]) == [AV * 2.0, AV * 2.0]


def test_loops_and_bodies_nested_in_unfolded_ones_are_not_outlined():
    b = big()
    loop = fori_node([P0 + (P1 * b).sum()], N, [], [A], [B])
    fg, count = rewritten(outline_constants, [A, B, N], loop.outputs, [AV, BV, 3])
    assert count == 0 and loop in fg.apply_nodes
    after = call_node([(P0 * b).sum()], [loop.outputs[0]])  # a call after the loop still changes
    fg, count = rewritten(outline_constants, [A, B, N], after.outputs, [AV, BV, 3])
    assert count == 1 and loop in fg.apply_nodes
    inner = call_node([(P0 * b).sum()], [P0])
    outer = call_node([cast(Any, inner.outputs[0]) + 1.0], [A], fold=False)
    fg, count = rewritten(outline_constants, [A], outer.outputs, [AV])
    assert count == 0 and inner in fg.apply_nodes
