"""The in-graph Scan: every Scan feature, against vanilla PyTensor, with gradients.

Each case builds a graph with `pytensor.scan` and checks three compilations of it
against vanilla PyTensor (built, compiled and run with innergraph uninstalled,
``tests/vanilla.py``):

* ``pipeline``: the default mode — native Scans are lifted, rewritten with the outer
  graph, and lowered back;
* ``in_graph``: the graph built by `innergraph.scan`, executed by the in-graph Scan
  itself (innergraph installed, its rewrites excluded: `IN_GRAPH`);
* ``roundtrip``: `lift` then `lower` on a FunctionGraph, no rewriting in between —
  exact to the last bit.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import ancestors, applys_between
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.rewriting.shape import ShapeFeature

import innergraph
from innergraph import graph_stats, lift, lower
from innergraph.ops.scan import Scan
from vanilla import vanilla_function, vanilla_values
from typed import grad

#: innergraph installed, its rewrites excluded: the in-graph consumers run as they were built (not vanilla).
IN_GRAPH = get_default_mode().excluding("innergraph")
DEFAULT = get_default_mode()


def sit_sot(scan, x, s):
    return scan(lambda y: y**2 * 0.5 + 1, outputs_info=[x], n_steps=5, return_updates=False)


def mit_sot(scan, x, s):
    init = pt.stack([x, x + 1])
    return scan(lambda a, b: a * 0.5 + b * 0.25, outputs_info=[{"initial": init, "taps": [-2, -1]}], n_steps=6, return_updates=False)


def nit_sot_with_sequence_taps(scan, x, s):
    return scan(lambda prev, cur, k: pt.exp(cur) - prev * k, sequences=[{"input": s, "taps": [-1, 0]}], non_sequences=[x], return_updates=False)


def backwards(scan, x, s):
    return scan(lambda v, acc: acc * 0.9 + v, sequences=[s], outputs_info=[x], go_backwards=True, return_updates=False)


def several_outputs(scan, x, s):
    def step(v, a, b):
        return a + v, b * v, pt.sin(a)

    ys = scan(step, sequences=[s], outputs_info=[x, x + 1, None], return_updates=False)
    return ys[0] + ys[1] + ys[2]


def until_loop(scan, x, s):
    from pytensor.scan.utils import until

    return scan(lambda y: (y * 1.5 + 0.1, until(y > 3.0)), outputs_info=[x], n_steps=50, return_updates=False)


def nested(scan, x, s):
    def outer_step(v, acc):
        inner = scan(lambda z: z * v + 0.5, outputs_info=[acc], n_steps=3, return_updates=False)
        return inner[-1]

    return scan(outer_step, sequences=[s], outputs_info=[x], return_updates=False)


def truncated(scan, x, s):
    return scan(lambda v, y: y * v + pt.tanh(y), sequences=[s], outputs_info=[x], truncate_gradient=2, return_updates=False)


DIFFERENTIABLE = [sit_sot, mit_sot, nit_sot_with_sequence_taps, backwards, several_outputs, until_loop, nested, truncated]


def inputs():
    return pt.dscalar("x"), pt.dvector("s")


def values():
    return 0.7, np.array([0.3, -0.2, 0.5, 0.1, 0.4])


def outputs_of(case, scan):
    x, s = inputs()
    y = case(scan, x, s)
    cost = (y**2).sum()
    return [x, s], [y, *grad(cost, [x, s], disconnected_inputs="ignore")]


def run(inputs_, outputs_, mode):
    fn = pytensor.function(inputs_, outputs_, mode=mode, on_unused_input="ignore")
    return fn, fn(*values())


@pytest.fixture(scope="module", params=DIFFERENTIABLE, ids=lambda c: c.__name__)
def case(request):
    expected = vanilla_values(lambda: outputs_of(request.param, pytensor.scan), values(), DEFAULT, on_unused_input="ignore")
    return request.param, expected


def assert_close(got, expected):
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_pipeline_matches_vanilla(case):
    build, expected = case
    ins, outs = outputs_of(build, pytensor.scan)
    fn, got = run(ins, outs, DEFAULT)
    assert_close(got, expected)
    assert graph_stats(fn)["consumers"]["scan"] <= _vanilla_scan_count(build)


def test_in_graph_scan_runs_itself(case):
    build, expected = case
    ins, outs = outputs_of(build, innergraph.scan)
    assert not any(isinstance(n.op, NativeScan) for n in applys_between(ins, outs))
    assert any(isinstance(n.op, Scan) for n in applys_between(ins, outs))
    fn, got = run(ins, outs, IN_GRAPH)
    assert_close(got, expected)


def test_lift_then_lower_is_exact(case):
    build, expected = case
    ins, outs = outputs_of(build, pytensor.scan)
    fg = FunctionGraph(ins, outs, clone=True)
    n_native = sum(isinstance(n.op, NativeScan) for n in fg.apply_nodes)
    assert lift(fg) >= n_native
    assert not any(isinstance(n.op, NativeScan) for n in fg.apply_nodes)
    assert lower(fg) >= 1
    assert not any(isinstance(n.op, Scan) for n in fg.apply_nodes)
    _, got = run(fg.inputs, fg.outputs, IN_GRAPH)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def _four_loops() -> tuple[list, Any]:
    a, x = inputs()
    step = lambda v, acc: acc * 0.9 + pt.sin(v)  # noqa: E731
    finals = [pytensor.scan(step, sequences=[seq], outputs_info=[a], return_updates=False)[-1] for seq in (x, x[1:], x * 2)]
    other = pytensor.scan(lambda v, acc: acc * 0.8 + pt.sin(v), sequences=[x], outputs_info=[a], return_updates=False)[-1]
    return [a, x], [*finals, other]


def test_equal_native_scans_are_lifted_to_one_function():
    fg = FunctionGraph(*_four_loops(), clone=True)
    assert lift(fg) == 4
    scans = [n for n in fg.toposort() if isinstance(n.op, Scan)]
    assert len({n.inputs[0] for n in scans}) == 2  # one function for the three equal loops, another for 0.8
    _, got = run(fg.inputs, fg.outputs, IN_GRAPH)
    expected = vanilla_values(_four_loops, values(), DEFAULT)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_shapes_match_the_native_scan(case):
    """The consumer's own shapes (no nit-sot: from the outer inputs) equal PyTensor's Scan's."""
    from pytensor.graph.basic import equal_computations
    from pytensor.tensor.rewriting.shape import ShapeFeature

    from innergraph.core.instantiate import substitute_shapes
    from innergraph.ops.scan import _repoint_map

    build, _ = case
    ins, outs = outputs_of(build, innergraph.scan)
    fg = FunctionGraph(ins, outs, clone=True, features=[ShapeFeature()])
    checked = 0
    for node in [n for n in fg.apply_nodes if isinstance(n.op, Scan)]:
        shapes = [fg.shape_feature.shape_tuple(v) for v in node.inputs]
        native = node.op._native_for_graph(node.inputs)
        expected = native.op.infer_shape(native, shapes[1:])
        expected = substitute_shapes(expected, _repoint_map(native, node.inputs, node.outputs))
        for got, want in zip(node.op.infer_shape(node, shapes), expected, strict=True):
            assert (got is None) == (want is None)
            assert got is None or equal_computations(list(got), list(want))
        checked += 1
    assert checked


