"""The pipeline lifts plain OpFromGraphs (``innergraph_lift_ofg``): importing innergraph is enough.

The pass is first called directly on FunctionGraphs (so that a planted fault fails fast):
its count, each gain alone, what stays native, the Scans of a lifted graph, the merge.
The other tests build PyTensor's own `OpFromGraph` and compile it with the default
pipeline; the reference is the same graph compiled with innergraph uninstalled.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.link.vm import VMLinker
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph import graph_stats
from innergraph.core.graph import body_of
from innergraph.protocol import runtime
from innergraph.ops.call import Call
from innergraph.ops.scan import Scan as InGraphScan
from innergraph.rewriting.lift import mark_lifted
from innergraph.rewriting.lift_ofg import lift_op_from_graphs
from innergraph.core.types import Body
from typed import grad, pushforward

x, y = pt.dvector("x"), pt.dvector("y")
X = np.linspace(0.1, 1.0, 5)
Y = np.linspace(-1.0, 2.0, 5)
SAMPLE = (X, Y, Y, X)  # the arguments every test calls its functions with
PYTHON_VM = VMLinker(use_cloop=False, c_thunks=False)  # Scan gradients need a VM; this one compiles no C


def mode_for(linker):
    return Mode(linker=linker, optimizer="fast_run")


def compile_both(inputs, outputs=None, linker="cvm"):
    """The graph compiled with innergraph, and with PyTensor alone (innergraph uninstalled).

    Uninstalled, because ``excluding("innergraph")`` only reaches the outer graph:
    a native Scan or OpFromGraph compiles its inner graph with its own mode. The
    reference is called once while uninstalled, so its inner functions are
    compiled then (an OpFromGraph compiles its own on its first call). ``inputs`` may be
    a function returning ``(inputs, outputs)``: the reference is then also *built*
    uninstalled (tests/vanilla.py), as every graph with a gradient is here (a gradient
    goes through the pullbacks innergraph patches).
    """
    if callable(inputs):
        build = inputs
        inputs, outputs = build()
    else:
        build = lambda: (inputs, outputs)  # noqa: E731 - a forward graph, no patched pullback in it
    ours = pytensor.function(inputs, outputs, mode=mode_for(linker))
    with innergraph.uninstalled():
        vanilla_inputs, vanilla_outputs = build()
        vanilla = pytensor.function(vanilla_inputs, vanilla_outputs, mode=Mode(linker=linker, optimizer="fast_run"))
        vanilla(*SAMPLE[: len(inputs)])
    return ours, vanilla


def assert_same_values(f, g, *args):
    got, want = f(*args), g(*args)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def nodes_of(fn, cls, exact=True):
    return [n for n in fn.maker.fgraph.apply_nodes if (type(n.op) is cls if exact else isinstance(n.op, cls))]


def body_params(call_node):
    return body_of(call_node.inputs[0]).param_types


def two_output_ofg(cls=OpFromGraph, **kwargs):
    """A cheap output and an expensive one (an outer product and its tanh)."""
    p, q = pt.dvector("p"), pt.dvector("q")
    return cls([p, q], [pt.exp(p) * q, pt.tanh(pt.outer(p, q)).sum(axis=0)], **kwargs)


# The pass called directly --------------------------------------------------------------------
#
# `lift_op_from_graphs` on a FunctionGraph of PyTensor's own nodes, before any compilation
# (first, so that a planted fault fails fast): the count it returns, which OpFromGraphs it
# lifts (each gain alone), which it leaves native, the Scans it lifts with them, the merge.

P, Q = pt.dvector("p"), pt.dvector("q")
EXP_TIMES = OpFromGraph([P, Q], [pt.exp(P) * Q])  # nothing to gain unless its application gives one
TWICE = OpFromGraph([P, Q], [pt.exp(P) * Q], pullback=lambda inputs, outputs, g: [g[0] * 2.0, g[0]])  # EXP_TIMES's body, another Op


def lifted(outputs, inputs=(x, y), marked=False):
    """A copy of the graph after `lift_op_from_graphs` (the graph first marked lifted, if asked), and its count."""
    fgraph = FunctionGraph(list(inputs), list(outputs), clone=True)
    if marked:
        mark_lifted(fgraph)
    return fgraph, lift_op_from_graphs(fgraph)


def ops_of(fgraph, cls):
    return [n.op for n in fgraph.apply_nodes if type(n.op) is cls]


@pytest.mark.parametrize(
    "outputs, inputs",
    [
        (lambda: [EXP_TIMES(x, pt.constant(np.full(5, 2.0)))], [x]),
        (lambda: [EXP_TIMES(x, x)], [x]),
        (lambda: OpFromGraph([P, Q], [P, P * Q])(x, y), [x, y]),
    ],
    ids=["a constant argument", "a repeated argument", "an output returning an input"],
)
def test_each_gain_alone_lifts_the_ofg(outputs, inputs):
    fgraph, count = lifted(outputs(), inputs)
    assert count == 1
    assert not ops_of(fgraph, OpFromGraph) and len(ops_of(fgraph, Call)) == 1


def test_an_ofg_with_nothing_to_gain_is_left_as_it_was():
    fgraph, count = lifted([EXP_TIMES(x, y)])
    assert count == 0
    assert ops_of(fgraph, OpFromGraph) == [EXP_TIMES] and not ops_of(fgraph, Call)
    # 300 arguments, none repeated: the lengths compared are not CPython's cached small ints.
    params, args = [pt.dvector(f"p{i}") for i in range(300)], [pt.dvector(f"a{i}") for i in range(300)]
    wide = OpFromGraph(params, [pt.add(*params)])
    fgraph, count = lifted([wide(*args)], args)
    assert count == 0 and ops_of(fgraph, OpFromGraph) == [wide]


def test_an_output_only_an_unused_input_reads_is_dead():
    sum_prod = OpFromGraph([P, Q], [P + Q, P * Q])  # nothing to gain while both outputs are read
    first, second = sum_prod.make_node(x, y).outputs
    reads_first = OpFromGraph([P, Q], [P * 2.0], on_unused_input="ignore")  # its second input unused
    fgraph, count = lifted([first, reads_first(x, second)])
    assert count == 2 and not ops_of(fgraph, OpFromGraph)
    # Read as an input the reader uses, the same output is live, and neither Op gains.
    reads_both = OpFromGraph([P, Q], [P * Q])
    fgraph, count = lifted([first, reads_both(x, second)])
    assert count == 0 and len(ops_of(fgraph, OpFromGraph)) == 2 and not ops_of(fgraph, Call)


def test_an_ofg_with_nothing_to_gain_stays_native_beside_one_lifted():
    fgraph, count = lifted([pt.add(EXP_TIMES(x, x), OpFromGraph([P, Q], [P - Q])(x, y))])
    assert count == 1
    (native,) = [n for n in fgraph.apply_nodes if type(n.op) is OpFromGraph]
    assert native.inputs == fgraph.inputs and len(ops_of(fgraph, Call)) == 1


def test_native_scans_are_lifted_with_the_ofgs_in_a_lifted_graph_only():
    total = pytensor.scan(lambda row, acc: acc + row, sequences=[x], outputs_info=[pt.constant(0.0, dtype="float64")], return_updates=False)[-1]
    fgraph, count = lifted([EXP_TIMES(x, x), total], [x])
    assert count == 1 and len(ops_of(fgraph, NativeScan)) == 1 and len(ops_of(fgraph, Call)) == 1
    fgraph, count = lifted([EXP_TIMES(x, x), total], [x], marked=True)  # innergraph_lift ran on it
    assert count == 2 and not ops_of(fgraph, NativeScan) and len(ops_of(fgraph, InGraphScan)) == 1


def test_two_lifts_of_one_body_are_merged_and_one_lift_merges_nothing():
    assert EXP_TIMES != TWICE  # its pullback makes it another Op: each lift makes its own function
    fgraph, count = lifted([pt.add(EXP_TIMES(x, x), TWICE(y, y))])
    assert count == 2 and graph_stats(fgraph)["bodies"] == 1
    first, second = [n for n in fgraph.apply_nodes if isinstance(n.op, Call)]
    assert first.inputs[0] is second.inputs[0]
    # One lift: the rest of the graph is left to PyTensor's own merge, later.
    fgraph, count = lifted([pt.add(EXP_TIMES(x, x), pt.exp(y), pt.exp(y))])
    exp_y = [n for n in fgraph.apply_nodes if n.op == pt.exp(y).owner.op and n.inputs == [fgraph.inputs[1]]]
    assert count == 1 and len(exp_y) == 2


# Dead outputs, under every linker ------------------------------------------------------


@pytest.fixture(scope="module", params=["py", "cvm", "numba"])
def dead_output(request):
    used, _ = two_output_ofg()(x, y)
    return compile_both([x, y], [used], linker=request.param)


def test_a_dead_output_is_gone_with_values_as_vanilla(dead_output):
    ours, vanilla = dead_output
    assert graph_stats(vanilla)["unused_outputs"] == 1
    stats = graph_stats(ours)
    assert stats["unused_outputs"] == 0 and stats["consumers"]["call"] == 1
    (node,) = nodes_of(ours, Call)
    assert len(node.outputs) == 1 and not nodes_of(ours, OpFromGraph)
    assert_same_values(ours, vanilla, X, Y)


# Unused inputs, constant and repeated arguments ---------------------------------------------


def test_an_unused_input_is_dropped():
    p, q, r = pt.dvectors("p", "q", "r")
    out = OpFromGraph([p, q, r], [p * q + 1], on_unused_input="ignore")(x, y, x + y)
    ours, vanilla = compile_both([x, y], [out])
    (node,) = nodes_of(ours, Call)
    assert len(body_params(node)) == 2 and graph_stats(ours)["unused_params"] == 0
    assert graph_stats(vanilla)["unused_params"] == 1
    assert_same_values(ours, vanilla, X, Y)


def test_a_constant_argument_is_inlined_and_a_repeated_one_passed_once():
    p, q, r = pt.dvectors("p", "q", "r")
    op = OpFromGraph([p, q, r], [pt.exp(p) * q - r])
    out = op(x, x, pt.constant(np.full(5, 2.0)))
    ours, vanilla = compile_both([x], [out])
    (node,) = nodes_of(ours, Call)
    assert node.inputs[1:] == [ours.maker.fgraph.inputs[0]]  # one argument left: x
    assert_same_values(ours, vanilla, X)


# Merging -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_equal_ofgs():
    def helper():  # built twice, with other variable names each time
        u, v = pt.dvector(), pt.dvector()
        return OpFromGraph([u, v], [pt.tanh(u) * v + u])

    a, b = helper(), helper()
    assert a is not b and a == b
    before = sum(runtime.compile_count.values())
    fns = compile_both([x, y], [a(x, y) + b(y, x)])
    return fns, sum(runtime.compile_count.values()) - before


def test_two_applications_of_equal_ofgs_share_one_body_compiled_once(two_equal_ofgs):
    (ours, vanilla), compiled = two_equal_ofgs
    stats = graph_stats(ours)
    assert stats["consumers"]["call"] == 2 and stats["bodies"] == 1
    first, second = nodes_of(ours, Call)
    assert first.inputs[0] is second.inputs[0]
    assert compiled == 1
    assert graph_stats(vanilla)["consumers"]["call"] == 2
    assert_same_values(ours, vanilla, X, Y)


# Gradients, with and without overrides ---------------------------------------------------------


def scaled_pullback(inputs, outputs, cotangents):
    p, q = inputs
    g, _ = cotangents
    return [g * q * 3.0, g * 5.0]


@pytest.mark.parametrize("kwargs", [{}, {"pullback": scaled_pullback}], ids=["plain", "pullback"])
def test_gradients_keep_their_values(kwargs):
    def build():
        used, _ = two_output_ofg(**kwargs)(x, y)
        cost = used.sum()
        return [x, y], [cost, *grad(cost, [x, y])]

    ours, vanilla = compile_both(build)
    assert not nodes_of(ours, OpFromGraph)  # the forward Op and the pullback's Op are lifted
    assert all(n.op == Call() for n in nodes_of(ours, Call))  # compile-time calls carry no override
    assert_same_values(ours, vanilla, X, Y)


def test_pushforward_override_keeps_its_values():
    def jvp(inputs, tangents):
        return [tangents[0] * 11.0 + tangents[1], tangents[1]]

    def build():
        used, _ = two_output_ofg(pushforward=jvp)(x, y)
        tx, ty = pt.dvector("tx"), pt.dvector("ty")
        (out,) = pushforward([used], [x, y], [tx, ty], use_op_pushforward=True)
        return [x, y, tx, ty], [used, out]

    ours, vanilla = compile_both(build)
    assert graph_stats(ours)["unused_outputs"] == 0
    assert_same_values(ours, vanilla, X, Y, Y, X)


@pytest.fixture(scope="module")
def gradient_numba():
    def build():
        used, _ = two_output_ofg()(x, y)
        cost = (used**2).sum()
        return [x, y], [cost, *grad(cost, [x, y])]

    return compile_both(build, linker="numba")


def test_gradients_under_numba(gradient_numba):
    ours, vanilla = gradient_numba
    # Vanilla's pullback Op reads both outputs (as inputs it does not use): both are computed.
    assert graph_stats(vanilla)["unused_params"] > 0 and not nodes_of(vanilla, Call)
    stats = graph_stats(ours)
    assert stats["unused_outputs"] == stats["unused_params"] == 0
    assert sorted(len(n.outputs) for n in nodes_of(ours, Call)) == [1, 2]  # the forward call, the pullback call
    assert_same_values(ours, vanilla, X, Y)


# What stays native ---------------------------------------------------------------------------


class Fixed(OpFromGraph):
    """Stands for an Op with a fixed signature (AllocDiag, Einsum, ...)."""


def test_subclasses_are_untouched():
    used, _ = two_output_ofg(Fixed)(x, y)
    ours, vanilla = compile_both([x, y], [used])
    assert len(nodes_of(ours, Fixed)) == 1 and not nodes_of(ours, Call)
    assert graph_stats(ours)["unused_outputs"] == 1
    assert_same_values(ours, vanilla, X, Y)


def test_in_place_and_custom_mode_ofgs_are_untouched():
    in_place = two_output_ofg(destroy_map={0: [0]})
    custom = two_output_ofg(mode="FAST_COMPILE")
    fg = FunctionGraph([x, y], [in_place(x, y)[0], custom(x, y)[0]], clone=False)
    assert lift_op_from_graphs(fg) == 0
    assert [type(n.op) for n in fg.toposort()] == [OpFromGraph, OpFromGraph]
    ours, vanilla = compile_both([x, y], [custom(x, y)[0]])
    assert nodes_of(ours, OpFromGraph) and not nodes_of(ours, Call)
    assert_same_values(ours, vanilla, X, Y)


def test_an_ofg_the_lift_would_not_improve_stays_native():
    p, q = pt.dvector("p"), pt.dvector("q")
    both = OpFromGraph([p, q], [p + q, p * q])(x, y)
    ours, vanilla = compile_both([x, y], both)
    assert len(nodes_of(ours, OpFromGraph)) == 1 and not nodes_of(ours, Call)
    assert_same_values(ours, vanilla, X, Y)


def test_inline_ofgs_are_inlined_as_in_vanilla():
    used, _ = two_output_ofg(inline=True)(x, y)
    ours, vanilla = compile_both([x, y], [used])
    assert not nodes_of(ours, OpFromGraph, exact=False) and not nodes_of(ours, Call)
    assert [type(n.op) for n in ours.maker.fgraph.toposort()] == [type(n.op) for n in vanilla.maker.fgraph.toposort()]
    assert_same_values(ours, vanilla, X, Y)
    # Without PyTensor's inlining, an inline Op stays what it is, as in vanilla.
    kept = pytensor.function([x, y], [used], mode=Mode(linker="cvm", optimizer="fast_run").excluding("inline_ofg_expansion"))
    assert nodes_of(kept, OpFromGraph) and not nodes_of(kept, Call)


@pytest.mark.parametrize("tag", ["innergraph_ofg", "innergraph"])
def test_the_off_switch(tag):
    used, _ = two_output_ofg()(x, y)
    fn = pytensor.function([x, y], [used], mode=Mode(linker="cvm", optimizer="fast_run").excluding(tag))
    assert nodes_of(fn, OpFromGraph) and not nodes_of(fn, Call)
    assert graph_stats(fn)["unused_outputs"] == 1


def test_without_the_lift_a_native_ofg_still_loses_its_dead_output():
    used, _ = two_output_ofg()(x, y)
    fn = pytensor.function([x, y], [used], mode=Mode(linker="cvm", optimizer="fast_run").excluding("innergraph_lift_ofg"))
    (node,) = nodes_of(fn, OpFromGraph)
    assert not nodes_of(fn, Call) and len(node.outputs) == 1
    assert graph_stats(fn)["unused_outputs"] == 0


# Nesting ---------------------------------------------------------------------------------------


def scan_over_an_ofg():
    op = two_output_ofg()

    def step(row, acc):
        used, _ = op(row, acc)
        return used

    ys = pytensor.scan(step, sequences=[pt.outer(x, y)], outputs_info=[y], return_updates=False)
    return ys[-1].sum()


def test_an_ofg_in_a_scan_body_under_numba():
    ours, vanilla = compile_both([x, y], [scan_over_an_ofg()], linker="numba")
    (scan,) = nodes_of(ours, NativeScan)
    (call,) = [n for n in scan.op.fgraph.apply_nodes if isinstance(n.op, Call)]
    assert len(call.outputs) == 1
    (native,) = [n for s in nodes_of(vanilla, NativeScan) for n in s.op.fgraph.apply_nodes if isinstance(n.op, OpFromGraph)]
    assert len(native.outputs) == 2
    assert_same_values(ours, vanilla, X, Y)


def test_an_ofg_in_a_scan_body():
    def build():
        cost = scan_over_an_ofg()
        return [x, y], [cost, *grad(cost, [x, y])]

    ours, vanilla = compile_both(build)
    inner = [n for s in nodes_of(ours, NativeScan) for n in s.op.fgraph.apply_nodes]
    assert any(isinstance(n.op, Call) for n in inner) and not any(type(n.op) is OpFromGraph for n in inner)
    ours_stats, vanilla_stats = graph_stats(ours), graph_stats(vanilla)
    assert ours_stats["unused_outputs"] == ours_stats["unused_params"] == 0 < vanilla_stats["unused_params"]
    calls = [n for n in inner if isinstance(n.op, Call)]
    assert sorted(len(n.outputs) for n in calls) == [1, 2]  # the step's call lost its dead output
    assert_same_values(ours, vanilla, X, Y)


def test_an_op_from_graph_holding_a_scan_stays_native():
    """An OpFromGraph around a Scan is not lifted (`lift_ofg._holds_inner_graphs`).

    Lifted, this one (a repeated argument, then its gradient) once broke a body's closure
    in dead-slot removal (the thorough differential run found it). Lifted on 2026-12-02 it
    compiled and equalled vanilla (design/opfromgraph.md); the guard stays until a thorough
    run judges such lifts: the Op stays native, and its values and gradients are vanilla's.
    """
    def build():
        p, q, k = pt.dscalar("p"), pt.dvector("q"), pt.dvector("k")
        ys = pytensor.scan(
            lambda s1, s2, acc, v, w: acc * 0.5 + pt.tanh((v * v + v).sum()) * 0.5 + (s2 - s1),
            sequences=[{"input": q, "taps": [-1, 0]}],
            outputs_info=[p],
            non_sequences=[k, p],
            return_updates=False,
            mode=mode_for(PYTHON_VM),  # no C compilation, here or in the reference: this test stays fast
        )
        op = OpFromGraph([p, q, k], [ys[-1]])
        out = op(x.sum(), x, x)  # a repeated argument: the lift would gain
        return [x], [out, grad(out, x)]

    ours, vanilla = compile_both(build, linker=PYTHON_VM)
    assert nodes_of(ours, OpFromGraph)
    assert_same_values(ours, vanilla, X)


# Determinism -------------------------------------------------------------------------------------


def test_compiling_twice_gives_the_same_graph():
    def build():
        used, _ = two_output_ofg()(x, y)
        helper = OpFromGraph([x], [pt.exp(x) + 1])
        return [used + helper(x) + helper(y)]

    ours = mode_for("cvm")
    first, second = (pytensor.function([x, y], build(), mode=ours).maker.fgraph for _ in range(2))
    assert [str(n.op) for n in first.toposort()] == [str(n.op) for n in second.toposort()]
    assert equal_computations(first.outputs, second.outputs, first.inputs, second.inputs)
