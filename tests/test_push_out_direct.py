"""`innergraph.rewriting.push_out` called directly, fast (issue 47's mutation run).

`tests/test_rewrites.py` and `tests/test_push_out_cost.py` reach the push-outs through
`check_rewrite`, which compiles every graph twice with the C VM. These build native Scans
with the slots asked for (sequences, non-sequences, mit-mot taps, untraced states, nit-sot
buffers longer than the loop, ``until``), lift them, and call the pieces
(`AfterLoop`, `_rows`, `_first_rows_already`, `fold_constant_work`, `products`,
`_summed_term`) and the three passes on FunctionGraphs that are never compiled but by
the py linker without rewrites. Each pass's count and the loop it leaves are compared
with literal ones, built variables with the graphs they should be (`equal_computations`),
and the values after a pass with the values before, with a NumPy loop and, for the
pushed-out sums and rows, with vanilla PyTensor's ``scan``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import clone_replace
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.scalar import Composite, UnaryScalarOp, float64, upgrade_to_float
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.op import ScanInfo
from pytensor.scan.utils import expand_empty
from pytensor.tensor.basic import Alloc, ScalarFromTensor
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.subtensor import Subtensor

from innergraph.core.graph import body_of, scope_toposort
from innergraph.ops.call import Call
from innergraph.ops.scan import Scan
from innergraph.protocol.conversion import lift_graph
from innergraph.protocol.signature import Signature, consumers, sharing_rebuilt_functions
from innergraph.protocol.slots import Meaning
from innergraph.rewriting import push_out
from innergraph.rewriting.push_out import (
    AfterLoop,
    fold_constant_work,
    products,
    push_out_dot_sums,
    push_out_per_step_outputs,
    push_out_sequence_work,
)
from innergraph.testing.rewrites import rewritten
from consumer_nodes import PY, evaluate
from vanilla import vanilla_values

XS: Any = pt.dvector("xs")
YS: Any = pt.dvector("ys")
BUF: Any = pt.dvector("buf")
K: Any = pt.dscalar("k")
X0: Any = pt.dscalar("x0")
N: Any = XS.shape[0]
XV = np.array([0.5, -1.0, 2.0, 0.25])
YV = np.array([1.5, 0.75, -0.5, 3.0, 9.0])
BV = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
KV = 1.5
X0V = 0.25


# ---- loops built here


def native(
    inner_inputs: Sequence[Any],
    inner_outputs: Sequence[Any],
    *,
    n_seqs: int = 0,
    mit_mot: Sequence[tuple[tuple[int, ...], tuple[int, ...]]] = (),
    n_sit_sot: int = 0,
    n_nit_sot: int = 0,
    n_untraced: int = 0,
    n_non_seqs: int = 0,
    as_while: bool = False,
) -> NativeScan:
    """A native Scan of these inner inputs and outputs (in Scan's order: sequences, mit-mot taps, sit-sots, untraced, non-sequences)."""
    info = ScanInfo(
        n_seqs=n_seqs,
        mit_mot_in_slices=tuple(i for i, _ in mit_mot),
        mit_mot_out_slices=tuple(o for _, o in mit_mot),
        mit_sot_in_slices=(),
        sit_sot_in_slices=tuple((-1,) for _ in range(n_sit_sot)),
        n_nit_sot=n_nit_sot,
        n_untraced_sit_sot=n_untraced,
        n_non_seqs=n_non_seqs,
        as_while=as_while,
    )
    return NativeScan(list(inner_inputs), list(inner_outputs), info)


def one(op: NativeScan, *outer: Any) -> Any:
    """The one output of ``op`` on ``outer``."""
    (result,) = outs(op, *outer)
    return result


def outs(op: NativeScan, *outer: Any) -> list[Any]:
    result = op(*outer)
    return list(result) if isinstance(result, list | tuple) else [result]


def run(
    rewrite: Callable[[FunctionGraph], int], inputs: Sequence[Variable], outputs: Sequence[Variable], values: Sequence[Any]
) -> tuple[FunctionGraph, int, list[np.ndarray]]:
    """``rewrite`` on a graph of ``outputs`` lifted: the graph, the count, and its values, checked equal to those before."""
    lifted = lift_graph(list(outputs))
    before = evaluate(inputs, lifted, values)
    fg, count = rewritten(rewrite, inputs, lifted)
    after = evaluate(fg.inputs, fg.outputs, values)
    for b, a in zip(before, after, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    return fg, count, after


def scans(fg: FunctionGraph) -> list[Apply]:
    return [n for n in fg.apply_nodes if isinstance(n.op, Scan)]


def only_sig(fg: FunctionGraph) -> Any:
    (sig,) = list(consumers(fg))
    return sig


def nit_sots(fg: FunctionGraph) -> int:
    return sum(n.op.layout.info.n_nit_sot for n in scans(fg))


def sig_of(outputs: Sequence[Variable], inputs: Sequence[Variable]) -> tuple[FunctionGraph, Any]:
    fg, _ = rewritten(lambda g: 0, inputs, lift_graph(list(outputs)))
    return fg, only_sig(fg)



def test_the_template_follows_a_symbolic_count():
    """Two loops of one body over the same rows, of ``n1`` and ``n2`` steps (symbolic, one type, so one template): the second gets its own count."""
    nit = lambda x, m1, m0, k: m0 * k + x  # noqa: E731
    x, m1, m0, k = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.dscalar("k")
    op = native([x, m1, m0, k], [m1 * 0.5 + m0 + x, nit(x, m1, m0, k)], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=1)
    n1, n2 = pt.lscalar("n1"), pt.lscalar("n2")
    first = outs(op, n1, XS, BUF, n1, K)
    second = outs(op, n2, XS, BUF, n2, K)
    fg, count, after = run(merged_then_pushed, [XS, BUF, K, n1, n2], [first[1], second[1]], [XV, BV, KV, 4, 3])
    assert count == 2 and nit_sots(fg) == 0
    rows, _ = mit_mot_numpy(nit)
    np.testing.assert_allclose(after[0], rows, rtol=1e-12)
    np.testing.assert_allclose(after[1], rows[:3], rtol=1e-12)  # the first three steps read what the longer loop's did

# ---- the mit-mot loop: taps (-1, 0) read, tap 1 written


def mit_mot_loop(nit: Callable[[Any, Any, Any, Any], Any], length: Any = None) -> list[Any]:
    """A mit-mot of in taps (-1, 0), out tap 1 (``m_-1 * 0.5 + m_0 + x``) over ``BUF``, its nit-sot ``nit(x, m_-1, m_0, k)``."""
    x, m1, m0, k = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.dscalar("k")
    op = native([x, m1, m0, k], [m1 * 0.5 + m0 + x, nit(x, m1, m0, k)], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=1)
    buffer, per_step = outs(op, N, XS, BUF, N if length is None else length, K)
    return [per_step, buffer]


def i64(value: int) -> Any:
    return pt.constant(np.asarray(value, dtype="int64"))


def mit_mot_numpy(nit: Callable[[float, float, float, float], float], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    buffer, rows = BV.copy(), np.zeros(len(XV) if length is None else length)
    for t, x in enumerate(XV):
        m1, m0 = buffer[t], buffer[t + 1]
        buffer[t + 2] = m1 * 0.5 + m0 + x
        rows[t] = nit(x, m1, m0, KV)
    return rows, buffer


def test_after_loop_values_of_each_kind_of_param():
    per_step, buffer = mit_mot_loop(lambda x, m1, m0, k: m1 * 2.0 + m0 * k + x)
    fg, sig = sig_of([per_step, buffer], [XS, BUF, K])
    (seq,) = sig.having(Meaning.SEQUENCE)
    (mm,) = sig.having(Meaning.BUFFER)
    (inv,) = sig.having(Meaning.INVARIANT)
    tap_m1, tap_0 = (p for _, p in mm.params)
    values = AfterLoop(sig)
    assert len(values) == 4 and list(values) == [seq.params[0][1], tap_m1, tap_0, inv.params[0][1]]
    assert tap_m1 in values and tap_0 in values and K not in values and seq.args[0] not in values
    assert values[inv.params[0][1]] is inv.args[0]  # the non-sequence itself
    assert equal_computations([values[seq.params[0][1]]], [seq.args[0][: sig.header[0]]])  # xs itself: its rows
    assert values[tap_m1] is values[tap_m1]  # built once
    n = sig.header[0]
    assert equal_computations([values[tap_m1]], [mm.results[0][:n]])
    assert equal_computations([values[tap_0]], [mm.results[0][1 : 1 + n]])
    without = AfterLoop(sig, mit_mot=False)
    assert len(without) == 2 and tap_m1 not in without and tap_0 not in without
    rows = evaluate(fg.inputs, [values[tap_m1], values[tap_0]], [XV, BV, KV])
    final = mit_mot_numpy(lambda *a: 0.0)[1]
    np.testing.assert_array_equal(rows[0], final[:4])
    np.testing.assert_array_equal(rows[1], final[1:5])


def test_a_tap_that_a_later_step_overwrites_has_no_after_loop_value():
    # in taps (0, 1, 2), out taps (2, 3): tap 2 is written at step t and read at step t (before), so only 0 and 1 are final
    x, m0, m1, m2 = pt.dscalar("x"), pt.dscalar("m0"), pt.dscalar("m1"), pt.dscalar("m2")
    op = native([x, m0, m1, m2], [m2 + x, m0 * m1], n_seqs=1, mit_mot=[((0, 1, 2), (2, 3))])
    (buffer,) = outs(op, N, XS, BUF)
    _, sig = sig_of([buffer], [XS, BUF])
    (mm,) = sig.having(Meaning.BUFFER)
    params = [p for _, p in mm.params]
    values = AfterLoop(sig)
    assert [p in values for p in params] == [True, True, False]
    n = sig.header[0]
    assert equal_computations([values[params[0]], values[params[1]]], [mm.results[0][:n], mm.results[0][1 : 1 + n]])


def test_a_sequence_not_sliced_to_the_step_count_gets_its_rows():
    x, k = pt.dscalar("x"), pt.dscalar("k")
    op = native([x, k], [pt.exp(x) * k], n_seqs=1, n_nit_sot=1, n_non_seqs=1)
    steps = pt.lscalar("steps")
    (ys,) = outs(op, steps, YS, steps, K)
    fg, sig = sig_of([ys], [YS, steps, K])
    (seq,) = sig.having(Meaning.SEQUENCE)
    values = AfterLoop(sig)
    assert equal_computations([values[seq.params[0][1]]], [seq.args[0][: sig.header[0]]])
    np.testing.assert_array_equal(evaluate(fg.inputs, [values[seq.params[0][1]]], [YV, 3, KV])[0], YV[:3])
    (ys,) = outs(op, steps, YS[:steps], steps, K)  # as pytensor.scan passes it: the rows already
    fg, sig = sig_of([ys], [YS, steps, K])
    (seq,) = sig.having(Meaning.SEQUENCE)
    assert AfterLoop(sig)[seq.params[0][1]] is seq.args[0]


def test_rows_of_a_variable_and_of_a_constant():
    n = pt.lscalar("n")
    three = pt.constant(np.asarray(3, dtype="int64"))
    xs: Any = XS  # for mypy: a TensorVariable's indexing
    assert push_out._rows(XS, None, n) is XS
    assert equal_computations([push_out._rows(XS, 0, n)], [xs[:n]])
    assert equal_computations([push_out._rows(XS, 2, n)], [xs[2 : 2 + n]])
    by_number = push_out._rows(XS, 1, three)  # a constant step count is a number: no ScalarFromTensor of a constant
    assert equal_computations([by_number], [xs[1:4]])
    assert not any(isinstance(v.owner.op, ScalarFromTensor) for v in by_number.owner.inputs if v.owner is not None)
    table = pt.constant(np.arange(10.0) * 2)
    folded = push_out._rows(table, 2, three)
    assert isinstance(folded, Constant)
    np.testing.assert_array_equal(folded.data, [4.0, 6.0, 8.0])
    assert push_out._rows(table, None, three) is table
    assert not isinstance(push_out._rows(table, 2, n), Constant)  # a symbolic count: a slice
    np.testing.assert_array_equal(evaluate([n], [push_out._rows(table, 2, n)], [2])[0], [4.0, 6.0])


def test_first_rows_already():
    n = pt.lscalar("n")
    assert push_out._first_rows_already(XS[:n], n)
    assert push_out._first_rows_already(XS[: pt.scalar_from_tensor(n)], n)
    assert not push_out._first_rows_already(XS[: pt.lscalar("m")], n)
    assert not push_out._first_rows_already(XS[: pt.scalar_from_tensor(pt.lscalar("m"))], n)
    assert not push_out._first_rows_already(XS[1:n], n)
    assert not push_out._first_rows_already(XS[: n : 2], n)
    assert not push_out._first_rows_already(XS[:], n)
    assert not push_out._first_rows_already(XS[n], n)
    assert not push_out._first_rows_already(pt.dmatrix("m")[:n, :n], n)
    assert not push_out._first_rows_already(XS, n)
    assert not push_out._first_rows_already(Subtensor(()).make_node(XS).outputs[0], n)  # a Subtensor of no index
    assert not push_out._first_rows_already(pt.exp(XS), n)
    assert not push_out._first_rows_already(XS[: n + 1], n)


class _Boom(UnaryScalarOp):
    """A scalar op whose evaluation raises (folding it must leave it)."""

    def impl(self, x: Any) -> Any:
        raise ValueError("boom")


def test_fold_constant_work():
    two, three = pt.constant(np.asarray(2.0)), pt.constant(np.asarray([3.0, 4.0]))
    total = two * three + 1.0
    column = three.dimshuffle(0, "x")
    boom: Any = Elemwise(_Boom(upgrade_to_float))(three)  # type: ignore[abstract]
    live = XS + total
    folded = fold_constant_work([total, column, live, boom], stop={XS})
    assert isinstance(folded[0], Constant) and folded[0].type == total.type
    np.testing.assert_array_equal(folded[0].data, [7.0, 9.0])
    assert isinstance(folded[1], Constant) and folded[1].type == column.type
    np.testing.assert_array_equal(folded[1].data, [[3.0], [4.0]])
    assert folded[2] is not live and isinstance(folded[2].owner.inputs[1], Constant)  # live work reads the folded constant
    assert equal_computations([folded[2]], [XS + pt.constant(np.asarray([7.0, 9.0]))])
    assert folded[3] is boom  # its evaluation raised: left for constant folding
    table = pt.constant(np.array([[2.0, 0.0], [0.0, 3.0]]))
    det: Any = pt.linalg.det(table)
    assert fold_constant_work([det], stop=())[0] is det  # only elementwise work and broadcasts fold: a determinant stays
    late = three * 5.0  # after work that does not fold, and after work whose evaluation raised
    for first in (XS * K, boom):
        after_it = fold_constant_work([first, late], stop=set())
        assert after_it[0] is first and isinstance(after_it[1], Constant)
        np.testing.assert_array_equal(after_it[1].data, [15.0, 20.0])
    assert fold_constant_work([live], stop={XS, total}) == [live]  # the walk stops at ``stop``
    same = XS * K
    assert fold_constant_work([same], stop={XS})[0] is same  # nothing to fold: the outputs themselves
    f32 = pt.constant(np.asarray([1.0, 2.0], dtype="float32")) * pt.constant(np.asarray(2.0, dtype="float32"))
    f32_folded: Any = fold_constant_work([f32], stop=())[0]
    assert isinstance(f32_folded, Constant) and f32_folded.data.dtype == "float32" and f32_folded.type == f32.type


def test_fold_constant_work_leaves_a_node_of_two_outputs():
    # one storage cell per folded node: a two-output Elemwise of constants is left to constant folding, as a
    # single-output node with a non-constant input is (the `or` of the guard, not an `and`)
    a: Any = float64("a")
    first, second = cast(Any, Elemwise(Composite([a], [a + 1.0, a * 2.0])))(pt.constant(np.asarray([1.0, 2.0])))
    assert fold_constant_work([first, second], stop=()) == [first, second]


def test_template_key():
    c = pt.constant(np.asarray(1.0))
    assert push_out._template_key(c) == ("constant", c)
    assert push_out._template_key(XS) == XS.type and push_out._template_key(XS) is XS.type


# ---- push_out_per_step_outputs


def test_a_nit_sot_reading_final_taps_is_computed_after_the_loop():
    nit = lambda x, m1, m0, k: m1 * 2.0 + m0 * k + x  # noqa: E731
    fg, count, after = run(push_out_per_step_outputs, [XS, BUF, K], mit_mot_loop(nit), [XV, BV, KV])
    assert count == 1 and nit_sots(fg) == 0 and len(scans(fg)) == 1
    assert not any(isinstance(n.op, Call) for n in fg.apply_nodes)  # one loop of its body: the work stays inline
    rows, final = mit_mot_numpy(nit)
    np.testing.assert_allclose(after[0], rows, rtol=1e-12)
    np.testing.assert_allclose(after[1], final, rtol=1e-12)
    fg, count, _ = run(push_out_per_step_outputs, [XS, BUF, K], mit_mot_loop(nit), [XV, BV, KV])
    assert push_out_per_step_outputs(fg) == 0  # nothing left to move


def test_a_nit_sot_buffer_longer_than_the_loop_keeps_zeros():
    nit = lambda x, m1, m0, k: m0 * k  # noqa: E731
    fg, count, after = run(push_out_per_step_outputs, [XS, BUF, K], mit_mot_loop(nit, length=i64(6)), [XV, BV, KV])
    assert count == 1 and nit_sots(fg) == 0
    rows, _ = mit_mot_numpy(nit, length=6)
    np.testing.assert_allclose(after[0], rows, rtol=1e-12)
    assert after[0].shape == (6,) and (after[0][4:] == 0).all()


def test_nit_sots_that_read_no_final_tap_or_a_written_one_stay():
    for nit in (lambda x, m1, m0, k: x * k, lambda x, m1, m0, k: pt.exp(k)):  # no tap read: not this pass's
        fg, count, _ = run(push_out_per_step_outputs, [XS, BUF, K], mit_mot_loop(nit), [XV, BV, KV])
        assert count == 0 and nit_sots(fg) == 1
    # tap 2 of in taps (0, 1, 2) is overwritten later (out taps (2, 3)): a nit-sot reading it stays
    x, m0, m1, m2 = pt.dscalar("x"), pt.dscalar("m0"), pt.dscalar("m1"), pt.dscalar("m2")
    op = native([x, m0, m1, m2], [m2 + x, m0 * m1, m2 * 3.0, m0 * 3.0], n_seqs=1, mit_mot=[((0, 1, 2), (2, 3))], n_nit_sot=2)
    buffer, reads_written, reads_final = outs(op, N, XS, BUF, N, N)
    fg, count, _ = run(push_out_per_step_outputs, [XS, BUF], [reads_written, reads_final, buffer], [XV, BV])
    assert count == 1 and nit_sots(fg) == 1  # only m0 * 3
    (node,) = scans(fg)
    assert "Mul" in str(body_of(node.inputs[0]).outputs[-1].owner.op) and node.op.layout.info.n_nit_sot == 1


def test_a_nit_sot_that_needs_a_blockwise_stays():
    x, m0 = pt.dmatrix("x"), pt.dmatrix("m0")
    m1 = pt.dmatrix("m1")
    op = native([x, m0, m1], [m1 + x, pt.linalg.det(m0)], n_seqs=1, mit_mot=[((0, 1), (2,))], n_nit_sot=1)
    xs, buf = pt.tensor3("xs3"), pt.tensor3("buf3")
    buffer, dets = outs(op, xs.shape[0], xs, buf, xs.shape[0])
    buf2: Any = pt.tensor3("buf3b")
    buffer2, dets2 = outs(op, xs.shape[0], xs, buf2, xs.shape[0])  # a second loop of the body: the answer kept is kept
    rng = np.random.default_rng(0)
    values = [rng.normal(size=(3, 2, 2)), rng.normal(size=(5, 2, 2)), rng.normal(size=(5, 2, 2))]

    def merged_then_pushed(g: FunctionGraph) -> int:
        MergeOptimizer().rewrite(g)
        return push_out_per_step_outputs(g)

    fg, count, after = run(merged_then_pushed, [xs, buf, buf2], [dets, buffer, dets2, buffer2], values)
    assert count == 0 and nit_sots(fg) == 2
    np.testing.assert_allclose(after[0], np.linalg.det(taps_0(values[0], values[1])), rtol=1e-12)


def taps_0(xv: np.ndarray, bv: np.ndarray) -> np.ndarray:
    """What tap 0 reads at each step of a mit-mot of in taps (0, 1), out tap 2 written as ``m_1 + x``."""
    buffer, read = bv.copy(), []
    for t, x in enumerate(xv):
        read.append(buffer[t].copy())
        buffer[t + 2] = buffer[t + 1] + x
    return np.array(read)


def test_a_nit_sot_summing_a_row_of_taps_is_computed_after_the_loop():
    """A sum over a tap (not elementwise, but batched without a Blockwise) moves out too: only the sequence push-out asks for elementwise work."""
    x, m0, m1 = pt.dvector("x"), pt.dvector("m0"), pt.dvector("m1")
    op = native([x, m0, m1], [m1 + x, (m0 * x).sum()], n_seqs=1, mit_mot=[((0, 1), (2,))], n_nit_sot=1)
    xm, buf = pt.dmatrix("xm"), pt.dmatrix("bufm")
    buffer, sums = outs(op, xm.shape[0], xm, buf, xm.shape[0])
    rng = np.random.default_rng(4)
    values = [rng.normal(size=(3, 2)), rng.normal(size=(5, 2))]
    fg, count, after = run(push_out_per_step_outputs, [xm, buf], [sums, buffer], values)
    assert count == 1 and nit_sots(fg) == 0
    np.testing.assert_allclose(after[0], (taps_0(values[0], values[1]) * values[0]).sum(axis=1), rtol=1e-12)


def test_an_until_loop_and_a_loop_without_taps_are_left():
    x, m1, m0, k = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.dscalar("k")
    op = native([x, m1, m0, k], [m1 * 0.5 + m0 + x, m0 * k, pt.gt(m0, 1e9)], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=1, as_while=True)
    buffer, per_step = outs(op, N, XS, BUF, N, K)
    fg, count, _ = run(push_out_per_step_outputs, [XS, BUF, K], [per_step, buffer], [XV, BV, KV])
    assert count == 0 and nit_sots(fg) == 1
    fg, count, _ = run(push_out_per_step_outputs, [XS, K], [nit_loop(lambda x, k: pt.exp(x) * k)], [XV, KV])
    assert count == 0 and nit_sots(fg) == 1


def mit_mot_rows(nit: Callable[[float, float, float, float], float], xv: np.ndarray, bv: np.ndarray, kv: float) -> tuple[list[float], np.ndarray]:
    """`mit_mot_loop`'s loop in NumPy over these rows, buffer and non-sequence: the nit-sot's rows and the final buffer."""
    buffer, rows = bv.copy(), []
    for t, x in enumerate(xv):
        m1, m0 = buffer[t], buffer[t + 1]
        rows.append(nit(x, m1, m0, kv))
        buffer[t + 2] = m1 * 0.5 + m0 + x
    return rows, buffer


#: The second buffer of the tests with two loops of one body.
B2 = np.linspace(-1.0, 1.0, 8)


def merged_then_pushed(g: FunctionGraph) -> int:
    """Merge first (two loops of one body share one Op and one body), then the per-step push-out."""
    MergeOptimizer().rewrite(g)
    return push_out_per_step_outputs(g)


def test_two_loops_of_one_body_each_get_their_own_taps():
    """The second loop of a body reuses the first one's vectorized graph, over its own buffer, rows, count and non-sequence
    (or only those that differ); a nit-sot reading the buffer at two taps is vectorized for each loop (no template)."""
    one_tap = lambda x, m1, m0, k: m0 * k + x  # noqa: E731
    two_taps = lambda x, m1, m0, k: m1 * 2.0 + m0 * k + x  # noqa: E731
    buf2, k2 = pt.dvector("buf2"), pt.dscalar("k2")
    for nit, other_rows in [(one_tap, True), (one_tap, False), (two_taps, True)]:
        x, m1, m0, k = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.dscalar("k")
        op = native([x, m1, m0, k], [m1 * 0.5 + m0 + x, nit(x, m1, m0, k)], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=1)
        first = outs(op, N, XS, BUF, N, K)
        second = outs(op, YS.shape[0], YS, buf2, YS.shape[0], k2) if other_rows else outs(op, N, XS, buf2, N, K)
        inputs, values = [XS, BUF, K, YS, buf2, k2], [XV, BV, KV, YV, B2, -0.5]
        fg, count, after = run(merged_then_pushed, inputs, [first[1], second[1], first[0], second[0]], values)
        assert count == 2 and nit_sots(fg) == 0
        rows, buffer = mit_mot_rows(nit, XV, BV, KV)
        np.testing.assert_allclose(after[0], rows, rtol=1e-12)
        np.testing.assert_allclose(after[2], buffer, rtol=1e-12)
        rows, buffer = mit_mot_rows(nit, YV, B2, -0.5) if other_rows else mit_mot_rows(nit, XV, B2, KV)
        np.testing.assert_allclose(after[1], rows, rtol=1e-12)
        np.testing.assert_allclose(after[3], buffer, rtol=1e-12)


def test_the_count_is_a_constant_and_the_template_follows_it():
    """Two loops of one body, one of 4 steps and one of 3, both constant counts: each pushed-out output has its own rows."""
    nit = lambda x, m1, m0, k: m0 * k + x  # noqa: E731
    x, m1, m0, k = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.dscalar("k")
    op = native([x, m1, m0, k], [m1 * 0.5 + m0 + x, nit(x, m1, m0, k)], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=1)
    four, three = (pt.constant(np.asarray(v, dtype="int64")) for v in (4, 3))
    first = outs(op, four, XS, BUF, four, K)
    second = outs(op, three, XS, BUF, three, K)

    def merged_then_pushed(g: FunctionGraph) -> int:
        MergeOptimizer().rewrite(g)
        return push_out_per_step_outputs(g)

    fg, count, after = run(merged_then_pushed, [XS, BUF, K], [first[1], second[1]], [XV, BV, KV])
    assert count == 2 and nit_sots(fg) == 0
    rows, _ = mit_mot_numpy(nit)
    np.testing.assert_allclose(after[0], rows, rtol=1e-12)
    buffer, short = BV.copy(), []
    for t, xv in enumerate(XV[:3]):
        short.append(buffer[t + 1] * KV + xv)
        buffer[t + 2] = buffer[t] * 0.5 + buffer[t + 1] + xv
    np.testing.assert_allclose(after[1], short, rtol=1e-12)


# ---- push_out_sequence_work


def nit_loop(*nits: Callable[[Any, Any], Any], length: Any = None, sequence: Any = None, steps: Any = None) -> Any:
    """A loop over ``XS`` (or ``sequence``) whose nit-sots are ``nit(x, k)``, ``k`` the non-sequence ``K``."""
    x, k = pt.dscalar("x"), pt.dscalar("k")
    op = native([x, k], [nit(x, k) for nit in nits], n_seqs=1, n_nit_sot=len(nits), n_non_seqs=1)
    seq = XS if sequence is None else sequence
    n = N if steps is None else steps
    found = outs(op, n, seq, *[n if length is None else length] * len(nits), K)
    return found if len(nits) > 1 else found[0]


def test_a_loop_of_row_wise_outputs_is_replaced_by_them():
    y, z = nit_loop(lambda x, k: pt.exp(x) * k, lambda x, k: pt.sin(k))
    fg, count, after = run(push_out_sequence_work, [XS, K], [y, z], [XV, KV])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], np.exp(XV) * KV, rtol=1e-12)
    np.testing.assert_allclose(after[1], np.full(4, np.sin(KV)), rtol=1e-12)
    same = fg.outputs[1].owner
    assert isinstance(same.op, Alloc) and equal_computations(same.inputs[:1], [pt.sin(K)], in_xs=fg.inputs[1:], in_ys=[K])

    def build() -> tuple[list[Any], list[Any]]:
        xs, k = pt.dvector("xs"), pt.dscalar("k")
        ys, zs = pytensor.scan(lambda x, k: (pt.exp(x) * k, pt.sin(k)), sequences=[xs], non_sequences=[k], return_updates=False)
        return [xs, k], [ys, zs]

    for mine, theirs in zip(after, vanilla_values(build, [XV, KV], mode=PY), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_rows_of_rows_and_the_same_row_every_step():
    """Per-step rows that are vectors: a matrix, padded with zero rows, and a vector value allocated for every step."""
    x, k = pt.dvector("x"), pt.dvector("kv")
    op = native([x, k], [pt.exp(x) * k, pt.sin(k)], n_seqs=1, n_nit_sot=2, n_non_seqs=1)
    xm, kv = pt.dmatrix("xm"), pt.dvector("kvec")
    six = i64(6)
    for length in (xm.shape[0], six):
        y, z = outs(op, xm.shape[0], xm, length, length, kv)
        rng = np.random.default_rng(5)
        values = [rng.normal(size=(4, 3)), rng.normal(size=3)]
        fg, count, after = run(push_out_sequence_work, [xm, kv], [y, z], values)
        assert count == 1 and not scans(fg) and not any(isinstance(n.op, Call) for n in fg.apply_nodes)
        pad = np.zeros((0 if length is not six else 2, 3))
        np.testing.assert_allclose(after[0], np.concatenate([np.exp(values[0]) * values[1], pad]), rtol=1e-12)
        np.testing.assert_allclose(after[1], np.concatenate([np.tile(np.sin(values[1]), (4, 1)), pad]), rtol=1e-12)


def test_a_dead_output_does_not_keep_the_loop():
    """Only the live results count: a nit-sot no one reads (and that is not row-wise) does not keep the loop."""
    x, k = pt.dvector("x"), pt.dvector("kv")
    op = native([x, k], [pt.exp(x) * k, pt.dot(x, k)], n_seqs=1, n_nit_sot=2, n_non_seqs=1)
    xm, kv = pt.dmatrix("xm"), pt.dvector("kvec")
    y, _ = outs(op, xm.shape[0], xm, xm.shape[0], xm.shape[0], kv)
    rng = np.random.default_rng(6)
    values = [rng.normal(size=(4, 3)), rng.normal(size=3)]
    fg, count, after = run(push_out_sequence_work, [xm, kv], [y], values)
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], np.exp(values[0]) * values[1], rtol=1e-12)


