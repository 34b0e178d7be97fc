"""`innergraph.rewriting.outline_loops` called directly, fast (issue 47's mutation run).

``tests/test_outline_loops.py`` compiles each graph under the Numba linker (about 45 s a
run). These build loops with ``pytensor.scan``, lift them (`lift_native`) into a
FunctionGraph and call the pieces: `loop_groups` and its merge test (`_might_merge`,
`_value`), the walk's helpers (`_is_view`, `_constant_only`, `_equal_constants`), the
region a group's walk finds (`_Region`: its nodes, leaves, params and outputs), the pass
`outline_loops` (its count, the calls it leaves, the groups it refuses) and
`inline_outlined_loops`. Values are run by the py linker without rewrites, before and
after each pass, and compared with a NumPy loop.
"""

from __future__ import annotations

from types import SimpleNamespace
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
from pytensor.tensor.shape import Shape_i

import innergraph
import innergraph.rewriting.outline_loops as outline_module
from innergraph.core.graph import body_of, scope_toposort
from innergraph.ops.call import Call
from innergraph.ops.loop import ForiLoop
from innergraph.rewriting.lift import lift_native
from innergraph.rewriting.outline_loops import (
    MIN_LOOPS,
    _constant_only,
    _equal_constants,
    _is_loop,
    _is_view,
    _might_merge,
    _Region,
    _value,
    inline_outlined_loops,
    loop_groups,
    outline_loops,
)
from alarm import within
from consumer_nodes import call_node, function
from typed import one_tensor, param

PY = Mode(linker="py", optimizer="None")


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """A pass that loops forever (a mutant of the pass's ``while``) fails in 30 s, not at the mutation run's timeout."""
    with within(30, "outline_loops"):
        yield


def step(x_t: Any, acc: Any, w: Any) -> Any:
    return acc * w + pt.sin(x_t) * pt.exp(-(x_t**2))


def other_step(x_t: Any, acc: Any, w: Any) -> Any:
    return acc * w - pt.cos(x_t)


def scan(x: Any, init: Any, w: Any, fn: Any = step, **kwargs: Any) -> Any:
    return pytensor.scan(fn, sequences=[x], outputs_info=[init], non_sequences=[w], return_updates=False, **kwargs)


def numpy_trace(x: np.ndarray, init: float, w: float) -> np.ndarray:
    acc, trace = init, []
    for x_t in x:
        acc = acc * w + np.sin(x_t) * np.exp(-(x_t**2))
        trace.append(acc)
    return np.array(trace)


def lifted(inputs: Sequence[Variable], outputs: Sequence[Variable]) -> FunctionGraph:
    fgraph = FunctionGraph(list(inputs), list(outputs), clone=False)
    lift_native(fgraph)
    return fgraph


def run(fgraph: FunctionGraph, values: Sequence[Any]) -> list[Any]:
    return pytensor.function(fgraph.inputs, fgraph.outputs, mode=PY, on_unused_input="ignore")(*values)


def top(fgraph: FunctionGraph) -> list[Apply]:
    """The nodes of the graph's own scope (not those of the bodies it holds)."""
    return scope_toposort(fgraph.outputs)


def calls(fgraph: FunctionGraph) -> list[Apply]:
    return [n for n in top(fgraph) if isinstance(n.op, Call)]


def loops(fgraph: FunctionGraph) -> list[Apply]:
    return [n for n in top(fgraph) if _is_loop(n)]


