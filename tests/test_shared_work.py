"""Issue 22: a body shared by K consumers is paid for once.

* work a push-out moves out of a body that K loops share is one call body applied
  to each loop's rows (`innergraph.rewriting.outlined`), not K copies in the outer
  graph: fused once, converted once, values equal vanilla under every linker;
* within one Numba conversion, equal nodes of the outer graph convert once
  (`innergraph.backends.numba_code.convert_once`).
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import FinalizedOpFromGraph
from pytensor.compile.mode import Mode
from pytensor.scalar import Composite
from pytensor.tensor.elemwise import Elemwise

import innergraph
from innergraph_bench.cases import shared_step
from innergraph.core.fold import folded_bodies
from innergraph.core.graph import scope_toposort
from innergraph.ops.call import Call
from innergraph.stats import graph_stats
from typed import recording

K = 3
CASE = shared_step(5, K, length=20)


def compile_case(case, linker, variant="innergraph", excluding=()):
    mode = Mode(linker=linker, optimizer="fast_run").excluding(*excluding)
    if variant == "vanilla":
        with innergraph.uninstalled():  # a Scan's inner function compiles with Scan's own mode
            inputs, outputs = case.build("vanilla")
            fn = pytensor.function(inputs, outputs, mode=mode)
            return fn, fn(*case.values)
    inputs, outputs = case.build("innergraph")
    fn = pytensor.function(inputs, outputs, mode=mode)
    return fn, fn(*case.values)


@pytest.fixture(scope="module")
def numba_fn():
    return compile_case(CASE, "numba")


@pytest.fixture(scope="module")
def numba_fn_loops_inline():
    """The loops not outlined with their scaffolding (`innergraph.rewriting.outline_loops`): the push-out's call."""
    return compile_case(CASE, "numba", excluding=["innergraph_outline_loops"])


def outer_composites(fn):
    """The outer graph's fused elementwise nodes: an ``Elemwise`` of a ``Composite``, or PyTensor 3.3's kernel holding one."""

    def fused(op):
        if isinstance(op, Elemwise):
            return isinstance(op.scalar_op, Composite)
        return isinstance(op, FinalizedOpFromGraph) and any(fused(n.op) for n in op.fgraph.apply_nodes)

    return [n for n in fn.maker.fgraph.apply_nodes if fused(n.op)]


def test_work_out_of_a_shared_body_is_one_call_body(numba_fn_loops_inline):
    fn, _ = numba_fn_loops_inline
    stats = graph_stats(fn)
    assert stats["consumers"]["scan"] == K and stats["consumers"]["call"] == K
    calls = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Call)]
    assert len({id(n.inputs[0].data) for n in calls}) == 1  # one Body, one constant: fused and converted once
    assert outer_composites(fn) == []  # no per-loop copy of the row-wise work in the outer graph
    (body,) = {n.inputs[0].data for n in calls}
    fused = [n for n in scope_toposort(body.outputs) if isinstance(n.op, Elemwise)]
    assert len(fused) == 1 and isinstance(fused[0].op.scalar_op, Composite)  # the whole step, fused in the body


def test_one_loop_keeps_its_work_inline():
    fn, got = compile_case(shared_step(5, 1, length=20), "numba")
    assert graph_stats(fn)["consumers"]["call"] == 0
    assert len(outer_composites(fn)) == 1  # vanilla's form: the row-wise work fused in the outer graph
    _, want = compile_case(shared_step(5, 1, length=20), "numba", "vanilla")
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("linker", ["py", "cvm", "numba", "jax"])
def test_values_equal_vanilla(linker, numba_fn):
    if linker == "jax":
        pytest.importorskip("jax")
    fn, got = numba_fn if linker == "numba" else compile_case(CASE, linker)
    # under Numba the loops are outlined with their scaffolding and inlined back after the
    # fold (`innergraph.rewriting.outline_loops`): one loop's form per sequence, no call
    assert graph_stats(fn)["consumers"]["call"] == (0 if linker == "numba" else K)
    _, want = compile_case(CASE, linker, "vanilla")
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_pushed_work_of_a_shared_body_converts_once_under_numba(monkeypatch):
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    import innergraph.backends.numba  # noqa: F401  (the dispatchers, patched)

    original = numba_funcify_and_cache_key.dispatch(Composite)
    seen = []

    def counting(op, node=None, **kwargs):
        seen.append(op)
        return original(op, node=node, **kwargs)

    numba_funcify_and_cache_key.register(Composite)(counting)
    try:
        compile_case(shared_step(6, 4, length=10), "numba")
        ours = len(seen)
        seen.clear()
        compile_case(shared_step(6, 4, length=10), "numba", "vanilla")
        theirs = len(seen)
    finally:
        numba_funcify_and_cache_key.register(Composite)(original)
    # innergraph: the pushed-out work (one call body) and the decaying sum (one Scan Op for the four
    # loops) convert once each; vanilla: both, in each Scan's inner function
    assert (ours, theirs) == (2, 8)