def test_loops_each_pass_skips_do_not_stop_it():
    """A chain of loops, each reading the one before: a loop the pass leaves (for each reason it has) is followed by one it takes."""
    x, s, k = pt.dscalar("x"), pt.dscalar("s"), pt.dscalar("k")
    stops = native([x, s], [s + pt.exp(x) * pt.sin(x), pt.gt(s, 1e9)], n_seqs=1, n_sit_sot=1, as_while=True)
    first = one(stops, N, XS, expand_empty(pt.shape_padleft(X0), N))[-1]
    no_targets = native([x, s, k], [s * x + k], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    second = one(no_targets, N, XS, expand_empty(pt.shape_padleft(first), N), K)[-1]
    cheap = native([x, s, k], [s * 0.5 + x * 2.0 * s + x], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    third = one(cheap, N, XS, expand_empty(pt.shape_padleft(second), N), K)[-1]
    last = nit_loop(lambda x, k: pt.exp(x) * k, sequence=XS * third)
    fg, count, after = run(push_out_sequence_work, [XS, X0, K], [last], [XV * 0.1, X0V, KV])
    assert count == 1 and len(scans(fg)) == 3
    state = X0V
    for xv in XV * 0.1:
        state = state + np.exp(xv) * np.sin(xv)
    for xv in XV * 0.1:
        state = state * xv + KV
    for xv in XV * 0.1:
        state = state * 0.5 + xv * 2.0 * state + xv
    np.testing.assert_allclose(after[0], np.exp(XV * 0.1 * state) * KV, rtol=1e-12)


def test_rows_the_loop_never_writes_stay_zero():
    y, z = nit_loop(lambda x, k: x * k, lambda x, k: k * 2.0, length=i64(7))
    fg, count, after = run(push_out_sequence_work, [XS, K], [y, z], [XV, KV])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], [*(XV * KV), 0.0, 0.0, 0.0], rtol=1e-12)
    np.testing.assert_allclose(after[1], [*(np.full(4, 2 * KV)), 0.0, 0.0, 0.0], rtol=1e-12)