def outlined(fgraph: FunctionGraph, values: Sequence[Any], expect: int) -> list[Any]:
    """Run ``outline_loops`` (forced) on ``fgraph``: its count is ``expect``; the values before and after agree. Returns them."""
    before = run(fgraph, values)
    nodes = set(fgraph.apply_nodes)
    assert outline_loops(fgraph, force=True) == expect
    if not expect:
        assert set(fgraph.apply_nodes) == nodes  # a refused group: the graph untouched
    after = run(fgraph, values)
    for got, want in zip(after, before, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    return after


RNG = np.random.default_rng(3)
X = [RNG.normal(size=n) for n in (7, 5, 6)]


def three_loops() -> tuple[FunctionGraph, list[Variable], Variable, Variable]:
    xs = [pt.dvector(f"x{i}") for i in range(3)]
    a, w = pt.dscalar("a"), pt.dscalar("w")
    return lifted([*xs, a, w], [pt.add(*(scan(x, a, w)[-1] for x in xs))]), xs, a, w


# --- the pieces ------------------------------------------------------------------------


def test_value_reads_constants_and_static_shapes():
    assert _value(pt.constant(4)) == ("constant", 4)
    assert _value(pt.constant(4.0) + pt.constant(1.0)) == ("constant", 5)
    assert _value(pt.dvector("p", shape=(5,)).shape[0]) == ("constant", 5)
    x = pt.dvector("x")
    for variable in (x.shape[0], pt.constant([1, 2]), pt.constant(np.nan), pt.constant(1 + 2j)):
        # symbolic, not a scalar (NotScalarConstantError), NaN (int: ValueError), complex (int: TypeError)
        assert _value(variable) is variable


def test_is_view():
    x, m, s = pt.dvector("x"), pt.dmatrix("m"), pt.dscalar("s")
    i = pt.lscalar("i")
    views = [x[1:], x[None], m.T, x.shape, Shape_i(0)(x), ScalarFromTensor()(i), TensorFromScalar()(ScalarFromTensor()(i)), s + 1, s * s]
    for v in views:
        assert _is_view(v.owner), v
    for v in (pt.exp(x), s * x, x + x, pt.cumsum(x), m.sum()):
        assert not _is_view(v.owner), v


def _sums(n: int) -> Variable:
    """``c + c + ... + c``, n additions of one constant: 2 + n variables."""
    c = pt.constant(1.0)
    v: Variable = c
    for _ in range(n):
        v = v + c
    return v


def test_constant_only():
    c, x = pt.constant(2.0), pt.dscalar("x")
    assert _constant_only(c) and _constant_only(c * 3.0 + pt.constant(1.0))
    assert not _constant_only(x) and not _constant_only(c * x) and not _constant_only(x * c)
    # the walk looks at `limit` variables at most: n additions of one constant are n + 1 sums and the constant
    assert _constant_only(_sums(31)) and not _constant_only(_sums(32))
    assert _constant_only(_sums(3), limit=4) and not _constant_only(_sums(4), limit=4)
    # a function variable computed from constants alone is not a constant (it stands for a body)
    assert not _constant_only(function([pt.constant(2.0) * pt.constant(3.0)], [], fold=False))


def test_equal_constants():
    one, other, two, x = pt.constant(1.5), pt.constant(1.5), pt.constant(2.0), pt.dscalar("x")
    assert one is not other
    assert _equal_constants([one, one, one]) and _equal_constants([one, other]) and _equal_constants([one])
    assert not _equal_constants([one, two]) and not _equal_constants([one, other, two])
    assert not _equal_constants([x, x]) and not _equal_constants([one, x])


# --- the groups --------------------------------------------------------------------------


def test_loop_groups():
    x, y, z, u = (pt.dvector(n) for n in "xyzu")
    a, w = pt.dscalar("a"), pt.dscalar("w")
    assert MIN_LOOPS == 2
    one = lifted([x, a, w], [scan(x, a, w)[-1]])
    assert loop_groups(one) == []
    outlined(one, [X[0], 0.3, 0.9], expect=0)  # one loop: nothing to share
    two_bodies = lifted([x, y, a, w], [scan(x, a, w)[-1] + scan(y, a, w, fn=other_step)[-1]])
    assert loop_groups(two_bodies) == []
    # two groups, in the graph's order: each is outlined, as calls of its own body
    four = lifted([x, y, z, u, a, w], [scan(x, a, w)[-1] + scan(y, a, w)[-1] + scan(z, a, w, fn=other_step)[-1] + scan(u, a, w, fn=other_step)[-1]])
    groups = loop_groups(four)
    assert [len(g) for g in groups] == [2, 2]
    order = [n for n in four.toposort() if _is_loop(n)]
    assert [n for g in groups for n in g] == sorted(order, key=lambda n: (groups[0][0].op != n.op, order.index(n)))
    assert all(len({n.inputs[0] for n in g}) == 1 for g in groups) and groups[0][0].inputs[0] is not groups[1][0].inputs[0]
    values: list[Any] = [X[0], X[1], X[2], X[0][:4], 0.3, 0.9]
    got = outlined(four, values, expect=2)
    want = sum(numpy_trace(v, 0.3, 0.9)[-1] for v in values[:2]) + sum(_other_trace(v, 0.3, 0.9)[-1] for v in values[2:4])
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    assert len(calls(four)) == 4 and len({c.inputs[0] for c in calls(four)}) == 2 and not loops(four)
    assert loop_groups(four) == [] and outline_loops(four, force=True) == 0


def _other_trace(x: np.ndarray, init: float, w: float) -> np.ndarray:
    acc, trace = init, []
    for x_t in x:
        acc = acc * w - np.cos(x_t)
        trace.append(acc)
    return np.array(trace)


def test_loops_that_may_run_the_same_steps_are_no_group():
    x, y, a, b, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("b"), pt.dscalar("w")
    # one sequence: one symbolic length
    assert loop_groups(lifted([x, a, b, w], [scan(x, a, w)[-1] + scan(x, b, w)[-1]])) == []
    # equal constant step counts
    assert loop_groups(lifted([x, y, a, w], [scan(x, a, w, n_steps=4)[-1] + scan(y, a, w, n_steps=pt.constant(4))[-1]])) == []
    # static lengths: equal, then not
    p, q, r = pt.dvector("p", shape=(5,)), pt.dvector("q", shape=(5,)), pt.dvector("r", shape=(6,))
    assert loop_groups(lifted([p, q, a, w], [scan(p, a, w)[-1] + scan(q, a, w)[-1]])) == []
    assert [len(g) for g in loop_groups(lifted([p, r, a, w], [scan(p, a, w)[-1] + scan(r, a, w)[-1]]))] == [2]


# --- the region and the pass ------------------------------------------------------------


def test_three_loops_are_three_calls_of_one_body():
    fgraph, xs, a, w = three_loops()
    (group,) = loop_groups(fgraph)
    assert group == [n for n in fgraph.toposort() if _is_loop(n)]
    region = _Region(fgraph, group)
    # the loop and its scaffolding: the sequence's slice, the step count, the state buffer, the final read
    assert [str(t[0].op) for t in region.tuples] == [
        "Scan{scan_fn, in-graph}", "Subtensor{start:}", "Subtensor{i}", "Subtensor{:stop}", "SetSubtensor{:stop}", "Subtensor{i}", "Shape",
        "Subtensor{start:}", "ScalarFromTensor", "AllocEmpty{dtype='float64'}", "Add",
    ]
    assert all(len(set(t)) == 3 and [region.where[n] for n in t] == [(i, c) for c in range(3)] for i, t in enumerate(region.tuples))
    own = tuple(next(v for v in xs if v in {i for node in scope_toposort([loop.outputs[0]]) for i in node.inputs}) for loop in group)
    assert region._params() == [(w, w, w), (a, a, a), own]
    values = [*X, 0.3, 0.9]
    got = outlined(fgraph, values, expect=1)
    np.testing.assert_allclose(got[0], sum(numpy_trace(x, 0.3, 0.9)[-1] for x in X), rtol=1e-12)
    assert len(calls(fgraph)) == 3 and [str(n.op) for n in top(fgraph) if not isinstance(n.op, Call)] == ["Add"]  # all scaffolding in the calls
    (fn,) = {c.inputs[0] for c in calls(fgraph)}
    # the body: the region of one copy, and the views of the shared initial value it reads (its row, and that row's length)
    extra = ["ExpandDims{axis=0}", "Shape", "Subtensor{i}", "ScalarFromTensor"]
    assert sorted(str(n.op) for n in scope_toposort(body_of(fn).outputs)) == sorted([*(str(t[0].op) for t in region.tuples), *extra])
    assert sorted((c.inputs[1:] for c in calls(fgraph)), key=lambda i: xs.index(i[2])) == [[w, a, x] for x in xs]
    assert outline_loops(fgraph, force=True) == 0
    # inlined back: three loops of one Op, the calls gone
    assert inline_outlined_loops(fgraph) == 3
    assert not calls(fgraph) and len(loops(fgraph)) == 3 and len({n.op for n in loops(fgraph)}) == 1
    np.testing.assert_allclose(run(fgraph, values)[0], got[0], rtol=1e-12)


def test_only_for_the_numba_linker_unless_forced():
    fgraph, *_ = three_loops()
    with pytensor.config.change_flags(mode=Mode(linker="py", optimizer="None")):
        assert outline_loops(fgraph) == 0 and len(loops(fgraph)) == 3
    with pytensor.config.change_flags(mode=Mode(linker="numba", optimizer="None")):
        assert outline_loops(fgraph) == 1 and len(calls(fgraph)) == 3


def test_a_loop_over_another_loops_result_is_refused_and_the_next_group_outlined():
    x, y, z, a, w = pt.dvector("x"), pt.dvector("y"), pt.dvector("z"), pt.dscalar("a"), pt.dscalar("w")
    first = scan(x, a, w)
    cyclic = lifted([x, a, w], [scan(first, a, w)[-1]])
    assert [len(g) for g in loop_groups(cyclic)] == [2]
    assert _Region(cyclic, loop_groups(cyclic)[0])._params() is not None  # refused by the cycle check alone
    outlined(cyclic, [X[0], 0.3, 0.9], expect=0)
    # each loop's sequence scaled by an input of its own, the last param: the walk over the params goes on past it
    b, c = pt.dscalar("b"), pt.dscalar("c")
    inner = scan(x * b, a, w)
    chained = lifted([x, a, w, b, c], [scan(inner * c, a, w)[-1]])
    (group,) = loop_groups(chained)
    assert [leaf[-1].name for leaf in _Region(chained, group)._params() or []][-1:] == ["c"]
    outlined(chained, [X[0], 0.3, 0.9, 1.5, -2.0], expect=0)
    # the refused group first, then one that can be outlined: 1, and the pass ends
    first = scan(x, a, w)
    both = lifted([x, y, z, a, w], [scan(y, a, w, fn=other_step)[-1] + scan(z, a, w, fn=other_step)[-1] + scan(first, a, w)[-1]])
    groups = loop_groups(both)
    assert [len(g) for g in groups] == [2, 2] and groups[0][0].inputs[0] is not groups[1][0].inputs[0]
    assert not _Region(both, groups[0])._acyclic(_Region(both, groups[0])._params() or [])
    got = outlined(both, [X[0], X[1], X[2], 0.3, 0.9], expect=1)
    want = numpy_trace(numpy_trace(X[0], 0.3, 0.9), 0.3, 0.9)[-1] + _other_trace(X[1], 0.3, 0.9)[-1] + _other_trace(X[2], 0.3, 0.9)[-1]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    assert len(calls(both)) == 2 and len(loops(both)) == 2


def test_different_constant_step_counts_are_refused():
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")
    fgraph = lifted([x, y, a, w], [scan(x, a, w, n_steps=2)[-1] + scan(y, a, w, n_steps=3)[-1]])
    (group,) = loop_groups(fgraph)
    assert _Region(fgraph, group)._params() is None  # the step counts are constants that differ
    got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=0)
    np.testing.assert_allclose(got[0], numpy_trace(X[0][:2], 0.3, 0.9)[-1] + numpy_trace(X[1][:3], 0.3, 0.9)[-1], rtol=1e-12)


