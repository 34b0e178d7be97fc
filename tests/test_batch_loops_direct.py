"""`innergraph.rewriting.batch_loops` called directly, fast (issue 47's mutation run).

`tests/test_batch_loops.py` compiles grouped models under every linker (60 to 90 s a
run). These tests call the module's pieces (`_slices`, `_lifted`, `_repeated`,
`_inc_subtensor_batched`, `_stacked`, `_sink`, `_fold_increment_chain`) and the pass on
small FunctionGraphs, without Numba and without rewriting compilation (the py linker, no
optimizer): graphs are compared structurally and with literal counts, values with NumPy.
"""

from typing import Any, cast

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.compile.mode import Mode, optdb
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.replace import _vectorize_node, clone_replace
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.scan.utils import until
from pytensor.tensor.basic import Alloc, AllocEmpty
from pytensor.tensor.random.type import random_generator_type
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    IncSubtensor,
    Subtensor,
)
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorVariable

import innergraph
from innergraph.core.fold import unfold_inner_graphs, visible_nodes
from innergraph.core.graph import body_of
from innergraph.ops.scan import Scan
from innergraph.protocol.signature import consumers, sharing_rebuilt_functions
from innergraph.protocol.slots import Meaning
from innergraph.rewriting import batch_loops as bl
from innergraph.rewriting.untrace import untrace_final_states
from typed import one_tensor

PY = Mode(linker="py", optimizer=None)  # type: ignore[arg-type]  # Mode takes None (no rewriting); its annotation leaves None out


def evaluate(inputs, outputs, values):
    """``outputs`` of ``inputs`` at ``values``, run as built (py linker, no rewrites)."""
    return pytensor.function(
        list(inputs), list(outputs), mode=PY, on_unused_input="ignore"
    )(*values)


def close(got, want):
    """Equal to rounding (tanh and products in another order: float64, near zero too)."""
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def ops(outputs, inputs=None):
    """The Op classes' names of the nodes between ``inputs`` (default: the graph's inputs) and ``outputs``."""
    roots = list(graph_inputs(outputs)) if inputs is None else list(inputs)
    return sorted(type(n.op).__name__ for n in applys_between(roots, outputs))


def must_lift(args: list[Variable], depth: int) -> tuple[Any, bool]:
    """``bl._lifted(args, depth)`` where the test expects a lift: its ``(x, batched)``, not None."""
    lifted = bl._lifted(args, depth)
    assert lifted is not None, f"_lifted refused {args}"
    return lifted


RNG = np.random.default_rng(47)
X34 = RNG.normal(size=(3, 4))
T234 = RNG.normal(size=(2, 3, 4))


# ---- the pieces


def test_a_batched_type_gains_a_leading_axis_of_length_k():
    """K first, then the type's own shape and dtype."""
    assert bl._batched_type(TensorType("float32", shape=(None, 2)), 5) == TensorType(
        "float32", shape=(5, None, 2)
    )


def test_one_value_is_one_variable_or_equal_constants():
    """The same variable K times, or K equal constants (separate objects); anything else is not one value."""
    x, y = pt.dscalar("x"), pt.dscalar("y")
    assert bl._one_value([x, x, x])
    assert not bl._one_value([x, y])
    assert not bl._one_value([x, x, y])
    assert bl._one_value([pt.constant(1.5), pt.constant(1.5)])
    assert not bl._one_value([pt.constant(1.5), pt.constant(2.5)])
    assert not bl._one_value([pt.constant(1.5), x])


def test_a_slice_index_is_the_last_constant_index_of_the_same_indexing():
    """``X[a:, i]`` against ``X[a:, 0]``: ``i``; another ``X``, another start, another Op or a symbolic index: None."""
    x, y = pt.dmatrix("x"), pt.dmatrix("y")
    a, b, i = (
        ps.int64("a"),
        ps.int64("b"),
        ps.int64("i"),
    )  # scalars: taken as they are, not converted anew
    like = x[a:, 0].owner
    assert bl._slice_index(x[a:, 2], like) == 2
    assert bl._slice_index(x[a:, 0], like) == 0
    assert bl._slice_index(y[a:, 2], like) is None
    assert bl._slice_index(x[b:, 2], like) is None
    assert bl._slice_index(x[a:, i], like) is None
    assert bl._slice_index(x[:, 2], like) is None  # another Op (no start)
    assert bl._slice_index(x, like) is None
    assert (
        bl._slice_index(x[2:, 3], x[2:, 0].owner) == 3
    )  # equal constant starts, separate objects
    assert bl._slice_index(x[1:, 3], x[2:, 0].owner) is None


def test_k_columns_of_a_matrix_of_k_columns_in_order_are_the_matrix_itself():
    """``X[:, 0..3]`` of an (3, 4) ``X``: ``X`` transposed, no advanced index."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    got = bl._slices([x[:, i] for i in range(4)])
    assert got.type.shape == (4, 3)
    assert "AdvancedSubtensor" not in ops([got], [x])
    np.testing.assert_array_equal(evaluate([x], [got], [X34])[0], X34.T)


def test_columns_in_another_order_or_fewer_are_indexed():
    """A permutation, 3 of the 4 columns in order, a column twice: one advanced index each, with NumPy's values."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    permuted = bl._slices([x[:, i] for i in (2, 0, 3, 1)])
    repeated = bl._slices(
        [x[:, i] for i in (0, 0, 2, 3)]
    )  # before 0, 1, 2, 3 as a list: still indexed
    fewer = bl._slices([x[:, i] for i in range(3)])
    assert ops([permuted], [x]).count("AdvancedSubtensor") == 1
    assert ops([fewer], [x]).count("AdvancedSubtensor") == 1
    got = evaluate([x], [permuted, fewer, repeated], [X34])
    np.testing.assert_array_equal(got[0], X34.T[[2, 0, 3, 1]])
    np.testing.assert_array_equal(got[1], X34.T[:3])
    np.testing.assert_array_equal(got[2], X34.T[[0, 0, 2, 3]])


def test_columns_of_a_matrix_of_unknown_width_are_indexed():
    """Without a static width the K columns cannot be the whole matrix: indexed, NumPy's values."""
    x = pt.dmatrix("x")
    got = bl._slices([x[:, i] for i in range(4)])
    assert ops([got], [x]).count("AdvancedSubtensor") == 1
    np.testing.assert_array_equal(evaluate([x], [got], [X34])[0], X34.T)


def test_rows_of_a_vector_are_the_vector():
    """Axis 0: ``v[0], v[1], v[2]`` of a (3,) ``v`` is ``v``, not moved nor indexed."""
    v = pt.tensor("v", shape=(3,), dtype="float64")
    got = bl._slices([v[i] for i in range(3)])
    assert got.type.shape == (3,)
    assert ops([got], [v]) == ["Subtensor"]
    np.testing.assert_array_equal(evaluate([v], [got], [X34[0, :3]])[0], X34[0, :3])


def test_slices_behind_a_leading_index_take_the_right_axis():
    """``T[1, :, i]`` and ``T[:, 1, i]`` of a (2, 3, 4) ``T``: the last index's axis counts only the slices before it."""
    t = pt.tensor("t", shape=(2, 3, 4), dtype="float64")
    middle = bl._slices([t[1, :, i] for i in (0, 3)])
    last = bl._slices([t[:, 1, i] for i in range(4)])
    first = bl._slices([t[i] for i in range(2)])
    assert last.type.shape == (4, 2) and first.type.shape == (2, 3, 4)
    got = evaluate([t], [middle, last, first], [T234])
    np.testing.assert_array_equal(got[0], T234[1].T[[0, 3]])
    np.testing.assert_array_equal(got[1], T234[:, 1].T)
    np.testing.assert_array_equal(got[2], T234)


def test_slices_that_are_not_one_index_of_one_matrix_are_none():
    """A last index that is a range, a symbolic index, another matrix: None."""
    x, y, i = pt.dmatrix("x"), pt.dmatrix("y"), pt.iscalar("i")
    assert bl._slices([x[:, 0:1], x[:, 1:2]]) is None
    assert bl._slices([x[:, 0], x[:, i]]) is None
    assert bl._slices([x[:, 0], y[:, 1]]) is None


def test_lifting_one_value_or_constants():
    """One variable K times: itself, unbatched; equal constants: the first; other constants: stacked now."""
    x = pt.dscalar("x")
    assert bl._lifted([x, x, x], depth=3) == (x, False)
    one = pt.constant(2.0)
    got, batched = must_lift([one, pt.constant(2.0)], depth=3)
    assert got is one and not batched
    stacked, batched = must_lift(
        [pt.constant(1.0), pt.constant(2.0), pt.constant(3.0)], depth=3
    )
    assert batched and isinstance(stacked, Constant)
    np.testing.assert_array_equal(stacked.data, [1.0, 2.0, 3.0])


