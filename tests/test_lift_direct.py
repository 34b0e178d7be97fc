"""`innergraph.rewriting.lift` called directly, fast (issue 47's mutation run).

``tests/test_remerge.py``, ``tests/test_inline_args.py`` and ``tests/test_rewrites.py``
run `lift_native` on loops they compile; `fold_bodies` and `lower_consumers` are reached
only through compiled functions. These build FunctionGraphs of calls of explicit bodies
(folded or not, one nested in another), of PyTensor's own Scans, and of both, and call
`mark_lifted` / `was_lifted` (through a pickle too), `lift_native` (its count against
literal ones, its rounds and whether it merges: `unfold_inner_graphs` and `merge_fully`
recorded, the twentieth round an error, the op classes it leaves, and the values against
NumPy, run by the py linker without rewrites), `lower_consumers`,
`_has_functions` against a literal table, and `fold_bodies` in graphs lifted or not: its
count, which bodies it marks rewritten, the large and the small constants it makes
arguments and the one function constant equal bodies share afterwards, and the body an
earlier compilation interned.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan

from innergraph.core.graph import InnerGraph
from innergraph.core.types import Body, is_rewritten
from innergraph.ops.call import Call
from innergraph.ops.scan import Scan
from innergraph.rewriting import lift
from innergraph.rewriting.lift import _has_functions, fold_bodies, lift_native, lower_consumers, mark_lifted, was_lifted
from consumer_nodes import call_node, evaluate, function
from typed import param, recording

V: Any = pt.dvector().type
D: Any = pt.dscalar().type
P0: Any = param(0, V)
S0: Any = param(0, D)
X: Any = pt.dvector("x")
Y: Any = pt.dscalar("y")
XV = np.array([0.5, -1.0, 2.0, 0.25])
YV = 0.75
BIG = np.arange(100.0)


def _ops(fgraph: FunctionGraph) -> list[type]:
    return [type(n.op) for n in fgraph.toposort()]


def _count(fgraph: FunctionGraph, cls: type) -> int:
    return sum(isinstance(n.op, cls) for n in fgraph.apply_nodes)


def _loop(x: Any) -> Any:
    """PyTensor's own Scan: three steps of ``s * 0.5 + 1`` from ``x``, its last."""
    return pytensor.scan(lambda s: s * 0.5 + 1.0, outputs_info=[x], n_steps=3, return_updates=False)[-1]


def _looped(xv: np.ndarray) -> np.ndarray:
    for _ in range(3):
        xv = xv * 0.5 + 1.0
    return xv


def _call(*outputs: Any, fold: bool = True) -> Any:
    """A call on `X` of the body of one vector param computing ``outputs`` (from `P0`)."""
    return call_node(list(outputs), [X], fold=fold).outputs[0]


def _functions(fgraph: FunctionGraph) -> list[Variable]:
    return [n.inputs[0] for n in fgraph.toposort() if isinstance(n.op, Call)]


def _bodies(fgraph: FunctionGraph) -> list[Body]:
    return [f.data for f in _functions(fgraph) if isinstance(f, Constant)]


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The graphs `lift_native` hands to `merge_fully`."""
    calls: list[Any] = []
    monkeypatch.setattr(lift, "merge_fully", recording(calls, lift.merge_fully))
    return calls


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The graphs of `lift_native`'s rounds (its calls of `unfold_inner_graphs`); a twentieth round raises.

    The bound turns a fixpoint loop that never ends (a mutant's) into a failure at once.
    """
    calls: list[Any] = []
    original = lift.unfold_inner_graphs

    def unfold(fgraph: FunctionGraph, reason: str) -> int:
        calls.append(fgraph)
        if len(calls) >= 20:
            raise RuntimeError("lift_native: twenty rounds")
        return original(fgraph, reason=reason)

    monkeypatch.setattr(lift, "unfold_inner_graphs", unfold)
    return calls


# ---- marking