def _vanilla_scan_count(build):
    fn = vanilla_function(lambda: outputs_of(build, pytensor.scan), DEFAULT, on_unused_input="ignore")
    return graph_stats(fn)["consumers"]["scan"]


@pytest.mark.parametrize("linker", ["cvm", "vm", "py"])
def test_in_graph_scan_under_python_linkers(linker):
    from pytensor.compile.mode import Mode

    ins, outs = outputs_of(mit_sot, innergraph.scan)
    expected = vanilla_values(lambda: outputs_of(mit_sot, pytensor.scan), values(), DEFAULT)
    in_graph = Mode(linker=linker, optimizer="fast_run").excluding("innergraph")  # installed, rewrites excluded
    _, got = run(ins, outs, in_graph)
    assert_close(got, expected)


def test_shared_updates_and_random_generators():
    rng = pytensor.shared(np.random.default_rng(3), name="rng")
    counter = pytensor.shared(np.float64(0.0), name="counter")

    def build(scan):
        def step(y, g):
            next_g, noise = pt.random.normal(0, 1, rng=g).owner.outputs
            return y * 0.5 + noise, next_g

        (ys, _), updates = scan(step, outputs_info=[pt.constant(0.0, dtype="float64"), rng], n_steps=4)
        updates[counter] = counter + ys.sum()
        return ys, updates

    results = []
    for scan in (pytensor.scan, innergraph.scan):
        rng.set_value(np.random.default_rng(3))
        counter.set_value(0.0)
        ys, updates = build(scan)
        fn = pytensor.function([], ys, updates=updates)
        results.append((fn(), fn(), counter.get_value()))
    np.testing.assert_allclose(results[0][0], results[1][0])
    np.testing.assert_allclose(results[0][1], results[1][1])
    assert results[0][2] == pytest.approx(results[1][2])