def test_a_sequence_read_from_a_later_row():
    """A sequence ``ys`` of 5 rows read for 3 steps (not ``ys[:n]``): its first 3 rows, pushed out."""
    steps = pt.lscalar("steps")
    y = nit_loop(lambda x, k: pt.exp(x) * k, sequence=YS, steps=steps)
    fg, count, after = run(push_out_sequence_work, [YS, K, steps], [y], [YV, KV, 3])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], np.exp(YV[:3]) * KV, rtol=1e-12)


def test_a_loop_with_one_output_that_is_not_row_wise_keeps_its_outputs():
    # a dot of two rows is not elementwise: the loop stays, and the row-wise work it reads (exp(x) * sin(x)) becomes a sequence
    x, k = pt.dvector("x"), pt.dvector("kv")
    op = native([x, k], [pt.dot(pt.exp(x) * pt.sin(x), k), x * 2.0], n_seqs=1, n_nit_sot=2, n_non_seqs=1)
    xm, kv = pt.dmatrix("xm"), pt.dvector("kvec")
    dots, doubled = outs(op, xm.shape[0], xm, xm.shape[0], xm.shape[0], kv)
    rng = np.random.default_rng(1)
    values = [rng.normal(size=(4, 3)), rng.normal(size=3)]
    fg, count, after = run(push_out_sequence_work, [xm, kv], [dots, doubled], values)
    assert count == 1
    (node,) = scans(fg)
    info = node.op.layout.info
    assert (info.n_seqs, info.n_nit_sot) == (2, 2)  # x (for x * 2) and the new rows of exp(x) * sin(x)
    np.testing.assert_allclose(after[0], (np.exp(values[0]) * np.sin(values[0])) @ values[1], rtol=1e-12)


