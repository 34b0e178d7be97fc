# mypy: disable-error-code="override"
# (this file's Ops and linkers declare fgraph_convert with the arguments they take, as PyTensor's own do)
"""Linkers that cannot run innergraph's consumers get PyTensor's native Ops.

The target is a minimal JIT linker defined here: its conversion dispatch converts
PyTensor's own Ops (through ``perform``; PyTensor's IfElse and OpFromGraph by
hand, an OpFromGraph's inner graph with the same dispatch, as real backends do)
and refuses anything else, innergraph's consumers included. Values are compared
with the ``py`` linker on the same graphs.
"""

from functools import singledispatch

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.ifelse import IfElse as NativeIfElse
from pytensor.link.basic import JITLinker
from pytensor.link.numba.linker import NumbaLinker
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.core.dispatch import conversion_dispatches, implements, register_conversion_dispatch, runs
from innergraph.core.graph import scope_toposort
from innergraph.lifting.handover import hand_over, unsupported_consumers
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.scan import Scan
from innergraph.core.types import Body
from typed import call, ifelse

CONSUMERS = (Call, IfElse, Scan)
converted: list[type] = []  # the Op classes the toy dispatches were asked to convert


@singledispatch
def toy_funcify(op, node=None, **kwargs):
    raise NotImplementedError(f"toy linker: no conversion for {op}")


@toy_funcify.register(FunctionGraph)
def _toy_fgraph(fgraph, conversion=None, **kwargs):
    convert = conversion or toy_funcify
    steps = [(node, convert(node.op, node=node)) for node in fgraph.toposort()]

    def run(*inputs):
        env = dict(zip(fgraph.inputs, inputs, strict=True))
        value = lambda v: v.data if isinstance(v, Constant) else env[v]  # noqa: E731
        for node, fn in steps:
            env.update(zip(node.outputs, fn(*[value(v) for v in node.inputs]), strict=True))
        return [value(o) for o in fgraph.outputs]

    return run


def _by_perform(op, node):
    def run(*inputs):
        cells = [[None] for _ in node.outputs]
        op.perform(node, list(inputs), cells)
        return [c[0] for c in cells]

    return run


@toy_funcify.register(Op)
def _toy_op(op, node=None, **kwargs):
    if not type(op).__module__.startswith("pytensor."):
        raise NotImplementedError(f"toy linker: no conversion for {op}")
    converted.append(type(op))
    return _by_perform(op, node)


@toy_funcify.register(NativeIfElse)
def _toy_ifelse(op, node=None, **kwargs):
    converted.append(NativeIfElse)
    n = op.n_outs
    return lambda cond, *args: list(args[:n] if cond else args[n:])


@toy_funcify.register(OpFromGraph)
def _toy_ofg(op, node=None, **kwargs):
    converted.append(OpFromGraph)
    return _toy_fgraph(op.fgraph)


class ToyLinker(JITLinker):
    """A JIT linker with its own conversion dispatch, which knows nothing of innergraph."""

    incompatible_rewrites = ("cxx_only", "BlasOpt")

    def fgraph_convert(self, fgraph, **kwargs):
        return toy_funcify(fgraph)

    def jit_compile(self, fn):
        return fn

    def create_thunk_inputs(self, storage_map):
        assert self.fgraph is not None  # accepted before linking
        return [storage_map[n] for n in self.fgraph.inputs]


@singledispatch
def toy_call_funcify(op, node=None, **kwargs):
    return toy_funcify(op, node=node, **kwargs)


@toy_call_funcify.register(FunctionGraph)
def _toy_call_fgraph(fgraph, **kwargs):
    return _toy_fgraph(fgraph, conversion=toy_call_funcify)


@toy_call_funcify.register(Call)
def _toy_call(op, node=None, **kwargs):
    converted.append(Call)
    return _by_perform(op, node)


class ToyCallLinker(ToyLinker):
    """The toy linker, whose dispatch also implements innergraph's `Call`."""

    def fgraph_convert(self, fgraph, **kwargs):
        return toy_call_funcify(fgraph)


def modes(linker):
    return Mode(linker=linker, optimizer="fast_run"), Mode(linker="py", optimizer="fast_run")