def test_lifting_one_op_over_columns_vectorises_it():
    """``exp(X[:, i]) * 2`` for the 4 columns of an (3, 4) ``X``: ``exp(X.T) * 2``, one exp and one mul, NumPy's values."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    got, batched = must_lift([pt.exp(x[:, i]) * 2.0 for i in range(4)], depth=3)
    assert batched and got.type.shape == (4, 3)
    assert ops([got], [x]).count("Elemwise") == 2
    np.testing.assert_allclose(
        evaluate([x], [got], [X34])[0], np.exp(X34.T) * 2.0, rtol=1e-15
    )


def test_lifting_looks_as_deep_as_its_depth():
    """``exp(exp(X[:, i]))`` needs depth 3 (two Ops, then the slices): depth 2 gives None."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    args = [pt.exp(pt.exp(x[:, i])) for i in range(4)]
    assert bl._lifted(args, depth=2) is None
    got, batched = must_lift(args, depth=3)
    assert batched
    np.testing.assert_allclose(
        evaluate([x], [got], [X34])[0], np.exp(np.exp(X34.T)), rtol=1e-15
    )


def test_the_default_depth_is_twelve_ops():
    """`_stacked` lifts 11 Ops over the slices (12 levels) and stacks 12 Ops as they are (a Join)."""

    def chain(n):
        x = pt.tensor("x", shape=(3, 4), dtype="float64")
        args = [x[:, i] for i in range(4)]
        for _ in range(n):
            args = [pt.sin(a) for a in args]
        return x, bl._stacked(args, 0)

    assert bl._MAX_LIFT_DEPTH == 12
    x, deep = chain(11)
    assert "Join" not in ops([deep], [x]) and ops([deep], [x]).count("Elemwise") == 11
    expected = X34.T
    for _ in range(11):
        expected = np.sin(expected)
    np.testing.assert_allclose(evaluate([x], [deep], [X34])[0], expected, rtol=1e-14)
    y, deeper = chain(12)
    assert (
        "Join" in ops([deeper], [y]) and ops([deeper], [y]).count("Elemwise") == 12 * 4
    )


def test_lifting_refuses_other_ops_other_arities_and_free_variables():
    """Other Ops, one Op with other input counts, inputs of no Op, at depth 0: None."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    a, b = pt.dvector("a"), pt.dvector("b")
    assert bl._lifted([pt.exp(x[:, 0]), pt.log(x[:, 1])], depth=3) is None
    assert (
        bl._lifted(
            [pt.add(x[:, 0], x[:, 1]), pt.add(x[:, 1], x[:, 2], x[:, 3])], depth=3
        )
        is None
    )
    assert (
        bl._lifted(
            [pt.add(x[:, 1], x[:, 2], x[:, 3]), pt.add(x[:, 0], x[:, 1])], depth=3
        )
        is None
    )
    assert bl._lifted([a, b], depth=3) is None
    assert bl._lifted([pt.exp(a), pt.exp(b)], depth=0) is None
    assert bl._lifted([pt.exp(a), pt.exp(b)], depth=3) is None  # a and b do not lift


def test_k_equal_computations_lift_as_one_value():
    """``exp(a)`` K times, as separate nodes: the first, unbatched."""
    a = pt.dvector("a")
    first = pt.exp(a)
    assert bl._lifted([first, pt.exp(a), pt.exp(a)], depth=3) == (first, False)


def test_lifting_mixes_batched_and_unbatched_inputs():
    """``X[:, i] * c`` with one ``c``, and ``X[:, i] + i`` with constants per i: vectorised, NumPy's values."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    c = pt.dscalar("c")
    scaled, batched = must_lift([x[:, i] * c for i in range(4)], depth=3)
    shifted, batched_too = must_lift([x[:, i] + float(i) for i in range(4)], depth=3)
    assert batched and batched_too
    got = evaluate([x, c], [scaled, shifted], [X34, 1.5])
    np.testing.assert_allclose(got[0], X34.T * 1.5, rtol=1e-15)
    np.testing.assert_allclose(got[1], X34.T + np.arange(4.0)[:, None], rtol=1e-15)


def test_lifting_picks_the_output_each_arg_is():
    """The second output of a two-output Op over slices: the vectorised Op's second output."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    u = cast(ps.ScalarVariable, ps.float64("u"))
    two = pt.elemwise.Elemwise(ps.Composite([u], [u + 1.0, u * 3.0]))
    got, batched = must_lift([cast(list[Variable], two(x[:, i]))[1] for i in range(4)], depth=3)
    assert batched
    np.testing.assert_allclose(evaluate([x], [got], [X34])[0], X34.T * 3.0, rtol=1e-15)


def test_an_op_that_vectorises_only_as_a_blockwise_is_refused():
    """``sort`` of K rows lifts to a Blockwise: refused; a Blockwise Op (``det``) stays one and is taken."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    assert bl._lifted([pt.sort(x[:, i]) for i in range(4)], depth=3) is None
    m = pt.tensor("m", shape=(2, 3, 3), dtype="float64")
    got, batched = must_lift([one_tensor(pt.linalg.det(m[i])) for i in range(2)], depth=3)
    assert batched
    mats = RNG.normal(size=(2, 3, 3))
    np.testing.assert_allclose(
        evaluate([m], [got], [mats])[0], np.linalg.det(mats), rtol=1e-12
    )


def test_vectorised_nodes_take_batched_and_unbatched_inputs():
    """`_vectorized` on ``a * c``: the Op over a batched ``a`` and one ``c``; on ``sort``: None."""
    a, c = pt.dvector("a"), pt.dscalar("c")
    big = pt.tensor("big", shape=(4, 3), dtype="float64")
    (out,) = cast(list[Variable], bl._vectorized((a * c).owner, [(big, True), (c, False)], 4))
    np.testing.assert_allclose(
        evaluate([big, c], [out], [X34.T, 2.0])[0], X34.T * 2.0, rtol=1e-15
    )
    assert bl._vectorized(pt.sort(a).owner, [(big, True)], 4) is None


def test_an_increment_over_a_batched_target_and_value():
    """``inc(a[1], b)`` over K rows of ``a`` and K values ``b``: row i gains b_i at 1; a set sets it."""
    a, b = pt.dvector("a"), pt.dscalar("b")
    big, bs = (
        pt.tensor("big", shape=(4, 3), dtype="float64"),
        pt.tensor("bs", shape=(4,), dtype="float64"),
    )
    inc = bl._inc_subtensor_batched(
        pt.inc_subtensor(a[1], b).owner,
        [(big, True), (bs, True), (pt.constant(1), False)],
        4,
    )
    put = bl._inc_subtensor_batched(
        pt.set_subtensor(a[1], b).owner,
        [(big, True), (bs, True), (pt.constant(1), False)],
        4,
    )
    vals = np.arange(4.0) + 10.0
    got = evaluate([big, bs], [inc, put], [X34.T, vals])
    expected = X34.T.copy()
    expected[:, 1] += vals
    np.testing.assert_allclose(got[0], expected, rtol=1e-15)
    expected[:, 1] = vals
    np.testing.assert_allclose(got[1], expected, rtol=1e-15)


def test_an_increment_of_a_range_by_one_value_per_row_broadcasts_along_the_range():
    """``inc(a[1:3], b)``: row i gains b_i at 1 and 2 (b padded to (K, 1)); over a matrix's rows (K, 2, 4) it cannot pad: None."""
    a, b, m = pt.dvector("a"), pt.dscalar("b"), pt.dmatrix("m")
    big, bs = (
        pt.tensor("big", shape=(4, 3), dtype="float64"),
        pt.tensor("bs", shape=(4,), dtype="float64"),
    )
    node = pt.inc_subtensor(a[1:3], b).owner
    got = bl._inc_subtensor_batched(
        node, [(big, True), (bs, True), *((v, False) for v in node.inputs[2:])], 4
    )
    vals = np.arange(4.0) + 10.0
    expected = X34.T.copy()
    expected[:, 1:3] += vals[:, None]
    np.testing.assert_allclose(
        evaluate([big, bs], [got], [X34.T, vals])[0], expected, rtol=1e-15
    )
    node = pt.inc_subtensor(m[0:2], b).owner
    cube = pt.tensor("cube", shape=(4, 3, 4), dtype="float64")
    assert (
        bl._inc_subtensor_batched(
            node, [(cube, True), (bs, True), *((v, False) for v in node.inputs[2:])], 4
        )
        is None
    )


def test_an_increment_of_one_target_by_k_values_repeats_the_target_and_a_batched_index_is_refused():
    """An unbatched target is repeated K times first; an index that differs per row: None."""
    a, b = pt.dvector("a"), pt.dscalar("b")
    bs = pt.tensor("bs", shape=(4,), dtype="float64")
    node = pt.inc_subtensor(a[2], b).owner
    got = bl._inc_subtensor_batched(
        node, [(a, False), (bs, True), (node.inputs[2], False)], 4
    )
    vals = np.arange(4.0)
    expected = np.tile(X34[0, :3], (4, 1))
    expected[:, 2] += vals
    np.testing.assert_allclose(
        evaluate([a, bs], [got], [X34[0, :3], vals])[0], expected, rtol=1e-15
    )
    idx = pt.tensor("idx", shape=(4,), dtype="int64")
    assert (
        bl._inc_subtensor_batched(node, [(a, False), (bs, True), (idx, True)], 4)
        is None
    )


