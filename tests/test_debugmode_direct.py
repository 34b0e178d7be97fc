"""DebugMode's records of hidden variables, pruned directly (issue 47).

`innergraph.rewriting.debugmode.forget_hidden` drops from ``DebugMode``'s equivalence
tracker the variables the outer function cannot run (those reading a param, a free
variable or an inner-graph node), and rewrites each kept variable's reasons through the
forgotten ones. ``tests/test_debugmode.py`` compiles whole functions in ``DebugMode``
(seconds each); these build the tracker's records on small FunctionGraphs that are never
compiled: PyTensor's own tracker fed by ``fgraph.replace`` (a body lifted into a call,
then lowered back), and a tracker written by hand for the walks' corner cases (shared and
multi-output nodes, chains, repeats and cycles of hidden replacements). Each test runs
under an alarm: a fault planted in a walk that makes it endless fails in seconds.
"""

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.compile.debug.debugmode import _VariableEquivalenceTracker
from pytensor.graph.basic import Constant, NominalVariable, Variable
from pytensor.graph.fg import FunctionGraph

from alarm import within
from consumer_nodes import call_node, function
from innergraph.rewriting.debugmode import _Runnable, _through_hidden, forget_hidden
from typed import param


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    """Fail a test that runs over 10 s (a walk a planted fault made endless) before its stack fills memory."""
    with within(10, "the test"):
        yield


class _Tracker:
    """The two records of DebugMode's tracker that `forget_hidden` reads and writes."""

    def __init__(self, variables: list[Variable], reasons: dict[Variable, list[Any]]):
        self.all_variables_ever = list(variables)
        self.reasons = reasons


def _with_tracker(fgraph: FunctionGraph, tracker: Any) -> FunctionGraph:
    fgraph.equivalence_tracker = tracker  # type: ignore[attr-defined]  # as DebugMode sets it
    return fgraph


def _why(why: str, old: Variable, old_graph: str = "old", graph: str = "new") -> tuple[str, Variable, str, str]:
    return (why, old, old_graph, graph)


# -- _Runnable ----------------------------------------------------------------------------


def test_runnable_reads_inputs_constants_and_their_nodes():
    x, a = pt.dvector("x"), pt.dscalar("a")
    free = pt.dvector("free")  # not an input of the graph
    p = param(0, x.type)
    assert isinstance(p, NominalVariable)
    fgraph = FunctionGraph([x, a], [x * a], clone=False)
    runnable = _Runnable(fgraph)
    c = pt.constant(np.array([1.0, 2.0]))
    assert runnable(x) and runnable(a) and runnable(c)
    assert runnable(x * a) and runnable(x + c) and runnable(pt.exp(pt.sin(x) + c).sum())
    assert not runnable(free) and not runnable(p)
    assert not runnable(free + x) and not runnable(x + free) and not runnable(pt.exp(x * p))
    assert not runnable(pt.sin(free) + c)


def test_runnable_stops_at_inner_graph_nodes():
    x = pt.dvector("x")
    fgraph = FunctionGraph([x], [x * 2], clone=False)
    runnable = _Runnable(fgraph)
    unfolded = function([pt.exp(param(0, x.type))], [x.type], fold=False)
    folded = function([pt.exp(param(0, x.type))], [x.type])
    assert unfolded.owner is not None and not runnable(unfolded)  # an InnerGraph node: never runs
    assert not runnable(call_node([pt.exp(param(0, x.type))], [x], fold=False).outputs[0])
    assert isinstance(folded, Constant) and runnable(folded)
    assert runnable(call_node([pt.exp(param(0, x.type))], [x]).outputs[0])  # a call of a folded body