def test_equal_outer_nodes_convert_once(monkeypatch):
    import innergraph.backends.numba_code as code

    converted: list = []
    convert = code.numba_funcify_ensure_cache
    monkeypatch.setattr(code, "numba_funcify_ensure_cache", recording(converted, convert))
    xs = [pt.dvector(f"x{i}") for i in range(4)]
    outs = [pt.cumsum(x) for x in xs]  # four equal CumOp nodes over different inputs
    fn = pytensor.function(xs, outs, mode=Mode(linker="numba", optimizer="fast_run"))
    assert len([n for n in fn.maker.fgraph.apply_nodes if type(n.op).__name__ == "CumOp"]) == 4
    assert len([op for op in converted if type(op).__name__ == "CumOp"]) == 1
    values = [np.arange(float(i + 2)) for i in range(4)]
    for got, v in zip(fn(*values), values, strict=True):
        np.testing.assert_array_equal(got, np.cumsum(v))


def test_a_graph_compiled_with_innergraphs_rewrites_excluded_converts_as_pytensor_does(monkeypatch):
    """innergraph installed, its rewrites excluded (not vanilla: innergraph's conversion runs, and must
    convert every node, as PyTensor's does)."""
    import innergraph.backends.numba_code as code

    converted: list = []
    convert = code.numba_funcify_ensure_cache
    monkeypatch.setattr(code, "numba_funcify_ensure_cache", recording(converted, convert))
    xs = [pt.dvector(f"x{i}") for i in range(4)]
    mode = Mode(linker="numba", optimizer="fast_run").excluding("innergraph")
    pytensor.function(xs, [pt.cumsum(x) for x in xs], mode=mode)
    assert len([op for op in converted if type(op).__name__ == "CumOp"]) == 4


def test_outer_nodes_that_differ_in_a_constant_convert_apart(monkeypatch):
    import innergraph.backends.numba_code as code

    converted: list = []
    convert = code.numba_funcify_ensure_cache
    monkeypatch.setattr(code, "numba_funcify_ensure_cache", recording(converted, convert))
    x, y = pt.dvector("x"), pt.dvector("y")
    fn = pytensor.function([x, y], [pt.cumsum(x)[:2], pt.cumsum(y)[:3]], mode=Mode(linker="numba", optimizer="fast_run"))
    slices = [n for n in fn.maker.fgraph.apply_nodes if type(n.op).__name__ == "Subtensor"]
    assert len(slices) == 2 and slices[0].op == slices[1].op  # one Op, two constant stops
    assert len([op for op in converted if type(op).__name__ == "Subtensor"]) == 2
    assert len([op for op in converted if type(op).__name__ == "CumOp"]) == 1
    got = fn(np.arange(5.0), np.arange(5.0) * 2)
    np.testing.assert_array_equal(got[0], np.cumsum(np.arange(5.0))[:2])
    np.testing.assert_array_equal(got[1], np.cumsum(np.arange(5.0) * 2)[:3])


def test_calls_of_one_body_with_an_argument_repeated_or_not_convert_apart():
    # Call(body, o, o) compiles to code reading one argument twice: Call(body, x, o), an equal Op over
    # the same body, must not share it (issue 47's generator found the gradient 2 x x for 2 x, where
    # two spellings of ones merged after merge_arguments had run). The graph is linked as the
    # pipeline leaves such a graph: lifted, the two calls wired otherwise.
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.numba.linker import NumbaLinker

    from innergraph.rewriting.lift import mark_lifted

    x, o = pt.dvector("x"), pt.dvector("o")
    closure = innergraph.inner_graph(lambda a, b: a * (b * 2.0) - b, [x, o])
    outputs: list[Any] = [innergraph.call(closure, x, o), innergraph.call(closure, o, o)]
    fg = FunctionGraph([x, o], outputs, clone=False)
    mark_lifted(fg)
    calls = sorted(fg.apply_nodes, key=lambda n: n.inputs[1] is x)  # (o, o) converts first
    body: Any = calls[0].inputs[0]
    assert [type(n.op) for n in calls] == [Call, Call] and body.equals(calls[1].inputs[0])
    linked: Any = NumbaLinker().accept(fg).make_thunk()
    thunk, cells, results = linked[:3]
    xv, ov = np.array([0.5, -1.0, 2.0]), np.array([3.0, 0.25, -1.5])
    cells[0].storage[0], cells[1].storage[0] = xv, ov
    thunk()
    np.testing.assert_allclose(results[0].storage[0], xv * ov * 2.0 - ov, rtol=1e-15)
    np.testing.assert_allclose(results[1].storage[0], ov * ov * 2.0 - ov, rtol=1e-15)


@pytest.mark.monkey_patch_only  # checks the numba_funcify_ensure_cache record (a delegate in a patched PyTensor)
def test_uninstall_reverts_the_outer_conversion_memo():
    import pytensor.link.numba.dispatch.basic as numba_basic

    import innergraph.backends.numba  # noqa: F401  (the first Numba link loads it; this test may run first)
    from innergraph.backends import numba_code

    assert numba_basic.numba_funcify_ensure_cache is numba_code.convert_once
    innergraph.uninstall()
    try:  # PyTensor's own function again (innergraph's conversion calls it under another name)
        restored = numba_basic.numba_funcify_ensure_cache
        assert (restored.__module__, restored.__name__) == (numba_basic.__name__, "numba_funcify_ensure_cache")
    finally:
        innergraph.install()
    assert numba_basic.numba_funcify_ensure_cache is numba_code.convert_once