def test_scan_with_updates_returns_pytensor_structure():
    x = pt.dscalar("x")
    ys, updates = innergraph.scan(lambda y: y + 1, outputs_info=[x], n_steps=3)
    assert isinstance(ys, pt.TensorVariable) and len(updates) == 0
    ys_list = innergraph.scan(lambda y: [y + 1, y * 2], outputs_info=[x, None], n_steps=3, return_updates=False)
    assert isinstance(ys_list, list) and len(ys_list) == 2


def test_consumer_checks_its_inputs():
    from innergraph.core.errors import BodyTypeError

    x = pt.dscalar("x")
    ys = innergraph.scan(lambda y: y * 2, outputs_info=[x], n_steps=3, return_updates=False)
    node = ys.owner.inputs[0].owner  # Subtensor of the scan output
    scan_node = next(n for n in applys_between([x], [ys]) if isinstance(n.op, Scan))
    function, n_steps, *outer = scan_node.inputs
    with pytest.raises(BodyTypeError, match="sit_sot input 0"):
        scan_node.op.make_node(function, n_steps, pt.dmatrix("wrong_state"))
    assert node is not None


def test_scan_lifts_only_the_scan_it_builds():
    x = pt.dscalar("x")
    earlier = pytensor.scan(lambda y: y + 1, outputs_info=[x], n_steps=2, return_updates=False)
    later = innergraph.scan(lambda y, e: y * e, outputs_info=[x], non_sequences=[earlier[-1]], n_steps=2, return_updates=False)
    nodes = {v.owner for v in ancestors([later]) if v.owner is not None}
    assert sum(isinstance(n.op, NativeScan) for n in nodes) == 1  # `earlier`, untouched
    assert sum(isinstance(n.op, Scan) for n in nodes) == 1
    assert earlier.owner.inputs[0].owner is not None  # the caller's graph is unchanged


@pytest.mark.parametrize("use_op_pushforward", [False, True], ids=["from pullbacks", "the Op's own"])
def test_pushforward_matches_vanilla(use_op_pushforward):
    """PyTensor builds a pushforward from two pullbacks unless asked for the Op's own, which is `Scan.pushforward`."""
    from pytensor.gradient import pushforward

    def build(scan) -> tuple[list, Any]:
        x, s = inputs()
        v = pt.dvector("v")
        y = several_outputs(scan, x, s)
        return [x, s, v], pushforward(y, s, v, use_op_pushforward=use_op_pushforward)

    vals = (*values(), np.array([1.0, -1.0, 0.5, 0.2, 0.3]))
    expected = vanilla_values(lambda: build(pytensor.scan), vals, DEFAULT)
    got = pytensor.function(*build(innergraph.scan), mode=IN_GRAPH)(*vals)
    np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_infer_shape_does_not_run_the_loop():
    x, s = inputs()
    y = innergraph.scan(lambda v, acc: acc + v, sequences=[s], outputs_info=[x], return_updates=False)
    fn = pytensor.function([x, s], y.shape, mode=IN_GRAPH, on_unused_input="ignore")
    assert list(fn(*values())) == [5]
    assert graph_stats(fn)["consumers"]["scan"] == 0


