"""`innergraph.rewriting.outlined` called directly, fast (issue 47's mutation run).

``tests/test_shared_work.py`` reaches outlined work through the push-outs of compiled
loops. These call `readers` on FunctionGraphs of for-loops and while loops built from
explicit bodies, one function read by several loops and by a call (which is no loop),
against literal counts; and `outline` on templates over stand-ins some of which they do
not read, of one output and of two, and of constants only: which stand-ins become params
(`used`, the body's param types), the body it builds (`equal_computations` with the
template), the calls `apply` makes (one function for every application, the arguments
picked by identity), the values, run by the py linker without rewrites, against NumPy,
and the error on a template that reads a variable no consumer binds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant, equal_computations
from pytensor.graph.fg import FunctionGraph

from innergraph.core.graph import body_of
from innergraph.ops.call import Call
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.rewriting.outlined import Outline, outline, readers
from consumer_nodes import call_node, evaluate, function
from typed import param

D: Any = pt.dscalar().type
V: Any = pt.dvector().type
S0: Any = param(0, D)
X: Any = pt.dscalar("x")
Y: Any = pt.dscalar("y")
N: Any = pt.lscalar("n")


# ---- readers


def _fori(fn: Any, init: Any) -> Any:
    """A for-loop of `N` steps of ``fn`` over one carry."""
    return ForiLoop(0, 1).make_node(fn, N, init).outputs[0]


def test_readers_counts_the_loops_of_each_function() -> None:
    shared, alone = function([S0 * 0.5], [D]), function([S0 + 1.0], [D])
    cond, step = function([S0 < 10.0], [D]), function([S0 * 2.0, S0 < 5.0], [D])
    while_out = WhileLoop(1, 0, 0).make_node(cond, step, Y).outputs[0]
    called = Call().make_node(shared, X).outputs[0]  # a call is no loop: not counted
    outs = [_fori(shared, X) + _fori(shared, Y) + _fori(alone, X) + while_out + called]
    fgraph = FunctionGraph([X, Y, N], outs, clone=False)
    assert readers(fgraph) == {shared: 2, alone: 1, cond: 1, step: 1}


def test_readers_of_a_graph_of_calls_only_is_empty() -> None:
    out = call_node([S0 * 0.5], [X]).outputs[0] + pt.exp(X)
    assert readers(FunctionGraph([X], [out], clone=False)) == {}


def test_readers_of_unfolded_functions() -> None:
    fn = function([S0 * 0.5], [D], fold=False)
    fgraph = FunctionGraph([X, Y, N], [_fori(fn, X) * _fori(fn, Y)], clone=False)
    assert readers(fgraph) == {fn: 2}


# ---- outline


def test_an_outline_takes_only_the_stand_ins_its_template_reads() -> None:
    a, b, c = pt.dscalar("a"), pt.dvector("b"), pt.dscalar("c")
    template = [pt.exp(a) * c + 1.0]
    work = outline(template, [a, b, c])
    assert isinstance(work, Outline)
    assert work.used == [0, 2]
    body = body_of(work.function)
    assert list(body.param_types) == [D, D]
    expected = [pt.exp(param(0, D)) * param(1, D) + 1.0]
    assert equal_computations(list(body.outputs), expected)
    u, v = pt.dscalar("u"), pt.dscalar("v")
    (out,) = work.apply([u, pt.dvector("unused"), v])
    assert isinstance(out.owner.op, Call)
    assert out.owner.inputs[0] is work.function and out.owner.inputs[1:] == [u, v]
    (value,) = evaluate([u, v], [out], [0.5, -2.0])
    np.testing.assert_allclose(value, np.exp(0.5) * -2.0 + 1.0)


def test_every_application_calls_the_one_function() -> None:
    a, b = pt.dscalar("a"), pt.dscalar("b")
    work = outline([a - b], [a, b])
    assert work.used == [0, 1]
    (first,) = work.apply([X, Y])
    (second,) = work.apply([Y, X])
    assert first.owner.inputs[0] is second.owner.inputs[0] is work.function
    assert (first.owner.inputs[1:], second.owner.inputs[1:]) == ([X, Y], [Y, X])
    values = evaluate([X, Y], [first, second], [3.0, 1.25])
    np.testing.assert_allclose(values, [1.75, -1.75])


def test_a_template_of_two_outputs_gives_two() -> None:
    a, b = pt.dvector("a"), pt.dscalar("b")
    work = outline([a * b, a.sum()], [b, a])
    assert work.used == [0, 1]
    assert list(body_of(work.function).param_types) == [D, V]
    xs = pt.dvector("xs")
    outs = work.apply([X, xs])
    assert isinstance(outs, list) and len(outs) == 2
    assert outs[0].owner is outs[1].owner  # one call
    product, total = evaluate([X, xs], outs, [2.0, np.array([1.0, 2.5, -1.0])])
    np.testing.assert_allclose(product, [2.0, 5.0, -2.0])
    np.testing.assert_allclose(total, 2.5)


def test_a_template_of_constants_takes_no_stand_in() -> None:
    a = pt.dscalar("a")
    work = outline([pt.constant(2.0) * 3.0], [a])
    assert work.used == []
    assert list(body_of(work.function).param_types) == []
    (out,) = work.apply([X])
    assert out.owner.inputs == [work.function]
    (value,) = evaluate([], [out], [])
    np.testing.assert_allclose(value, 6.0)


def test_a_template_reading_an_unbound_variable_is_refused() -> None:
    a, free = pt.dscalar("a"), pt.dscalar("free")
    with pytest.raises(AssertionError, match="no consumer binds"):
        outline([a + free], [a])


def test_the_function_is_a_fresh_unfolded_variable() -> None:
    a = pt.dscalar("a")
    work = outline([a * 2.0], [a])
    assert not isinstance(work.function, Constant)
    assert equal_computations(list(body_of(work.function).outputs), [S0 * 2.0])
