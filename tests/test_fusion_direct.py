"""`innergraph.rewriting.fusion` called directly, fast (issue 47's mutation run).

``tests/test_rewrites.py`` and ``tests/test_interning.py`` reach body fusion through
compiled functions. These build bodies from explicit params (a lone elementwise node, two,
none, a lone ``Composite`` with an output nobody reads, a reduction of an elementwise
result and of a param, a call of a body nested in another) and call `_fusion_may_apply`
against a literal table, `fuse_body` (what the fused body holds: counts of elementwise
nodes and of a ``Composite``'s outputs; identity where a body is kept, given back from its
cache or from the memo, or interned; whether the copy is marked rewritten) and the pass
`fuse_bodies` on FunctionGraphs of calls (its count, which function inputs it replaced
and which it left as they were, by identity), and the values of the fused graphs, run by
the py linker without rewrites, against NumPy.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar import Composite, float64
from pytensor.tensor.elemwise import Elemwise

from innergraph.core.graph import scope_toposort
from innergraph.core.types import Body, is_rewritten, mark_rewritten
from innergraph.ops.call import Call
from innergraph.rewriting.fusion import _fusion_may_apply, fuse_bodies, fuse_body
from consumer_nodes import call_node, evaluate, function
from typed import param

V: Any = pt.dvector().type
P0: Any = param(0, V)
X: Any = pt.dvector("x")
XV = np.array([0.5, -1.0, 2.0, 0.25])

_A: Any = float64("a")
#: a Composite of two outputs; the bodies below read its first only (fusion prunes the second)
TWO_OUTPUTS = Composite([_A], [_A + 1.0, _A * 2.0])


def _body(*outputs: Any) -> Body:
    """The body of one vector param computing ``outputs`` (from `P0`)."""
    data = cast(Constant, function(list(outputs), [V])).data
    assert isinstance(data, Body)
    return data


def _composite(x: Any) -> Any:
    """`TWO_OUTPUTS` applied to ``x``: its first output."""
    return cast(list[Any], Elemwise(TWO_OUTPUTS)(x))[0]


def _chain() -> Body:
    return _body(pt.exp(P0) * 2.0)


def _nested() -> Body:
    """A body whose only node is a call of `_chain`'s body (no elementwise node of its own)."""
    return _body(call_node([pt.exp(P0) * 2.0], [P0]).outputs[0])


def _elemwise(body: Body) -> list[Any]:
    return [n for n in scope_toposort(body.outputs) if isinstance(n.op, Elemwise)]


def _nested_body(body: Body) -> Body:
    (node,) = [n for n in scope_toposort(body.outputs) if isinstance(n.op, Call)]
    assert isinstance(node.inputs[0], Constant)
    return node.inputs[0].data


def _run(body: Body) -> np.ndarray:
    """``body`` called on `XV` (py linker, no rewrites)."""
    call = Call().make_node(Constant(body.type, body), X).outputs[0]
    return evaluate([X], [call], [XV])[0]


# ---- which bodies fusion may change


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: _body(pt.exp(P0)), False),  # one elementwise node
        (lambda: _body(P0.sum()), False),  # none, and a reduction of a param
        (lambda: _body(pt.exp(P0.sum())), False),  # one, reading a reduction: the reduction reads a param
        (lambda: _body(pt.exp(P0), P0.sum()), False),  # one, beside a reduction of a param
        (lambda: _body(pt.exp(P0) * 2.0), True),  # two, chained
        (lambda: _body(pt.exp(P0), pt.sin(P0)), True),  # two siblings
        (lambda: _body(_composite(P0)), True),  # one, a Composite
        (lambda: _body(pt.exp(P0).sum()), True),  # a reduction of an elementwise result
        (_nested, True),  # no elementwise node, a nested body
    ],
    ids=["one", "none", "one-over-reduction", "one-beside-reduction", "chain", "siblings", "composite", "reduction", "nested"],
)
def test_fusion_may_apply(make: Any, expected: bool) -> None:
    assert _fusion_may_apply(make()) is expected


# ---- fuse_body


@pytest.mark.parametrize(
    "make",
    [lambda: _body(pt.exp(P0)), lambda: _body(P0.sum()), lambda: _body(pt.exp(P0.sum()))],
    ids=["one", "none", "one-over-reduction"],
)
def test_a_body_fusion_cannot_change_is_kept_as_it_is(make: Any) -> None:
    body = make()
    assert fuse_body(body) is body
    assert not is_rewritten(body)


def test_a_chain_becomes_one_composite_of_the_same_values() -> None:
    chain = _chain()
    fused = fuse_body(chain)
    assert fused is not chain and fused != chain
    (node,) = _elemwise(fused)
    assert isinstance(node.op.scalar_op, Composite)
    assert len(_elemwise(chain)) == 2  # the body itself is left as it was
    assert fused.type == chain.type
    np.testing.assert_allclose(_run(fused), np.exp(XV) * 2.0)
    assert not is_rewritten(fused)


def test_a_lone_composite_loses_the_output_nobody_reads() -> None:
    body = _body(_composite(P0))
    fused = fuse_body(body)
    (before,) = _elemwise(body)
    (after,) = _elemwise(fused)
    assert (before.op.scalar_op.nout, after.op.scalar_op.nout) == (2, 1)
    np.testing.assert_allclose(_run(fused), XV + 1.0)


