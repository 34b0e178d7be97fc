"""Loops sharing a body, outlined with their scaffolding as one call body (issue 22).

`innergraph.rewriting.outline_loops`: under the Numba linker, K loops over one step
function become K calls of one body holding one loop and the outer nodes around it,
rewritten once; after the fold the calls are inlined back (native Scans, one Op).
``CALLS`` leaves the calls in place, so the outlined form itself is checked and run.
Values are compared with vanilla PyTensor (innergraph uninstalled), structure with
the compiled graph's nodes.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import graph_inputs
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan

from innergraph.core.graph import scope_toposort
from innergraph.ops.call import Call
from innergraph.rewriting.outline_loops import loop_groups, outline_loops
from typed import grad
from vanilla import vanilla_values

NUMBA = Mode(linker="numba", optimizer="fast_run")
#: The outlined form, not inlined back after the fold.
CALLS = NUMBA.excluding("innergraph_inline_outlined_loops")


def vanilla(build, values, linker="numba"):
    """``build()``'s ``(inputs, outputs)``, built, compiled and run with innergraph uninstalled (tests/vanilla.py)."""
    return vanilla_values(build, values, Mode(linker=linker, optimizer="fast_run"))


def compiled(build, mode):
    """``build()``'s ``(inputs, outputs)`` compiled with innergraph installed."""
    inputs, outputs = build()
    return pytensor.function(inputs, outputs, mode=mode)


def step(x_t, acc, w):
    return acc * w + pt.sin(x_t) * pt.exp(-(x_t**2))


def k_loops(k, n=7):
    xs = [pt.dvector(f"x{i}") for i in range(k)]
    a, w = pt.dscalar("a"), pt.dscalar("w")
    traces = [pytensor.scan(step, sequences=[x], outputs_info=[a], non_sequences=[w], return_updates=False) for x in xs]
    rng = np.random.default_rng(3)
    values = [rng.normal(size=n) for _ in range(k)] + [0.3, 0.9]
    return xs, a, w, traces, values


def outer(fn):
    return list(fn.maker.fgraph.apply_nodes)


def loop_calls(fn):
    """The calls of ``fn``'s outer graph whose body runs a loop."""
    calls = [n for n in outer(fn) if isinstance(n.op, Call)]
    return [c for c in calls if any(isinstance(n.op, NativeScan) for n in scope_toposort(c.inputs[0].data.outputs))]


def three_loops_graph():
    xs, a, w, traces, _ = k_loops(3)
    return [*xs, a, w], [pt.add(*(t[-1] for t in traces))]


@pytest.fixture(scope="module")
def three_loops():
    *_, values = k_loops(3)
    inputs, outputs = three_loops_graph()
    fn = pytensor.function(inputs, outputs, mode=CALLS)
    return fn, inputs, outputs, values


def test_k_loops_are_k_calls_of_one_body(three_loops):
    fn, _, _, _ = three_loops
    calls = [n for n in outer(fn) if isinstance(n.op, Call)]
    assert len(calls) == 3 and not [n for n in outer(fn) if isinstance(n.op, NativeScan)]
    assert len({id(c.inputs[0].data) for c in calls}) == 1  # one Body, rewritten and converted once
    (body,) = {c.inputs[0].data for c in calls}
    loops = [n for n in scope_toposort(body.outputs) if isinstance(n.op, NativeScan)]
    assert len(loops) == 1  # the loop, lowered once, inside the body
    # each call passes its own sequence and the shared initial state and weight
    assert sorted(len(c.inputs) for c in calls) == [4, 4, 4]


def test_values_equal_vanilla(three_loops):
    fn, inputs, outputs, values = three_loops
    np.testing.assert_allclose(fn(*values)[0], vanilla(three_loops_graph, values)[0], rtol=1e-12)


