"""`innergraph.rewriting.merge_loops` called directly, fast (issue 47's mutation run).

The pass's end-to-end tests (``tests/test_rewrites.py``, ``tests/test_reverse.py``) go
through `check_rewrite` and compile. These call the module's pieces
(`merge_equal_consumers`, `loop_merge_key`, `_could_be_one`) and the pass on small
FunctionGraphs (functions unfolded and merged, as in the pipeline), never compiled for
Numba: literal counts (the pass's answer), the merged loop's layout, node identity, and
values run with the py linker against NumPy.

A fault that makes the pass merge a loop with itself repeats without end; `guard` stops
any pass that merges more often than these graphs allow.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeFeature, MergeOptimizer
from pytensor.graph.traversal import apply_ancestors
from pytensor.scan.utils import until
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.variable import TensorVariable

import innergraph
from innergraph.core.fold import unfold_inner_graphs, visible_nodes
from innergraph.ops.loop import WhileLoop
from innergraph.ops.scan import Scan
from innergraph.protocol.signature import Signature, consumers
from innergraph.protocol.slots import Capabilities
from innergraph.rewriting import merge_loops as ml

PY = Mode(linker="py", optimizer="None")
MOST_MERGES = 6  # no graph here needs more than three


@pytest.fixture(autouse=True)
def guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a pass that merges more than `MOST_MERGES` times (a loop merged with itself grows forever)."""
    calls = [0]
    merge = ml.replace_consumer

    def counted(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        assert calls[0] <= MOST_MERGES, "merge_loops merged more often than the graph has loops"
        merge(*args, **kwargs)

    monkeypatch.setattr(ml, "replace_consumer", counted)
    yield


N = pt.lscalar("n")
A0 = pt.dscalar("a0")
V0 = pt.dvector("v0")


def loop(step: Callable[..., Any], init: Variable, n: Variable = N, **kwargs: Any) -> TensorVariable:
    """The trace of ``step`` from ``init`` over ``n`` steps."""
    return cast(TensorVariable, innergraph.scan(step, outputs_info=[init], n_steps=n, return_updates=False, **kwargs))


def graph(inputs: Sequence[Variable], outputs: Sequence[Variable], merge: bool = True) -> FunctionGraph:
    """A FunctionGraph of ``outputs`` as the pipeline gives it to the pass: functions unfolded, merged (unless not ``merge``)."""
    fg = FunctionGraph(list(inputs), list(outputs), clone=True)
    unfold_inner_graphs(fg)
    if merge:
        MergeOptimizer().rewrite(fg)
    return fg


def scans(fg: FunctionGraph) -> list[Apply]:
    """The outer graph's loops."""
    return [node for node in visible_nodes(fg) if isinstance(node.op, Scan)]


def n_sit_sot(node: Apply) -> int:
    return int(cast(Any, node.op).layout.info.n_sit_sot)


def signatures(fg: FunctionGraph) -> list[Signature]:
    """The outer graph's consumers, inputs before users."""
    visible = visible_nodes(fg)
    return [sig for sig in consumers(fg) if sig.node in visible]


def loop_of(fg: FunctionGraph, out: Variable) -> Signature:
    """The one consumer ``out`` reads."""
    (sig,) = [sig for sig in signatures(fg) if sig.node in apply_ancestors([out])]
    return sig


def evaluate(fg: FunctionGraph, *values: Any) -> list[Any]:
    """``fg``'s outputs at ``values``, run as built (py linker, no rewrites)."""
    return cast(list[Any], pytensor.function(fg.inputs, fg.outputs, mode=PY, on_unused_input="ignore")(*values))


def affine(a0: Any, steps: int, decay: float) -> np.ndarray:
    """NumPy's trace of ``a = a * decay + 1``."""
    trace, a = [], np.asarray(a0, dtype="float64")
    for _ in range(steps):
        a = a * decay + 1.0
        trace.append(a)
    return np.array(trace)


def close(got: Any, want: Any) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-14)


def exps(fg: FunctionGraph) -> int:
    return sum(isinstance(n.op, Elemwise) and type(cast(Any, n.op).scalar_op).__name__ == "Exp" for n in fg.apply_nodes)


# ---- merge_equal_consumers


