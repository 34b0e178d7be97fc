"""Scope-aware instantiation and shapes without running, called directly (issue 47).

`innergraph.core.instantiate` substitutes a body's params by values (`substitute`,
`instantiate`, `copy_scope`, `private_fgraph`), fits arguments to param types
(`fit_arguments`), shares nodes and small constants with a graph (`NodeTable`) and
computes the shapes of a body's outputs and of a loop's carried values without running
them (`step_output_shapes`, `carried_shapes`, `same_shape`). Every other test reaches it
through compiled functions; these call each function on small graphs that are never
compiled but by the py linker (a fault planted in the module fails here in seconds), and
compare with literal numbers, NumPy, or the graph it should be (`equal_computations`,
identity where the module promises sharing).
"""

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.type import RandomGeneratorType
from pytensor.tensor.shape import SpecifyShape

from innergraph import ArityError, BodyTypeError, InnerGraph, InnerGraphType, body_of, inner_graph
from innergraph.core import compat
from innergraph.core import instantiate as module
from innergraph.core.instantiate import (
    LARGE_CONSTANT,
    NodeTable,
    carried_shapes,
    copy_scope,
    fit_arguments,
    instantiate,
    is_large_constant,
    is_small_tensor_constant,
    private_fgraph,
    same_shape,
    small_constant_key,
    step_output_shapes,
    substitute,
    substitute_shapes,
)
from typed import call, param, recording

dscalar = pt.dscalar().type
dvector = pt.dvector().type
lscalar = pt.lscalar().type
vector3 = pt.TensorType("float64", shape=(3,))


def _values(outputs: list[Any], inputs: list[Variable], *args: Any) -> list[Any]:
    """``outputs`` evaluated on ``args`` by the py linker, without rewrites."""
    fn = pytensor.function(inputs, outputs, mode=Mode(linker="py", optimizer="None"), on_unused_input="ignore")
    return [np.asarray(v) for v in fn(*args)]


# --- substitute ---------------------------------------------------------------------------


def test_substitute_rebuilds_only_what_reads_a_replaced_variable():
    a, x, y, x2, y2 = (pt.dvector(n) for n in ("a", "x", "y", "x2", "y2"))
    untouched = pt.exp(a)  # first in the walk: the rebuild goes on past it
    both = x * y  # every input replaced
    out = untouched + both
    (new,) = substitute([out], {x: x2, y: y2})
    assert new is not out and out.owner.inputs == [untouched, both]  # the caller's graph is left
    assert new.owner.inputs[0] is untouched  # shared, not copied
    assert new.owner.inputs[1].owner.inputs == [x2, y2]
    ins = [np.array([0.5, -1.0]), np.array([2.0, 3.0]), np.array([-4.0, 0.25])]
    (got,) = _values([new], [a, x2, y2], *ins)
    np.testing.assert_allclose(got, np.exp(ins[0]) + ins[1] * ins[2])
    assert substitute([out], {}) == [out]


def test_substitute_fits_a_replacement_to_the_type_it_replaces():
    """A vector of unknown length in place of a length-3 one is fitted (`specify_shape`): the node keeps its type."""
    x3, y = vector3("x3"), pt.dvector("y")
    (new,) = substitute([pt.exp(x3)], {x3: y})
    assert new.type == vector3
    assert isinstance(new.owner.inputs[0].owner.op, SpecifyShape) and new.owner.inputs[0].owner.inputs[0] is y
    (got,) = _values([new], [y], np.array([0.0, 1.0, 2.0]))
    np.testing.assert_allclose(got, np.exp([0.0, 1.0, 2.0]))


def test_substitute_shapes_keeps_missing_shapes_and_their_lengths():
    x, z, n, m = pt.dvector("x"), pt.dvector("z"), pt.lscalar("n"), pt.lscalar("m")
    shapes = substitute_shapes([(x.shape[0], n + 1), None, (), (n,)], {x: z, n: m})
    assert shapes[1] is None and shapes[2] == () and shapes[3] == (m,)
    assert len(shapes) == 4 and len(shapes[0]) == 2
    assert equal_computations(list(shapes[0]), [z.shape[0], m + 1])


# --- constants ----------------------------------------------------------------------------