def test_row_wise_work_becomes_a_new_sequence_and_the_old_one_goes():
    x, s, k = pt.dscalar("x"), pt.dscalar("s"), pt.dscalar("k")
    op = native([x, s, k], [s * 0.5 + pt.exp(x) * pt.sin(x) * k + pt.tanh(s)], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    trace = one(op, N, XS, expand_empty(pt.shape_padleft(X0), N), K)
    fg, count, after = run(push_out_sequence_work, [XS, X0, K], [trace], [XV, X0V, KV])
    assert count == 1
    (node,) = scans(fg)
    sig = only_sig(fg)
    (seq,) = sig.having(Meaning.SEQUENCE)  # x is no longer read: only the new rows are
    assert seq.args[0] is not XS and seq.args[0].ndim == 1
    body = body_of(node.inputs[0])
    scalar_ops = [type(n.op.scalar_op).__name__ for n in scope_toposort(body.outputs) if hasattr(n.op, "scalar_op")]
    assert "Sin" not in scalar_ops and "Exp" not in scalar_ops and "Tanh" in scalar_ops
    # the rows are exp(x) * sin(x) * k over all of x: k's product is row-wise too
    np.testing.assert_allclose(evaluate(fg.inputs, [seq.args[0]], [XV, X0V, KV])[0], np.exp(XV) * np.sin(XV) * KV, rtol=1e-12)
    expected, state = [X0V], X0V
    for xv in XV:
        state = state * 0.5 + np.exp(xv) * np.sin(xv) * KV + np.tanh(state)
        expected.append(state)
    np.testing.assert_allclose(after[0], expected, rtol=1e-12)
    assert push_out_sequence_work(fg) == 0


def test_cheap_row_wise_work_stays_and_invariant_work_is_not_a_sequence():
    x, s, k = pt.dscalar("x"), pt.dscalar("s"), pt.dscalar("k")
    cheap = native([x, s, k], [s * 0.5 + x * 2.0 * s + x], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    fg, count, _ = run(push_out_sequence_work, [XS, X0, K], [one(cheap, N, XS, expand_empty(pt.shape_padleft(X0), N), K)], [XV, X0V, KV])
    assert count == 0 and [s.args[0] for s in only_sig(fg).having(Meaning.SEQUENCE)] == fg.inputs[:1]  # x * 2 costs less than its read
    invariant = native([x, s, k], [s * pt.exp(k) * pt.sin(k) + x], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    fg, count, _ = run(push_out_sequence_work, [XS, X0, K], [one(invariant, N, XS, expand_empty(pt.shape_padleft(X0), N), K)], [XV, X0V, KV])
    assert count == 0


def test_row_wise_targets():
    x, y, k, s = pt.dscalar("x"), pt.dscalar("y"), pt.dscalar("k"), pt.dscalar("s")
    ex = pt.exp(x)
    work = ex * pt.sin(y)
    inv = pt.exp(k)
    out = s * work + ex + inv * s
    targets, read = push_out._row_wise_targets([out], {x, y}, {k})
    assert targets == [ex, work] and read == set()
    # an output that is row-wise work itself is a target; a row read by other work stays read
    targets, read = push_out._row_wise_targets([work, s * x], {x, y}, {k})
    assert targets == [work] and read == {x}
    targets, read = push_out._row_wise_targets([pt.dot(pt.stack([x, y]), pt.stack([s, s]))], {x, y}, set())
    assert targets == [] and read == {x, y}


def test_row_wise_targets_in_lazy_branches_are_not_taken():
    from pytensor.conditional.op import ifelse

    x, s = pt.dscalar("x"), pt.dscalar("s")
    ex = pt.exp(x)
    lazy: Any = ifelse(pt.gt(s, 0), ex, s)
    targets, read = push_out._row_wise_targets([s + lazy], {x}, set())
    assert targets == [] and read == {x}
    doubled = ex * 2.0
    targets, read = push_out._row_wise_targets([s + lazy + doubled], {x}, set())  # computed on every step too: taken
    assert targets == [ex, doubled] and read == set()


def test_loops_that_share_a_body_share_the_pushed_out_work():
    x, k = pt.dscalar("x"), pt.dscalar("k")
    op = native([x, k], [pt.exp(x) * k, x * k], n_seqs=1, n_nit_sot=2, n_non_seqs=1)
    first = outs(op, N, XS, N, N, K)
    second = outs(op, YS.shape[0], YS, YS.shape[0], YS.shape[0], X0)

    def merged_then_pushed(g: FunctionGraph) -> int:
        MergeOptimizer().rewrite(g)
        with sharing_rebuilt_functions():
            return push_out_sequence_work(g)

    fg, count, after = run(merged_then_pushed, [XS, YS, K, X0], [*first, *second], [XV, YV, KV, X0V])
    assert count == 2 and not scans(fg)
    calls = [n for n in fg.apply_nodes if isinstance(n.op, Call)]
    # one outlined body per output, each applied to both loops' rows
    assert len(calls) == 4 and len({n.inputs[0] for n in calls}) == 2
    assert {n.inputs[1].owner.inputs[0] for n in calls} == set(fg.inputs[:2])  # xs[:n], ys[:m]
    np.testing.assert_allclose(after[0], np.exp(XV) * KV, rtol=1e-12)
    np.testing.assert_allclose(after[2], np.exp(YV) * X0V, rtol=1e-12)
    np.testing.assert_allclose(after[3], YV * X0V, rtol=1e-12)


def test_loops_that_share_a_body_share_the_new_sequences():
    x, s, k = pt.dscalar("x"), pt.dscalar("s"), pt.dscalar("k")
    op = native([x, s, k], [s * 0.5 + pt.exp(x) * pt.sin(x) + pt.tanh(s) * k], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    first = one(op, N, XS, expand_empty(pt.shape_padleft(X0), N), K)
    second = one(op, YS.shape[0], YS, expand_empty(pt.shape_padleft(K), YS.shape[0]), X0)

    def merged_then_pushed(g: FunctionGraph) -> int:
        MergeOptimizer().rewrite(g)
        with sharing_rebuilt_functions():
            return push_out_sequence_work(g)

    fg, count, after = run(merged_then_pushed, [XS, YS, X0, K], [first, second], [XV, YV, X0V, KV])
    assert count == 2
    nodes = scans(fg)
    assert len(nodes) == 2 and len({n.inputs[0] for n in nodes}) == 1  # still one body
    calls = [n for n in fg.apply_nodes if isinstance(n.op, Call)]
    assert len(calls) == 2 and len({n.inputs[0] for n in calls}) == 1
    state, expected = KV, [KV]
    for yv in YV:
        state = state * 0.5 + np.exp(yv) * np.sin(yv) + np.tanh(state) * X0V
        expected.append(state)
    np.testing.assert_allclose(after[1], expected, rtol=1e-12)


def test_row_wise_work_in_an_until_loop_stays():
    x, s = pt.dscalar("x"), pt.dscalar("s")
    op = native([x, s], [s + pt.exp(x) * pt.sin(x), pt.gt(s, 1e9)], n_seqs=1, n_sit_sot=1, as_while=True)
    trace = one(op, N, XS, expand_empty(pt.shape_padleft(X0), N))
    fg, count, _ = run(push_out_sequence_work, [XS, X0], [trace], [XV, X0V])
    assert count == 0 and len(only_sig(fg).having(Meaning.SEQUENCE)) == 1
    x, k = pt.dscalar("x"), pt.dscalar("k")
    nits = native([x, k], [pt.exp(x) * k, pt.gt(x, 1e9)], n_seqs=1, n_nit_sot=1, n_non_seqs=1, as_while=True)
    fg, count, _ = run(push_out_sequence_work, [XS, K], [one(nits, N, XS, N, K)], [XV, KV])
    assert count == 0 and len(scans(fg)) == 1


def test_a_loop_without_sequences_is_left():
    x0, k = pt.dscalar("s"), pt.dscalar("k")
    op = native([x0, k], [x0 * pt.exp(k) + 1.0], n_sit_sot=1, n_non_seqs=1)
    three = pt.constant(np.asarray(3, dtype="int64"))
    fg, count, _ = run(push_out_sequence_work, [X0, K], [one(op, three, expand_empty(pt.shape_padleft(X0), three), K)], [X0V, KV])
    assert count == 0 and len(scans(fg)) == 1


# ---- push_out_dot_sums


def accumulator(update: Callable[..., Any], n_seqs: int, seqs: Sequence[Any], init: Any, extra: int = 0) -> list[Any]:
    """An untraced state ``u`` updated as ``update(*rows, u)``, plus ``extra`` nit-sots (the update's other outputs)."""
    rows = [pt.tensor(f"r{i}", shape=(None,) * (s.ndim - 1), dtype="float64") for i, s in enumerate(seqs)]
    u = pt.tensor("u", shape=(None,) * init.ndim, dtype="float64")
    updated = update(*rows, u)
    updated = updated if isinstance(updated, list) else [updated]
    op = native([*rows, u], [*updated[1:], updated[0]], n_seqs=n_seqs, n_nit_sot=extra, n_untraced=1)
    n = seqs[0].shape[0]
    found = outs(op, n, *seqs, init, *[n] * extra)
    return [found[-1], *found[:-1]]


A3: Any = pt.tensor3("a")
B3: Any = pt.tensor3("b")
U0: Any = pt.dmatrix("u0")
V0: Any = pt.dvector("v0")
RNG = np.random.default_rng(2)
AV, BV3, U0V = RNG.normal(size=(4, 2, 3)), RNG.normal(size=(4, 3, 5)), RNG.normal(size=(2, 5))


def test_a_dot_accumulator_becomes_one_dot():
    (final,) = accumulator(lambda a, b, u: u + pt.dot(a, b), 2, [A3, B3], U0)
    fg, count, after = run(push_out_dot_sums, [A3, B3, U0], [final], [AV, BV3, U0V])
    assert count == 1 and not scans(fg)
    expected = U0V + sum(AV[t] @ BV3[t] for t in range(4))
    np.testing.assert_allclose(after[0], expected, rtol=1e-12)

    def build() -> tuple[list[Any], list[Any]]:
        a, b, u0 = pt.tensor3("a"), pt.tensor3("b"), pt.dmatrix("u0")
        us = pytensor.scan(lambda x, y, u: u + pt.dot(x, y), sequences=[a, b], outputs_info=[u0], return_updates=False)
        return [a, b, u0], [us[-1]]

    np.testing.assert_allclose(after[0], vanilla_values(build, [AV, BV3, U0V], mode=PY)[0], rtol=1e-12)
    (swapped,) = accumulator(lambda a, b, u: pt.dot(a, b) + u, 2, [A3, B3], U0)  # the state on either side
    fg, count, after = run(push_out_dot_sums, [A3, B3, U0], [swapped], [AV, BV3, U0V])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], expected, rtol=1e-12)
    assert push_out_dot_sums(fg) == 0


def test_a_state_accumulating_a_sequence_of_products_becomes_its_sum():
    products_of = XS * XS[::-1]
    (final,) = accumulator(lambda r, u: u + r, 1, [products_of], X0)
    fg, count, after = run(push_out_dot_sums, [XS, X0], [final], [XV, X0V])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], X0V + (XV * XV[::-1]).sum(), rtol=1e-12)
    xm: Any = pt.dmatrix("xm")
    (final,) = accumulator(lambda r, u: u + r, 1, [xm * xm], YS)  # rows of vectors: summed over the steps, not within a row
    xmv = np.random.default_rng(7).normal(size=(4, 5))
    fg, count, after = run(push_out_dot_sums, [xm, YS], [final], [xmv, YV])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], YV + (xmv * xmv).sum(axis=0), rtol=1e-12)
    (final,) = accumulator(lambda r, u: r + u, 1, [(XS * 2.0).dimshuffle(0)[1:]], X0)  # through views; the state second
    fg, count, after = run(push_out_dot_sums, [XS, X0], [final], [XV, X0V])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], X0V + (XV[1:] * 2.0).sum(), rtol=1e-12)