def test_an_allocation_is_repeated_by_allocating_again():
    """``alloc(v, 3, 2)`` and ``empty((3, 2))`` repeated 4 times: one allocation of shape (4, 3, 2), no stack."""
    v = pt.dscalar("v")
    full = bl._repeated(pt.alloc(v, 3, 2), 4)
    assert isinstance(full.owner.op, Alloc) and full.type.shape == (4, 3, 2)
    np.testing.assert_array_equal(
        evaluate([v], [full], [1.5])[0], np.full((4, 3, 2), 1.5)
    )
    empty = bl._repeated(pt.empty((3, 2)), 4)
    assert isinstance(empty.owner.op, AllocEmpty) and empty.type.shape == (4, 3, 2)


def test_a_slice_or_an_increment_of_an_allocation_is_repeated_through_it():
    """``zeros(5, 2)[1:]`` and ``inc(zeros(3)[1], y)`` repeated 4 times: the Op over the repeated allocation, no Join."""
    y = pt.dscalar("y")
    sliced = bl._repeated(pt.zeros((5, 2))[1:], 4)
    assert isinstance(sliced.owner.op, Subtensor) and isinstance(
        sliced.owner.inputs[0].owner.op, Alloc
    )
    assert sliced.type.shape == (4, 4, 2)
    inc = bl._repeated(pt.inc_subtensor(pt.zeros(3)[1], y), 4)
    assert isinstance(inc.owner.op, IncSubtensor) and "Join" not in ops([inc], [y])
    got = evaluate([y], [sliced, inc], [2.5])
    np.testing.assert_array_equal(got[0], np.zeros((4, 4, 2)))
    np.testing.assert_array_equal(got[1], np.tile([0.0, 2.5, 0.0], (4, 1)))


def test_anything_else_is_repeated_by_stacking():
    """A variable, or an allocation past the depth: K copies stacked, NumPy's values."""
    a = pt.dvector("a")
    got = bl._repeated(a, 3)
    assert got.type.shape == (3, None) and "Alloc" not in ops([got], [a])
    np.testing.assert_array_equal(
        evaluate([a], [got], [X34[0]])[0], np.tile(X34[0], (3, 1))
    )
    deep = bl._repeated(
        pt.zeros(3)[1:], 4, depth=1
    )  # the Subtensor at depth 1, its Alloc at 0
    assert isinstance(deep.owner.op, Subtensor) and not isinstance(
        deep.owner.inputs[0].owner.op, Alloc
    )
    assert not isinstance(bl._repeated(pt.zeros(3), 4, depth=0).owner.op, Alloc)
    np.testing.assert_array_equal(evaluate([], [deep], [])[0], np.zeros((4, 2)))


def test_stacking_lifts_moves_and_repeats():
    """`_stacked`: columns lifted on axis 0 and 1; one value repeated; values that do not lift stacked as they are."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    a, b = pt.dvector("a"), pt.dvector("b")
    cols = [x[:, i] for i in range(4)]
    rows, moved = bl._stacked(cols, 0), bl._stacked(cols, 1)
    same = bl._stacked([a, a], 1)
    joined = bl._stacked([a, b], 1)
    assert moved.type.shape == (3, 4) and same.type.shape == (None, 2)
    assert "Join" not in ops([rows, moved], [x]) and "Join" in ops([joined], [a, b])
    got = evaluate([x, a, b], [rows, moved, same, joined], [X34, X34[0], X34[1]])
    np.testing.assert_array_equal(got[0], X34.T)
    np.testing.assert_array_equal(got[1], X34)
    np.testing.assert_array_equal(got[2], np.stack([X34[0], X34[0]], axis=1))
    np.testing.assert_array_equal(got[3], np.stack([X34[0], X34[1]], axis=1))


# ---- the pass on grouped loops

N = 5
XS = RNG.normal(size=(N, 3))
S0 = RNG.normal(size=3)
KS = RNG.uniform(0.2, 0.9, size=3)
C = 0.7


def loop_over(fn, seq, outputs_info, non_sequences, n_steps):
    """A loop of ``fn`` over the one sequence ``seq``: the shape every group's loop in this file takes."""
    return innergraph.scan(
        fn,
        sequences=[seq],
        outputs_info=outputs_info,
        non_sequences=non_sequences,
        n_steps=n_steps,
        return_updates=False,
    )


def step(x, s, k, c):
    return s * k + pt.tanh(x) * c


def reference(xs, s0, ks, c, order=range(3), shared_init=False):
    """NumPy's traces of `step`, one per group of ``order``."""
    traces = []
    for g in order:
        s = s0[0] if shared_init else s0[g]
        trace = []
        for t in range(xs.shape[0]):
            s = s * ks[g] + np.tanh(xs[t, g]) * c
            trace.append(s)
        traces.append(np.array(trace))
    return traces


def batched(outputs, inputs):
    """A FunctionGraph of ``outputs`` (functions unfolded, merged as in the pipeline), after `batch_loops`; and its count."""
    fg = FunctionGraph(list(inputs), list(outputs), clone=True)
    unfold_inner_graphs(fg)
    MergeOptimizer().rewrite(fg)
    return fg, bl.batch_loops(fg)


def scans(fg):
    """The outer graph's loops."""
    return [n for n in visible_nodes(fg) if isinstance(n.op, Scan)]


def param_shapes(node):
    """The static shapes of a loop's body params."""
    return [getattr(t, "shape", None) for t in body_of(node.inputs[0]).param_types]


def grouped(order=range(3), shared_init=False):
    """Three loops of `step`, one per group (column of ``xs``), as a user's Python loop writes them."""
    xs, s0, ks, c = (
        pt.dmatrix("xs"),
        pt.dvector("s0"),
        pt.dvector("ks"),
        pt.dscalar("c"),
    )
    outs = [
        loop_over(step, xs[:, g], [s0[0] if shared_init else s0[g]], [ks[g], c], xs.shape[0])
        for g in order
    ]
    return [xs, s0, ks, c], outs


def test_three_loops_of_one_step_become_one_loop_with_numpys_values():
    """One loop whose row, state and k are batched (3,) and c not; each result is its group's trace."""
    inputs, outs = grouped()
    fg, count = batched(outs, inputs)
    assert count == 1
    (node,) = scans(fg)
    assert sorted(param_shapes(node), key=len) == [(), (3,), (3,), (3,)]
    assert "SpecifyShape" not in ops(
        body_of(node.inputs[0]).outputs
    )  # the batched types are the declared ones
    for got, want in zip(
        evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C]),
        reference(XS, S0, KS, C),
        strict=True,
    ):
        close(got, want)


def test_loops_in_another_order_read_their_own_groups():
    """Groups 2, 0, 1: each result is its own group's trace."""
    order = [2, 0, 1]
    inputs, outs = grouped(order=order)
    fg, count = batched(outs, inputs)
    assert count == 1 and len(scans(fg)) == 1
    for got, want in zip(
        evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C]),
        reference(XS, S0, KS, C, order),
        strict=True,
    ):
        close(got, want)


def test_a_state_from_one_initial_value_is_batched_when_its_step_reads_a_batched_param():
    """All three start from ``s0[0]``; the state reads ``k``, which differs: batched, NumPy's values."""
    inputs, outs = grouped(shared_init=True)
    fg, count = batched(outs, inputs)
    assert count == 1
    (node,) = scans(fg)
    assert param_shapes(node).count((3,)) == 3
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C])
    for g, want in enumerate(reference(XS, S0, KS, C, shared_init=True)):
        close(got[g], want)


def doubling_loops(steps, starts, ks, groups=3):
    """``groups`` loops ``s = s k + x`` with a per-step output ``2 s``, group g over ``steps[:, g]`` from ``starts[g]``: traces and outputs, interleaved."""
    outs = [
        loop_over(lambda x, s, k: (s * k + x, s * 2.0), steps[:, g], [starts[g], None], [ks[g]], steps.shape[0])
        for g in range(groups)
    ]
    return [o for pair in outs for o in pair]


def check_doubling_loops(got, steps, starts):
    """``got`` (`doubling_loops`' outputs) against the loops run in NumPy."""
    for g in range(3):
        s, trace, doubled = starts[g], [], []
        for t in range(N):
            doubled.append(s * 2.0)
            s = s * KS[g] + steps[t, g]
            trace.append(s)
        close(got[2 * g], trace)
        close(got[2 * g + 1], doubled)