def test_one_variable_as_two_params_of_the_first_copy_is_refused():
    x, y, a, b, c = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("b"), pt.dscalar("c")
    # the first copy (the graph's first loop) starts from a and multiplies by a: no stand-ins to build the body over
    refused = lifted([x, y, a, b, c], [scan(y, b, c)[-1] + scan(x, a, a)[-1]])
    (group,) = loop_groups(refused)
    assert group[0].inputs[-1] is not None and _Region(refused, group)._params() is None
    outlined(refused, [X[0], X[1], 0.3, 0.5, 0.9], expect=0)
    # the other copy first: it passes b and c, the second copy a twice, which a call can
    taken = lifted([x, y, a, b, c], [scan(x, a, a)[-1] + scan(y, b, c)[-1]])
    got = outlined(taken, [X[0], X[1], 0.3, 0.5, 0.9], expect=1)
    np.testing.assert_allclose(got[0], numpy_trace(X[0], 0.3, 0.3)[-1] + numpy_trace(X[1], 0.5, 0.9)[-1], rtol=1e-12)
    assert sorted(len(set(c.inputs[1:])) for c in calls(taken)) == [2, 3]


def test_initial_values_computed_alike_through_views():
    """A shared initial value is walked up through views (scalar arithmetic here) for 6 levels:
    the state buffer's shape reads it 4 levels down (ScalarFromTensor, Subtensor, Shape,
    ExpandDims), so two additions on ``a`` are built into the body, a third makes ``a + 1`` a param."""
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")
    for n in (2, 3):
        chain = [a]
        for _ in range(n):
            chain.append(chain[-1] + 1)
        fgraph = lifted([x, y, a, w], [scan(x, chain[-1], w)[-1] + scan(y, chain[-1], w)[-1]])
        (group,) = loop_groups(fgraph)
        found = _Region(fgraph, group)._params()
        assert found is not None
        got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=1)
        np.testing.assert_allclose(got[0], numpy_trace(X[0], 0.3 + n, 0.9)[-1] + numpy_trace(X[1], 0.3 + n, 0.9)[-1], rtol=1e-12)
        ins = {v for c in calls(fgraph) for v in c.inputs[1:]}
        assert ins == {w, x, y, *chain[: n - 1]}, (n, ins)


