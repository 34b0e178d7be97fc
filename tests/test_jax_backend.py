# mypy: disable-error-code="override"
# (this file's Ops and linkers declare make_node with the arguments they take, as PyTensor's own do)
"""innergraph's consumers under the JAX linker (`innergraph.backends.jax`).

Every program is compiled once for the module (jit compiles are slowish) under the
default JAX mode (the pipeline lowers Scans to PyTensor's) and under
``get_mode("JAX").excluding("innergraph")`` (`JAX_IN_GRAPH`: innergraph installed, its
rewrites excluded, so the in-graph consumers reach the linker as they were built), and
compared with a Python VM (PyTensor's own runtimes) and with vanilla PyTensor's
equivalent under JAX (built, compiled and first called with innergraph uninstalled)
where vanilla can compile it.
"""

import dataclasses

import jax
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.ifelse import ifelse as vanilla_ifelse
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.vm import VMLinker
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.utils import until

import innergraph
from innergraph import lift_graph
from innergraph.protocol import runtime
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.scan import Scan
from vanilla import vanilla_function
from typed import call, grad, ifelse

JAX = get_mode("JAX")
JAX_IN_GRAPH = JAX.excluding("innergraph")
PY_VM = Mode(linker=VMLinker(use_cloop=False, c_thunks=False), optimizer="fast_run")
MODES = {"jax": JAX, "jax-in-graph": JAX_IN_GRAPH}

# a static length: vanilla PyTensor cannot run a Scan gradient under JAX over a vector of unknown length
x, a, c = pt.tensor("x", dtype="float64", shape=(5,)), pt.dscalar("a"), pt.dscalar("c")
XV = np.array([0.3, -1.2, 0.8, 2.0, -0.4])


def compile_all(inputs, outputs, modes=MODES):
    return {name: pytensor.function(inputs, outputs, mode=m) for name, m in modes.items()}


def assert_all_close(got, want, rtol=1e-10):
    got, want = list(got), list(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=1e-12)


def nodes_of(fn, cls):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, cls)]


# --- the conditional --------------------------------------------------------------------


def conditional(cond_fn):
    y = cond_fn(a > 0, pt.exp(x).sum() * a, (x**2).sum() + a)
    return [y, *grad(y, [a, x])]


@pytest.fixture(scope="module")
def conditional_fns():
    fns = compile_all([a, x], conditional(ifelse))
    fns["py"] = pytensor.function([a, x], conditional(ifelse), mode=PY_VM)
    fns["vanilla"] = vanilla_function(lambda: ([a, x], conditional(vanilla_ifelse)), JAX, first_call=(1.5, XV))
    return fns


@pytest.mark.parametrize("av", [1.5, -0.5])
@pytest.mark.parametrize("mode", list(MODES))
def test_ifelse_values_and_gradients(conditional_fns, mode, av):
    assert nodes_of(conditional_fns[mode], IfElse)  # the in-graph conditional reached the JAX linker
    assert_all_close(conditional_fns[mode](av, XV), conditional_fns["py"](av, XV))
    assert_all_close(conditional_fns[mode](av, XV), conditional_fns["vanilla"](av, XV))


class Tick(Op):
    """Identity whose JAX conversion counts its runs with a ``jax.debug.callback``."""

    __props__ = ()
    runs = 0

    def make_node(self, v):
        v = pt.as_tensor_variable(v)
        return Apply(self, [v], [v.type()])

    def perform(self, node, inputs, outputs):
        Tick.runs += 1
        outputs[0][0] = inputs[0].copy()


def _count(*_):
    Tick.runs += 1


@jax_funcify.register(Tick)
def _jax_tick(op, **kwargs):
    def tick(v):
        jax.debug.callback(_count, v)
        return v

    return tick


def runs_of(fn, *args):
    before = Tick.runs
    fn(*args)
    jax.effects_barrier()
    return Tick.runs - before