def test_ordinary_merging_counts_the_nodes_merged_away():
    """exp(x) twice and x + 1 three times, built apart: 5 nodes become 2, so 3; then nothing is left to merge."""
    x = pt.dscalar("x")
    fg = FunctionGraph([x], [pt.exp(x), pt.exp(x), x + 1, x + 1, x + 1], clone=False)
    assert len(fg.apply_nodes) == 5 and not hasattr(fg, "merge_feature")
    assert ml.merge_equal_consumers(fg) == 3
    assert len(fg.apply_nodes) == 2
    assert fg.outputs[0] is fg.outputs[1] and fg.outputs[2] is fg.outputs[4]
    assert ml.merge_equal_consumers(fg) == 0
    close(evaluate(fg, 0.5), [np.exp(0.5)] * 2 + [1.5] * 3)


def test_ordinary_merging_replaces_a_stale_merge_feature():
    """A feature that lost what it scheduled (as PyTensor's can forget a constant) is dropped for a fresh one, which sees every node."""
    x = pt.dscalar("x")
    fg = FunctionGraph([x], [pt.exp(x), pt.exp(x), pt.exp(x)], clone=False)
    stale = MergeFeature()
    fg.attach_feature(stale)
    stale.scheduled.clear()
    MergeOptimizer().apply(fg)
    assert len(fg.apply_nodes) == 3  # the stale feature merges nothing
    assert ml.merge_equal_consumers(fg) == 2
    assert cast(Any, fg).merge_feature is not stale
    assert fg.outputs[0] is fg.outputs[1] is fg.outputs[2]


# ---- loop_merge_key and _could_be_one


def test_a_counted_loops_key_is_its_class_and_its_forms_key():
    """A Scan over ``n`` steps: (Scan, its form's key), whose first entry is ``n``; a Scan with a condition, a while loop, a call: None."""
    counted = loop(lambda a: a * 0.5 + 1.0, A0)
    stopping = cast(
        Variable,
        innergraph.scan(lambda a: (a * 0.5 + 1.0, until(a > 1.5)), outputs_info=[A0], n_steps=N, return_updates=False),
    )
    looping = innergraph.while_loop(lambda a: a < 1.5, lambda a: a * 0.5 + 1.0, A0, max_steps=10)
    called = cast(Variable, innergraph.call(lambda a: pt.exp(a) * 2.0, A0))
    fg = graph([N, A0], [counted, stopping, looping, called])
    counted_sig, stopping_sig, looping_sig, call_sig = (loop_of(fg, out) for out in fg.outputs)
    assert isinstance(looping_sig.node.op, WhileLoop) and not call_sig.capabilities.loop
    assert not counted_sig.is_while and stopping_sig.is_while
    key = cast(tuple[Any, Any], ml.loop_merge_key(counted_sig))
    assert key[0] is Scan and key[1][0] is fg.inputs[0]
    assert ml.loop_merge_key(stopping_sig) is None
    assert ml.loop_merge_key(looping_sig) is None  # a loop whose form has no key
    assert ml.loop_merge_key(call_sig) is None  # no loop, no key


def test_a_form_that_is_no_loop_gives_no_key_even_with_a_key_function():
    """Registration refuses that form; one made by `dataclasses.replace` gets no key."""
    fg = graph([N, A0], [loop(lambda a: a * 0.5 + 1.0, A0)])
    (sig,) = signatures(fg)
    assert ml.loop_merge_key(sig) is not None
    not_a_loop = replace(sig, form=replace(sig.form, capabilities=Capabilities(loop=False, counted=True)))
    assert ml.loop_merge_key(not_a_loop) is None


def test_loops_could_be_one_with_equal_ops_and_input_types_only():
    """Equal Ops (not the same object) and equal input types: True; one loop, another flag, another state type: False."""
    fg = graph(
        [N, A0, V0],
        [
            loop(lambda a: a * 0.5 + 1.0, A0),
            loop(lambda a: a * 0.25 + 1.0, A0),
            loop(lambda a: a * 0.5 + 1.0, V0),
            loop(lambda a: a * 0.5 + 1.0, A0, truncate_gradient=3),
        ],
    )
    half, quarter, vector, truncated = (loop_of(fg, out) for out in fg.outputs)
    assert half.node.op == quarter.node.op and half.node.op is not quarter.node.op
    assert ml._could_be_one([half, quarter])
    assert ml._could_be_one([truncated, half, quarter])
    assert not ml._could_be_one([half])
    assert not ml._could_be_one([half, truncated])  # other Ops, equal input types
    assert not ml._could_be_one([truncated, half])
    assert half.node.op == vector.node.op  # equal Ops over other input types
    assert not ml._could_be_one([half, vector])
    assert not ml._could_be_one([vector, half])
    assert not ml._could_be_one([half, vector, truncated])


# ---- the pass