def test_large_constants_have_more_than_64_elements():
    assert LARGE_CONSTANT == 64
    at, above, one = pt.constant(np.zeros(64)), pt.constant(np.zeros(65)), pt.constant(np.zeros(1))
    assert [is_large_constant(c) for c in (at, above, one, pt.constant(2.0))] == [False, True, False, False]
    assert [is_small_tensor_constant(c) for c in (at, above, one, pt.constant(2.0))] == [True, False, True, True]
    # not constants, or not tensors: neither
    for value in (pt.dvector("v"), 3, ps.constant(2.0), pytensor.shared(np.zeros(100))):
        assert not is_large_constant(value)
        assert not is_small_tensor_constant(value)


def test_small_constant_key_is_type_and_bytes():
    two = np.float64(2.0)
    assert small_constant_key(pt.constant(two)) == small_constant_key(pt.constant(two))
    assert small_constant_key(pt.constant(np.float64(0.0))) != small_constant_key(pt.constant(np.float64(-0.0)))
    assert small_constant_key(pt.constant(np.float32(2.0))) != small_constant_key(pt.constant(two))


def test_node_table_shares_equal_small_constants():
    table = NodeTable()
    first, again, other = pt.constant(2.0), pt.constant(2.0), pt.constant(3.0)
    assert table.constant(first) is first
    assert table.constant(again) is first
    assert table.constant(other) is other
    big, big_again = pt.constant(np.ones(65)), pt.constant(np.ones(65))
    assert table.constant(big) is big and table.constant(big_again) is big_again  # never compared by value


def test_node_table_shares_the_graphs_constants():
    x = pt.dvector("x")
    held = pt.constant(2.0)
    fg = FunctionGraph([x], [x * held + pt.exp(x)], clone=False)
    table = NodeTable(fg)
    assert table.constant(pt.constant(2.0)) is held
    fresh = pt.constant(5.0)
    assert table.constant(fresh) is fresh


# --- NodeTable.node -----------------------------------------------------------------------


class _Made:
    """``make`` for `NodeTable.node`: builds ``op(*inputs)`` and counts the calls."""

    def __init__(self, op: Any, inputs: list[Variable]):
        self.op, self.inputs, self.calls = op, inputs, 0

    def __call__(self) -> Apply:
        self.calls += 1
        return self.op.make_node(*self.inputs)


def test_node_table_without_a_graph_records_what_it_made():
    x, y = pt.dvector("x"), pt.dvector("y")
    table = NodeTable()
    make = _Made(pt.add, [x, y])
    first = table.node(pt.add, [x, y], make)
    assert make.calls == 1 and first.inputs == [x, y]
    assert table.node(pt.add, [x, y], make) is first and make.calls == 1
    assert table.node(pt.add, [x, y], make, [o.type for o in first.outputs]) is first and make.calls == 1
    other = _Made(pt.mul, [x, y])
    assert table.node(pt.mul, [x, y], other).op == pt.mul and other.calls == 1


def test_node_table_finds_the_graphs_node_by_an_equal_op():
    x, y, z = pt.dvector("x"), pt.dvector("y"), pt.dvector("z")
    wrong = x + z  # the same Op on other inputs, first among x's clients
    right = x + y
    fg = FunctionGraph([x, y, z], [wrong, right, y * 2, pt.exp(y)], clone=False)
    table = NodeTable(fg)
    add = Elemwise(ps.add)  # equal to pt.add, another object
    assert add == pt.add and add is not pt.add
    make = _Made(add, [x, y])
    assert table.node(add, [x, y], make) is right.owner and make.calls == 0
    assert table.node(add, [x, y], make) is right.owner and make.calls == 0  # now recorded
    # the types asked for are the node's: found; other types: made
    assert table.node(add, [x, y], make, [dvector]) is right.owner and make.calls == 0
    made = table.node(pt.sub, [x, y], _Made(pt.sub, [x, y]))
    assert made.op == pt.sub and made not in fg.apply_nodes
    again = NodeTable(fg)
    assert again.node(add, [x, y], make, [vector3]) is not right.owner and make.calls == 1
    # an input the graph does not hold: no node of the graph reads it
    new = pt.dvector("new")
    assert NodeTable(fg).node(add, [x, new], _Made(add, [x, new])).inputs == [x, new]