def test_a_per_step_output_that_reads_the_batched_state_is_batched():
    """A trace and a per-step output ``2 s``: both batched, one loop, NumPy's values."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    fg, count = batched(doubling_loops(xs, s0, ks), [xs, s0, ks])
    assert count == 1 and len(scans(fg)) == 1
    check_doubling_loops(evaluate(fg.inputs, fg.outputs, [XS, S0, KS]), XS, S0)


def test_what_no_group_changes_stays_one_and_serves_all_groups():
    """A state from one ``t0`` that reads only ``c``, and a per-step output ``c t``: unbatched params, one result for all."""
    xs, s0, ks, t0, c = (
        pt.dmatrix("xs"),
        pt.dvector("s0"),
        pt.dvector("ks"),
        pt.dscalar("t0"),
        pt.dscalar("c"),
    )
    outs = [
        loop_over(lambda x, s, t, k, c: (s * k + x, t * c, t + c), xs[:, g], [s0[g], t0, None], [ks[g], c], xs.shape[0])
        for g in range(3)
    ]
    fg, count = batched([o for triple in outs for o in triple], [xs, s0, ks, t0, c])
    assert count == 1
    (node,) = scans(fg)
    assert sorted(param_shapes(node), key=len) == [
        (),
        (),
        (3,),
        (3,),
        (3,),
    ]  # t and c one value, x, s and k batched
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, 0.5, C])
    t, ts, plus = 0.5, [], []
    for _ in range(N):
        plus.append(t + C)
        t = t * C
        ts.append(t)
    for g in range(3):
        close(got[3 * g + 1], ts)
        close(got[3 * g + 2], plus)
    assert (
        fg.outputs[2] is fg.outputs[5] is fg.outputs[8] and fg.outputs[2].owner is node
    )  # one result, read by all three
    assert all(fg.outputs[j].owner.inputs[0] is node.outputs[1] for j in (1, 4, 7))


def test_a_batched_state_whose_next_value_reads_no_batched_param_is_repeated():
    """States from ``s0[g]`` whose next value is ``tanh(x) c`` over one sequence: batched by their initial values, NumPy's values."""
    x, s0, c = pt.dvector("x"), pt.dvector("s0"), pt.dscalar("c")
    outs = [
        loop_over(lambda xt, s, c: (pt.tanh(xt) * c, s + xt), x, [s0[g], None], [c], x.shape[0])
        for g in range(3)
    ]
    fg, count = batched([o for pair in outs for o in pair], [x, s0, c])
    assert count == 1
    got = evaluate(fg.inputs, fg.outputs, [XS[:, 0], S0, C])
    for g in range(3):
        close(got[2 * g], np.tanh(XS[:, 0]) * C)
        close(
            got[2 * g + 1],
            np.concatenate([[S0[g]], np.tanh(XS[:-1, 0]) * C]) + XS[:, 0],
        )


def test_loops_the_pass_leaves_apart():
    """One loop alone, a loop reading another's result, another step, another length, a condition, a step that sorts: 0, as many loops."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    n = xs.shape[0]

    def loop(fn, seq, g, **kw):
        return innergraph.scan(
            fn,
            sequences=[seq],
            outputs_info=[s0[g]],
            non_sequences=[ks[g]],
            return_updates=False,
            **kw,
        )

    lone = loop(lambda x, s, k: s * k + x, xs[:, 0], 0, n_steps=n)
    fg, count = batched([lone], [xs, s0, ks])
    assert count == 0 and len(scans(fg)) == 1
    a = loop(lambda x, s, k: s * k + x, xs[:, 0], 0, n_steps=n)
    b = loop(lambda x, s, k: s * k + x, a, 1, n_steps=n)
    other = loop(lambda x, s, k: s - k * x, xs[:, 2], 2, n_steps=n)
    shorter = loop(lambda x, s, k: s * k + x, xs[1:, 2], 2)
    fg, count = batched([b, other, shorter], [xs, s0, ks])
    assert count == 0 and len(scans(fg)) == 4
    whiles = [
        loop(lambda x, s, k: (s * k + x, until(s > 10.0)), xs[:, g], g)
        for g in range(2)
    ]
    sorts = [
        loop(
            lambda x, s, k: s * k + pt.sort(pt.stack([x, s]))[0], xs[:, g], g, n_steps=n
        )
        for g in range(2)
    ]
    for outs in (whiles, sorts):
        fg, count = batched(outs, [xs, s0, ks])
        assert count == 0 and len(scans(fg)) == 2


def test_two_groups_of_two_steps_count_two():
    """Two loops of one step and two of another: two batched loops, the pass counts 2, NumPy's values."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    n = xs.shape[0]
    plus = [
        loop_over(lambda x, s, k: s * k + x, xs[:, g], [s0[g]], [ks[g]], n)
        for g in range(2)
    ]
    minus = [
        loop_over(lambda x, s, k: s * k - x, xs[:, g], [s0[g]], [ks[g]], n)
        for g in range(2)
    ]
    fg, count = batched([*plus, *minus], [xs, s0, ks])
    assert count == 2 and len(scans(fg)) == 2
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS])
    for j, sign in enumerate((1.0, 1.0, -1.0, -1.0)):
        g, s, trace = j % 2, S0[j % 2], []
        for t in range(N):
            s = s * KS[g] + sign * XS[t, g]
            trace.append(s)
        close(got[j], trace)


# ---- what the K results feed (`_sink`, `_fold_increment_chain`)

V3 = np.array([0.5, -1.25, 2.0])
ACC = np.arange(5.0) * 10.0


def sunk(outputs_of, inputs=None):
    """The graph ``outputs_of(v[0], v[1], v[2])`` over a (3,) ``v`` and a vector ``acc``, after `_sink` of the three slices."""
    v, acc = pt.tensor("v", shape=(3,), dtype="float64"), pt.dvector("acc")
    slices = [v[i] for i in range(3)]
    fg = FunctionGraph([v, acc], outputs_of(slices, acc), clone=False)
    bl._sink(fg, [slices])
    return fg


def names(fg):
    """The Op classes' names of ``fg``'s nodes, sorted."""
    return sorted(type(n.op).__name__ for n in fg.apply_nodes)


def chain(slices, acc, where=(4, 1, 3), op=pt.inc_subtensor):
    """``acc[where[0]] += s0``, then ``[where[1]] += s1`` on the result, then the third: the chain a gradient builds."""
    out = acc
    for s, w in zip(slices, where, strict=True):
        out = op(out[w], s)
    return out


def test_a_chain_of_increments_at_distinct_constant_indices_becomes_one():
    """``acc[4] += v0; acc[1] += v1; acc[3] += v2``: one increment of ``acc[[4, 1, 3]]`` by ``v``, NumPy's values."""
    fg = sunk(lambda s, acc: [chain(s, acc)])
    assert names(fg) == ["AdvancedIncSubtensor", "Subtensor"]
    expected = ACC.copy()
    expected[[4, 1, 3]] += V3
    np.testing.assert_array_equal(
        evaluate(fg.inputs, fg.outputs, [V3, ACC])[0], expected
    )


def test_chains_that_are_not_one_increment_stay_and_later_readers_are_batched():
    """A repeated index, a set, a two-index increment, a chain broken by a product, ranges, a symbolic index: three IncSubtensors stay; ``exp`` read after them: one."""
    j = pt.lscalar("j")
    cases = [
        lambda s, acc: chain(s, acc, where=(4, 1, 4)),
        lambda s, acc: chain(s, acc, op=pt.set_subtensor),
        lambda s, acc: chain(s, pt.outer(acc, acc), where=((0, 4), (1, 1), (2, 3))),
        lambda s, acc: pt.inc_subtensor(
            (chain(s[:2], acc, where=(4, 1)) * 2.0)[3], s[2]
        ),  # two chains
        lambda s, acc: chain(
            s, acc, where=(slice(0, 2), slice(1, 3), slice(3, 5))
        ),  # ranges: two inputs
        lambda s, acc: chain(
            s, acc, where=(slice(None),) * 3
        ),  # the whole: no index input
        lambda s, acc: chain(s, acc, where=(4, 1, j)),
    ]
    elemwises = (1, 1, 1, 2, 1, 1, 1)  # one exp (and the product)
    for case, elemwise in zip(cases, elemwises, strict=True):
        v, acc = pt.tensor("v", shape=(3,), dtype="float64"), pt.dvector("acc")
        slices = [v[i] for i in range(3)]
        fg = FunctionGraph(
            [v, acc, j], [case(slices, acc), *(pt.exp(x) for x in slices)], clone=False
        )
        bl._sink(fg, [slices])
        assert sum(isinstance(n.op, IncSubtensor) for n in fg.apply_nodes) == 3
        assert not any(isinstance(n.op, AdvancedIncSubtensor) for n in fg.apply_nodes)
        assert names(fg).count("Elemwise") == elemwise
    got = evaluate(fg.inputs, fg.outputs, [V3, ACC, 2])
    expected = ACC.copy()
    expected[[4, 1]] += V3[:2]
    expected[2] += V3[2]
    np.testing.assert_array_equal(got[0], expected)
    close(got[1:], np.exp(V3))