@pytest.mark.parametrize("mode", list(MODES))
def test_the_untaken_branch_never_runs_under_jit(mode):
    ticked: Any = Tick()(pt.exp(x))  # one output
    ours = pytensor.function([a, x], ifelse(a > 0, ticked.sum(), x.sum()), mode=MODES[mode])
    assert runs_of(ours, 1.0, XV) == 1  # the counter works: the taken branch ticks once
    assert runs_of(ours, -1.0, XV) == 0  # lax.cond: the other branch's work is never done
    # PyTensor's own IfElse is lazy under JAX itself since PyTensor 3.3.6 (its LazyIfElse): innergraph
    # leaves it to PyTensor, with or without its rewrites, and vanilla is lazy too; PyTensor's eager
    # form (its lazy_ifelse rewrites excluded) still runs both branches
    plain = vanilla_ifelse(a > 0, ticked.sum(), x.sum())
    assert runs_of(pytensor.function([a, x], plain, mode=MODES[mode]), -1.0, XV) == 0
    with innergraph.uninstalled():
        assert runs_of(pytensor.function([a, x], plain, mode=JAX), -1.0, XV) == 0
        assert runs_of(pytensor.function([a, x], plain, mode=JAX.excluding("lazy_ifelse")), -1.0, XV) == 1


# --- the call ---------------------------------------------------------------------------


def helper(v, w):
    return (pt.sin(v) * w).sum(), pt.tanh(v) * w


def applied(call_fn):
    y, z = call_fn(x, a)
    cost = y + (z**2).sum()
    return [y, z, *grad(cost, [x, a])]


@pytest.fixture(scope="module")
def call_fns():
    v, w = pt.dvector("v"), pt.dscalar("w")
    ofg = OpFromGraph([v, w], list(helper(v, w)))
    fns = compile_all([x, a], applied(lambda *args: call(helper, *args)))
    fns["py"] = pytensor.function([x, a], applied(lambda *args: call(helper, *args)), mode=PY_VM)
    fns["vanilla"] = vanilla_function(lambda: ([x, a], applied(ofg)), JAX, first_call=(XV, 0.7))
    return fns


@pytest.mark.parametrize("mode", list(MODES))
def test_call_values_and_gradients(call_fns, mode):
    assert nodes_of(call_fns[mode], Call)
    assert_all_close(call_fns[mode](XV, 0.7), call_fns["py"](XV, 0.7))
    assert_all_close(call_fns[mode](XV, 0.7), call_fns["vanilla"](XV, 0.7))


def test_a_body_is_converted_once_for_all_its_calls():
    ys = [call(lambda v: pt.exp(v).sum(), x * k) for k in (1.0, 2.0, 3.0)]  # one body, three calls
    fn = pytensor.function([x], ys, mode=JAX_IN_GRAPH)
    calls = nodes_of(fn, Call)
    assert len(calls) == 3 and len({id(n.inputs[0].data) for n in calls}) == 1
    assert runtime.compile_count[(id(calls[0].inputs[0].data), "jax")] == 1
    assert_all_close(fn(XV), [np.exp(XV * k).sum() for k in (1.0, 2.0, 3.0)])


# --- nested consumers -------------------------------------------------------------------


def nested():
    inner_call = innergraph.scan(
        lambda s, acc: call(lambda v, w: pt.sin(v) * w, s, acc) + acc * 0.5,
        sequences=[x],
        outputs_info=[a],
        return_updates=False,
    )
    branchy = call(lambda v, w: ifelse(w > 0, pt.exp(v).sum(), v.sum() * w), x, a)
    return [inner_call, branchy, *grad(inner_call.sum() + branchy, [x, a])]


@pytest.fixture(scope="module")
def nested_fns():
    fns = compile_all([x, a], nested())
    fns["py"] = pytensor.function([x, a], nested(), mode=PY_VM)
    return fns


@pytest.mark.parametrize("av", [0.9, -0.9])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_call_in_a_scan_and_a_conditional_in_a_call(nested_fns, mode, av):
    assert_all_close(nested_fns[mode](XV, av), nested_fns["py"](XV, av))


# --- for loops --------------------------------------------------------------------------