def test_inlined_back_each_loop_is_a_native_scan_over_its_own_sequence(three_loops):
    _, inputs, outputs, values = three_loops
    fn = pytensor.function(inputs, outputs, mode=NUMBA)
    scans = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, NativeScan)]
    assert len(scans) == 3 and len({id(n.op) for n in scans}) == 1  # one native Op, converted once
    assert not [n for n in outer(fn) if isinstance(n.op, Call)]
    xs, (a, w) = inputs[:3], inputs[3:]
    # one loop's form (the step's row-wise work fused ahead of it, as with one loop), per sequence
    assert sorted(type(n.op).__name__ for n in outer(fn)) == [*["Elemwise"] * 4, *["Scan"] * 3, *["Shape_i"] * 3]  # with the final sum
    for scan in scans:
        reads = {v for v in graph_inputs(scan.inputs) if not isinstance(v, Constant)}
        assert reads - {a, w} in [{x} for x in xs]
    np.testing.assert_allclose(fn(*values)[0], vanilla(three_loops_graph, values)[0], rtol=1e-12)


def test_traces_and_finals_both_read():
    def build():
        xs, a, w, traces, _ = k_loops(2)
        return [*xs, a, w], [traces[0], traces[1][-1], traces[1][2:5].sum()]

    *_, values = k_loops(2)
    fn = compiled(build, mode=CALLS)
    assert loop_calls(fn)
    for got, want in zip(fn(*values), vanilla(build, values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gradients_equal_vanilla():
    def build():  # vanilla's gradient of a Scan is PyTensor's own pullback: built uninstalled
        xs, a, w, traces, _ = k_loops(3)
        cost = pt.add(*(t[-1] for t in traces))
        return [*xs, a, w], [cost, *grad(cost, [*xs, a, w])]

    *_, values = k_loops(3)
    fn = compiled(build, mode=CALLS)
    assert loop_calls(fn)
    for got, want in zip(fn(*values), vanilla(build, values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_a_loop_over_another_loops_result_is_left_alone():
    def build():
        x, a, w = pt.dvector("x"), pt.dscalar("a"), pt.dscalar("w")
        first = pytensor.scan(step, sequences=[x], outputs_info=[a], non_sequences=[w], return_updates=False)
        second = pytensor.scan(step, sequences=[first], outputs_info=[a], non_sequences=[w], return_updates=False)
        return [x, a, w], [second[-1]]

    fn = compiled(build, mode=CALLS)
    assert not loop_calls(fn)  # outlining would make a cycle (the calls left: the push-out's row-wise work)
    assert len([n for n in outer(fn) if isinstance(n.op, NativeScan)]) == 2
    values = [np.linspace(-1, 1, 6), 0.3, 0.9]
    np.testing.assert_allclose(fn(*values)[0], vanilla(build, values)[0], rtol=1e-12)


def test_loops_inside_a_body_over_its_params_stay():
    def build():
        xs, a, w = pt.dmatrix("xs"), pt.dscalar("a"), pt.dscalar("w")

        def outer_step(row, acc):
            one = pytensor.scan(step, sequences=[row], outputs_info=[acc], non_sequences=[w], return_updates=False)[-1]
            two = pytensor.scan(step, sequences=[row[::-1]], outputs_info=[acc], non_sequences=[w], return_updates=False)[-1]
            return one + two

        return [xs, a, w], [pytensor.scan(outer_step, sequences=[xs], outputs_info=[a], return_updates=False)[-1]]

    fn = compiled(build, mode=CALLS)
    values = [np.random.default_rng(5).normal(size=(4, 5)), 0.1, 0.8]
    np.testing.assert_allclose(fn(*values)[0], vanilla(build, values)[0], rtol=1e-12)


@pytest.mark.parametrize("linker", ["cvm", "py"])
def test_only_under_numba(linker):
    def build():
        xs, a, w, traces, _ = k_loops(2)
        return [*xs, a, w], [traces[0][-1] + traces[1][-1]]

    *_, values = k_loops(2)
    fn = compiled(build, mode=Mode(linker=linker, optimizer="fast_run"))
    assert len([n for n in outer(fn) if isinstance(n.op, NativeScan)]) == 2
    np.testing.assert_allclose(fn(*values)[0], vanilla(build, values, linker)[0], rtol=1e-12)


def test_excluded_by_name():
    xs, a, w, traces, values = k_loops(2)
    outputs = [traces[0][-1] + traces[1][-1]]
    fn = pytensor.function([*xs, a, w], outputs, mode=CALLS.excluding("innergraph_outline_loops"))
    assert len([n for n in outer(fn) if isinstance(n.op, NativeScan)]) == 2 and not loop_calls(fn)


def test_deterministic_and_one_group_per_body():
    def outlined():
        xs, a, w, traces, _ = k_loops(4)
        fgraph = FunctionGraph([*xs, a, w], [pt.add(*(t[-1] for t in traces))], clone=False)
        from innergraph.rewriting.lift import lift_native

        lift_native(fgraph)
        groups = loop_groups(fgraph)
        assert [len(g) for g in groups] == [4]
        assert outline_loops(fgraph, force=True) == 1
        assert loop_groups(fgraph) == []
        return fgraph

    one, two = outlined(), outlined()
    calls = [[n for n in g.toposort() if isinstance(n.op, Call)] for g in (one, two)]
    assert len(calls[0]) == len(calls[1]) == 4
    assert [[type(i).__name__ for i in c.inputs] for c in calls[0]] == [[type(i).__name__ for i in c.inputs] for c in calls[1]]
    assert [str(n.op) for n in one.toposort()] == [str(n.op) for n in two.toposort()]


def test_loops_of_equal_length_are_merged_not_outlined():
    def build():
        x, y = pt.dvector("x"), pt.dvector("y")
        return [x, y], [pytensor.scan(lambda s: s + 1, sequences=[v], n_steps=4, return_updates=False) for v in (x, y)]

    fn = compiled(build, mode=CALLS.excluding("scan_pushout_seqs_ops"))  # the loops stay loops
    assert len([n for n in outer(fn) if isinstance(n.op, NativeScan)]) == 1 and not loop_calls(fn)
    values = [np.arange(5.0), np.arange(6.0)]
    for got, want in zip(fn(*values), vanilla(build, values), strict=True):
        np.testing.assert_array_equal(got, want)


def test_loops_of_different_constant_lengths_are_left_alone():
    """Two loops of one body whose ``n_steps`` are different constants: no call body
    could take the constants as params, so nothing is outlined (PyTensor's own
    ``TestScanMerge.test_basic`` builds this; before the fix the rewrite raised)."""
    x, y = pt.dvector("x"), pt.dvector("y")
    sx = pytensor.scan(lambda a: a.sum(), sequences=[x], n_steps=2, return_updates=False)
    sy = pytensor.scan(lambda a: a.sum(), sequences=[y], n_steps=3, return_updates=False)
    with pytensor.config.change_flags(on_opt_error="raise"):
        f = pytensor.function([x, y], [sx, sy], mode=Mode(linker="numba", optimizer="fast_run"))
    got = f(np.arange(3.0), np.arange(4.0))
    np.testing.assert_array_equal(got[0], [0.0, 1.0])
    np.testing.assert_array_equal(got[1], [0.0, 1.0, 2.0])


def test_loops_over_sequences_of_different_opfromgraphs_keep_their_own():
    """Two `OpFromGraph` nodes with a dead output each (the lift makes them calls, of two bodies) feed two
    loops of one step: the calls are equal Ops over different bodies and must not be outlined as one.

    Outlining took every function-typed input as shared (2026-12-02): both loops then read the first
    body's sequence, 84.59 for vanilla's 77.04.
    """
    def build():
        x, y, a, w, v = pt.dvector("x"), pt.dvector("y"), pt.dscalar("a"), pt.dscalar("w"), pt.dvector("v")
        twice = OpFromGraph([v], [pt.exp(v) * 2.0, v + 1.0])
        thrice = OpFromGraph([v], [pt.exp(v) * 3.0, v + 2.0])
        loops = []
        for f, s in ((twice, x), (thrice, y)):
            outputs: Any = f(s)
            sequence = outputs[0]  # the second output is dead
            loops.append(pytensor.scan(step, sequences=[sequence], outputs_info=[a], non_sequences=[w], return_updates=False)[-1])
        return [x, y, a, w], [loops[0] + loops[1]]

    values = [np.linspace(0.0, 1.0, 5), np.linspace(1.0, 2.0, 5), 0.3, 0.9]
    (expected,) = vanilla(build, values)
    for mode in (NUMBA, CALLS):
        fn = compiled(build, mode)
        np.testing.assert_allclose(fn(*values), expected, rtol=1e-13)