def test_an_intermediate_sum_read_elsewhere_keeps_the_chain():
    """``acc[4] += v0`` read by another output too: no fold, three IncSubtensors, the exps read after them one; NumPy's values."""

    def outputs(s, acc):
        first = pt.inc_subtensor(acc[4], s[0])
        return [
            pt.inc_subtensor(pt.inc_subtensor(first[1], s[1])[3], s[2]),
            first,
            *(pt.exp(x) for x in s),
        ]

    fg = sunk(outputs)
    assert names(fg).count("IncSubtensor") == 3 and "AdvancedIncSubtensor" not in names(
        fg
    )
    assert names(fg).count("Elemwise") == 1  # the exps read after the chain: one
    first = ACC.copy()
    first[4] += V3[0]
    whole = first.copy()
    whole[[1, 3]] += V3[1:]
    got = evaluate(fg.inputs, fg.outputs, [V3, ACC])
    np.testing.assert_array_equal(got[0], whole)
    np.testing.assert_array_equal(got[1], first)
    close(got[2:], np.exp(V3))


def test_k_readers_of_one_op_become_the_op_vectorised_and_their_readers_too():
    """``exp(v_i) * 2``: one exp and one mul over ``v`` (the sink follows the new slices), NumPy's values."""
    fg = sunk(lambda s, acc: [pt.exp(x) * 2.0 for x in s])
    assert names(fg).count("Elemwise") == 2
    np.testing.assert_allclose(
        evaluate(fg.inputs, fg.outputs, [V3, ACC]),
        [np.exp(x) * 2.0 for x in V3],
        rtol=1e-15,
    )


def test_readers_of_other_ops_other_positions_or_each_others_results_stay():
    """``exp, sin, exp``; ``v0 - c, c - v1, v2 - c``; ``v0 + c, v1 + c + c, ...`` and the reverse; ``v1 - v0, v1 - v2, v0 - v2``; ``v0 + 1, v1 + that, ...`` and ``1 + v0, that + v1, ...``: three Elemwise each, NumPy's values."""
    c = pt.dscalar("c")

    def chained(s, acc):
        r0 = s[0] + 1.0
        r1 = s[1] + r0
        return [r0, r1, s[2] + r1]

    def chained_right(s, acc):  # each slice read at position 1, as an increment's value
        r0 = 1.0 + s[0]
        r1 = r0 + s[1]
        return [r0, r1, r1 + s[2]]

    cases = [
        lambda s, acc: [pt.exp(s[0]), pt.sin(s[1]), pt.exp(s[2])],
        lambda s, acc: [s[0] - c, c - s[1], s[2] - c],
        lambda s, acc: [pt.add(s[0], c), pt.add(s[1], c, c), pt.add(s[2], c, c)],
        lambda s, acc: [pt.add(s[0], c, c), pt.add(s[1], c), pt.add(s[2], c)],
        lambda s, acc: [
            s[1] - s[0],
            s[1] - s[2],
            s[0] - s[2],
        ],  # v0, v1, v2 read at positions 1, 0, 1
        chained,
        chained_right,
    ]
    a, b, d = V3
    expected = [
        [np.exp(a), np.sin(b), np.exp(d)],
        [a - 0.5, 0.5 - b, d - 0.5],
        [a + 0.5, b + 1.0, d + 1.0],
        [a + 1.0, b + 0.5, d + 0.5],
        [b - a, b - d, a - d],
        [a + 1.0, b + a + 1.0, d + b + a + 1.0],
        [a + 1.0, b + a + 1.0, d + b + a + 1.0],
    ]
    for case, want in zip(cases, expected, strict=True):
        v, acc = pt.tensor("v", shape=(3,), dtype="float64"), pt.dvector("acc")
        slices = [v[i] for i in range(3)]
        fg = FunctionGraph([v, acc, c], case(slices, acc), clone=False)
        bl._sink(fg, [slices])
        assert names(fg).count("Elemwise") == 3
        close(evaluate(fg.inputs, fg.outputs, [V3, ACC, 0.5]), want)


def test_a_group_whose_slices_left_the_graph_is_skipped():
    """A group with a slice no longer in the graph is skipped; the next group (``exp`` of ``w``'s slices) is still batched."""
    v, w = (
        pt.tensor("v", shape=(3,), dtype="float64"),
        pt.tensor("w", shape=(3,), dtype="float64"),
    )
    stale, slices = [v[i] for i in range(3)], [w[i] for i in range(3)]
    fg = FunctionGraph(
        [v, w],
        [*(pt.exp(x) for x in stale[:2]), *(pt.exp(x) for x in slices)],
        clone=False,
    )
    bl._sink(fg, [stale, slices])
    assert (
        names(fg).count("Elemwise") == 3
    )  # v's two exps as they were, w's three as one
    close(evaluate(fg.inputs, fg.outputs, [V3, -V3]), [*np.exp(V3[:2]), *np.exp(-V3)])


def test_an_increment_of_an_allocation_past_the_depth_is_stacked():
    """``inc(zeros(3)[1], y)`` at depth 1: the increment is repeated through, its allocation (depth 0) stacked."""
    y = pt.dscalar("y")
    got = bl._repeated(pt.inc_subtensor(pt.zeros(3)[1], y), 4, depth=1)
    assert isinstance(got.owner.op, IncSubtensor) and not isinstance(
        got.owner.inputs[0].owner.op, Alloc
    )
    np.testing.assert_array_equal(
        evaluate([y], [got], [2.5])[0], np.tile([0.0, 2.5, 0.0], (4, 1))
    )


def test_k_increments_of_rows_lift_as_one_increment():
    """``inc(X[i][1], c_i)`` for the 3 rows of an (3, 4) ``X``: one IncSubtensor of ``X``'s rows, NumPy's values."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    got, batched = must_lift(
        [pt.inc_subtensor(x[i][1], float(i)) for i in range(3)], depth=3
    )
    assert batched and ops([got], [x]).count("IncSubtensor") == 1
    expected = X34.copy()
    expected[:, 1] += np.arange(3.0)
    np.testing.assert_array_equal(evaluate([x], [got], [X34])[0], expected)
    a, b = pt.dvector("a"), pt.dscalar("b")
    node = pt.inc_subtensor(a[1], b).owner
    assert (
        bl._vectorized(node, [(x, True), (b, False), (node.inputs[2], False)], 3)
        is not None
    )
    assert (
        bl._vectorized(node, [(x, True), (b, False), (pt.lvector("i"), True)], 3)
        is None
    )


def test_loops_with_a_slot_that_is_not_a_tensor_are_left_apart():
    """Two loops reading a random generator each (a non-sequence of another type): 0, two loops."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    rngs = [random_generator_type(f"rng{g}") for g in range(2)]

    def noisy(x, s, k, rng):
        _, noise = pt.random.normal(rng=rng, return_next_rng=True)
        return s * k + x + noise

    outs = [
        loop_over(noisy, xs[:, g], [s0[g]], [ks[g], rngs[g]], xs.shape[0])
        for g in range(2)
    ]
    fg, count = batched(outs, [xs, s0, ks, *rngs])
    assert count == 0 and len(scans(fg)) == 2