def loop(scan_fn):
    """mit-sot (taps -2, -1), sit-sot, nit-sot, a sequence and a non-sequence; gradients give mit-mots."""

    def step(s, y2, y1, z, k):
        return y1 * 0.5 + y2 * 0.25 + s * k, z * 0.9 + pt.sin(y1), y1 * z

    y0 = pt.stack([a, a * 0.5])
    ys, zs, ws = scan_fn(step, sequences=[x], outputs_info=[dict(initial=y0, taps=[-2, -1]), a, None], non_sequences=[c], return_updates=False)
    cost = ys.sum() + zs[-1] + (ws**2).sum()
    return [ys, zs, ws, *grad(cost, [x, a, c])]


@pytest.fixture(scope="module")
def loop_fns():
    fns = compile_all([x, a, c], loop(innergraph.scan))
    fns["py"] = pytensor.function([x, a, c], loop(innergraph.scan), mode=PY_VM)
    fns["vanilla"] = vanilla_function(lambda: ([x, a, c], loop(pytensor.scan)), JAX, first_call=(XV, 0.4, 1.3))
    return fns


@pytest.mark.parametrize("mode", list(MODES))
def test_scan_values_and_gradients(loop_fns, mode):
    if mode == "jax-in-graph":
        scans = nodes_of(loop_fns[mode], Scan)
        assert any(n.op.layout.info.n_mit_mot for n in scans)  # the gradient's mit-mot ran in-graph
    assert_all_close(loop_fns[mode](XV, 0.4, 1.3), loop_fns["py"](XV, 0.4, 1.3))
    assert_all_close(loop_fns[mode](XV, 0.4, 1.3), loop_fns["vanilla"](XV, 0.4, 1.3))


def issue_1669(scan_fn):
    x0 = pt.dscalar("x0")
    ys = scan_fn(lambda acc: pt.sin(acc) * 1.5, outputs_info=[x0], n_steps=4, return_updates=False)
    return x0, grad(grad(ys[-1], x0), x0)


@pytest.mark.parametrize("mode, scan_fn", [("jax", pytensor.scan), ("jax-in-graph", innergraph.scan)])
def test_issue_1669_second_derivative(mode, scan_fn):
    x0, g2 = issue_1669(scan_fn)
    fn = pytensor.function([x0], g2, mode=MODES[mode])
    native_taps = [n.op.info.mit_mot_in_slices for n in nodes_of(fn, NativeScan)]
    in_graph_taps = [n.op.layout.info.mit_mot_in_slices for n in nodes_of(fn, Scan)]
    assert any(native_taps + in_graph_taps)  # the second derivative runs a mit-mot under JAX
    np.testing.assert_allclose(fn(0.3), -11.69510, atol=5e-6)
    np.testing.assert_allclose(fn(0.3), pytensor.function([x0], g2, mode=PY_VM)(0.3), rtol=1e-12)


def test_a_mit_mot_writing_before_its_oldest_input_tap_runs_as_the_runtime_does():
    """In taps (0, 1), out tap -1: PyTensor's lax.scan conversion cannot express it; the while-loop form can."""
    m, k = pt.dvector("m"), pt.dscalar("k")
    t0, t1, kk = pt.dscalar("t0"), pt.dscalar("t1"), pt.dscalar("kk")
    info = _info(n_non_seqs=1, mit_mot_in_slices=((0, 1),), mit_mot_out_slices=((-1,),))
    op = NativeScan([t0, t1, kk], [t0 * kk + t1], info)
    out = op(pt.constant(4, dtype="int64"), m, k)
    fn = pytensor.function([m, k], out, mode=JAX)
    mv = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert_all_close([fn(mv, 0.5)], [pytensor.function([m, k], out, mode=PY_VM)(mv, 0.5)])


def _info(**counts):
    from pytensor.scan.op import ScanInfo

    fields: dict[str, Any] = dict(
        n_seqs=0,
        mit_mot_in_slices=(),
        mit_mot_out_slices=(),
        mit_sot_in_slices=(),
        sit_sot_in_slices=(),
        n_nit_sot=0,
        n_untraced_sit_sot=0,
        n_non_seqs=0,
        as_while=False,
    )
    fields.update(counts)
    return ScanInfo(**fields)