def test_node_table_compares_the_number_of_inputs():
    x, y, z = pt.dvector("x"), pt.dvector("y"), pt.dvector("z")
    two, three = pt.add(x, y), pt.add(x, y, z)
    fg = FunctionGraph([x, y, z], [two, three, pt.exp(z)], clone=False)
    for inputs, held in (([x, y], two), ([x, y, z], three)):
        make = _Made(pt.add, inputs)
        assert NodeTable(fg).node(pt.add, inputs, make) is held.owner and make.calls == 0
    # x's clients hold add(x, y) first: a call of add on x, z only is new
    made = NodeTable(fg).node(pt.add, [x, z], _Made(pt.add, [x, z]))
    assert made.inputs == [x, z] and made not in fg.apply_nodes
    # a node whose inputs begin with the ones asked for is not theirs
    longer = FunctionGraph([x, y, z], [pt.add(x, y, z)], clone=False)
    made = NodeTable(longer).node(pt.add, [x, y], _Made(pt.add, [x, y]))
    assert made.inputs == [x, y] and made not in longer.apply_nodes


def test_node_table_finds_a_node_of_300_inputs():
    """Beyond CPython's cached small ints, equal lengths are other int objects."""
    xs = [pt.dscalar(f"x{i}") for i in range(300)]
    total = pt.add(*xs)
    fg = FunctionGraph(xs, [total], clone=False)
    make = _Made(pt.add, xs)
    assert NodeTable(fg).node(pt.add, xs, make) is total.owner and make.calls == 0


class _NotWalked(list):
    """A client list the lookup must not walk (a shorter one holds the node)."""

    def __iter__(self):
        raise AssertionError("walked a longer client list than needed")


def test_node_table_walks_the_shortest_client_list():
    x, y = pt.dvector("x"), pt.dvector("y")
    both_add, both_mul = x + y, y * x
    fillers = [x + 1, x * 3, x - 2]
    long = _NotWalked([(f.owner, 0) for f in fillers] + [(both_add.owner, 0), (both_mul.owner, 1)])
    short = [(both_add.owner, 1), (both_mul.owner, 0)]
    graph: Any = SimpleNamespace(clients={x: long, y: short})
    for op, inputs, held in ((pt.add, [x, y], both_add), (pt.mul, [y, x], both_mul)):
        make = _Made(op, inputs)
        assert NodeTable(graph).node(op, inputs, make) is held.owner and make.calls == 0


# --- copy_scope and private_fgraph --------------------------------------------------------


def _nested() -> tuple[Any, Any]:
    """A body ``p0 * 2 + sin(p1)`` whose sine is a nested function, and that nested function."""
    inner = inner_graph(lambda u: pt.sin(u), [dscalar]).function
    outer = inner_graph(lambda u, v: u * 2.0 + call(inner, v), [dscalar, dscalar]).function
    return outer, inner


def test_copy_scope_copies_every_node_and_shares_leaves():
    outer, _ = _nested()
    body = body_of(outer)
    a, b = pt.dscalar("a"), pt.dscalar("b")
    p0, p1 = param(0, dscalar), param(1, dscalar)
    (copy,) = copy_scope(body.outputs, {p0: a, p1: b})
    old = {n for n in pytensor.graph.traversal.applys_between([p0, p1], body.outputs)}
    new = set(pytensor.graph.traversal.applys_between([a, b], [copy]))
    assert new and not (old & new)
    old_leaves = {v for v in graph_inputs(body.outputs) if isinstance(v, Constant)}
    new_leaves = {v for v in graph_inputs([copy]) if isinstance(v, Constant)}
    assert old_leaves == new_leaves  # the constants and the nested function, shared
    assert {v for v in graph_inputs([copy]) if not isinstance(v, Constant)} == {a, b}
    (got,) = _values([copy], [a, b], 1.5, 0.25)
    np.testing.assert_allclose(got, 1.5 * 2.0 + np.sin(0.25))
    # no leaves: a copy of the nodes over the same params
    (same,) = copy_scope(body.outputs)
    assert same is not body.outputs[0] and equal_computations([same], list(body.outputs))


def test_copy_scope_fits_a_leaf_to_the_type_it_replaces():
    x3, y = vector3("x3"), pt.dvector("y")
    out = pt.exp(x3) * 2.0
    for table in (None, NodeTable()):
        (copy,) = copy_scope([out], {x3: y}, table)
        assert copy.type == vector3
        (got,) = _values([copy], [y], np.array([0.0, 1.0, 2.0]))
        np.testing.assert_allclose(got, np.exp([0.0, 1.0, 2.0]) * 2.0)