def test_loops_whose_per_step_outputs_have_other_row_counts_are_left_apart():
    """Two loops with a per-step output whose row counts are other variables (``n`` and ``n + 0``): 0, two loops."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    fg = FunctionGraph([xs, s0, ks], doubling_loops(xs, s0, ks, groups=2), clone=True)
    unfold_inner_graphs(fg)
    MergeOptimizer().rewrite(fg)
    sig = list(consumers(fg))[1]
    (slot,) = [s for s in sig.slots if sig.meaning(s) is Meaning.PER_STEP_OUTPUT]
    (rows,) = slot.args
    position = max(
        i for i, v in enumerate(sig.node.inputs) if v is rows
    )  # the header's n_steps comes first
    fg.change_node_input(sig.node, position, cast(TensorVariable, rows) + 0)
    assert bl.batch_loops(fg) == 0 and len(scans(fg)) == 2


def test_what_the_batched_loops_results_feed_is_batched_by_the_pass():
    """``2 o`` summed for each group's trace ``o``: after the pass one mul and one sum in the outer graph, NumPy's values."""
    inputs, outs = grouped()
    fg, count = batched([(o * 2.0).sum() for o in outs], inputs)
    assert count == 1
    outer = sorted(
        type(getattr(n.op, "scalar_op", n.op)).__name__ + type(n.op).__name__
        for n in visible_nodes(fg)
    )
    assert (
        outer.count("MulElemwise") == 1 and outer.count("AddSum") == 1
    )  # each once, not per group
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C])
    close(got, [2.0 * trace.sum() for trace in reference(XS, S0, KS, C)])


def test_readers_after_a_chain_are_still_batched():
    """The slices read first by a chain ``v0 + 1, v1 + that, ...`` (left), then by ``exp``: the three exps become one."""

    def outputs(s, acc):
        r0 = s[0] + 1.0
        r1 = s[1] + r0
        return [s[2] + r1, *(pt.exp(x) for x in s)]

    fg = sunk(outputs)
    assert names(fg).count("Elemwise") == 4
    a, b, d = V3
    close(evaluate(fg.inputs, fg.outputs, [V3, ACC]), [d + b + a + 1.0, *np.exp(V3)])


def canonical(outputs, inputs):
    """A FunctionGraph of ``outputs`` with functions unfolded, merged and canonicalized (PyTensor's pass), as the pipeline gives `batch_loops`."""
    fg = FunctionGraph(list(inputs), list(outputs), clone=True)
    unfold_inner_graphs(fg)
    fg.attach_feature(ShapeFeature())
    MergeOptimizer().rewrite(fg)
    optdb["canonicalize"].query(
        RewriteDatabaseQuery(include=["fast_run"], exclude=["innergraph"])
    ).rewrite(fg)
    return fg


def grouped_gradient_reference():
    """NumPy's cost of `grouped`'s three loops and its derivatives in ``s0`` and ``ks`` (forward mode, summed)."""
    total, d_s0, d_ks = 0.0, np.zeros(3), np.zeros(3)
    for g in range(3):
        s, ds, dk = S0[g], 1.0, 0.0
        for t in range(N):
            s, ds, dk = s * KS[g] + np.tanh(XS[t, g]) * C, ds * KS[g], dk * KS[g] + s
            total, d_s0[g], d_ks[g] = total + s, d_s0[g] + ds, d_ks[g] + dk
    return total, d_s0, d_ks


def test_the_gradient_loops_are_batched_too_with_their_buffers():
    """Cost and gradient of the three groups: the forward loops and the gradient loops (a buffer, traces, a per-step output) each batched, NumPy's values."""
    inputs, outs = grouped()
    _, s0, ks, _ = inputs
    cost = pt.add(*(o.sum() for o in outs))
    grads = cast(list[Variable], pytensor.grad(cost, [s0, ks]))  # a list, for a list of wrt
    fg = canonical([cost, *grads], inputs)
    assert bl.batch_loops(fg) == 2
    shapes = sorted(param_shapes(n).count((3,)) for n in scans(fg))
    assert shapes == [3, 7]  # forward: x, s, k; gradient: all but c
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C])
    for value, want in zip(got, grouped_gradient_reference(), strict=True):
        close(value, want)


def test_k_readers_whose_vectorised_form_cannot_replace_them_stay_and_later_readers_are_batched():
    """Three ``ScalarFromTensor`` of an int vector's slices, then three ``exp``: the first stay, the ``exp`` become one.

    Vectorised, the ``ScalarFromTensor`` are tensor slices, which cannot stand for
    scalars (`_sink` raised TypeError replacing them); the slices' next readers are
    still tried.
    """
    v = pt.tensor("v", shape=(3,), dtype="int64")
    slices = [v[i] for i in range(3)]
    readers = [pt.scalar_from_tensor(sl) for sl in slices]
    fg = FunctionGraph([v], [*readers, *(pt.exp(sl) for sl in slices)], clone=False)
    bl._sink(fg, [slices])
    assert names(fg).count("ScalarFromTensor") == 3 and names(fg).count("Elemwise") == 1
    assert all(o.owner is r.owner for o, r in zip(fg.outputs[:3], readers, strict=True))
    got = evaluate(fg.inputs, fg.outputs, [np.array([2, -1, 5])])
    assert [int(g) for g in got[:3]] == [2, -1, 5]
    close(got[3:], np.exp([2.0, -1.0, 5.0]))


def test_an_uncanonicalized_grouped_gradient_is_batched_where_the_types_allow():
    """`grouped`'s cost and gradient, functions unfolded and merged but not canonicalized: the forward loops batched, NumPy's values.

    The gradient's lengths are ``ScalarFromTensor`` of int slices there; `_sink` raised
    TypeError replacing them by the slices of their vectorised form.
    """
    inputs, outs = grouped()
    _, s0, ks, _ = inputs
    cost = pt.add(*(o.sum() for o in outs))
    grads = cast(list[Variable], pytensor.grad(cost, [s0, ks]))  # a list, for a list of wrt
    fg = FunctionGraph(list(inputs), [cost, *grads], clone=True)
    unfold_inner_graphs(fg)
    MergeOptimizer().rewrite(fg)
    assert len(scans(fg)) == 6 and names(fg).count("ScalarFromTensor") == 7
    assert bl.batch_loops(fg) == 1  # the forward loops; uncanonicalized, the gradient loops stay apart
    assert len(scans(fg)) == 4 and names(fg).count("ScalarFromTensor") == 7
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C])
    for value, want in zip(got, grouped_gradient_reference(), strict=True):
        close(value, want)


def test_readers_after_readers_whose_other_inputs_do_not_lift_are_still_batched():
    """The slices read first by ``v_i * w_i`` (three free ``w_i``: left), then by ``exp``: the three exps become one."""
    ws = [pt.dscalar(f"w{i}") for i in range(3)]
    v = pt.tensor("v", shape=(3,), dtype="float64")
    slices = [v[i] for i in range(3)]
    fg = FunctionGraph(
        [v, *ws],
        [
            *(x * w for x, w in zip(slices, ws, strict=True)),
            *(pt.exp(x) for x in slices),
        ],
        clone=False,
    )
    bl._sink(fg, [slices])
    assert names(fg).count("Elemwise") == 4
    close(
        evaluate(fg.inputs, fg.outputs, [V3, 2.0, 3.0, 4.0]),
        [*(V3 * [2.0, 3.0, 4.0]), *np.exp(V3)],
    )


def test_an_increment_of_rows_by_one_row_per_batch_broadcasts_along_the_rows():
    """``inc(m[0:2], b)`` with a row ``b``: over K matrices and K rows, b_i is added to rows 0 and 1 of matrix i (padded to (K, 1, 4))."""
    m, b = pt.dmatrix("m"), pt.dvector("b")
    cube, rows = (
        pt.tensor("cube", shape=(2, 3, 4), dtype="float64"),
        pt.tensor("rows", shape=(2, 4), dtype="float64"),
    )
    node = pt.inc_subtensor(m[0:2], b).owner
    got = bl._inc_subtensor_batched(
        node, [(cube, True), (rows, True), *((v, False) for v in node.inputs[2:])], 2
    )
    expected = T234.copy()
    expected[:, 0:2] += X34[:2, None, :]
    close(evaluate([cube, rows], [got], [T234, X34[:2]])[0], expected)


class Twice(Op):
    """``2 x``, an Op whose batched form (`_vectorize_node`) raises ``error``: a third party's Op that cannot batch."""

    __props__ = ("error",)

    def __init__(self, error):
        self.error = error

    def make_node(self, *inputs: Variable) -> Apply:
        (x,) = [pt.as_tensor_variable(v) for v in inputs]
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.asarray(2.0 * inputs[0])


@_vectorize_node.register(Twice)
def _twice_refuses(op, node, *inputs):
    raise {
        "type": TypeError,
        "value": ValueError,
        "not implemented": NotImplementedError,
    }[op.error]("no batched form")


ERRORS = ("type", "value", "not implemented")


def test_ops_whose_batched_form_raises_are_not_lifted():
    """``Twice`` over K columns raising TypeError, ValueError or NotImplementedError when vectorised: None, each."""
    x = pt.tensor("x", shape=(3, 4), dtype="float64")
    for error in ERRORS:
        assert bl._lifted([one_tensor(Twice(error)(x[:, i])) for i in range(4)], depth=3) is None


def test_loops_whose_step_raises_when_batched_are_left_apart():
    """Two loops of ``Twice(s) k + x``, the vectorisation raising each of the three errors: 0, two loops, NumPy's values."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    for error in ERRORS:
        twice = Twice(error)
        outs = [
            loop_over(lambda x, s, k, op=twice: op(s) * k + x, xs[:, g], [s0[g]], [ks[g]], xs.shape[0])
            for g in range(2)
        ]
        fg, count = batched(outs, [xs, s0, ks])
        assert count == 0 and len(scans(fg)) == 2
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS])
    for g in range(2):
        s, trace = S0[g], []
        for t in range(N):
            s = 2.0 * s * KS[g] + XS[t, g]
            trace.append(s)
        close(got[g], trace)


class Loose(Op):
    """``2 x``, whose batched form loses the static shape (``shape``: None) or, with ``dtype``, returns another dtype."""

    __props__ = ("dtype",)

    def __init__(self, dtype=None):
        self.dtype = dtype

    def make_node(self, *inputs: Variable) -> Apply:
        (x,) = [pt.as_tensor_variable(v) for v in inputs]
        out = (
            TensorType(self.dtype or x.type.dtype, shape=(None,) * x.type.ndim)()
            if x.type.ndim
            else x.type()
        )
        return Apply(self, [x], [out])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.asarray(
            2.0 * inputs[0], dtype=node.outputs[0].type.dtype
        )


@_vectorize_node.register(Loose)
def _loose_batched(op, node, x):
    return op.make_node(x)


def loose_loops(op):
    """Two loops of ``op(s k + x)``."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    outs = [
        loop_over(lambda x, s, k: op(s * k + x), xs[:, g], [s0[g]], [ks[g]], xs.shape[0])
        for g in range(2)
    ]
    return batched(outs, [xs, s0, ks])