def test_two_independent_loops_over_the_same_steps_become_one():
    """Two decays of ``a0`` over ``n`` steps: one loop with both states, count 1, NumPy's values; then nothing to merge."""
    fg = graph([N, A0], [loop(lambda a: a * 0.5 + 1.0, A0), loop(lambda a: a * 0.25 + 1.0, A0)])
    assert len(scans(fg)) == 2
    assert ml.merge_loops(fg) == 1
    (node,) = scans(fg)
    assert n_sit_sot(node) == 2
    got = evaluate(fg, 5, 0.3)
    close(got[0], affine(0.3, 5, 0.5))
    close(got[1], affine(0.3, 5, 0.25))
    assert ml.merge_loops(fg) == 0
    assert scans(fg) == [node]


def test_one_loop_is_left_as_it_is():
    fg = graph([N, A0], [loop(lambda a: a * 0.5 + 1.0, A0)])
    (node,) = scans(fg)
    assert ml.merge_loops(fg) == 0
    assert scans(fg) == [node] and n_sit_sot(node) == 1


def test_three_loops_of_three_layouts_become_one_in_two_merges():
    """A scalar state, a vector state, a matrix state (no two could be one node): two merges, one loop, NumPy's values."""
    m0 = pt.dmatrix("m0")
    fg = graph(
        [N, A0, V0, m0],
        [loop(lambda a: a * 0.5 + 1.0, A0), loop(lambda a: a * 0.25 + 1.0, V0), loop(lambda a: a * 2.0 + 1.0, m0)],
    )
    assert ml.merge_loops(fg) == 2
    (node,) = scans(fg)
    assert n_sit_sot(node) == 3
    v, m = np.array([0.1, -0.2]), np.arange(4.0).reshape(2, 2)
    got = evaluate(fg, 3, 0.3, v, m)
    close(got[0], affine(0.3, 3, 0.5))
    close(got[1], affine(v, 3, 0.25))
    close(got[2], affine(m, 3, 2.0))


def test_equal_loops_become_one_node_before_others_are_merged():
    """Two equal loops and another: ordinary merging first (count 1), then one merge (count 2): two states, not three."""
    equal = [loop(lambda a: a * 0.5 + 1.0, A0), loop(lambda a: a * 0.5 + 1.0, A0)]
    fg = graph([N, A0], [*equal, loop(lambda a: a * 0.25 + 1.0, A0)], merge=False)  # built apart, not merged yet
    assert len(scans(fg)) == 3
    assert ml.merge_loops(fg) == 2
    (node,) = scans(fg)
    assert n_sit_sot(node) == 2
    got = evaluate(fg, 4, -0.7)
    close(got[0], affine(-0.7, 4, 0.5))
    assert fg.outputs[0] is fg.outputs[1]
    close(got[2], affine(-0.7, 4, 0.25))


def test_ordinary_merging_runs_only_where_loops_could_be_one():
    """A scalar loop and a vector loop (no two could be one node) beside exp(a0) twice: the loops merge (count 1), the exps stay two."""
    outputs = [loop(lambda a: a * 0.5 + 1.0, A0), loop(lambda a: a * 0.25 + 1.0, V0), pt.exp(A0), pt.exp(A0)]
    fg = graph([N, A0, V0], outputs, merge=False)
    assert exps(fg) == 2
    assert ml.merge_loops(fg) == 1
    assert len(scans(fg)) == 1 and exps(fg) == 2
    alone = FunctionGraph([A0], [pt.exp(A0), pt.exp(A0)], clone=True)
    assert ml.merge_loops(alone) == 0 and exps(alone) == 2


def test_ordinary_merging_that_merges_nothing_counts_nothing():
    """Two loops that could be one node (equal Ops and input types) but differ: ordinary merging runs and merges nothing, the loops merge: count 1."""
    fg = graph([N, A0], [loop(lambda a: a * 0.5 + 1.0, A0), loop(lambda a: a * 0.25 + 1.0, A0)])
    assert ml._could_be_one(signatures(fg))
    assert ml.merge_loops(fg) == 1
    assert len(scans(fg)) == 1


def test_a_loop_reading_another_is_not_merged_with_it():
    """The second loop starts from the first one's last state: two loops, count 0, NumPy's values."""
    first = loop(lambda a: a * 0.5 + 1.0, A0)
    second = loop(lambda a: a * 0.25 + 1.0, first[-1])
    fg = graph([N, A0], [first, second])
    nodes = set(scans(fg))
    assert len(nodes) == 2
    assert ml.merge_loops(fg) == 0
    assert set(scans(fg)) == nodes
    got = evaluate(fg, 3, 0.3)
    close(got[1], affine(affine(0.3, 3, 0.5)[-1], 3, 0.25))