def _pair(outputs: Any, *inputs: Variable) -> tuple[FunctionGraph, _Region]:
    fgraph = lifted(inputs, outputs)
    (group,) = loop_groups(fgraph)
    return fgraph, _Region(fgraph, group)


def test_the_walk_down_takes_readers_alike_only():
    x, y, a, w, b, c = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w"), pt.dscalar("b"), pt.dscalar("c")
    values = [X[0], X[1], 0.3, 0.9, 1.5, -2.0]
    fx, fy = numpy_trace(X[0], 0.3, 0.9)[-1], numpy_trace(X[1], 0.3, 0.9)[-1]
    cases = [
        # each final times one shared factor: the product is in the region, the calls return it
        (lambda: scan(x, a, w)[-1] * b + scan(y, a, w)[-1] * b, fx * 1.5 + fy * 1.5, "Mul", ["Add"]),
        # times a factor of its own: the region ends at the final read
        (lambda: scan(x, a, w)[-1] * b + scan(y, a, w)[-1] * c, fx * 1.5 - fy * 2.0, "Subtensor{i}", ["Add", "Mul", "Mul"]),
        # read as the other operand: the readers are not alike
        (lambda: (scan(x, a, w)[-1] - b) + (b - scan(y, a, w)[-1]), fx - fy, "Subtensor{i}", ["Add", "Sub", "Sub"]),
    ]
    for build, want, last, outside in cases:
        fgraph, region = _pair([build()], x, y, a, w, b, c)
        ((first, _),) = region._outputs()
        assert str(first.owner.op) == last
        got = outlined(fgraph, values, expect=1)
        np.testing.assert_allclose(got[0], want, rtol=1e-12)
        assert sorted(str(n.op) for n in top(fgraph) if not isinstance(n.op, Call)) == outside


def test_traces_read_twice_or_whole():
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")
    tx, ty = numpy_trace(X[0], 0.3, 0.9), numpy_trace(X[1], 0.3, 0.9)
    # one trace read twice, the other once: the region ends at the traces, which the calls return
    for twice_first in (True, False):
        outputs = [_twice(x, a, w), scan(y, a, w)[-1]]
        fgraph, region = _pair(outputs if twice_first else outputs[::-1], x, y, a, w)
        assert [str(v[0].owner.op) for v in region._outputs()] == ["Subtensor{start:}"]
        got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=1)
        np.testing.assert_allclose(got if twice_first else got[::-1], [tx[-1] + tx[2], ty[-1]], rtol=1e-12)
    # one trace whole, one final: the trace is read outside its copy's region
    fgraph, region = _pair([scan(x, a, w), scan(y, a, w)[-1]], x, y, a, w)
    assert [str(v[0].owner.op) for v in region._outputs()] == ["Subtensor{start:}"]
    got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=1)
    np.testing.assert_allclose(got[0], tx, rtol=1e-12)
    np.testing.assert_allclose(got[1], ty[-1], rtol=1e-12)


def _twice(x: Variable, a: Variable, w: Variable) -> Any:
    trace = scan(x, a, w)
    return trace[2] + trace[-1]