def test_copy_scope_through_a_table_reuses_the_graphs_nodes_and_constants():
    x = pt.dvector("x")
    two = pt.constant(2.0)
    held = pt.exp(x) * two
    fg = FunctionGraph([x], [held], clone=False)
    p = param(0, dvector)
    (copy,) = copy_scope([pt.exp(p) * pt.constant(2.0) + 1.0], {p: x}, NodeTable(fg))
    assert copy.owner.inputs[0] is held  # exp(x) * 2 is the graph's: its constant 2.0 is the graph's
    assert copy.owner not in fg.apply_nodes
    (got,) = _values([copy], [x], np.array([0.0, 1.0]))
    np.testing.assert_allclose(got, np.exp([0.0, 1.0]) * 2.0 + 1.0)


def test_private_fgraph_copies_the_nodes_and_shares_constants_and_nested_functions():
    outer, inner = _nested()
    body = body_of(outer)
    fg = private_fgraph(body)
    assert [v.name for v in fg.inputs] == ["p0", "p1"] and [v.type for v in fg.inputs] == [dscalar, dscalar]
    assert not set(fg.apply_nodes) & set(pytensor.graph.traversal.applys_between(list(graph_inputs(body.outputs)), body.outputs))
    body_constants = {v for v in graph_inputs(body.outputs) if isinstance(v, Constant)}
    graph_constants = {v for v in fg.variables if isinstance(v, Constant)}
    assert graph_constants == body_constants  # the very objects, nested function among them
    assert any(isinstance(v.data, type(body)) and v.data == body_of(inner) for v in graph_constants)
    before = body.outputs[0].owner.inputs
    p0: Any = fg.inputs[0]
    fg.replace(fg.outputs[0], p0 * 3.0)  # rewriting the copy in place
    assert body.outputs[0].owner.inputs == before
    (got,) = _values(list(fg.outputs), list(fg.inputs), 2.0, 0.5)
    np.testing.assert_allclose(got, 6.0)


# --- fit_arguments and instantiate --------------------------------------------------------


def test_fit_arguments_converts_each_argument_to_its_param_type():
    rng = pytensor.shared(np.random.default_rng(0))
    x = pt.dvector("x")
    fitted = fit_arguments([dscalar, vector3, RandomGeneratorType(), lscalar], [np.float64(2.5), x, rng, np.int64(4)], where="here")
    assert [v.type for v in fitted] == [dscalar, vector3, RandomGeneratorType(), lscalar]
    assert isinstance(fitted[0], Constant) and fitted[0].data == 2.5
    assert fitted[1].owner.inputs[0] is x  # specify_shape(x, 3)
    assert fitted[2] is rng
    assert isinstance(fitted[3], Constant) and fitted[3].data == 4
    many = [pt.dscalar() for _ in range(300)]
    assert fit_arguments([dscalar] * 300, many, where="here") == many


def test_fit_arguments_names_the_count_and_the_argument():
    with pytest.raises(ArityError, match=r"here: the function takes 2 arguments .*got 1"):
        fit_arguments([dscalar, dscalar], [1.0], where="here")
    with pytest.raises(ArityError, match=r"takes 2 arguments .*got 3"):
        fit_arguments([dscalar, dscalar], [1.0, 2.0, 3.0], where="here")
    with pytest.raises(ArityError, match=r"takes 1 arguments .*got 0"):
        fit_arguments([dscalar], [], where="here")
    with pytest.raises(BodyTypeError, match=r"there: argument 1 \(2.5\) has type .*float64.*param 1 has type .*int64") as caught:
        fit_arguments([dscalar, lscalar], [np.float64(1.0), np.float64(2.5)], where="there")
    assert isinstance(caught.value.__cause__, TypeError)
    with pytest.raises(BodyTypeError, match=r"argument 0 \(m\)"):
        fit_arguments([dvector], [pt.dmatrix("m")], where="there")


def test_fit_arguments_takes_where_by_keyword_only():
    x = pt.dscalar("x")
    assert fit_arguments(function_type_params=[dscalar], args=[x], where="here") == [x]
    with pytest.raises(TypeError, match="positional"):
        fit_arguments([dscalar], [x], "here")  # type: ignore[call-arg]  # on purpose