def test_accumulators_the_sums_do_not_take_stay():
    cases: list[tuple[Callable[..., Any], list[Any], Any, list[Any]]] = [
        (lambda r, u: u + r, [XS], X0, [XV, X0V]),  # a plain sequence: vanilla's loop, vanilla's order
        (lambda r, u: u + r, [XS + 2.0], X0, [XV, X0V]),  # a sum, not a product
        (lambda r, u: u - r, [XS * XS], X0, [XV, X0V]),  # a difference
        (lambda r, u: u * r, [XS * XS], X0, [XV, X0V]),
        (lambda r, u: u + r * 2.0, [XS * XS], X0, [XV, X0V]),  # a term that is not the row
        (lambda r, u: u + pt.exp(u), [XS * XS], X0, [XV, X0V]),
        (lambda r, u: pt.add(u, r, r), [XS * XS], X0, [XV, X0V]),  # three terms
        (lambda r, u: r + r, [XS * XS], X0, [XV, X0V]),  # no state
        (lambda r, u: pt.add(u), [XS * XS], X0, [XV, X0V]),  # an Add of one input: no term
    ]
    for update, seqs, init, values in cases:
        (final,) = accumulator(update, 1, seqs, init)
        fg, count, _ = run(push_out_dot_sums, [XS, X0], [final], values)
        assert count == 0 and len(scans(fg)) == 1
    vec = pt.tensor("vec", shape=(None, 3), dtype="float64")
    (final,) = accumulator(lambda a, b, u: u + pt.dot(a, b) * u.sum(), 2, [A3, B3], U0)
    fg, count, _ = run(push_out_dot_sums, [A3, B3, U0], [final], [AV, BV3, U0V])
    assert count == 0
    (final,) = accumulator(lambda a, v, u: u + pt.dot(a, v), 2, [A3, vec], V0)  # a dot of a matrix and a vector row
    fg, count, _ = run(push_out_dot_sums, [A3, vec, V0], [final], [AV, RNG.normal(size=(4, 3)), np.zeros(2)])
    assert count == 0