a, x = pt.dscalar("a"), pt.dvector("x")
X = np.linspace(-1.0, 2.0, 5)


def consumers_in(outputs):
    """The consumer classes anywhere in a graph: bodies, OpFromGraph and Scan inner graphs included."""
    found, stack, seen = set(), [list(outputs)], set()
    while stack:
        for node in scope_toposort(stack.pop()):
            if isinstance(node.op, CONSUMERS):
                found.add(type(node.op))
            inner = getattr(node.op, "fgraph", None)
            if isinstance(inner, FunctionGraph) and id(inner) not in seen:
                seen.add(id(inner))
                stack.append(list(inner.outputs))
            for var in node.inputs:
                if isinstance(var, Constant) and isinstance(var.data, Body) and id(var.data) not in seen:
                    seen.add(id(var.data))
                    stack.append(list(var.data.outputs))
    return found


def check(inputs, outputs, values, linker=None, exclude=()):
    """Compile with the toy linker and with ``py``; same values; return the toy function."""
    toy_mode, py_mode = modes(linker or ToyLinker())
    fn = pytensor.function(inputs, outputs, mode=toy_mode.excluding(*exclude))
    ref = pytensor.function(inputs, outputs, mode=py_mode.excluding(*exclude))
    for args in values:
        for got, want in zip(fn(*args), ref(*args), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    return fn


def ifelse_graph():
    return ifelse(a > 0, pt.exp(x).sum() * a, (x**2).sum() + a)


def call_graph():
    return call(lambda v, s: (pt.sin(v) * s).sum(), x, a)


def scan_graph():
    return innergraph.scan(lambda xt, acc: acc * 0.5 + xt * a, sequences=[x], outputs_info=[a], return_updates=False)


def nested_graph():
    """A scan whose step calls a function whose body holds a conditional."""

    def helper(v, s):
        return ifelse(s > 0, pt.exp(v) * s, v - s)

    def step(xt, acc):
        return call(helper, xt, acc) * 0.5 + acc

    return innergraph.scan(step, sequences=[x], outputs_info=[a], return_updates=False)


def test_ifelse_call_and_scan_are_lowered_for_a_linker_that_cannot_run_them():
    out = [ifelse_graph(), call_graph(), scan_graph()]
    converted.clear()
    fn = check([a, x], out, [(1.5, X), (-0.5, X)], exclude=["innergraph"])
    assert consumers_in(fn.maker.fgraph.outputs) == set()
    assert {NativeIfElse, OpFromGraph, NativeScan} <= set(converted)
    assert not any(issubclass(c, CONSUMERS) for c in converted)


def test_nested_consumers_are_lowered_innermost_first():
    out = nested_graph()
    assert consumers_in([out]) == {Scan, Call, IfElse}
    converted.clear()
    fn = check([a, x], [out], [(1.5, X), (-0.5, X)], exclude=["innergraph"])
    assert consumers_in(fn.maker.fgraph.outputs) == set()
    assert NativeScan in converted
    # the native Scan's inner graph holds the lowered call, whose graph holds the native conditional
    (scan_node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    inner = [type(n.op) for n in scan_node.op.fgraph.apply_nodes]
    assert OpFromGraph in inner
    (ofg,) = [n.op for n in scan_node.op.fgraph.apply_nodes if isinstance(n.op, OpFromGraph)]
    assert any(isinstance(n.op, NativeIfElse) for n in ofg.fgraph.apply_nodes)


def test_the_default_pipeline_hands_over_what_it_keeps_in_graph():
    # Without exclusions the pipeline lowers the Scan itself; the call and the
    # conditional (kept in-graph by the pipeline, also inside the Scan) are handed over.
    fn = check([a, x], [ifelse_graph(), call_graph(), nested_graph()], [(1.5, X), (-0.5, X)])
    assert consumers_in(fn.maker.fgraph.outputs) == set()


def test_a_consumer_the_dispatch_implements_is_kept_and_its_body_handed_over():
    def helper(v, s):
        return ifelse(s > 0, (pt.exp(v) * s).sum(), (v - s).sum())

    out = call(helper, x, a)
    converted.clear()
    fn = check([a, x], [out], [(1.5, X), (-0.5, X)], linker=ToyCallLinker())
    assert Call in converted
    (node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Call)]
    body = node.inputs[0].data
    assert consumers_in(body.outputs) == set()  # the conditional in its body was lowered
    assert any(isinstance(n.op, NativeIfElse) for n in scope_toposort(body.outputs))
    assert consumers_in([out]) == {Call, IfElse}  # what the user built is untouched


def test_the_lowered_graph_is_valid_under_the_destroy_handler():
    y = call(lambda v: pt.exp(v) * 2.0, x + a)
    z = ifelse(a > 0, y * 3.0, y - 1.0)
    out = pt.exp(z) + y
    fn = check([a, x], [out, y], [(1.5, X), (-0.5, X)])
    fgraph = fn.maker.fgraph
    assert any(getattr(n.op, "destroy_map", None) for n in fgraph.apply_nodes), "no in-place node: nothing tested"
    assert hasattr(fgraph, "destroyers")
    fgraph.validate()
    assert consumers_in(fgraph.outputs) == set()


def test_thunk_linkers_and_numba_run_consumers_as_they_are():
    from pytensor.compile.mode import predefined_linkers

    import innergraph.backends.numba  # noqa: F401  (what the first Numba link loads)

    for name in ("py", "c|py", "c", "vm", "cvm"):
        assert unsupported_consumers(predefined_linkers[name]) == set(), name
    numba = NumbaLinker()
    names = {d.__name__ for d in conversion_dispatches(numba)}
    assert names == {"numba_funcify_and_cache_key", "numba_funcify"}
    assert unsupported_consumers(numba) == set()


def test_the_dispatch_is_discovered_and_only_class_registrations_count():
    assert conversion_dispatches(ToyLinker()) == (toy_funcify,)
    assert conversion_dispatches(ToyCallLinker()) == (toy_call_funcify,)
    assert unsupported_consumers(ToyLinker()) == set(CONSUMERS)  # the fallback registered for Op does not count
    assert unsupported_consumers(ToyCallLinker()) == {IfElse, Scan}
    assert implements(toy_call_funcify, Call, family=Call)
    assert not implements(toy_funcify, Call, family=Call)


def test_an_undetermined_dispatch_lowers_everything_until_declared():
    import sys

    class OpaqueLinker(ToyCallLinker):
        def fgraph_convert(self, fgraph, **kwargs):
            return getattr(sys.modules[__name__], "toy_call_funcify")(fgraph)

    assert conversion_dispatches(OpaqueLinker()) == ()
    assert not runs(OpaqueLinker(), Call, family=Call)
    out = call_graph()
    fn = check([a, x], [out], [(1.5, X)], linker=OpaqueLinker())
    assert consumers_in(fn.maker.fgraph.outputs) == set()

    register_conversion_dispatch(OpaqueLinker, lambda: toy_call_funcify)
    assert unsupported_consumers(OpaqueLinker()) == {IfElse, Scan}
    fn = check([a, x], [out], [(1.5, X)], linker=OpaqueLinker())
    assert consumers_in(fn.maker.fgraph.outputs) == {Call}
    with pytest.raises(TypeError, match="not a JITLinker subclass"):
        register_conversion_dispatch(Mode, lambda: toy_funcify)  # type: ignore[arg-type]  # the wrong class is the test


def test_hand_over_is_a_no_op_for_thunk_linkers():
    from pytensor.link.basic import PerformLinker

    fgraph = FunctionGraph([a, x], [ifelse_graph(), call_graph()], clone=True)
    innergraph.fold_inner_graphs(fgraph)
    before = {type(n.op) for n in fgraph.apply_nodes}
    assert hand_over(fgraph, PerformLinker()) == 0
    assert {type(n.op) for n in fgraph.apply_nodes} == before
    assert hand_over(fgraph, ToyLinker()) == 2
    assert consumers_in(fgraph.outputs) == set()


def test_default_mode_is_untouched():
    # the toy tests above must not have changed the default mode's linker
    assert not isinstance(get_default_mode().linker, ToyLinker)