def test_instantiate_substitutes_this_scopes_params_only():
    outer, inner = _nested()
    a, b = pt.dscalar("a"), pt.dscalar("b")
    (out,) = instantiate(outer, [a, pt.constant(np.float64(0.5))])
    calls = [n for n in pytensor.graph.traversal.applys_between([a], [out]) if n.inputs and any(isinstance(v, Constant) and v.data == body_of(inner) for v in n.inputs)]
    assert calls  # the nested function is read as it is, its params untouched
    (got,) = _values([out], [a, b], 1.5, 0.0)
    np.testing.assert_allclose(got, 1.5 * 2.0 + np.sin(0.5))
    with pytest.raises(ArityError, match="instantiate"):
        instantiate(outer, [a])


# --- shapes -------------------------------------------------------------------------------

_rng_type = RandomGeneratorType()


def _step() -> Any:
    """A step ``(rng, n, v) -> (rng', normal(size=n), zeros(3) + sum(v), exp(v), v[:n])``.

    Outputs: a non-tensor, a dimension read from a param's *value*, a static one, one
    from a param's shape, one from both.
    """
    rng, n, v = param(0, _rng_type), param(1, lscalar), param(2, dvector)
    nxt, draw = pt.random.normal(0, 1, size=(n,), rng=rng, return_next_rng=True)
    outputs = [nxt, draw, pt.zeros(3) + v.sum(), pt.exp(v), v[:n] * 2.0]
    ftype = InnerGraphType([_rng_type, lscalar, dvector], [o.type for o in outputs])
    return InnerGraph(ftype).make_node(*outputs).outputs[0]


def _ints(dims: Any, inputs: list[Variable], *args: Any) -> list[int]:
    return [int(v) for v in _values(list(dims), inputs, *args)]


def test_step_output_shapes_with_every_argument():
    f = _step()
    rng, n, x = pytensor.shared(np.random.default_rng(0)), pt.lscalar("n"), pt.dvector("x")
    shapes: Any = step_output_shapes(f, [rng, n, x], [None, (), (x.shape[0],)])
    assert len(shapes) == 5 and shapes[0] is None
    assert shapes[2] == (3,) and type(shapes[2][0]) is int
    assert [len(s) for s in shapes[1:]] == [1, 1, 1, 1]
    dims = [shapes[1][0], shapes[3][0], shapes[4][0]]
    assert _ints(dims, [n, x], 2, np.zeros(5)) == [2, 5, 2]
    assert _ints(dims, [n, x], 7, np.zeros(5)) == [7, 5, 5]
    # a shape given for the generator, which has none, is not read
    again: Any = step_output_shapes(f, [rng, n, x], [(), (), (x.shape[0],)])
    assert _ints([again[1][0], again[3][0]], [n, x], 2, np.zeros(5)) == [2, 5]
    # integer dimensions, made variables
    literal: Any = step_output_shapes(f, [rng, n, x], [None, (), (4,)])
    assert _ints([literal[1][0], literal[3][0], literal[4][0]], [n], 9) == [9, 4, 4]


def test_step_output_shapes_of_per_step_params():
    """A dimension read from a per-step param's value is unknown (None); one from its shape is the argument's."""
    f = _step()
    m = pt.lscalar("m")
    n = pt.lscalar("n")
    shapes: Any = step_output_shapes(f, [None, n, None], [None, (), (m,)])
    assert shapes[0] is None and shapes[2] == (3,)
    assert shapes[3] == (m,)  # exp(v): the state's shape, the very dimension given
    assert _ints([shapes[1][0]], [n], 6) == [6]
    # v[:n] reads v's length, m, and n's value, known: min(n, m)
    assert _ints([shapes[4][0]], [n, m], 2, 5) == [2] and _ints([shapes[4][0]], [n, m], 7, 5) == [5]
    shapes = step_output_shapes(f, [None, None, None], [None, (), (m,)])
    assert shapes[1] == (None,) and shapes[3] == (m,) and shapes[4] == (None,)


def test_step_output_shapes_of_a_state_of_unknown_shape():
    """An argument's shape unknown: the shapes are inferred over the arguments, no placeholder left."""
    f = _step()
    rng, n, x = pytensor.shared(np.random.default_rng(0)), pt.lscalar("n"), pt.dvector("x")
    shapes: Any = step_output_shapes(f, [rng, n, x], [None, (), None])
    leaves = {v.name for s in shapes if s is not None for d in s if isinstance(d, Variable) for v in graph_inputs([d])}
    assert not any(name and name.startswith("d") for name in leaves), leaves
    assert _ints([shapes[1][0], shapes[3][0], shapes[4][0]], [n, x], 3, np.zeros(6)) == [3, 6, 3]
    per_step: Any = step_output_shapes(f, [None, n, None], [None, (), None])
    assert per_step[3] == (None,) and per_step[2] == (3,)