def test_a_loop_reading_one_of_two_others_merges_with_the_other_only():
    """Loops 1 and 2 independent, loop 3 reads loop 1: 1 and 2 merge (count 1); 3 then reads the merged loop and stays."""
    first = loop(lambda a: a * 0.5 + 1.0, A0)
    second = loop(lambda a: a * 0.25 + 1.0, A0)
    third = loop(lambda a: a * 2.0 + 1.0, first[-1])
    fg = graph([N, A0], [first, second, third])
    assert ml.merge_loops(fg) == 1
    assert len(scans(fg)) == 2
    got = evaluate(fg, 3, 0.3)
    close(got[0], affine(0.3, 3, 0.5))
    close(got[1], affine(0.3, 3, 0.25))
    close(got[2], affine(affine(0.3, 3, 0.5)[-1], 3, 2.0))


def test_loops_over_other_steps_or_with_a_condition_stay_apart():
    """Over ``n`` and over ``m`` steps: count 0; two loops with an ``until`` over ``n``: count 0."""
    m = pt.lscalar("m")
    fg = graph([N, m, A0], [loop(lambda a: a * 0.5 + 1.0, A0), loop(lambda a: a * 0.25 + 1.0, A0, n=m)])
    assert ml.merge_loops(fg) == 0 and len(scans(fg)) == 2

    def stopping(decay: float) -> Variable:
        return cast(
            Variable,
            innergraph.scan(
                lambda a: (a * decay + 1.0, until(a > 1.5)), outputs_info=[A0], n_steps=N, return_updates=False
            ),
        )

    fg = graph([N, A0], [stopping(0.5), stopping(0.25)])
    assert ml.merge_loops(fg) == 0 and len(scans(fg)) == 2


def test_ordinary_merging_runs_once_a_pass(monkeypatch: pytest.MonkeyPatch):
    """Four loops of one layout, from ``a0`` and ``a1``, two decays each: three merges (count 3), one loop of four states, NumPy's values.

    Ordinary merging runs once, before the first merge: once loops are merged, a merged
    body repeats work of another loop's body (the same decay), which MergeOptimizer would
    share and the pass would count as a merged loop if it ran again.
    """
    a1 = pt.dscalar("a1")
    decays = (0.5, 0.25)
    fg = graph([N, A0, a1], [loop(lambda a, d=d: a * d + 1.0, start) for start in (A0, a1) for d in decays])
    runs = [0]
    merge = ml.merge_equal_consumers

    def counted(fgraph: FunctionGraph) -> int:
        runs[0] += 1
        return merge(fgraph)

    monkeypatch.setattr(ml, "merge_equal_consumers", counted)
    assert ml.merge_loops(fg) == 3
    assert runs == [1]
    (node,) = scans(fg)
    assert n_sit_sot(node) == 4
    got = evaluate(fg, 3, 0.3, -0.4)
    for out, (start, d) in zip(got, [(s, d) for s in (0.3, -0.4) for d in decays], strict=True):
        close(out, affine(start, 3, d))


def test_loops_inside_a_body_are_merged_with_none():
    """Two loops over 3 steps inside a loop's body, beside two outer loops over 3 steps (one constant 3 in every scope).

    Only the outer loops merge (count 1); the inner ones stay in their body, apart.
    Grouped by key alone, the inner loops would merge and an inner one would then pair
    with an outer one (a body reading an outer variable it has no param for).
    """
    three = pt.constant(3, dtype="int64")

    def step(a: Variable) -> Variable:
        return cast(Variable, loop(lambda b: b * 0.5 + a, a, n=three)[-1] + loop(lambda b: b * 0.25 + a, a, n=three)[-1])

    fg = graph([A0], [loop(step, A0, n=three), loop(lambda a: a * 2.0 + 1.0, A0, n=pt.constant(3, dtype="int64"))])
    assert len([n for n in fg.apply_nodes if isinstance(n.op, Scan)]) == 4 and len(scans(fg)) == 2
    assert ml.merge_loops(fg) == 1
    (node,) = scans(fg)
    assert n_sit_sot(node) == 2
    assert len([n for n in fg.apply_nodes if isinstance(n.op, Scan)]) == 3

    def inner(a: float, d: float) -> float:
        b = a
        for _ in range(3):
            b = b * d + a
        return b

    a, trace = 0.3, []
    for _ in range(3):
        a = inner(a, 0.5) + inner(a, 0.25)
        trace.append(a)
    got = evaluate(fg, 0.3)
    close(got[0], trace)
    close(got[1], affine(0.3, 3, 2.0))