def test_a_batched_step_that_loses_the_static_shape_is_told_it():
    """``Loose`` batched gives a (None,) state where (2,) is declared: shape specified, one loop, NumPy's values."""
    fg, count = loose_loops(Loose())
    assert count == 1
    (node,) = scans(fg)
    assert "SpecifyShape" in ops(body_of(node.inputs[0]).outputs)
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS])
    for g in range(2):
        s, trace = S0[g], []
        for t in range(N):
            s = 2.0 * (s * KS[g] + XS[t, g])
            trace.append(s)
        close(got[g], trace)


def test_a_batched_step_of_another_dtype_is_refused():
    """``Loose`` batched gives float32 where float64 is declared: no shape fixes it, 0, two loops."""
    fg, count = loose_loops(Loose("float32"))
    assert count == 0 and len(scans(fg)) == 2


def test_a_rebuild_that_refuses_leaves_the_loops(monkeypatch):
    """The batched loop's rebuild raising TypeError or ValueError (a consumer refusing its slots): 0, the three loops as they were."""
    for error in (TypeError, ValueError):

        def refuse(*args, error=error, **kwargs):
            raise error("refused")

        monkeypatch.setattr(bl, "rebuild", refuse)
        inputs, outs = grouped()
        fg, count = batched(outs, inputs)
        assert count == 0 and len(scans(fg)) == 3


def test_a_chain_of_increments_of_columns_is_not_folded_as_rows():
    """``acc[:, 2] += v0; acc[:, 0] += v1; acc[:, 1] += v2`` (two index entries, one input): three IncSubtensors stay, NumPy's values."""
    v, acc = pt.tensor("v", shape=(3,), dtype="float64"), pt.dmatrix("acc")
    slices = [v[i] for i in range(3)]
    out = acc
    for s, w in zip(slices, (2, 0, 1), strict=True):
        out = pt.inc_subtensor(out[:, w], s)
    fg = FunctionGraph([v, acc], [out], clone=False)
    bl._sink(fg, [slices])
    assert names(fg).count("IncSubtensor") == 3 and "AdvancedIncSubtensor" not in names(
        fg
    )
    table = X34[:, :3].copy()
    expected = table.copy()
    expected[:, [2, 0, 1]] += V3
    np.testing.assert_array_equal(
        evaluate(fg.inputs, fg.outputs, [V3, table])[0], expected
    )


def test_readers_after_readers_that_do_not_batch_are_still_batched():
    """The slices read first by ``Twice`` (whose batched form raises: left), then by ``exp``: the three exps become one."""
    v = pt.tensor("v", shape=(3,), dtype="float64")
    slices = [v[i] for i in range(3)]
    twice = Twice("type")
    fg = FunctionGraph(
        [v], [*(one_tensor(twice(x)) for x in slices), *(pt.exp(x) for x in slices)], clone=False
    )
    bl._sink(fg, [slices])
    assert names(fg).count("Twice") == 3 and names(fg).count("Elemwise") == 1
    close(evaluate(fg.inputs, fg.outputs, [V3]), [*(2.0 * V3), *np.exp(V3)])


def test_a_step_with_a_blockwise_op_is_batched():
    """``s k + det(m)`` with a matrix per group: ``det`` is a Blockwise already and stays one, one loop, NumPy's values."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    ms = pt.tensor("ms", shape=(3, 2, 2), dtype="float64")
    outs = [
        loop_over(lambda x, s, k, m: s * k + x + pt.linalg.det(m), xs[:, g], [s0[g]], [ks[g], ms[g]], xs.shape[0])
        for g in range(3)
    ]
    fg, count = batched(outs, [xs, s0, ks, ms])
    assert count == 1 and len(scans(fg)) == 1
    mats = RNG.normal(size=(3, 2, 2))
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, mats])
    for g in range(3):
        s, trace = S0[g], []
        for t in range(N):
            s = s * KS[g] + XS[t, g] + np.linalg.det(mats[g])
            trace.append(s)
        close(got[g], trace)


class Tight(Op):
    """``2 x``, whose batched form (a matrix) claims a last axis of static length 1 where the vector it batches has none."""

    __props__ = ()

    def make_node(self, *inputs: Variable) -> Apply:
        (x,) = [pt.as_tensor_variable(v) for v in inputs]
        shape = (*x.type.shape[:-1], 1) if x.type.ndim > 1 else x.type.shape
        return Apply(self, [x], [TensorType(x.type.dtype, shape=shape)()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.asarray(2.0 * inputs[0])


@_vectorize_node.register(Tight)
def _tight_batched(op, node, x):
    return op.make_node(x)


def test_a_batched_step_of_a_more_static_type_than_declared_is_refused():
    """Vector states of unknown length whose batched step claims length 1: no shape makes it the declared (3, None), 0, two loops."""
    xs, rows, ks = pt.dmatrix("xs"), pt.dmatrix("rows"), pt.dvector("ks")
    outs = [
        loop_over(lambda x, s, k: Tight()(s * k + x), xs[:, g], [rows[g]], [ks[g]], xs.shape[0])
        for g in range(2)
    ]
    fg, count = batched(outs, [xs, rows, ks])
    assert count == 0 and len(scans(fg)) == 2
    got = evaluate(fg.inputs, fg.outputs, [XS, S0[:2, None], KS])
    for g in range(2):
        s, trace = S0[g], []
        for t in range(N):
            s = 2.0 * (s * KS[g] + XS[t, g])
            trace.append([s])
        close(got[g], trace)


def test_untraced_states_are_batched_on_their_first_axis():
    """Three loops whose final state only is read, untraced (carried): one loop, its carry stacked and sliced on axis 0, NumPy's values."""
    xs, s0, ks, c, n = (
        pt.dmatrix("xs"),
        pt.dvector("s0"),
        pt.dvector("ks"),
        pt.dscalar("c"),
        pt.lscalar("n"),
    )
    outs = [
        loop_over(step, xs[:, g], [s0[g]], [ks[g], c], n)
        for g in range(3)
    ]
    fg = canonical([o[-1] for o in outs], [xs, s0, ks, c, n])
    with (
        sharing_rebuilt_functions()
    ):  # as the pipeline's rounds do: one new function for the three
        assert untrace_final_states(fg) == 3
    sig = next(iter(consumers(fg)))
    assert [sig.meaning(slot) for slot in sig.slots].count(Meaning.CARRY) == 1
    assert bl.batch_loops(fg) == 1 and len(scans(fg)) == 1
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS, C, N])
    close(got, [trace[-1] for trace in reference(XS, S0, KS, C)])


def test_loops_that_read_each_other_are_batched_stage_by_stage():
    """``a_g`` then ``b_g`` reading ``a_g``, for two groups: the a's batched first, the b's in the next sweep: 2, two loops, NumPy's values."""
    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    n = xs.shape[0]

    def loop(seq, g):
        return loop_over(lambda x, s, k: s * k + x, seq, [s0[g]], [ks[g]], n)

    firsts = [loop(xs[:, g], g) for g in range(2)]
    seconds = [loop(firsts[g], g) for g in range(2)]
    fg, count = batched(seconds, [xs, s0, ks])
    assert count == 2 and len(scans(fg)) == 2
    got = evaluate(fg.inputs, fg.outputs, [XS, S0, KS])
    for g in range(2):
        a, b, trace = S0[g], S0[g], []
        for t in range(N):
            a = a * KS[g] + XS[t, g]
            b = b * KS[g] + a
            trace.append(b)
        close(got[g], trace)


def test_readers_after_an_unmatched_reader_are_still_batched():
    """``sin`` reads ``v0`` only, then ``exp`` reads each slice: the sin left, the three exps one."""
    v = pt.tensor("v", shape=(3,), dtype="float64")
    slices = [v[i] for i in range(3)]
    fg = FunctionGraph(
        [v], [pt.sin(slices[0]), *(pt.exp(x) for x in slices)], clone=False
    )
    bl._sink(fg, [slices])
    assert names(fg).count("Elemwise") == 2
    close(evaluate(fg.inputs, fg.outputs, [V3]), [np.sin(V3[0]), *np.exp(V3)])