def test_step_output_shapes_infers_a_body_once(monkeypatch):
    """Known argument shapes cost a substitution into the body's cached template, not an inference; static outputs not even that."""
    f = _step()
    inferred: list[Any] = []
    real = compat.infer_output_shapes
    monkeypatch.setattr(compat, "infer_output_shapes", recording(inferred, real, whole=True))
    n, x = pt.lscalar("n"), pt.dvector("x")
    for _ in range(3):
        step_output_shapes(f, [None, n, x], [None, (), (x.shape[0],)])
    assert len(inferred) == 1
    step_output_shapes(f, [None, n, x], [None, (), None])  # an unknown shape: inferred directly
    assert len(inferred) == 2
    static = inner_graph(lambda u: pt.zeros((2, 3)) + u, [dscalar]).function
    assert step_output_shapes(static, [None], [()]) == [(2, 3)]
    assert len(inferred) == 2 and "output shape template" not in body_of(static).cache


def test_step_output_shapes_refuses_lists_of_other_lengths():
    f = _step()
    n, x = pt.lscalar("n"), pt.dvector("x")
    with pytest.raises(ValueError):
        step_output_shapes(f, [None, n, x, x], [None, (), (x.shape[0],), ()])
    with pytest.raises(ValueError):
        step_output_shapes(f, [None, n, x], [None, (), (x.shape[0], x.shape[0])])  # a vector's shape of two dimensions
    with pytest.raises(ValueError):
        step_output_shapes(f, [None, n, x], [None, (), ()])


def test_carried_shapes_keep_the_initial_shape_or_refuse():
    keeps = inner_graph(lambda v, k: (v * k, pt.exp(k)), [dvector, dscalar]).function
    m, k = pt.lscalar("m"), pt.dscalar("k")
    assert carried_shapes(keeps, [None, k], [(m,), ()], [0]) == [(m,)]
    assert carried_shapes(keeps, [None, None], [(m,), ()], [0, 1]) == [(m,), ()]
    assert carried_shapes(keeps, [None, k], [(m,), ()], []) == []
    grows = inner_graph(lambda v: pt.concatenate([v, v]), [dvector]).function
    with pytest.raises(NotImplementedError, match="carried value 0"):
        carried_shapes(grows, [None], [(m,)], [0])
    reads = inner_graph(lambda v: pt.zeros(v.sum().astype("int64")), [dvector]).function
    with pytest.raises(NotImplementedError):
        carried_shapes(reads, [None], [(m,)], [0])


def test_same_shape_dimension_by_dimension():
    x, y = pt.dvector("x"), pt.dvector("y")
    assert same_shape((3, 4), (3, 4)) and same_shape((), ())
    for a, b in (((3,), (4,)), ((4,), (3,)), ((3,), (3, 4)), ((3, 4), (3,)), (None, (3,)), ((3,), None), (None, None)):
        assert not same_shape(a, b), (a, b)
    assert same_shape((300,), (pt.constant(300),)) and same_shape((pt.constant(300),), (pt.constant(300),))
    assert same_shape((1,) * 300, (1,) * 300)
    assert same_shape((x.shape[0],), (x.shape[0],)) and same_shape((x.shape[0], 2), (pt.dvector("z").shape[0] * 0 + x.shape[0], 2)) is False
    assert same_shape((x.shape[0],), (pt.shape(x)[0],))  # an equal computation
    d = x.shape[0]
    assert same_shape((d,), (d,))
    assert not same_shape((x.shape[0],), (y.shape[0],))
    unequal: Any = (((d,), (None,)), ((None,), (d,)), ((d,), (3,)), ((3,), (d,)), ((3,), (None,)))
    for a, b in unequal:
        assert not same_shape(a, b), (a, b)
    assert not same_shape((pt.constant(1 + 2j),), (1,))  # a constant that is no integer: compared as a graph


def test_shape_of_a_type_that_fixes_it():
    assert module._static_shape(vector3) == (3,)
    assert module._static_shape(pt.TensorType("float64", shape=(3, None))) is None
    assert module._static_shape(_rng_type) is None
    assert module._static_shape(pt.dscalar().type) == ()