def test_an_accumulator_another_output_reads_stays():
    (final, running) = accumulator(lambda r, u: [u + r, u * 2.0], 1, [XS * XS], X0, extra=1)  # the state read twice
    fg, count, _ = run(push_out_dot_sums, [XS, X0], [final, running], [XV, X0V])
    assert count == 0 and len(scans(fg)) == 1

    def update(r: Any, u: Any) -> list[Any]:
        new = u + r
        return [new, new * pt.sin(r)]  # the running sum read by another output

    (final, running) = accumulator(update, 1, [XS * XS], X0, extra=1)
    fg, count, _ = run(push_out_dot_sums, [XS, X0], [final, running], [XV, X0V])
    assert count == 0 and len(scans(fg)) == 1


def test_only_the_accumulator_that_qualifies_leaves_the_loop():
    r, q, u, w = pt.dscalar("r"), pt.dscalar("q"), pt.dscalar("u"), pt.dscalar("w")
    op = native([r, q, u, w], [u + r, w * q + 1.0], n_seqs=2, n_untraced=2)
    prods, plain = XS * XS, XS + 1.0
    u_final, w_final = outs(op, N, prods, plain, X0, K)
    fg, count, after = run(push_out_dot_sums, [XS, X0, K], [u_final, w_final], [XV, X0V, KV])
    assert count == 1
    sig = only_sig(fg)
    assert len(sig.having(Meaning.CARRY)) == 1 and sig.having(Meaning.CARRY)[0].args[0] is fg.inputs[2]
    np.testing.assert_allclose(after[0], X0V + (XV * XV).sum(), rtol=1e-12)
    w_expected = KV
    for xv in XV:
        w_expected = w_expected * (xv + 1.0) + 1.0
    np.testing.assert_allclose(after[1], w_expected, rtol=1e-12)


def test_products_are_sequences_of_elementwise_products():
    r, q, s, k = pt.dscalar("r"), pt.dscalar("q"), pt.dscalar("s"), pt.dscalar("k")
    op = native([r, q, s, k], [r + q + s + k], n_seqs=3, n_nit_sot=1, n_non_seqs=1)
    out = one(op, N, XS * YS[:4], (XS * 2.0).dimshuffle(0)[::-1], XS - 1.0, N, XS[0] * 2.0)
    _, sig = sig_of([out], [XS, YS])
    seqs = sig.having(Meaning.SEQUENCE)
    found = products(sig)
    assert found == {seqs[0].params[0][1], seqs[1].params[0][1]}


def test_reads_counts_every_read():
    x = pt.dscalar("x")
    y = x * x
    total = y + x
    reads = push_out._reads([total, y])
    reads.pop(total)  # an output: read once as one
    assert push_out._reads([total, y])[total] == 1
    assert reads == {x: 3, y: 2}  # x twice in x * x and once in y + x; y in y + x and as an output


def test_summed_term_directly():
    a, b, u = pt.dmatrix("a"), pt.dmatrix("b"), pt.dmatrix("u")
    assert push_out._summed_term(u + pt.dot(a, b), u, {a, b}, set()) is not None
    assert push_out._summed_term(u + pt.dot(a, b), u, {a}, set()) is None  # b not a row
    assert push_out._summed_term(u + pt.dot(a, b), a, {a, b}, set()) is None  # the state is not a term
    assert push_out._summed_term(u, u, {a, b}, set()) is None  # no node
    assert push_out._summed_term(pt.add(u), u, {a, b}, {a}) is None  # an Add of the state alone
    r = pt.dmatrix("r")
    assert push_out._summed_term(u + r, u, {r}, set()) is None and push_out._summed_term(u + r, u, set(), {r}) is not None
    v = pt.dvector("v")
    assert push_out._summed_term(u + v, u, set(), {v}) is None  # another rank: the term is broadcast


# ---- what the first run's survivors showed