def test_nit_sot_shapes_from_outside_the_loop_where_they_can_be():
    """A step shape read from a non-sequence or a row's shape needs no loop; one read from a row's value does."""
    m, n = pt.dmatrix("m"), pt.lscalar("n")
    rows = pt.lvector("rows")

    def step(row, k, size):
        return pt.zeros(size), row * 2.0, pt.zeros(k)

    zs, doubled, ragged = innergraph.scan(step, sequences=[m, rows], non_sequences=[n], return_updates=False)
    node = zs.owner
    assert isinstance(node.op, Scan)
    fg = FunctionGraph([m, rows, n], node.outputs, clone=False, features=[ShapeFeature()])
    zs_shape, doubled_shape, ragged_shape = (fg.shape_feature.shape_of[o] for o in node.outputs)
    loop_free = [*zs_shape, *doubled_shape, ragged_shape[0]]
    assert not any(isinstance(a.owner.op, Scan) for a in ancestors(loop_free) if a.owner is not None)
    assert n in set(ancestors([zs_shape[1]]))  # the non-sequence itself, not the output
    assert any(isinstance(a.owner.op, Scan) for a in ancestors([ragged_shape[1]]) if a.owner is not None)
    mv, rv = np.ones((3, 4)), np.array([2, 2, 2])
    fn = pytensor.function([m, rows, n], [*zs_shape, *doubled_shape, *ragged_shape], mode=IN_GRAPH)
    assert [int(v) for v in fn(mv, rv, 5)] == [3, 5, 3, 4, 3, 2]


def test_untraced_state_round_trip():
    rng = pytensor.shared(np.random.default_rng(0), name="rng")

    def step(y, g):
        next_g, noise = pt.random.normal(0, 1, rng=g).owner.outputs
        return y + noise, next_g

    (ys, _), _ = pytensor.scan(step, outputs_info=[pt.constant(0.0, dtype="float64"), rng], n_steps=3)
    fg = FunctionGraph([rng], [ys], clone=True)
    (native,) = [n for n in fg.apply_nodes if isinstance(n.op, NativeScan)]
    assert native.op.info.n_untraced_sit_sot == 1
    lift(fg)
    (consumer,) = [n for n in fg.apply_nodes if isinstance(n.op, Scan)]
    assert consumer.op.layout.info == native.op.info
    lower(fg)
    (lowered,) = [n for n in fg.apply_nodes if isinstance(n.op, NativeScan)]
    assert lowered.op == native.op


def test_loops_over_one_body_are_converted_to_numba_once():
    """K loops whose bodies merged are K Scans of one Op; its Numba conversion runs once, not K times (vanilla: K)."""
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    xs = [pt.dvector(f"x{i}") for i in range(4)]
    outs = [
        pytensor.scan(lambda x, a: a * 0.9 + x, sequences=[x], outputs_info=[pt.constant(0.0, dtype="float64")], return_updates=False)[-1]
        for x in xs
    ]
    pytensor.function(xs, pt.add(*outs), mode="NUMBA")  # loads the Numba dispatch

    def conversions():
        """The function compiled, and the Scan conversions it made (counted around whatever is registered now)."""
        calls = []
        original = numba_funcify_and_cache_key.dispatch(NativeScan)

        def counting(op, node=None, **kwargs):
            calls.append(op)
            return original(op, node=node, **kwargs)

        numba_funcify_and_cache_key.register(NativeScan, counting)
        try:
            return pytensor.function(xs, pt.add(*outs), mode="NUMBA"), len(calls)
        finally:
            numba_funcify_and_cache_key.register(NativeScan, original)

    innergraph.clear_body_cache()
    fn, ours = conversions()
    with innergraph.uninstalled():  # vanilla's registration (innergraph's, for the body by reference, is reverted)
        _, theirs = conversions()
    scans = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    assert len(scans) == 4 and len({n.op for n in scans}) == 1
    assert (ours, theirs) == (1, 4)