# --- while loops ------------------------------------------------------------------------


def doubling(scan_fn):
    ys = scan_fn(lambda acc: (acc * 2, until(acc > 10)), outputs_info=[a], n_steps=100, return_updates=False)
    return [ys, ys[-1], ys.sum()]


def states_while(scan_fn):
    """A while loop with a sequence, mit-sot, sit-sot, nit-sot and a non-sequence."""

    def step(s, y2, y1, z, k):
        y = y1 + y2 * 0.5 + s
        return [y, z + y * k, z * y], until(pt.abs(y) > 3)

    y0 = pt.stack([a, a + 1.0])
    ys, zs, ws = scan_fn(step, sequences=[x], outputs_info=[dict(initial=y0, taps=[-2, -1]), a, None], non_sequences=[c], return_updates=False)
    return [ys, zs, ws, ys[-1] + zs[-1]]


@pytest.fixture(scope="module")
def while_fns():
    fns = {}
    for name, build in (("doubling", doubling), ("states", states_while)):
        for mode, m in {**MODES, "py": PY_VM}.items():
            fns[name, mode] = pytensor.function([x, a, c], build(innergraph.scan), mode=m, on_unused_input="ignore")
        # pytensor.scan's graph, compiled with innergraph (vanilla's JAX linker refuses while loops)
        fns[name, "pytensor.scan"] = pytensor.function([x, a, c], build(pytensor.scan), mode=JAX, on_unused_input="ignore")
    return fns


@pytest.mark.parametrize("av", [1.5, 20.0, 1e-3])
@pytest.mark.parametrize("mode", [*MODES, "pytensor.scan"])
@pytest.mark.parametrize("name", ["doubling", "states"])
def test_while_scan_values_and_trace_lengths(while_fns, name, mode, av):
    fn = while_fns[name, mode]
    if mode == "jax-in-graph":
        assert any(n.op.layout.info.as_while for n in nodes_of(fn, Scan))
    want = while_fns[name, "py"](XV, av, 0.7)
    got = fn(XV, av, 0.7)
    assert_all_close(got, want)  # shapes included: the traces end where the loop stopped
    if name == "doubling":
        assert len(got[0]) == {1.5: 4, 20.0: 1, 1e-3: 15}[av]


def test_a_while_loop_stays_jitted_unless_it_returns_a_trace():
    from innergraph.backends.jax_loop import DynamicTraceLength

    ys = innergraph.scan(lambda acc: (acc * 2, until(acc > 10)), outputs_info=[a], n_steps=100, return_updates=False)
    last, full = (pytensor.function([a], out, mode=JAX) for out in (ys[-1], ys))
    assert float(last(1.5)) == 24.0 and list(full(1.5)) == [3.0, 6.0, 12.0, 24.0]
    assert float(_run_under_jit(last, 1.5)[0]) == 24.0  # only the last value leaves the loop
    with pytest.raises(DynamicTraceLength, match="while loop ran"):  # the linker then runs it eagerly
        _run_under_jit(full, 1.5)


def test_a_while_loop_in_a_graph_jit_cannot_trace_runs_eagerly():
    """Without ``fast_run`` the buffer's bounds are not folded to constants: JAX cannot slice with them under jit."""
    from pytensor.compile.mode import JAX as JAX_MODE
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery

    jax_only = Mode(linker=JAX.linker, optimizer=RewriteDatabaseQuery(include=["jax"], exclude=JAX_MODE._optimizer.exclude))
    xs = pytensor.scan(lambda v: (v + 1, until(v > 3)), outputs_info=[pt.zeros(())], n_steps=100, return_updates=False)
    fn = pytensor.function([], xs, mode=jax_only)
    with pytest.raises(IndexError, match="static"):
        _run_under_jit(fn)
    assert_all_close([fn()], [pytensor.function([], xs, mode=Mode(linker="py", optimizer=None))()])  # type: ignore[arg-type]  # None: no rewriting
    assert list(fn()) == [1.0, 2.0, 3.0, 4.0, 5.0]