def two_states(x_t: Any, s: Any, t: Any, w: Any) -> Any:
    return s * w + x_t, t - s * x_t


def test_loops_of_two_states():
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")

    def loop(v: Variable) -> Any:
        return pytensor.scan(two_states, sequences=[v], outputs_info=[a, a], non_sequences=[w], return_updates=False)

    def numpy_loop(v: np.ndarray) -> tuple[float, float]:
        s = t = 0.3
        for x_t in v:
            s, t = s * 0.9 + x_t, t - s * x_t
        return s, t

    (sx, tx), (sy, ty) = loop(x), loop(y)
    fgraph, region = _pair([sx[-1] + ty[-1]], x, y, a, w)
    loops_ = region.tuples[0]
    first, second = (loops_[0].outputs[0], loops_[1].outputs[0]), (loops_[0].outputs[1], loops_[1].outputs[1])
    assert region._same_tuple(first) and region._same_tuple(second)
    assert not region._same_tuple((first[0], second[1])) and not region._same_tuple((first[1], first[0]))
    assert not region._same_tuple((x, y)) and not region._same_tuple((first[0], x))
    # the first copy reads one state's final, the other the other's: both states are outputs
    assert len(region._outputs()) == 2
    got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=1)
    np.testing.assert_allclose(got[0], numpy_loop(X[0])[0] + numpy_loop(X[1])[1], rtol=1e-12)


def test_sequences_from_other_outputs_of_equal_nodes_are_leaves():
    """Each loop reads one half of a split of its own vector: the first half, the second half.
    The splits are equal Ops, but of other outputs: not one computation, so the halves are params."""
    u, v, a, w, sizes = pt.dvector("u"), pt.dvector("v"), pt.dscalar("a"), pt.dscalar("w"), pt.lvector("sizes")
    first = pt.split(u, sizes, n_splits=2)[0]
    second = pt.split(v, sizes, n_splits=2)[1]
    fgraph, region = _pair([scan(first, a, w)[-1] + scan(second, a, w)[-1]], u, v, a, w, sizes)
    assert not any(str(t[0].op).startswith("Split") for t in region.tuples)
    values: list[Any] = [np.arange(6.0) / 7, np.arange(6.0, 12.0) / 7, 0.3, 0.9, np.array([2, 4])]
    got = outlined(fgraph, values, expect=1)
    want = numpy_trace(values[0][:2], 0.3, 0.9)[-1] + numpy_trace(values[1][2:], 0.3, 0.9)[-1]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_alike():
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")
    fgraph, region = _pair([scan(x, a, w)[-1] + scan(y, a, w)[-1]], x, y, a, w)
    p, q, r = pt.dvector("p"), pt.dvector("q"), pt.dvector("r")
    f, g = pt.fvector("f"), pt.fvector("g")
    add, other_add = (p + q).owner, (q + r).owner
    assert region._alike([add, other_add])
    assert not region._alike([add, add])  # one node twice
    assert not region._alike([add, (p * q).owner])  # other Ops
    assert not region._alike([add, pt.add(p, q, r).owner]) and not region._alike([pt.add(p, q, r).owner, add])  # other input counts
    assert not region._alike([add, (f + g).owner])  # other output types
    fn = region.tuples[0][0].inputs[0]
    assert not region._alike([fn.owner, fn.owner.clone()])  # a body is never part of the region
    # calls (one Op for every body): of one function variable over other arguments, alike; of two bodies, not
    s = param(0, a.type)
    body = function([s * 2.0, s * 3.0], [a.type])
    assert region._alike([Call().make_node(body, a), Call().make_node(body, w)])
    assert not region._alike([call_node([s * 2.0, s * 3.0], [a]), call_node([s * 4.0, s * 5.0], [w])])
    out_nodes = [c for c, _ in fgraph.clients[fgraph.outputs[0]]]
    assert not region._alike([*out_nodes, *(o.clone() for o in out_nodes)])
    # a group of 300 loops: 300 distinct nodes are alike (counts beyond CPython's cached ints), 299 and a repeat not
    many = _Region.__new__(_Region)
    many.k = 300
    adds = [(p + pt.dvector(f"q{i}")).owner for i in range(300)]
    assert many._alike(adds) and not many._alike([*adds[:299], adds[0]])
    wide = [pt.add(*(pt.dscalar(f"{name}{i}") for i in range(300))).owner for name in "rt"]  # 300 inputs each
    assert region._alike(wide)
    sizes = pt.lvector("sizes")
    splits = [pt.split(v, sizes, n_splits=300)[0].owner for v in (p, q)]  # 300 outputs each
    assert len(splits[0].outputs) == 300 and region._alike(splits)