def test_a_reduction_of_an_elementwise_result_is_copied_unchanged() -> None:
    # fusing a reduction into its elementwise input is C-only: the scope-safe sequence
    # leaves it, but the body is one fusion may change, so it is copied
    body = _body(pt.exp(P0).sum())
    fused = fuse_body(body)
    assert fused is not body and fused == body


def test_a_nested_body_is_fused_in_its_own_scope() -> None:
    outer = _nested()
    fused = fuse_body(outer)
    assert fused is not outer
    assert len(_elemwise(_nested_body(outer))) == 2
    inner = _nested_body(fused)
    (node,) = _elemwise(inner)
    assert isinstance(node.op.scalar_op, Composite)
    assert inner is fuse_body(_nested_body(outer))  # the nested body's own fused copy, from its cache
    np.testing.assert_allclose(_run(fused), np.exp(XV) * 2.0)


def test_fusion_is_cached_on_the_body_and_a_fused_body_is_given_back() -> None:
    chain = _chain()
    fused = fuse_body(chain)
    assert fuse_body(chain) is fused
    assert fuse_body(fused) is fused
    assert fuse_body(fused, {}) is fused


def test_the_memo_gives_an_equal_body_the_first_ones_copy() -> None:
    first, second = _chain(), _chain()
    assert first == second and first is not second
    memo: dict[Body, Body] = {}
    fused = fuse_body(first, memo)
    assert memo == {first: fused}
    assert fuse_body(second, memo) is fused
    assert fuse_body(second) is not fused  # without the memo: its own copy, from its own cache


def test_a_rewritten_body_gives_a_rewritten_interned_copy() -> None:
    first, second = mark_rewritten(_chain()), mark_rewritten(_chain())
    fused = fuse_body(first)
    assert is_rewritten(fused) and fused is not first
    assert fuse_body(second) is fused  # its own cache is empty: the copy is interned
    assert fuse_body(fused) is fused
    plain = fuse_body(_chain())
    assert not is_rewritten(plain) and plain is not fused and plain == fused


def test_a_body_marked_rewritten_after_its_fusion_is_fused_again() -> None:
    chain = _chain()
    plain = fuse_body(chain)
    again = fuse_body(mark_rewritten(chain))
    assert again is not plain and is_rewritten(again) and not is_rewritten(plain)


# ---- fuse_bodies


def _calls(*bodies: Body) -> tuple[FunctionGraph, list[Variable]]:
    """A FunctionGraph summing a call of each body on `X`, and the calls' function inputs."""
    nodes = [Call().make_node(Constant(b.type, b), X) for b in bodies]
    total: Any = nodes[0].outputs[0]
    for node in nodes[1:]:
        total = total + node.outputs[0]
    fgraph = FunctionGraph([X], [total], clone=False)
    return fgraph, [n.inputs[0] for n in nodes]


def _functions(fgraph: FunctionGraph) -> list[Variable]:
    return [n.inputs[0] for n in scope_toposort(fgraph.outputs) if isinstance(n.op, Call)]


def test_fuse_bodies_replaces_only_the_bodies_it_changes() -> None:
    lone, chain = _body(pt.exp(P0)), _chain()
    fgraph, (lone_fn, chain_fn) = _calls(lone, chain)
    assert fuse_bodies(fgraph) == 1
    functions = _functions(fgraph)
    assert lone_fn in functions and chain_fn not in functions
    (new,) = [f for f in functions if f is not lone_fn]
    assert isinstance(new, Constant) and new.data is fuse_body(chain)
    assert new.type == chain_fn.type
    (out,) = evaluate([X], fgraph.outputs, [XV])
    np.testing.assert_allclose(out, np.exp(XV) + np.exp(XV) * 2.0)


def test_fuse_bodies_replaces_a_body_by_an_equal_copy() -> None:
    # a body fusion may change but leaves equal (a reduction of an elementwise result, a
    # call of a body that stays) is replaced by its copy all the same: a new body, counted
    reduction, outer = _body(pt.exp(P0).sum()), _body(call_node([pt.exp(P0)], [P0]).outputs[0])
    fgraph, functions = _calls(reduction, outer)
    assert fuse_bodies(fgraph) == 2
    new = _functions(fgraph)
    assert not set(new) & set(functions)
    assert [f.data for f in new if isinstance(f, Constant)] == [reduction, outer]
    assert all(isinstance(f, Constant) and f.data is fuse_body(b) for f, b in zip(new, (reduction, outer), strict=True))


def test_fuse_bodies_counts_each_body_and_shares_an_equal_ones_copy() -> None:
    first, second, nested = _chain(), _chain(), _nested()
    fgraph, _ = _calls(first, second, nested)
    assert fuse_bodies(fgraph) == 3
    a, b, c = (f.data for f in _functions(fgraph) if isinstance(f, Constant))
    assert a is b  # one memo for the pass: the equal body gets the first one's copy
    assert len(_elemwise(a)) == 1 and _nested_body(c) is a
    (out,) = evaluate([X], fgraph.outputs, [XV])
    np.testing.assert_allclose(out, 3 * np.exp(XV) * 2.0)


def test_fuse_bodies_of_a_graph_fusion_cannot_change_is_zero() -> None:
    lone = _body(pt.exp(P0))
    fgraph, functions = _calls(lone, lone)
    assert fuse_bodies(fgraph) == 0
    assert _functions(fgraph) == functions