def test_a_graph_is_lifted_once_marked() -> None:
    fgraph = FunctionGraph([X], [pt.exp(X)], clone=False)
    assert was_lifted(fgraph) is False
    mark_lifted(fgraph)
    assert was_lifted(fgraph) is True
    assert vars(fgraph)["_innergraph_lifted"] is True  # in the graph's __dict__, which a pickle keeps
    assert was_lifted(pickle.loads(pickle.dumps(fgraph))) is True
    unmarked = FunctionGraph([X], [pt.exp(X)], clone=False)
    assert was_lifted(pickle.loads(pickle.dumps(unmarked))) is False


# ---- lift_native


def test_lifting_a_graph_without_bodies_changes_nothing(merges: list[Any], rounds: list[Any]) -> None:
    fgraph = FunctionGraph([X], [pt.exp(X) + pt.exp(X)], clone=False)
    before = _ops(fgraph)
    assert lift_native(fgraph) == 0
    assert rounds == [fgraph]  # one round, which finds nothing
    assert _ops(fgraph) == before and merges == []
    assert was_lifted(fgraph)


def test_lifting_unfolds_a_folded_call(merges: list[Any], rounds: list[Any]) -> None:
    # one body came in: no merge, so the two exp(x) of the outer graph stay two
    fgraph = FunctionGraph([X], [_call(pt.exp(P0) * 2.0) + pt.exp(X) + pt.exp(X)], clone=False)
    assert lift_native(fgraph) == 1
    assert len(rounds) == 2
    assert merges == [] and was_lifted(fgraph)
    (function,) = _functions(fgraph)
    assert not isinstance(function, Constant) and isinstance(function.owner.op, InnerGraph)
    (out,) = evaluate([X], fgraph.outputs, [XV])
    np.testing.assert_allclose(out, np.exp(XV) * 2.0 + 2 * np.exp(XV))


def test_lifting_turns_a_native_scan_into_innergraphs(merges: list[Any]) -> None:
    fgraph = FunctionGraph([X], [_loop(X)], clone=True)
    assert lift_native(fgraph) == 1
    assert merges == []
    assert _count(fgraph, NativeScan) == 0 and _count(fgraph, Scan) == 1 and _count(fgraph, InnerGraph) == 1
    assert lower_consumers(fgraph) == 1
    assert _count(fgraph, NativeScan) == 1 and _count(fgraph, Scan) == 0 and _count(fgraph, InnerGraph) == 0
    assert lower_consumers(fgraph) == 0
    (out,) = evaluate(fgraph.inputs, fgraph.outputs, [XV])  # the round trip's values (the lifted Scan's would compile its body)
    np.testing.assert_allclose(out, _looped(XV))


def test_lifting_a_call_and_a_scan_counts_both_and_merges(merges: list[Any]) -> None:
    fgraph = FunctionGraph([X], [_call(pt.exp(P0) * 2.0) + _loop(X)], clone=True)
    assert lift_native(fgraph) == 2
    assert merges == [fgraph]
    assert _count(fgraph, InnerGraph) == 2 and _count(fgraph, NativeScan) == 0
    (out,) = evaluate(fgraph.inputs, fgraph.outputs, [XV])
    np.testing.assert_allclose(out, np.exp(XV) * 2.0 + _looped(XV))


def test_lifting_unfolds_a_nested_call_with_its_caller(merges: list[Any], rounds: list[Any]) -> None:
    # one round unfolds both, the nested body with the outer one; a second finds nothing
    inner = call_node([pt.exp(P0) * 2.0], [P0]).outputs[0]
    fgraph = FunctionGraph([X], [_call(inner + 1.0)], clone=False)
    assert lift_native(fgraph) == 2
    assert len(rounds) == 2
    assert merges == [fgraph]
    assert _count(fgraph, InnerGraph) == 2 and not any(isinstance(f, Constant) for f in _functions(fgraph))
    (out,) = evaluate([X], fgraph.outputs, [XV])
    np.testing.assert_allclose(out, np.exp(XV) * 2.0 + 1.0)