def test_inline_outlined_loops():
    x, y, a, w, b = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w"), pt.dscalar("b")
    plain = lifted([x, y, a, w], [scan(x, a, w)[-1] + scan(y, a, w)[-1]])
    assert inline_outlined_loops(plain) == 0 and len(loops(plain)) == 2  # not outlined: nothing to inline
    doubled = one_tensor(innergraph.call(lambda v: v * 2.0, b))  # a call without a loop stays
    fgraph = lifted([x, y, a, w, b], [scan(x, a, w)[-1] + scan(y, a, w)[-1] + doubled])
    # a call whose body holds PyTensor's own Scan (not lifted): a loop call too
    native = one_tensor(innergraph.call(lambda xv, av, wv: scan(xv, av, wv, fn=other_step)[-1], x, a, w))
    assert any(isinstance(n.op, NativeScan) for n in scope_toposort(body_of(native.owner.inputs[0]).outputs))
    fgraph.add_output(native)
    values = [X[0], X[1], 0.3, 0.9, 1.5]
    got = outlined(fgraph, values, expect=1)
    assert len(calls(fgraph)) == 4
    assert inline_outlined_loops(fgraph) == 3
    (left,) = calls(fgraph)
    assert left.outputs[0] is doubled
    assert len(loops(fgraph)) == 2 and len([n for n in top(fgraph) if isinstance(n.op, NativeScan)]) == 1
    again = run(fgraph, values)
    np.testing.assert_allclose(again[0], numpy_trace(X[0], 0.3, 0.9)[-1] + numpy_trace(X[1], 0.3, 0.9)[-1] + 3.0, rtol=1e-12)
    np.testing.assert_allclose(again[1], _other_trace(X[0], 0.3, 0.9)[-1], rtol=1e-12)
    np.testing.assert_allclose(again[0], got[0], rtol=1e-12)


def test_initial_values_from_constants():
    """Equal values computed from constants alone are built into the body; different ones are no param (a
    constant cannot be one): the group is refused."""
    x, y, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("w")
    equal = lifted([x, y, w], [scan(x, pt.constant(np.float64(0.25)) * 2.0, w)[-1] + scan(y, pt.constant(np.float64(0.25)) * 2.0, w)[-1]])
    got = outlined(equal, [X[0], X[1], 0.9], expect=1)
    np.testing.assert_allclose(got[0], numpy_trace(X[0], 0.5, 0.9)[-1] + numpy_trace(X[1], 0.5, 0.9)[-1], rtol=1e-12)
    assert sorted(len(c.inputs) for c in calls(equal)) == [3, 3]  # the body, w and the sequence
    for first, second in [(pt.constant(np.float64(0.25)) * 2.0, pt.constant(np.float64(0.35)) * 2.0), (pt.constant(np.float64(0.5)), pt.constant(np.float64(0.7)))]:
        different = lifted([x, y, w], [scan(x, first, w)[-1] + scan(y, second, w)[-1]])
        (group,) = loop_groups(different)
        assert _Region(different, group)._params() is None
        got = outlined(different, [X[0], X[1], 0.9], expect=0)
        np.testing.assert_allclose(got[0], numpy_trace(X[0], 0.5, 0.9)[-1] + numpy_trace(X[1], 0.7, 0.9)[-1], rtol=1e-12)


def test_sequences_computed_by_calls_of_different_bodies():
    """Each loop's sequence is a call of its own body (``exp(v) * 2``, ``exp(v) * 3``): the calls are equal
    Ops over different function variables, so they are not one computation.

    Found by this file's mutation run (2026-12-02): `_Region._up` took any function-typed input as
    shared (``or is_function(first)``), so the calls were walked as alike and the call body called
    the first copy's body for every copy (84.59 for 77.04, also from two `OpFromGraph` nodes with a
    dead output each, which the lift makes calls). `_alike` now asks for the same function variables.
    """
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")
    twice = one_tensor(innergraph.call(lambda v: pt.exp(v) * 2.0, x))
    thrice = one_tensor(innergraph.call(lambda v: pt.exp(v) * 3.0, y))
    fgraph = lifted([x, y, a, w], [scan(twice, a, w)[-1] + scan(thrice, a, w)[-1]])
    got = run(fgraph, [X[0], X[1], 0.3, 0.9])  # before the pass: NumPy's
    want = numpy_trace(np.exp(X[0]) * 2, 0.3, 0.9)[-1] + numpy_trace(np.exp(X[1]) * 3, 0.3, 0.9)[-1]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    outline_loops(fgraph, force=True)
    np.testing.assert_allclose(run(fgraph, [X[0], X[1], 0.3, 0.9])[0], want, rtol=1e-12)