def _decay(v):
    acc = 0.0
    for x in v:
        acc = acc * 0.9 + x
    return acc


def test_lowered_bodies_are_not_canonicalized_twice():
    """The pipeline rewrote a lowered body with the outer graph; its native compile skips canonicalize/stabilize."""
    x0 = pt.dscalar("x0")
    ys = pytensor.scan(lambda y: pt.exp(y) * 1 + 0, outputs_info=[x0], n_steps=3, return_updates=False)
    fn = pytensor.function([x0], ys)
    (node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    assert {"canonicalize", "stabilize"} <= set(node.op.mode._optimizer.exclude)
    expected, y = [], 0.4
    for _ in range(3):
        y = np.exp(y)
        expected.append(y)
    np.testing.assert_allclose(fn(0.4), expected)



def test_a_lowered_scan_carries_the_compiled_mode_without_the_passes_its_body_went_through():
    """PyTensor 3.3 rewrites a Scan's inner graph with its own mode when it has one: the lowered Scan's
    is the compiled mode without canonicalize, stabilize and the round trip, its other exclusions kept."""
    import pickle

    from pytensor.compile.mode import Mode

    from innergraph.lifting.rules import LoweredScanMode, already_rewritten

    x0 = pt.dscalar("x0")
    ys = pytensor.scan(lambda y: y + 1, outputs_info=[x0], n_steps=4, return_updates=False)
    compiled = Mode(linker="py", optimizer="fast_run").excluding("local_useless_elemwise")
    fn = pytensor.function([x0], ys, mode=compiled)
    (node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    np.testing.assert_allclose(fn(0.5), [1.5, 2.5, 3.5, 4.5])
    mode = node.op.mode
    assert type(mode) is LoweredScanMode
    excluded = set(mode.provided_optimizer.exclude)
    assert {"canonicalize", "stabilize", "innergraph_lift", "local_useless_elemwise"} <= excluded
    assert already_rewritten(compiled) is mode  # one mode per query, linker and refold: one native Op per body
    # pickled, it is PyTensor's own Mode with the same linker and query
    unpickled = pickle.loads(pickle.dumps(mode))
    assert type(unpickled) is Mode and set(unpickled.provided_optimizer.exclude) == excluded
    # a mode subclass (a debugging mode) is kept as it is

    class Custom(Mode):
        pass

    assert type(already_rewritten(Custom(linker="py", optimizer="fast_run"))) is Custom


def test_excluding_pytensors_scan_rewrites_keeps_the_scans_native():
    """``mode.excluding("scan")`` turns PyTensor's Scan rewrites off; innergraph's counterparts go with them."""
    x0 = pt.dscalar("x0")
    xs = pytensor.scan(lambda x: x + 0, outputs_info=[x0], n_steps=5, return_updates=False)
    ys = pytensor.scan(lambda x: x * 1, outputs_info=[x0], n_steps=5, return_updates=False)
    mode = get_default_mode().excluding("scan")
    ours = pytensor.function([x0], [xs, ys], mode=mode)
    with innergraph.uninstalled():
        theirs = pytensor.function([x0], [xs, ys], mode=mode)
    native = [[n.op for n in fn.maker.fgraph.toposort() if isinstance(n.op, NativeScan)] for fn in (ours, theirs)]
    assert len(native[0]) == 2 and native[0] == native[1]  # vanilla's Scans, their inner graphs as vanilla rewrote them
    for got, want in zip(ours(1.5), theirs(1.5), strict=True):
        np.testing.assert_array_equal(got, want)
    # with them, innergraph sees through both loops: x + 0 and x * 1 leave each state as it is
    assert not [n for n in pytensor.function([x0], [xs, ys]).maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