def test_an_untraced_state_starting_from_the_first_rows_is_not_an_after_loop_value():
    """A state whose initial value is ``xs[:n]`` (as a sequence's rows look) changes every step: a nit-sot reading it stays."""
    x, u, k = pt.dscalar("x"), pt.dvector("u"), pt.dscalar("k")
    op = native([x, u, k], [u * x * k, u * 0.5 + 1.0], n_seqs=1, n_nit_sot=1, n_untraced=1, n_non_seqs=1)
    per_step, _ = outs(op, N, XS, XS[:N], N, K)
    fg, sig = sig_of([per_step], [XS, K])
    (carry,) = sig.having(Meaning.CARRY)
    assert carry.params[0][1] not in AfterLoop(sig) and carry.params[0][1] not in AfterLoop(sig, mit_mot=False)
    for rewrite in (push_out_sequence_work, push_out_per_step_outputs):
        fg, count, after = run(rewrite, [XS, K], [per_step], [XV, KV])
        assert len(scans(fg)) == 1 and nit_sots(fg) == 1  # (the sequence push-out may make the row x[None] a sequence)
    state, rows = XV.copy(), []
    for xv in XV:
        rows.append(state * xv * KV)
        state = state * 0.5 + 1.0
    np.testing.assert_allclose(after[0], rows, rtol=1e-12)



def test_a_trace_starting_from_the_first_rows_is_not_an_after_loop_value():
    """A traced state whose buffer is ``xs[:n]`` (as a sequence's rows look) has no after-loop value either ('trace' sorts after 'sequence')."""
    x, s, k = pt.dscalar("x"), pt.dscalar("s"), pt.dscalar("k")
    op = native([x, s, k], [s * 0.5 + 1.0, s * x * k], n_seqs=1, n_sit_sot=1, n_nit_sot=1, n_non_seqs=1)
    trace, per_step = outs(op, N, XS, XS[:N], N, K)
    fg, sig = sig_of([per_step, trace], [XS, K])
    (slot,) = sig.having(Meaning.TRACE)
    assert slot.args[0].owner is not None and isinstance(slot.args[0].owner.op, Subtensor)
    assert slot.params[0][1] not in AfterLoop(sig) and slot.params[0][1] not in AfterLoop(sig, mit_mot=False)

def test_outer_work_behind_the_rows_is_not_walked():
    """The rows are determinants of a batch of matrices (a Blockwise in the outer graph): the vectorized work stops at them."""
    mats: Any = pt.tensor3("mats")
    dets: Any = pt.linalg.det(mats)
    assert any(isinstance(n.op, Blockwise) for n in scope_toposort([dets]))
    y = nit_loop(lambda x, k: pt.exp(x) * k, sequence=dets, steps=dets.shape[0])
    batch = np.random.default_rng(3).normal(size=(4, 2, 2))
    values = [batch, KV]
    fg, count, after = run(push_out_sequence_work, [mats, K], [y], values)
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], np.exp(np.linalg.det(batch)) * KV, rtol=1e-12)


def test_consumers_the_passes_do_not_take_are_left():
    """A call (not counted) beside a loop: every pass leaves it, and still changes the loop."""
    from consumer_nodes import call_node
    from typed import param

    p0, p1 = param(0, X0.type), param(1, K.type)
    called = call_node([pt.exp(p0) * p1], [X0, K]).outputs[0]
    c = np.exp(X0V) * KV
    # each loop reads the call's value (as its non-sequence, or its state's initial value): the call comes first
    y, z = clone_replace(nit_loop(lambda x, k: pt.exp(x) * k, lambda x, k: pt.sin(k)), {K: called})
    fg, count, after = run(push_out_sequence_work, [XS, K, X0], [called, y, z], [XV, KV, X0V])
    assert count == 1 and not scans(fg) and any(isinstance(n.op, Call) for n in fg.apply_nodes)
    np.testing.assert_allclose(after[0], c, rtol=1e-12)
    np.testing.assert_allclose(after[1], np.exp(XV) * c, rtol=1e-12)
    nit = lambda x, m1, m0, k: m0 * k  # noqa: E731
    fg, count, after = run(push_out_per_step_outputs, [XS, BUF, K, X0], clone_replace(mit_mot_loop(nit), {K: called}), [XV, BV, KV, X0V])
    assert count == 1 and nit_sots(fg) == 0
    np.testing.assert_allclose(after[0], mit_mot_rows(lambda x, m1, m0, k: m0 * k, XV, BV, c)[0], rtol=1e-12)
    (final,) = accumulator(lambda r, u: u + r, 1, [XS * XS], called)
    fg, count, after = run(push_out_dot_sums, [XS, X0, K], [final], [XV, X0V, KV])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], c + (XV * XV).sum(), rtol=1e-12)


def test_a_step_count_that_is_also_an_argument_is_not_walked():
    """The step count, computed through a Blockwise, is also the loop's non-sequence: the vectorized work stops at it."""
    mats: Any = pt.tensor3("mats")
    dets: Any = pt.linalg.det(mats)
    steps = pt.cast(dets[0], "int64")
    x, k = pt.dscalar("x"), pt.lscalar("k")
    op = native([x, k], [pt.exp(x) * k], n_seqs=1, n_nit_sot=1, n_non_seqs=1)
    y = one(op, steps, XS, steps, steps)
    fg, count, after = run(push_out_sequence_work, [XS, mats], [y], [XV, np.array([[[3.0, 0.0], [0.0, 1.0]]])])
    assert count == 1 and not scans(fg)
    np.testing.assert_allclose(after[0], np.exp(XV[:3]) * 3, rtol=1e-12)


def test_a_loop_passing_one_variable_twice_keeps_no_template():
    """The first loop of a body passes k for both non-sequences: its vectorized graph cannot be rebound for a loop passing two."""
    x, m1, m0, a, b = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.dscalar("a"), pt.dscalar("b")
    op = native([x, m1, m0, a, b], [m1 * 0.5 + m0 + x, m0 * a + b + x], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=2)
    buf2 = pt.dvector("buf2")
    buffer1, rows1 = outs(op, N, XS, BUF, N, K, K)
    later: Any = rows1.sum()  # the second loop reads the first's rows: it comes second
    buffer2, rows2 = outs(op, N, XS, buf2, N, K, later)

    fg, count, after = run(merged_then_pushed, [XS, BUF, K, buf2], [rows1, rows2, buffer1, buffer2], [XV, BV, KV, B2])
    assert count == 2 and nit_sots(fg) == 0
    first, _ = mit_mot_rows(lambda x, m1, m0, k: m0 * k + k + x, XV, BV, KV)
    np.testing.assert_allclose(after[0], first, rtol=1e-12)
    second, _ = mit_mot_rows(lambda x, m1, m0, k: m0 * k + sum(first) + x, XV, B2, KV)
    np.testing.assert_allclose(after[1], second, rtol=1e-12)


def test_a_tap_above_the_written_one_is_not_final():
    """In taps (0, 2), out tap 1: tap 2 reads row t + 2, which step t + 1 writes; only tap 0's reads are the final buffer's rows."""
    x, m0, m2 = pt.dscalar("x"), pt.dscalar("m0"), pt.dscalar("m2")
    op = native([x, m0, m2], [m0 * 0.5 + m2 + x, m2 * 3.0, m0 * 3.0], n_seqs=1, mit_mot=[((0, 2), (1,))], n_nit_sot=2)
    buffer, reads_2, reads_0 = outs(op, N, XS, BUF, N, N)
    fg, count, after = run(push_out_per_step_outputs, [XS, BUF], [reads_2, reads_0, buffer], [XV, BV])
    assert count == 1 and nit_sots(fg) == 1
    bv, read_2, read_0 = BV.copy(), [], []
    for t, xv in enumerate(XV):
        read_2.append(bv[t + 2] * 3.0)
        read_0.append(bv[t] * 3.0)
        bv[t + 1] = bv[t] * 0.5 + bv[t + 2] + xv
    np.testing.assert_allclose(after[0], read_2, rtol=1e-12)
    np.testing.assert_allclose(after[1], read_0, rtol=1e-12)
    np.testing.assert_allclose(after[2], bv, rtol=1e-12)