def test_an_invariant_of_its_own_before_a_shared_one():
    """``non_sequences=[b_i, w]``: each loop's own scale, then the shared weight; both are params, the
    scales whether inputs of the graph or computed by nodes that are not alike (``exp(b)``, ``c * c``)."""
    x, y, a, w, b, c = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w"), pt.dscalar("b"), pt.dscalar("c")

    def scaled(x_t: Any, acc: Any, scale: Any, w: Any) -> Any:
        return acc * w + scale * x_t

    def loop(v: Variable, scale: Variable) -> Any:
        return pytensor.scan(scaled, sequences=[v], outputs_info=[a], non_sequences=[scale, w], return_updates=False)[-1]

    def numpy_loop(v: np.ndarray, scale: float) -> float:
        acc = 0.3
        for x_t in v:
            acc = acc * 0.9 + scale * x_t
        return acc

    for own_b, own_c, values in [(b, c, (1.5, -2.0)), (pt.exp(b), c * c, (np.exp(1.5), 4.0))]:
        fgraph = lifted([x, y, a, w, b, c], [loop(x, own_b) + loop(y, own_c)])
        got = outlined(fgraph, [X[0], X[1], 0.3, 0.9, 1.5, -2.0], expect=1)
        np.testing.assert_allclose(got[0], numpy_loop(X[0], values[0]) + numpy_loop(X[1], values[1]), rtol=1e-12)
        ins = sorted((frozenset(c.inputs[1:]) for c in calls(fgraph)), key=lambda s: x in s)
        assert ins == [frozenset({y, a, w, own_c}), frozenset({x, a, w, own_b})]
    # equal scales computed from constants, one node after the lift's merge; given the second loop its own
    # (a pass may leave equal computations unmerged), the body builds the first's, w is still a param
    fgraph = lifted([x, y, a, w], [loop(x, pt.constant(np.float64(0.25)) * 2.0) + loop(y, pt.constant(np.float64(0.25)) * 2.0)])
    (group,) = loop_groups(fgraph)
    assert group[0].inputs[4] is group[1].inputs[4]
    fgraph.change_node_input(group[1], 4, pt.constant(np.float64(0.25)) * 2.0, import_missing=True)
    got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=1)
    np.testing.assert_allclose(got[0], numpy_loop(X[0], 0.5) + numpy_loop(X[1], 0.5), rtol=1e-12)
    assert sorted([v.name for v in c.inputs[1:]] for c in calls(fgraph)) == [["w", "a", "x"], ["w", "a", "y"]]


def test_loops_alone_are_refused():
    """Two for-loops of one body over their own step counts, their results read by one node: the region
    is the loops alone, no scaffolding to share."""
    n, m, a = pt.lscalar("n"), pt.lscalar("m"), pt.dscalar("a")
    s = param(0, a.type)
    fn = function([s * 2.0 + 1.0], [a.type])
    first, second = (one_tensor(ForiLoop(0, 1).make_node(fn, steps, a).outputs[0]) for steps in (n, m))
    fgraph = FunctionGraph([n, m, a], [first + second], clone=False)
    (group,) = loop_groups(fgraph)
    assert len(_Region(fgraph, group).tuples) == 1
    got = outlined(fgraph, [3, 2, 0.5], expect=0)
    np.testing.assert_allclose(got[0], 11.0 + 5.0)
    # each result read by its own exp: the loops and one node, enough to outline
    first, second = (one_tensor(ForiLoop(0, 1).make_node(fn, steps, a).outputs[0]) for steps in (n, m))
    fgraph = FunctionGraph([n, m, a], [pt.exp(first) + pt.exp(second)], clone=False)
    (group,) = loop_groups(fgraph)
    assert len(_Region(fgraph, group).tuples) == 2
    got = outlined(fgraph, [3, 2, 0.5], expect=1)
    np.testing.assert_allclose(got[0], np.exp(11.0) + np.exp(5.0))