def _run_under_jit(fn, *args):
    """The compiled function's JAX code, run under ``jax.jit`` (what the JAX linker runs first)."""
    return jax.jit(jax_funcify(fn.maker.fgraph))(*args)


# --- untraced states --------------------------------------------------------------------


def with_untraced_last_state(outputs):
    """Rebuild the native Scan under ``outputs`` with its last sit-sot untraced (as PyTensor's rewrite does)."""
    (node,) = {o.owner.inputs[0].owner for o in outputs}  # pytensor.scan returns buffer[1:]
    op, info = node.op, node.op.info
    assert info.n_untraced_sit_sot == 0 and info.n_sit_sot >= 1
    new_info = dataclasses.replace(info, sit_sot_in_slices=info.sit_sot_in_slices[:-1], n_untraced_sit_sot=1)
    first = 1 + info.n_seqs + info.n_mit_mot + info.n_mit_sot + info.n_sit_sot - 1
    inputs = list(node.inputs)
    inputs[first] = inputs[first][0]  # the initial value instead of its buffer
    inner = op.fgraph.unfreeze()  # PyTensor keeps a Scan's inner graph frozen
    native = NativeScan(inner.inputs, inner.outputs, new_info, mode=op.mode)
    return native(*inputs, return_list=True)


@pytest.fixture(scope="module")
def untraced_fns():
    fns = {}
    for kind, cond in (("for", None), ("while", lambda u: until(u > 2.0))):

        def step(s, z, u, k, cond=cond):
            outs = [z * 0.5 + s, u + pt.abs(s) * k]
            return outs if cond is None else (outs, cond(u))

        zs, us = pytensor.scan(step, sequences=[x], outputs_info=[a, a], non_sequences=[c], return_updates=False)
        native_outputs = with_untraced_last_state([zs, us])
        in_graph = lift_graph(native_outputs)
        assert isinstance(in_graph[0].owner.op, Scan)
        fns[kind, "py"] = pytensor.function([x, a, c], native_outputs, mode=PY_VM)
        fns[kind, "jax"] = pytensor.function([x, a, c], native_outputs, mode=JAX_IN_GRAPH)
        fns[kind, "jax-in-graph"] = pytensor.function([x, a, c], in_graph, mode=JAX_IN_GRAPH)
    return fns


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", ["for", "while"])
def test_untraced_states(untraced_fns, kind, mode):
    assert_all_close(untraced_fns[kind, mode](XV, 0.2, 1.1), untraced_fns[kind, "py"](XV, 0.2, 1.1))


# --- reversibility ----------------------------------------------------------------------


@pytest.mark.monkey_patch_only  # checks the JAXLinker.jit_compile record (a delegate in a patched PyTensor)
@pytest.mark.parametrize("cls", [Call, IfElse, Scan, NativeScan])
def test_uninstall_removes_the_jax_registrations(cls):
    import innergraph.backends.jax as backend
    from innergraph.backends.jax_generated import jax_funcify_generated

    registered: dict[type, Any] = {Call: jax_funcify_generated, IfElse: jax_funcify_generated}
    registered |= {Scan: backend.jax_funcify_scan, NativeScan: backend.jax_funcify_native_scan}
    default = jax_funcify.dispatch(object)
    before = {Call: default, IfElse: default, Scan: default, NativeScan: backend._native_scan_funcify}
    from pytensor.link.jax.linker import JAXLinker

    assert jax_funcify.dispatch(cls) is registered[cls]
    assert JAXLinker.jit_compile is backend.jit_compile
    innergraph.uninstall()
    try:
        assert jax_funcify.dispatch(cls) is before[cls]
        assert JAXLinker.jit_compile is backend._original_jit_compile
    finally:
        innergraph.install()
    assert jax_funcify.dispatch(cls) is registered[cls]