# ---- _has_functions


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: [pt.exp(X)], False),
        (lambda: [_call(pt.exp(P0))], True),  # a folded function read by a call
        (lambda: [_call(pt.exp(P0), fold=False)], True),  # an unfolded one
        (lambda: [function([pt.exp(P0)], [V], fold=False)], True),  # an output, read by no node
        (lambda: [function([pt.exp(P0)], [V]), pt.exp(X)], True),  # a folded output
    ],
    ids=["none", "folded", "unfolded", "output", "folded-output"],
)
def test_has_functions(make: Any, expected: bool) -> None:
    assert _has_functions(FunctionGraph([X], make(), clone=False)) is expected


# ---- fold_bodies


def test_folding_a_graph_without_functions_is_zero() -> None:
    for lifted in (False, True):
        fgraph = FunctionGraph([X], [pt.exp(X) + pt.exp(X)], clone=False)
        if lifted:
            mark_lifted(fgraph)
        assert fold_bodies(fgraph) == 0
        assert _count(fgraph, pt.elemwise.Elemwise) == 3  # no merge either


def test_folding_an_unlifted_graph_leaves_its_bodies_unmarked() -> None:
    big = pt.constant(BIG)
    fgraph = FunctionGraph([X], [_call((pt.sum(P0) * big).sum() + P0, fold=False)], clone=False)
    assert fold_bodies(fgraph) == 1
    assert _count(fgraph, InnerGraph) == 0
    (body,) = _bodies(fgraph)
    assert not is_rewritten(body)
    assert len(body.param_types) == 1  # its large constant stays in it
    (out,) = evaluate([X], fgraph.outputs, [XV])
    np.testing.assert_allclose(out, XV.sum() * BIG.sum() + XV)


def test_folding_a_lifted_graph_marks_its_bodies_and_outlines_large_constants() -> None:
    big = pt.constant(BIG)
    weighted = _call((pt.sum(P0) * big).sum() + P0, fold=False)
    plain = _call(pt.exp(P0) * 2.0, fold=False)
    fgraph = FunctionGraph([X], [weighted + plain], clone=False)
    mark_lifted(fgraph)
    assert fold_bodies(fgraph) == 2  # one outlined (and folded), one folded
    assert _count(fgraph, InnerGraph) == 0
    bodies = _bodies(fgraph)
    assert len(bodies) == 2 and all(is_rewritten(b) for b in bodies)
    assert sorted(len(b.param_types) for b in bodies) == [1, 2]  # the large constant is an argument now
    (out,) = evaluate([X], fgraph.outputs, [XV])
    np.testing.assert_allclose(out, XV.sum() * BIG.sum() + XV + np.exp(XV) * 2.0)


def test_folding_a_lifted_graph_merges_bodies_its_small_constants_told_apart() -> None:
    calls = [call_node([pt.exp(S0) * k], [Y], fold=False).outputs[0] for k in (2.0, 3.0)]
    fgraph = FunctionGraph([Y], [calls[0] + calls[1]], clone=False)
    mark_lifted(fgraph)
    assert fold_bodies(fgraph) == 2
    first, second = _functions(fgraph)
    assert first is second  # one body, one constant: merged
    (body,) = _bodies(fgraph)[:1]
    assert is_rewritten(body) and len(body.param_types) == 2
    (out,) = evaluate([Y], fgraph.outputs, [YV])
    np.testing.assert_allclose(out, np.exp(YV) * 5.0)


def test_folding_a_lifted_graph_without_outlines_does_not_merge() -> None:
    fgraph = FunctionGraph([X], [_call(pt.exp(P0) * 2.0, fold=False) + pt.exp(X) + pt.exp(X)], clone=False)
    mark_lifted(fgraph)
    assert fold_bodies(fgraph) == 1
    assert sum(isinstance(n.op, pt.elemwise.Elemwise) and n.inputs == [X] for n in fgraph.apply_nodes) == 2
    (body,) = _bodies(fgraph)
    assert is_rewritten(body)


def test_folding_brings_the_body_an_earlier_compilation_interned() -> None:
    folded = []
    for _ in range(2):
        fgraph = FunctionGraph([X], [_call(pt.exp(P0) * 7.0, fold=False)], clone=False)
        mark_lifted(fgraph)
        assert fold_bodies(fgraph) == 1
        folded += _bodies(fgraph)
    assert folded[0] is folded[1]