def test_a_folded_chain_ends_the_groups_batching():
    """Today's limit, pinned: after the chain of increments is folded, the same slices' ``exp`` readers stay three (values right)."""
    fg = sunk(lambda s, acc: [chain(s, acc), *(pt.exp(x) for x in s)])
    assert (
        names(fg).count("AdvancedIncSubtensor") == 1
        and names(fg).count("Elemwise") == 3
    )
    expected = ACC.copy()
    expected[[4, 1, 3]] += V3
    got = evaluate(fg.inputs, fg.outputs, [V3, ACC])
    np.testing.assert_array_equal(got[0], expected)
    close(got[1:], np.exp(V3))


def test_repeats_through_nested_increments_and_slices_count_their_depth():
    """Two nested increments of an allocation: at depth 3 it is allocated again, at depth 2 stacked; a slice of one: depth 2 allocates."""
    y = pt.dscalar("y")
    nested = pt.inc_subtensor(pt.inc_subtensor(pt.zeros(3)[1], y)[2], y)

    def allocation_under(x, levels):
        for _ in range(levels):
            x = x.owner.inputs[0]
        return isinstance(x.owner.op, Alloc)

    assert allocation_under(bl._repeated(nested, 4, depth=3), 2)
    assert not allocation_under(bl._repeated(nested, 4, depth=2), 2)
    assert allocation_under(bl._repeated(pt.zeros(3)[1:], 4, depth=2), 1)
    assert allocation_under(bl._repeated(pt.zeros(5)[1:][1:], 4, depth=3), 2)
    assert not allocation_under(bl._repeated(pt.zeros(5)[1:][1:], 4, depth=2), 2)
    got = evaluate(
        [y], [bl._repeated(nested, 4, depth=3), bl._repeated(nested, 4, depth=2)], [2.5]
    )
    np.testing.assert_array_equal(got[0], np.tile([0.0, 2.5, 2.5], (4, 1)))
    np.testing.assert_array_equal(got[1], np.tile([0.0, 2.5, 2.5], (4, 1)))


def test_a_chain_whose_values_do_not_lift_is_not_folded():
    """`_fold_increment_chain` called on a chain adding three free scalars (not slices of one result): False, the chain kept."""
    acc, ws = pt.dvector("acc"), [pt.dscalar(f"w{i}") for i in range(3)]
    out = chain(ws, acc)
    fg = FunctionGraph([acc, *ws], [out], clone=False)
    nodes = [n for n in fg.toposort() if isinstance(n.op, IncSubtensor)]
    assert not bl._fold_increment_chain(fg, ws, nodes, 1)
    assert names(fg).count("IncSubtensor") == 3 and fg.outputs[0] is out


BIG = 300  # above CPython's cached small ints: lengths compared with `is` would differ


def test_many_slices_beyond_the_small_ints():
    """300 slices: read in order they are ``v`` itself; their ``exp`` readers become one; a chain of 300 increments folds into one."""
    v, acc = pt.tensor("v", shape=(BIG,), dtype="float64"), pt.dvector("acc")
    slices = [v[i] for i in range(BIG)]
    assert "AdvancedSubtensor" not in ops([bl._slices(slices)], [v])
    values = np.linspace(-1.0, 1.0, BIG)
    exps = FunctionGraph([v], [pt.exp(x) for x in slices], clone=False)
    bl._sink(exps, [slices])
    assert names(exps).count("Elemwise") == 1
    close(evaluate(exps.inputs, exps.outputs, [values]), np.exp(values))
    out = acc
    for i, s in enumerate(slices):
        out = pt.inc_subtensor(out[BIG - 1 - i], s)
    fg = FunctionGraph([v, acc], [out], clone=False)
    bl._sink(fg, [slices])
    assert names(fg).count("AdvancedIncSubtensor") == 1 and "IncSubtensor" not in names(
        fg
    )
    np.testing.assert_array_equal(
        evaluate(fg.inputs, fg.outputs, [values, np.zeros(BIG)])[0], values[::-1]
    )


def test_readers_with_many_inputs_beyond_the_small_ints():
    """``add(c, ..., c, v_i)``, 300 inputs, the slice last (position 299): the three readers become one ``add(c, ..., c, v)``, read at 0, 1, 2."""
    v, c = pt.tensor("v", shape=(3,), dtype="float64"), pt.dscalar("c")
    slices = [v[i] for i in range(3)]
    fg = FunctionGraph(
        [v, c], [pt.add(*([c] * (BIG - 1)), x) for x in slices], clone=False
    )
    bl._sink(fg, [slices])
    (add,) = [
        n for n in fg.apply_nodes if type(n.op).__name__ == "Elemwise"
    ]  # not evaluated: Python's Elemwise takes 32 operands
    assert [list(graph_inputs([i])) for i in add.inputs] == [[c]] * (BIG - 1) + [[v]]
    lifted, batched_ = must_lift(
        [pt.add(*([c] * (BIG - 1)), x) for x in slices], depth=3
    )  # 300 inputs each
    assert batched_ and lifted.owner.op == add.op and len(lifted.owner.inputs) == BIG
    assert [(o.owner.inputs[0], o.owner.inputs[1].data) for o in fg.outputs] == [
        (add.outputs[0], i) for i in range(3)
    ]


def test_slices_that_are_outputs_too_still_have_their_readers_batched():
    """Each slice an output of the graph (read by the graph's end first), then read by ``exp``: the three exps become one."""
    v = pt.tensor("v", shape=(3,), dtype="float64")
    slices = [v[i] for i in range(3)]
    fg = FunctionGraph([v], [*slices, *(pt.exp(x) for x in slices)], clone=False)
    assert (
        type(fg.clients[slices[0]][0][0].op).__name__ == "Output"
    )  # the first reader the sink meets
    bl._sink(fg, [slices])
    assert names(fg).count("Elemwise") == 1
    close(evaluate(fg.inputs, fg.outputs, [V3]), [*V3, *np.exp(V3)])


def test_a_step_with_more_blockwise_nodes_than_the_small_ints_is_batched():
    """257 ``det`` in the step: as many Blockwise nodes after vectorising as before (counts beyond CPython's cached ints), one loop."""

    def many(x, s, k, m):
        return s * k + x + pt.add(*(pt.linalg.det(m + float(i)) for i in range(257)))

    xs, s0, ks = pt.dmatrix("xs"), pt.dvector("s0"), pt.dvector("ks")
    ms = pt.tensor("ms", shape=(2, 2, 2), dtype="float64")
    seq, init, k, m = (
        pt.dvector("seq"),
        pt.dscalar("init"),
        pt.dscalar("k"),
        pt.tensor("m", shape=(2, 2), dtype="float64"),
    )
    one = loop_over(many, seq, [init], [k, m], xs.shape[0])
    outs = [
        clone_replace(one, replace={seq: xs[:, g], init: s0[g], k: ks[g], m: ms[g]})
        for g in range(2)
    ]  # traced once
    fg, count = batched(outs, [xs, s0, ks, ms])
    assert count == 1 and len(scans(fg)) == 1
    (node,) = scans(fg)
    assert ops(body_of(node.inputs[0]).outputs).count("Blockwise") == 257


def test_untraced_vector_states_are_batched_on_their_first_axis():
    """Carried rows (two numbers per group): stacked (3, 2), not (2, 3), and each final row its group's, NumPy's values."""
    xs, rows, ks, n = (
        pt.dmatrix("xs"),
        pt.dmatrix("rows"),
        pt.dvector("ks"),
        pt.lscalar("n"),
    )
    outs = [
        loop_over(lambda x, s, k: s * k + x, xs[:, g], [rows[g]], [ks[g]], n)
        for g in range(3)
    ]
    fg = canonical([o[-1] for o in outs], [xs, rows, ks, n])
    with sharing_rebuilt_functions():
        assert untrace_final_states(fg) == 3
    assert bl.batch_loops(fg) == 1 and len(scans(fg)) == 1
    starts = X34[:, :2]
    finals = []
    for g in range(3):
        s = starts[g]
        for t in range(N):
            s = s * KS[g] + XS[t, g]
        finals.append(s)
    close(evaluate(fg.inputs, fg.outputs, [XS, starts, KS, N]), finals)


def test_vector_sequences_traces_and_per_step_outputs_are_batched_after_their_rows():
    """Rows of two numbers per step and group: sequence, trace and per-step output stacked on axis 1 (after the steps), NumPy's values."""
    cube, rows, ks = pt.tensor3("cube"), pt.dmatrix("rows"), pt.dvector("ks")
    fg, count = batched(doubling_loops(cube, rows, ks), [cube, rows, ks])
    assert count == 1 and len(scans(fg)) == 1
    steps = RNG.normal(size=(N, 3, 2))
    starts = X34[:, :2]
    check_doubling_loops(evaluate(fg.inputs, fg.outputs, [steps, starts, KS]), steps, starts)