def test_runnable_memoizes_shared_nodes_and_every_output():
    x, free = pt.dvector("x"), pt.dvector("free")
    fgraph = FunctionGraph([x], [x * 2], clone=False)
    runnable = _Runnable(fgraph)
    shared = pt.sin(x)
    deep = shared
    for i in range(3000):  # deeper than Python's recursion: the walk keeps its own stack
        deep = deep + (shared if i % 2 else x)
    assert runnable(deep)
    assert runnable.memo[shared] and runnable.memo[x]
    first, second = pt.split(x, [1, 2], axis=0)
    hidden_first, hidden_second = pt.split(free, [1, 2], axis=0)
    assert first.owner is second.owner
    assert runnable(first) and runnable.memo[second]  # both outputs of the node
    assert not runnable(hidden_second) and runnable.memo[hidden_first] is False
    assert runnable(second) and not runnable(hidden_first)
    mixed = pt.add(x, shared, free, pt.constant(1.0))
    assert not runnable(mixed) and runnable.memo[free] is False and runnable.memo[mixed] is False
    assert runnable(x) and not runnable(free)  # asked again: from the memo


def test_runnable_of_a_variable_reached_twice_before_it_is_known():
    """``y + sin(y)`` and ``y * y``: ``y`` is on the walk's stack twice; the second time it is known, and the walk goes on."""
    x, free = pt.dvector("x"), pt.dvector("free")
    fgraph = FunctionGraph([x], [x * 2], clone=False)
    assert _Runnable(fgraph)(x + pt.sin(x))
    assert _Runnable(fgraph)(x * x)
    assert not _Runnable(fgraph)(free + pt.sin(free))
    assert not _Runnable(fgraph)(pt.exp(x) + pt.sin(free) * free)


# -- _through_hidden ---------------------------------------------------------------------


def test_through_hidden_keeps_runnable_reasons_and_follows_hidden_ones():
    x, free = pt.dvector("x"), pt.dvector("free")
    fgraph = FunctionGraph([x], [x * 2], clone=False)
    runnable = _Runnable(fgraph)
    native, lifted, lowered, other = pt.sin(x), pt.sin(free), pt.sin(x) * 1, pt.cos(x)
    reasons: dict[Variable, list[Any]] = {
        lifted: [_why("lift", native, "g0", "g1")],
        lowered: [_why("lower", lifted, "g1", "g2"), _why("fold", other, "g3", "g4")],
    }
    assert _through_hidden(reasons, lowered, runnable) == [_why("lift, then lower", native, "g0", "g2"), _why("fold", other, "g3", "g4")]
    assert _through_hidden(reasons, native, runnable) == []  # no reasons
    assert _through_hidden(reasons, lifted, runnable) == [_why("lift", native, "g0", "g1")]


def test_through_hidden_of_a_chain_names_every_rewrite_and_the_last_graph():
    x, free = pt.dvector("x"), pt.dvector("free")
    runnable = _Runnable(FunctionGraph([x], [x * 2], clone=False))
    native, hidden_1, hidden_2, new = pt.sin(x), pt.sin(free), pt.cos(free), pt.tan(x)
    reasons: dict[Variable, list[Any]] = {
        hidden_1: [_why("a", native, "g0", "g1")],
        hidden_2: [_why("b", hidden_1, "g1", "g2")],
        new: [_why("c", hidden_2, "g2", "g3")],
    }
    assert _through_hidden(reasons, new, runnable) == [_why("a, then b, then c", native, "g0", "g3")]
    assert _through_hidden(reasons, hidden_2, runnable) == [_why("a, then b", native, "g0", "g2")]
    del reasons[hidden_1]  # a hidden variable replacing nothing: no reason left
    assert _through_hidden(reasons, new, runnable) == []


def test_through_hidden_visits_a_hidden_variable_once():
    """Two hidden replacements of one hidden variable: its reasons once; a cycle of hidden replacements ends."""
    x, free = pt.dvector("x"), pt.dvector("free")
    runnable = _Runnable(FunctionGraph([x], [x * 2], clone=False))
    native, hidden_0, hidden_1, hidden_2, new = pt.sin(x), pt.exp(free), pt.sin(free), pt.cos(free), pt.tan(x)
    reasons: dict[Variable, list[Any]] = {
        hidden_0: [_why("a", native, "g0", "g1")],
        hidden_1: [_why("b", hidden_0)],
        hidden_2: [_why("c", hidden_0)],
        new: [_why("d", hidden_1, "n1", "n2"), _why("e", hidden_2, "n3", "n4")],
    }
    assert _through_hidden(reasons, new, runnable) == [_why("a, then b, then d", native, "g0", "n2")]
    reasons[hidden_0].append(_why("back", hidden_2))  # a cycle: hidden_0 and hidden_2 replaced each other
    assert _through_hidden(reasons, new, runnable) == [_why("a, then b, then d", native, "g0", "n2")]


