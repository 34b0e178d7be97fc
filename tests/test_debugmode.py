"""PyTensor's DebugMode compiles and runs what innergraph built or rewrote, gradients included.

DebugMode rewrites every graph twice and compares the rewrite events (a pipeline
whose result depends on hash order fails with ``StochasticOrder``), then evaluates
every variable the graph ever held, replaced ones included, with Python and C
implementations, and checks each replacement against what it replaced. Each case
is compared with the vanilla construct (PyTensor's own Scan, IfElse, OpFromGraph)
compiled without innergraph's rewrites. Graphs are kept small: DebugMode is slow.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor import scalar as ps
from pytensor.compile.debug.debugmode import BadOptimization, DebugMode
from pytensor.compile.mode import Mode, optdb
from pytensor.graph.basic import NominalVariable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.graph.traversal import ancestors
from pytensor.ifelse import ifelse as vanilla_ifelse
from pytensor.scan.utils import until
from pytensor.tensor.elemwise import Elemwise

import innergraph
from innergraph import graph_stats
from innergraph_bench import cases
from innergraph.rewriting.debugmode import forget_hidden
from innergraph.core.graph import InnerGraph
from innergraph.ops.ifelse import IfElse
from innergraph.rewriting.db import unregister
from typed import grad as grad_of

#: The reference's mode: vanilla PyTensor, compiled with innergraph uninstalled (`_vanilla`).
CVM = Mode(linker="cvm", optimizer="fast_run")

Graph = tuple[list[Any], list[Any], list[Any]]  # inputs, outputs, input values


def _with_grads(inputs: list[Any], out: Any, values: list[Any]) -> Graph:
    cost = out if out.ndim == 0 else out.sum()
    return inputs, [out, *grad_of(cost, inputs, disconnected_inputs="ignore")], values


X_VALUE, A_VALUE = np.array([0.3, -0.8, 1.2]), 0.7


def _xa() -> tuple[Any, Any]:
    return pt.dvector("x"), pt.dscalar("a")


def call(variant: str) -> Graph:
    x, a = _xa()
    if variant == "innergraph":
        y = innergraph.call(lambda v: (pt.sin(v) * a).sum(), x)
    else:
        v, b = pt.dvector(), pt.dscalar()
        y = OpFromGraph([v, b], [(pt.sin(v) * b).sum()])(x, a)
    return _with_grads([x, a], y, [X_VALUE, A_VALUE])


def _scan(variant: str) -> Callable[..., Any]:
    return innergraph.scan if variant == "innergraph" else pytensor.scan


def scan(variant: str) -> Graph:
    x, a = _xa()
    ys = _scan(variant)(
        lambda v, acc, w: acc * w + pt.sin(v), sequences=[x], outputs_info=[a], non_sequences=[a], return_updates=False
    )
    return _with_grads([x, a], ys, [X_VALUE, A_VALUE])


def scan_until(variant: str) -> Graph:
    _, a = _xa()
    ys = _scan(variant)(lambda y: (y * 1.5 + 0.1, until(y > 3.0)), outputs_info=[a], n_steps=8, return_updates=False)
    return _with_grads([a], ys, [A_VALUE])


def ifelse(variant: str) -> Graph:
    x, a = _xa()
    cond_fn = innergraph.ifelse if variant == "innergraph" else vanilla_ifelse
    y = cond_fn(a > 0, pt.exp(x).sum() * a, (x**2).sum() + a)
    return _with_grads([x, a], y, [X_VALUE, A_VALUE])


def op_from_graph(variant: str) -> Graph:
    x, a = _xa()
    u, w = pt.dvector(), pt.dscalar()
    build = innergraph.op_from_graph if variant == "innergraph" else OpFromGraph
    op = build([u, w], [pt.exp(u) * w + u])
    first: Any = op(x, a)  # one output each
    y = first + op(x * 2, a)
    return _with_grads([x, a], y, [X_VALUE, A_VALUE])


def inner_graph_consumers(variant: str) -> Graph:
    """One body from `inner_graph`, read by a call and by both branches of a conditional built by hand."""
    x, a = _xa()
    if variant == "innergraph":
        f = innergraph.inner_graph(lambda u, w: pt.tanh(u) * w, [pt.dvector, pt.dscalar]).function
        g = innergraph.inner_graph(lambda u, w: u * w + 1, [pt.dvector, pt.dscalar]).function
        called: Any = innergraph.call(f, x, a)  # one output
        chosen = IfElse(2).make_node(a > 0, innergraph.fold_function(f), innergraph.fold_function(g), x, a, x, a).outputs[0]
    else:
        called = pt.tanh(x) * a
        chosen = vanilla_ifelse(a > 0, pt.tanh(x) * a, x * a + 1)
    return _with_grads([x, a], called + chosen, [X_VALUE, A_VALUE])


def nested(variant: str) -> Graph:
    """A scan whose step calls a function and runs a scan."""
    x, a = _xa()

    def step(v: Any, acc: Any) -> Any:
        if variant == "innergraph":
            g = innergraph.call(lambda s, t: pt.exp(s) * t, v, acc)
        else:
            g = pt.exp(v) * acc
        inner = _scan(variant)(lambda z: z * 0.5 + v, outputs_info=[g], n_steps=2, return_updates=False)
        return inner[-1]

    ys = _scan(variant)(step, sequences=[x], outputs_info=[a], return_updates=False)
    return _with_grads([x, a], ys, [X_VALUE, A_VALUE])


def issue_1669(variant: str) -> Graph:
    case = cases.issue_1669(2)
    inputs, outputs = case.build(variant)
    return inputs, outputs, list(case.values)


def ar2(variant: str) -> Graph:
    case = cases.ar2(n=8)
    inputs, outputs = case.build(variant)
    return inputs, outputs, list(case.values)


CASES = [call, scan, scan_until, ifelse, op_from_graph, inner_graph_consumers, nested, issue_1669, ar2]


#: PyTensor's DebugMode with its default checks; the rewrites run twice (the default,
#: ``config.DebugMode__patience``, is 10): a pipeline that depends on hash order
#: differs between any two runs. `test_the_named_mode` uses the default as it is.
DEBUG = DebugMode(stability_patience=2)


def _check(build: Callable[[str], Graph], mode: Any) -> None:
    inputs, outputs, values = build("innergraph")
    got = pytensor.function(inputs, outputs, mode=mode)(*values)
    with innergraph.uninstalled():  # vanilla: built, compiled and run without innergraph
        v_inputs, v_outputs, _ = build("vanilla")
        want = pytensor.function(v_inputs, v_outputs, mode=CVM)(*values)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("build", CASES, ids=lambda c: c.__name__)
def test_debugmode_matches_vanilla(build):
    # AR(2)'s fused index arithmetic cannot run in DebugMode, with or without innergraph:
    # a scalar `Composite`'s Python implementation raises ("'Scratchpad' object has no
    # attribute 'ufunc'", PyTensor 3.0.7). Without fusion both variants run.
    _check(build, DEBUG.excluding("fusion") if build is ar2 else DEBUG)


def test_the_named_mode():
    _check(call, "DebugMode")


def _reads_a_param(var: Any) -> bool:
    return any(isinstance(v, NominalVariable) for v in ancestors([var]))


def test_the_tracker_keeps_no_hidden_variable():
    """The rewrites imported body nodes (the tracker saw them); none is left for DebugMode's linker to run."""
    inputs, outputs, _ = scan("innergraph")
    fn = pytensor.function(inputs, outputs, mode=DEBUG)
    tracker = fn.maker.fgraph.equivalence_tracker
    imported = [e.node for e in tracker.event_list if e.kind == "import" and e.reason == "innergraph_lift"]
    assert any(_reads_a_param(out) for node in imported for out in node.outputs)
    assert not any(_reads_a_param(v) for v in tracker.all_variables_ever)
    assert not any(isinstance(v.owner.op, InnerGraph) for v in tracker.all_variables_ever if v.owner is not None)
    assert forget_hidden(fn.maker.fgraph) == 0  # nothing left to forget
    assert forget_hidden(FunctionGraph(inputs, outputs, clone=True)) == 0  # no tracker: other modes