def test_the_vectorized_work_is_kept_as_the_body_template():
    nit = lambda x, m1, m0, k: m0 * k + x  # noqa: E731
    per_step, buffer = mit_mot_loop(nit)
    fg, sig = sig_of([per_step, buffer], [XS, BUF, K])
    (slot,) = sig.having(Meaning.PER_STEP_OUTPUT)
    ((_, out),) = slot.outputs
    values = AfterLoop(sig)
    templates: dict[Any, Any] = {}
    first = values.vectorized([out], templates)
    assert first is not None and len(templates) == 1
    ((firsts, n, template),) = templates.values()
    assert n is sig.header[0] and list(template) == first and len(firsts) == 3  # the rows, the buffer and k
    again = values.vectorized([out], templates)
    assert again == first and again is not template  # the same loop's variables: the template itself, as a new list
    rows, _ = mit_mot_numpy(nit)
    np.testing.assert_allclose(evaluate(fg.inputs, first, [XV, BV, KV])[0], rows, rtol=1e-12)
    # a body read at two taps of one buffer binds that buffer twice: no template
    per_step, buffer = mit_mot_loop(lambda x, m1, m0, k: m1 * m0 + x)
    fg, sig = sig_of([per_step, buffer], [XS, BUF, K])
    (slot,) = sig.having(Meaning.PER_STEP_OUTPUT)
    templates = {}
    assert AfterLoop(sig).vectorized([slot.outputs[0][1]], templates) is not None and templates == {}


def test_a_loop_with_a_live_state_is_refused_before_any_vectorization():
    """The whole-loop push-out needs every live result row-wise: a live state refuses it before any work is vectorized."""
    state, exps = accumulator(lambda r, u: [u + r, pt.exp(r)], 1, [XS], pt.constant(np.asarray(0.0)), extra=1)
    fg, sig = sig_of([state, exps], [XS])
    templates: dict[Any, Any] = {}
    assert push_out._pushed_outputs(fg, sig, AfterLoop(sig), row_wise=True, templates=templates) == {}
    assert templates == {}
    # the same loop with its state dead: its one row-wise output is pushed, and its work vectorized once
    fg, sig = sig_of([exps], [XS])
    pushed = push_out._pushed_outputs(fg, sig, AfterLoop(sig), row_wise=True, templates=templates)
    assert list(pushed) == fg.outputs and len(templates) == 1
    np.testing.assert_allclose(evaluate(fg.inputs, list(pushed.values()), [XV])[0], np.exp(XV), rtol=1e-12)



def test_a_loop_of_257_row_wise_outputs_is_pushed_whole():
    """Counts beyond CPython's cached ints (256): every one of 257 live per-step outputs is row-wise, so all are pushed."""
    x, k = pt.dscalar("x"), pt.dscalar("k")
    op = native([x, k], [x * k + float(i) for i in range(257)], n_seqs=1, n_nit_sot=257, n_non_seqs=1)
    fg, sig = sig_of(outs(op, N, XS, *[N] * 257, K), [XS, K])
    pushed = push_out._pushed_outputs(fg, sig, AfterLoop(sig), row_wise=True, templates={})
    assert list(pushed) == fg.outputs
    np.testing.assert_allclose(evaluate(fg.inputs, [pushed[fg.outputs[-1]]], [XV, KV])[0], XV * KV + 256.0, rtol=1e-12)


def test_a_body_of_257_arguments_keeps_its_template():
    """Counts beyond CPython's cached ints (256): 257 distinct non-sequences, each bound once, still make a template."""
    x = pt.dscalar("x")
    ks = [pt.dscalar(f"k{i}") for i in range(257)]
    outer = [pt.dscalar(f"kv{i}") for i in range(257)]
    op = native([x, *ks], [functools.reduce(operator.add, ks, x)], n_seqs=1, n_nit_sot=1, n_non_seqs=257)
    fg, sig = sig_of([one(op, N, XS, N, *outer)], [XS, *outer])
    (slot,) = sig.having(Meaning.PER_STEP_OUTPUT)
    templates: dict[Any, Any] = {}
    vectorized = AfterLoop(sig).vectorized([slot.outputs[0][1]], templates)
    assert vectorized is not None and len(templates) == 1
    values = [XV, *np.linspace(0.0, 1.0, 257)]
    np.testing.assert_allclose(evaluate(fg.inputs, vectorized, values)[0], XV + sum(values[1:]), rtol=1e-12)

def test_a_step_count_passed_as_an_argument_keeps_no_template():
    """The first loop passes its step count as its non-sequence too: a later loop of the body passing another value must not get its count."""
    x, m1, m0, k = pt.dscalar("x"), pt.dscalar("m_1"), pt.dscalar("m0"), pt.lscalar("k")
    op = native([x, m1, m0, k], [m1 * 0.5 + m0 + x, m0 * k + x], n_seqs=1, mit_mot=[((-1, 0), (1,))], n_nit_sot=1, n_non_seqs=1)
    buffer1, rows1 = outs(op, N, XS, BUF, N, N)
    two: Any = pt.cast(rows1[0] * 0.0 + 2.0, "int64")  # 2, read from the first loop: the second loop comes second
    buf2 = pt.dvector("buf2")
    buffer2, rows2 = outs(op, YS.shape[0], YS, buf2, YS.shape[0], two)

    fg, count, after = run(merged_then_pushed, [XS, BUF, YS, buf2], [rows1, rows2, buffer1, buffer2], [XV, BV, YV, B2])
    assert count == 2 and nit_sots(fg) == 0
    np.testing.assert_allclose(after[0], mit_mot_rows(lambda x, m1, m0, k: m0 * k + x, XV, BV, 4)[0], rtol=1e-12)
    np.testing.assert_allclose(after[1], mit_mot_rows(lambda x, m1, m0, k: m0 * k + x, YV, B2, 2)[0], rtol=1e-12)


def test_the_sequence_push_out_reads_no_tap_of_a_buffer():
    """Row-wise work next to a mit-mot tap: the work moves out, the tap (whose final rows the loop itself writes) stays in."""
    nit = lambda x, m1, m0, k: pt.exp(x) * pt.sin(x) * m0  # noqa: E731
    fg, count, after = run(push_out_sequence_work, [XS, BUF, K], mit_mot_loop(nit), [XV, BV, KV])
    assert count == 1 and len(scans(fg)) == 1 and nit_sots(fg) == 1
    rows, _ = mit_mot_numpy(lambda x, m1, m0, k: np.exp(x) * np.sin(x) * m0)
    np.testing.assert_allclose(after[0], rows, rtol=1e-12)


def test_row_wise_work_an_output_and_the_body_both_read():
    x, s = pt.dscalar("x"), pt.dscalar("s")
    ex = pt.exp(x)
    targets, read = push_out._row_wise_targets([ex, s * ex], {x}, set())
    assert targets == [ex] and read == set()


def test_dot_sums_after_a_loop_without_accumulators_and_past_one_they_leave():
    """A loop with no accumulator, then one whose first accumulator is read twice and whose second is taken."""
    x, s = pt.dscalar("x"), pt.dscalar("s")
    plain = native([x, s], [s * x + 1.0], n_seqs=1, n_sit_sot=1)
    first = one(plain, N, XS, expand_empty(pt.shape_padleft(X0), N))[-1]
    r, u, w = pt.dscalar("r"), pt.dscalar("u"), pt.dscalar("w")
    op = native([r, u, w], [u * 2.0, u + r, w + r], n_seqs=1, n_nit_sot=1, n_untraced=2)
    doubled, u_final, w_final = outs(op, N, XS * XS, first, K, N)
    fg, count, after = run(push_out_dot_sums, [XS, X0, K], [doubled, u_final, w_final], [XV, X0V, KV])
    assert count == 1 and len(scans(fg)) == 2
    sig = [sig for sig in consumers(fg) if sig.having(Meaning.CARRY)][0]
    assert len(sig.having(Meaning.CARRY)) == 1  # u stays: its running value is read by another output
    np.testing.assert_allclose(after[2], KV + (XV * XV).sum(), rtol=1e-12)


def test_row_wise_work_reading_an_invariant_blockwise_stays_and_the_pass_goes_on():
    """``exp(x) * det(m)``: the determinant of the non-sequence is a Blockwise, so the work does not vectorize and stays in the loop;
    the loop after it (reading its result) is still pushed out."""
    x, s, m = pt.dscalar("x"), pt.dscalar("s"), pt.dmatrix("m")
    op = native([x, s, m], [s * 0.5 + pt.exp(x) * pt.linalg.det(m)], n_seqs=1, n_sit_sot=1, n_non_seqs=1)
    mat = pt.dmatrix("mat")
    trace = one(op, N, XS, expand_empty(pt.shape_padleft(X0), N), mat)
    last = nit_loop(lambda x, k: pt.exp(x) * k, sequence=XS * trace[-1])
    mv = np.array([[2.0, 0.5], [0.25, 1.0]])
    fg, count, after = run(push_out_sequence_work, [XS, X0, K, mat], [last], [XV, X0V, KV, mv])
    assert count == 1 and len(scans(fg)) == 1
    assert [s.args[0] for s in only_sig(fg).having(Meaning.SEQUENCE)] == fg.inputs[:1]  # x itself: exp(x) * det(m) stays
    state = X0V
    for xv in XV:
        state = state * 0.5 + np.exp(xv) * np.linalg.det(mv)
    np.testing.assert_allclose(after[0], np.exp(XV * state) * KV, rtol=1e-12)