def test_the_walk_down_goes_on_past_an_output_whose_readers_differ():
    """Two-state loops, the second copy's first state trimmed by another Op (``[1:10**6]`` for ``[1:]``, the
    same rows) or read twice: the walk down stops at that output but still takes the second state's reads."""
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")

    def loop(v: Variable) -> Any:
        return pytensor.scan(two_states, sequences=[v], outputs_info=[a, a], non_sequences=[w], return_updates=False)

    for read_twice in (False, True):
        (sx, tx), (sy, ty) = loop(x), loop(y)
        fgraph = lifted([x, y, a, w], [sx[-1] + sy[-1], tx[-1] * ty[-1]])
        (group,) = loop_groups(fgraph)
        raw = group[1].outputs[0]
        ((reader, _),) = fgraph.clients[raw]
        assert str(reader.op) == "Subtensor{start:}"
        if read_twice:  # the second copy's first state also read as a whole buffer: two readers
            fgraph.add_output(raw)
        else:
            fgraph.replace(reader.outputs[0], one_tensor(raw)[1:10**6])
        region = _Region(fgraph, group)
        assert [(str(v[0].owner.op), v[0].owner.outputs.index(v[0])) for v in region._outputs()] == [
            ("Scan{scan_fn, in-graph}", 0), ("Subtensor{i}", 0),
        ]
        before = run(fgraph, [X[0], X[1], 0.3, 0.9])
        assert outline_loops(fgraph, force=True) == 1
        for got, want in zip(run(fgraph, [X[0], X[1], 0.3, 0.9]), before, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_shared_invariant_computed_from_constants_is_built_into_the_body():
    """``w = sum([0.2, 0.3, 0.4])``, read by every loop: computed from constants alone (and no view), the
    body computes it, no call passes it."""
    x, y, a = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a")
    w = pt.constant(np.array([0.2, 0.3, 0.4])).sum()
    fgraph = lifted([x, y, a], [scan(x, a, w)[-1] + scan(y, a, w)[-1]])
    got = outlined(fgraph, [X[0], X[1], 0.3], expect=1)
    np.testing.assert_allclose(got[0], numpy_trace(X[0], 0.3, 0.9)[-1] + numpy_trace(X[1], 0.3, 0.9)[-1], rtol=1e-12)
    assert sorted([v.name for v in c.inputs[1:]] for c in calls(fgraph)) == [["a", "x"], ["a", "y"]]


def test_more_params_than_cached_small_ints():
    """Each loop reads 300 invariants of its own: 302 params, a count beyond CPython's cached ints, and
    the group is outlined (the test of duplicate params compares the counts by value)."""
    x, y, a = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a")
    bs, cs = ([pt.dscalar(f"{name}{i}") for i in range(300)] for name in "bc")

    def many(x_t: Any, acc: Any, *scales: Any) -> Any:
        total = scales[0]
        for scale in scales[1:]:
            total = total + scale
        return acc * 0.5 + x_t * total

    def loop(v: Variable, own: list[Any]) -> Any:
        return pytensor.scan(many, sequences=[v], outputs_info=[a], non_sequences=own, return_updates=False)[-1]

    fgraph = lifted([x, y, a, *bs, *cs], [loop(x, bs) + loop(y, cs)])
    (group,) = loop_groups(fgraph)
    assert len(_Region(fgraph, group)._params() or []) == 302
    assert outline_loops(fgraph, force=True) == 1
    assert sorted(len(c.inputs) for c in calls(fgraph)) == [303, 303] and not loops(fgraph)


class _Headers:
    """`signature` stood in for: node i's header is the constant ``headers[i]`` (None: no signature)."""

    def __init__(self, headers: Any):
        self.headers = headers
        self.saved = outline_module.signature

    def __call__(self, node: Any) -> Any:
        value = self.headers[node]
        return None if value is None else SimpleNamespace(header=(pt.constant(value),))

    def __enter__(self) -> None:
        setattr(outline_module, "signature", self)

    def __exit__(self, *exc: Any) -> None:
        setattr(outline_module, "signature", self.saved)


def test_might_merge():
    """Loops may run the same steps when two headers are equal; a loop without a signature (a form whose
    signature is fixed) is left to the other rewrites. 300 loops: counts beyond CPython's cached ints."""
    fgraph, *_ = three_loops()
    (group,) = loop_groups(fgraph)
    with _Headers(dict.fromkeys(group)):
        assert loop_groups(fgraph) == []
    cases: list[tuple[list[Any], bool]] = [([4, 5], False), ([4, 4], True), ([4, None], True), (list(range(300)), False), ([*range(299), 7], True)]
    for headers, merge in cases:
        with _Headers(headers):
            assert _might_merge(cast(Any, range(len(headers)))) is merge, headers


def test_a_group_over_another_groups_traces_is_outlined_after_it():
    """Loops (``other_step``) over the traces of a group of loops (``step``): the groups are outlined in
    the graph's order, the first alone, then the second around the first's calls (2 groups). Taken the
    other way round, the second group's walk up would take the first's loops into its own body (1)."""
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")
    fx, fy = scan(x, a, w), scan(y, a, w)
    fgraph = lifted([x, y, a, w], [scan(fx, a, w, fn=other_step)[-1] + scan(fy, a, w, fn=other_step)[-1]])
    assert [len(g) for g in loop_groups(fgraph)] == [2, 2]
    got = outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=2)
    want = sum(_other_trace(numpy_trace(v, 0.3, 0.9), 0.3, 0.9)[-1] for v in X[:2])
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    (fn,) = {c.inputs[0] for c in calls(fgraph)}
    inner = [n for n in scope_toposort(body_of(fn).outputs) if isinstance(n.op, Call)]
    assert len(calls(fgraph)) == 2 and len(inner) == 1 and not loops(fgraph)


def test_read_outside():
    """A client is outside a copy's region unless a node of that copy's region: by copy number, for
    groups of more than 256 loops too (numbers beyond CPython's cached ints)."""
    region = _Region.__new__(_Region)
    p = pt.dvector("p")
    inside, outside = (p + 1.0).owner, (p * 2.0).owner
    region.where = {inside: (3, int("300"))}
    assert not region._read_outside(inside, int("300"))
    assert region._read_outside(inside, 299) and region._read_outside(inside, 301) and region._read_outside(outside, 300)
    fgraph = FunctionGraph([p], [p + 1.0], clone=False)
    ((output_node, _),) = fgraph.clients[fgraph.outputs[0]]
    assert region._read_outside(output_node, 0)


def three_states(x_t: Any, s: Any, t: Any, u: Any, w: Any) -> Any:
    return s * w + x_t, t * w - x_t, u + s * x_t


def test_readers_of_other_tuples_are_not_alike():
    """Three-state loops; each copy multiplies its first state's final by another state's final, the
    first copy by one, the second by the other: the products are not one computation, and stay outside."""
    x, y, a, w = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w")

    def loop(v: Variable) -> Any:
        return pytensor.scan(three_states, sequences=[v], outputs_info=[a, a, a], non_sequences=[w], return_updates=False)

    for swap in (False, True):
        (sx, tx, ux), (sy, ty, uy) = loop(x), loop(y)
        first, second = (ux, ty) if not swap else (tx, uy)
        fgraph = lifted([x, y, a, w], [sx[-1] * first[-1] + sy[-1] * second[-1], tx[-1] + ux[-1] + ty[-1] + uy[-1]])
        region = _Region(*_pair_nodes(fgraph))
        assert "Mul" not in [str(t[0].op) for t in region.tuples]
        outlined(fgraph, [X[0], X[1], 0.3, 0.9], expect=1)


def _pair_nodes(fgraph: FunctionGraph) -> tuple[FunctionGraph, list[Apply]]:
    (group,) = loop_groups(fgraph)
    return fgraph, group