@node_rewriter([Elemwise])
def _sin_to_cos(fgraph, node):
    """Wrong, and only in the graph DebugMode compiles (not in the inner compile of the native Scan it checks against)."""
    if isinstance(node.op.scalar_op, ps.Sin) and hasattr(fgraph, "equivalence_tracker"):
        return [pt.cos(node.inputs[0])]
    return None


def test_a_wrong_rewrite_of_a_lifted_body_is_still_caught():
    """Lift, a wrong rewrite of the body, lower: DebugMode compares the lowered Scan with the native one it replaced."""
    a = pt.dscalar("a")
    ys = pytensor.scan(lambda acc: pt.sin(acc) * 0.5, outputs_info=[a], n_steps=3, return_updates=False)
    rewriter = dfs_rewriter(_sin_to_cos)
    optdb.register("wrong_sin_to_cos", rewriter, "fast_run", position=1.57)  # between simplify and lower
    try:
        with pytest.raises(BadOptimization, match="innergraph.lift, then innergraph.lower"):
            pytensor.function([a], ys, mode=DEBUG)(A_VALUE)
    finally:
        unregister(optdb, "wrong_sin_to_cos", rewriter)
        optdb.__db__.pop(type(rewriter).__name__, None)


@pytest.mark.monkey_patch_only
def test_the_patch_of_debugmode_is_reverted_by_uninstall():
    from pytensor.compile.debug import debugmode

    from innergraph.patching import debugmode as patch

    assert debugmode._find_bad_optimizations is patch.find_bad_optimizations
    innergraph.uninstall()
    try:
        assert debugmode._find_bad_optimizations is patch._original
    finally:
        innergraph.install()
    assert debugmode._find_bad_optimizations is patch.find_bad_optimizations