# -- forget_hidden -----------------------------------------------------------------------


def test_forget_hidden_without_a_tracker_is_a_no_op():
    x = pt.dvector("x")
    assert forget_hidden(FunctionGraph([x], [x * 2], clone=False)) == 0


def test_forget_hidden_drops_what_cannot_run_and_rewrites_the_reasons():
    x, free = pt.dvector("x"), pt.dvector("free")
    native, hidden, hidden_2, new, plain, other = pt.sin(x), pt.sin(free), pt.cos(free), pt.sin(x) * 1, pt.cos(x), pt.tan(x)
    mixed = pt.exp(x)
    reasons: dict[Variable, list[Any]] = {
        hidden: [_why("lift", native, "g0", "g1")],
        hidden_2: [_why("h", native)],
        new: [_why("lower", hidden, "g1", "g2")],
        plain: [_why("merge", other, "m0", "m1")],
        mixed: [_why("merge", other, "m2", "m3"), _why("lower", hidden, "g4", "g5")],
        native: [],
    }
    plain_reasons, hidden_reasons = reasons[plain], reasons[hidden]
    variables = [x, native, hidden, new, plain, hidden_2, other, mixed, free]
    tracker = _Tracker(variables, reasons)
    fgraph = _with_tracker(FunctionGraph([x], [new], clone=False), tracker)
    assert forget_hidden(fgraph) == 3
    assert tracker.all_variables_ever == [x, native, new, plain, other, mixed]  # in order
    assert reasons[new] == [_why("lift, then lower", native, "g0", "g2")]
    assert reasons[mixed] == [_why("merge", other, "m2", "m3"), _why("lift, then lower", native, "g0", "g5")]
    assert reasons[plain] is plain_reasons  # nothing hidden: left as it was
    assert reasons[hidden] is hidden_reasons  # the forgotten keep theirs (nothing reads them)
    assert reasons[native] == []
    assert forget_hidden(fgraph) == 0
    assert tracker.all_variables_ever == [x, native, new, plain, other, mixed]


def test_forget_hidden_with_pytensors_tracker_after_a_lift_and_a_lowering():
    """``native -> call -> native``, recorded by DebugMode's tracker: checked as ``native -> native``."""
    x = pt.dvector("x")
    native = pt.sin(x)
    fgraph = FunctionGraph([x], [native * 2], clone=False)
    tracker = _VariableEquivalenceTracker()
    fgraph.attach_feature(tracker)
    _with_tracker(fgraph, tracker)
    body = pt.sin(param(0, x.type))
    call = call_node([body], [x], fold=False).outputs[0]
    fgraph.replace(native, call, reason="lift")
    lowered = pt.sin(x)
    fgraph.replace(call, lowered, reason="lower")
    hidden = [v for v in tracker.all_variables_ever if not _Runnable(fgraph)(v)]
    assert call in hidden and body in hidden and call.owner.inputs[0] in hidden
    before = len(tracker.all_variables_ever)
    assert forget_hidden(fgraph) == len(hidden) > 0
    assert len(tracker.all_variables_ever) == before - len(hidden)
    assert not any(v in tracker.all_variables_ever for v in hidden)
    assert lowered in tracker.all_variables_ever and native in tracker.all_variables_ever
    ((why, old, _, _),) = tracker.reasons[lowered]
    assert why == "lift, then lower" and old is native


def test_forget_hidden_counts_what_it_drops():
    """The count is the records' length before less after: 3 of 4 dropped is 3 (not 4 % 1, which is 0)."""
    x, free = pt.dvector("x"), pt.dvector("free")
    tracker = _Tracker([free, x, pt.sin(free), free + x], {})
    assert forget_hidden(_with_tracker(FunctionGraph([x], [x * 2], clone=False), tracker)) == 3
    assert tracker.all_variables_ever == [x]
    tracker = _Tracker([free], {})
    assert forget_hidden(_with_tracker(FunctionGraph([x], [x * 2], clone=False), tracker)) == 1
    assert tracker.all_variables_ever == []