def test_debugmode_lowers_for_pytensors_own_runtime_whatever_the_default_mode():
    """DebugMode rewrites without setting ``config.mode``: the lowering must still see DebugMode, not the default linker.

    With the default mode on Numba, innergraph took DebugMode's compilation for a Numba
    one and kept a reverse loop's accumulator untraced, the form only the JIT backends
    run correctly (`tests/test_untraced_runtime.py`: PyTensor's own Scan runtime loses an
    uncopied untraced state). DebugMode then evaluated that form with PyTensor's
    runtime and returned a wrong gradient (pymc-extras' structural time series: -0.33
    against -0.77). `innergraph.core.dispatch.linker_being_compiled` now recognises
    DebugMode's graph by its equivalence tracker.
    """
    from pytensor.scan.op import Scan as NativeScan

    s0, k = pt.dvector("s0"), pt.dscalar("k")
    trace = pytensor.scan(lambda s: s * k + 3.0, outputs_info=[s0], n_steps=3, return_updates=False)
    grad = grad_of(trace[-1].sum(), [k])
    sample = (np.array([1.0, 2.0]), 2.5)
    with pytensor.config.change_flags(mode="NUMBA"):
        fn = pytensor.function([s0, k], grad, mode=DEBUG)
        (got,) = fn(*sample)
    with innergraph.uninstalled():
        (want,) = pytensor.function([s0, k], grad, mode=CVM)(*sample)
    assert want == pytest.approx(92.25)  # d/dk of sum(s3): sum(s2) + k sum(s1) + k^2 sum(s0)
    assert got == pytest.approx(want, rel=1e-12)
    with pytensor.config.change_flags(mode="NUMBA"):  # the same loops as for PyTensor's cvm runtime
        thunks = pytensor.function([s0, k], grad, mode=Mode(linker="cvm", optimizer="fast_run"))

    def forms(f: Any) -> list[tuple[str | None, Any]]:
        return sorted((n.op.name, n.op.info) for n in f.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan))

    assert forms(fn) == forms(thunks) and len(forms(fn)) == 2
