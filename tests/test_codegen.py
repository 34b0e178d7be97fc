"""Code generated from step semantics (innergraph.protocol.semantics): the loops and the worked example under
Numba and JAX, against NumPy and the py linker; the generated source; declarations that cannot run."""

import dataclasses
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode

import innergraph
from innergraph.consumer import Capabilities, Iterate, register_consumer
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.protocol.plans import loop_plan
from innergraph.protocol.slots import FORMS
from typed import grad, pushforward

from test_consumer_api import example

x, a = pt.dscalar("x"), pt.dscalar("a")
v = pt.dvector("v")
m = pt.lscalar("m")


def graph():
    """Every loop form: while (unbounded, bounded by an input), do-while, Loop(pre, update, post), fori, the example."""
    root = innergraph.while_loop(lambda s: pt.abs(s["x"] * s["x"] - a) > 1e-12, lambda s: {"x": 0.5 * (s["x"] + a / s["x"]), "n": s["n"] + 1}, {"x": x, "n": pt.constant(0, dtype="int64")})
    zero = innergraph.while_loop(lambda s: s < 0.0, lambda s: s - 1.0, x)
    once = innergraph.do_while(lambda s: s * 2.0, lambda s: s < 0.0, x)
    bounded = innergraph.while_loop(lambda s: s < 1e9, lambda s: s * 2.0, x, max_steps=m)
    prepost = innergraph.loop(lambda s: s[0] < 100.0, lambda s: (s[0] * 3.0, s[1] + v), lambda s: s[0] < 50.0, (x, v))
    fori = innergraph.fori_loop(2, 6, lambda i, s: (s[0] + pt.cast(i, "float64") * s[1], s[1] * a), (v, x))
    rep = example.repeat(m, lambda s: s * a + 1.0, [v])[0]
    # carries the step overwrites in place (the loop owns them): swapped, read twice, aliased initial values
    swap = innergraph.fori_loop(0, 3, lambda i, s: (s[1] + 0.0, s[0] * 2.0, s[2] * s[2] + s[2]), (v, v, v))
    return [root["x"], root["n"], zero, once, bounded, prepost[0], prepost[1], fori[0], fori[1], rep, *swap]


def reference(x0, c, vv, mm):
    r, n = x0, 0
    while abs(r * r - c) > 1e-12:
        r, n = 0.5 * (r + c / r), n + 1
    b = x0
    for _ in range(mm):
        if not b < 1e9:
            break
        b = b * 2.0
    p, q = x0, vv.copy()
    if p < 100.0:
        while True:
            p, q = p * 3.0, q + vv
            if not p < 50.0:
                break
    f0, f1 = vv.copy(), x0
    for i in range(2, 6):
        f0, f1 = f0 + i * f1, f1 * c
    rep = vv.copy()
    for _ in range(mm):
        rep = rep * c + 1.0
    s0, s1, s2 = vv.copy(), vv.copy(), vv.copy()
    for _ in range(3):
        s0, s1, s2 = s1 + 0.0, s0 * 2.0, s2 * s2 + s2
    return [r, n, x0, x0 * 2.0, b, p, q, f0, f1, rep, s0, s1, s2]


ARGS = [(1.5, 2.0, np.array([0.5, -1.0]), 4), (3.0, 0.5, np.array([2.0]), 0), (200.0, 9.0, np.array([1.0, 1.0, 3.0]), 40)]


_FUNCTIONS: dict = {}  # one compilation per backend for the module


def _compiled(backend):
    if backend not in _FUNCTIONS:
        mode = get_mode(backend.upper()) if backend in ("numba", "jax") else Mode(linker="py", optimizer="fast_run")
        with warnings.catch_warnings():
            warnings.filterwarnings("error", "Numba will use object mode")  # every loop has generated code
            _FUNCTIONS[backend] = pytensor.function([x, a, v, m], graph(), mode=mode)
    return _FUNCTIONS[backend]


@pytest.fixture(scope="module", params=["numba", "jax", "py"])
def compiled(request):
    return request.param, _compiled(request.param)


@pytest.fixture(scope="module", params=[
    "numba",
    # "py" found, when this case got its assertion (issue 37), that design/examples/repeat.py's Repeat.run
    # returned its input arrays as its outputs when it ran no step, with no view_map (py and cvm)
    "py",
])
def compiled_mutable(request):
    """The backends whose results are mutable arrays (JAX arrays are immutable: nothing to alias)."""
    return request.param, _compiled(request.param)


@pytest.fixture(scope="module")
def numba_fn():
    """The Numba function: its generated source and disk-cache keys."""
    return _compiled("numba")


@pytest.mark.parametrize("args", ARGS)
def test_values_against_numpy(compiled, args):
    backend, fn = compiled
    got = fn(*args)
    for i, (g, w) in enumerate(zip(got, reference(*args), strict=True)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, err_msg=f"{backend}: output {i}")
    loops = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, (WhileLoop, ForiLoop, example.Repeat))]
    assert len(loops) >= 6, backend  # the loops ran as loops, not as something else


def test_results_do_not_alias_inputs(compiled_mutable):
    backend, fn = compiled_mutable
    xv = np.array([0.5, -1.0])
    out = fn(1.5, 2.0, xv, 0)  # the example's loop runs no step (m = 0): its result is a copy of its input
    shared = [i for i, o in enumerate(out) if np.shares_memory(np.asarray(o), xv)]
    assert shared == [], f"{backend}: outputs {shared} alias the input"


# --- the generated Numba source ---------------------------------------------------------------


def _source(node):
    from innergraph.backends.numba import numba_body_code
    from innergraph.backends.numba_generated import generated_source
    from innergraph.protocol.runtime import body_value

    plan = loop_plan(node.op, node)
    codes = {b: numba_body_code(body_value(node.inputs[plan.functions[b]])) for b in plan.bodies_run}
    return plan, generated_source(plan, codes)[1]


def test_generated_source_follows_the_semantics(numba_fn):
    fn = numba_fn
    nodes = {type(n.op).__name__ + str(getattr(n.op, "bounded", getattr(n.op, "n_seqs", ""))): n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, (WhileLoop, ForiLoop, example.Repeat))}
    plan, lines = _source(nodes["WhileLoopTrue"])
    assert "while go and steps < limit:" in lines and plan.pre == 0 and plan.post is not None
    assert sum(".copy()" in line for line in lines) == len(plan.carries)  # each carried value copied once per call
    plan, lines = _source(nodes["ForiLoop1"])
    assert plan.pre is None and plan.post is None and plan.sequences
    assert any(line.startswith("for t in range(") for line in lines) and not any("go" in line for line in lines)
    plan, lines = _source(nodes["Repeat"])
    assert plan.count == 1 and not plan.sequences and lines[-1] == "return x0"


def test_disk_cache_key_is_the_bodies(numba_fn):
    fn = numba_fn
    from innergraph.backends.numba_generated import numba_funcify_generated

    keys = {}
    for node in fn.maker.fgraph.apply_nodes:
        if isinstance(node.op, (WhileLoop, ForiLoop, example.Repeat)):
            _, key = numba_funcify_generated(node.op, node)
            assert key is not None, node
            keys[node] = key
    assert len(set(keys.values())) == len(keys)  # different loops, different keys
    twin = pytensor.function([v, m], example.repeat(m, lambda s: s * 2.0 + 1.0, [v])[0], mode="NUMBA")
    twin2 = pytensor.function([v, m], example.repeat(m, lambda s: s * 2.0 + 1.0, [v])[0], mode="NUMBA")
    (n1,), (n2,) = ([n for n in f.maker.fgraph.apply_nodes if isinstance(n.op, example.Repeat)] for f in (twin, twin2))
    assert numba_funcify_generated(n1.op, n1)[1] == numba_funcify_generated(n2.op, n2)[1]  # equal bodies, equal keys


# --- JAX: gradients where the loop supports them ------------------------------------------------


def test_jax_pullback_of_fori_and_bounded_while():
    xs = pt.dvector("xs")
    fori = innergraph.fori_loop(0, 4, lambda i, s: pt.sin(s) * a + pt.cast(i, "float64"), xs)
    bounded = innergraph.while_loop(lambda s: pt.sum(s) < 50.0, lambda s: s * a + 1.0, xs, max_steps=6)
    cost = pt.sum(fori**2) + pt.sum(bounded)
    grads = grad(cost, [xs, a])
    args = (np.array([0.3, -0.2]), 1.7)
    want = pytensor.function([xs, a], [cost, *grads], mode=Mode(linker="py", optimizer="fast_run"))(*args)
    got = pytensor.function([xs, a], [cost, *grads], mode="JAX")(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10)


def test_jax_fori_with_symbolic_bounds_values_and_derivatives():
    """Symbolic bounds carry the index from ``lower`` (no arange of symbolic length): JAX runs them and their
    pushforward; reverse mode is checked against the Scan's on the py linker (and under JAX below)."""
    lo, hi = pt.lscalar("lo"), pt.lscalar("hi")
    xs = pt.dvector("xs")
    fori = innergraph.fori_loop(lo, hi, lambda i, s: (pt.sin(s[0]) * a + pt.cast(i, "float64"), s[1] + i), (xs, pt.constant(0, dtype="int64")))
    tangent = pushforward(fori[0], [xs, a], [pt.ones_like(xs), pt.constant(0.5)], use_op_pushforward=True)
    outs = [fori[0], fori[1], tangent]
    got_fn = pytensor.function([xs, a, lo, hi], outs, mode="JAX")
    py_mode = Mode(linker="py", optimizer="fast_run")
    py_fn = pytensor.function([xs, a, lo, hi], outs, mode=py_mode)
    nodes = [n for n in got_fn.maker.fgraph.apply_nodes if isinstance(n.op, ForiLoop)]
    assert nodes and all(n.op.n_seqs == 0 for n in nodes), [n.op for n in nodes]  # the index is carried, not a sequence
    x0 = np.array([0.3, -0.2])
    for lo_, hi_ in [(2, 6), (-1, 3), (5, 5), (4, 1)]:  # zero steps when hi <= lo
        s, ds, total = x0.copy(), np.ones(2), 0
        for i in range(lo_, hi_):
            s, ds, total = np.sin(s) * 1.7 + i, np.cos(s) * ds * 1.7 + np.sin(s) * 0.5, total + i
        got, want = got_fn(x0, 1.7, lo_, hi_), py_fn(x0, 1.7, lo_, hi_)
        np.testing.assert_allclose(np.asarray(got[0]), s, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(got[2]), ds, rtol=1e-12)
        assert int(got[1]) == total == int(want[1])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12)
    scan = pytensor.scan(lambda i, s: pt.sin(s) * a + pt.cast(i, "float64"), sequences=[pt.arange(lo, hi)], outputs_info=[xs], return_updates=False)[-1]
    wrt = [xs, a]
    grads = pytensor.function([xs, a, lo, hi], [*grad(pt.sum(fori[0] ** 2), wrt), *grad(pt.sum(scan**2), wrt)], mode=py_mode)
    for lo_, hi_ in [(2, 6), (-1, 3)]:
        g = grads(x0, 1.7, lo_, hi_)
        for ours, scans in zip(g[:2], g[2:], strict=True):
            np.testing.assert_allclose(ours, scans, rtol=1e-12)


def test_jax_fori_reverse_mode_with_symbolic_bounds_runs_eagerly_with_py_values():
    """Reverse mode of a fori loop with symbolic bounds stores a history of symbolic length (a Scan whose
    buffers ``jax.jit`` cannot size): under JAX the function falls back to eager execution, with concrete
    shapes, and gives the py linker's numbers, zero steps included; constant bounds stay jitted."""
    from pytensor.scan.op import Scan as NativeScan

    lo, hi = pt.lscalar("lo"), pt.lscalar("hi")
    xs = pt.dvector("xs")
    fori = innergraph.fori_loop(lo, hi, lambda i, s: pt.sin(s) * a + pt.cast(i, "float64"), xs)
    outs = [fori, *grad(pt.sum(fori**2), [xs, a])]
    jax_fn = pytensor.function([xs, a, lo, hi], outs, mode="JAX")
    py_fn = pytensor.function([xs, a, lo, hi], outs, mode=Mode(linker="py", optimizer="fast_run"))
    scans = [n for n in jax_fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    assert scans and not isinstance(scans[0].inputs[0], pytensor.graph.basic.Constant)  # the history's length is symbolic
    x0 = np.array([0.3, -0.2])
    for lo_, hi_ in [(2, 6), (-1, 3), (5, 5), (4, 1), (0, 7)]:
        for got, want in zip(jax_fn(x0, 1.7, lo_, hi_), py_fn(x0, 1.7, lo_, hi_), strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, err_msg=f"range({lo_}, {hi_})")
    fixed = innergraph.fori_loop(0, 4, lambda i, s: pt.sin(s) * a, xs)
    fixed_fn = pytensor.function([xs, a], grad(pt.sum(fixed), xs), mode="JAX")
    from innergraph.backends.jax import _has_dynamic_loop

    assert not _has_dynamic_loop(fixed_fn.maker.fgraph)  # a static trip count keeps PyTensor's jit
    assert _has_dynamic_loop(jax_fn.maker.fgraph)


# --- declarations -------------------------------------------------------------------------------


class _Plain(example.Repeat):
    """The example without step semantics."""


class _Late(example.Repeat):
    """The example registered after the backends loaded."""


def test_no_semantics_keeps_object_mode_with_a_warning_naming_the_op():
    form = FORMS[example.Repeat]
    register_consumer(_Plain, dataclasses.replace(form, semantics=None, make=lambda op, h, fns, g, args: _Plain(len(g.get("carry", []))).make_node(fns[0], *h, *args)))
    try:
        closure = innergraph.inner_graph(lambda s: s * 2.0, [v])
        out = _Plain(1)(innergraph.fold_function(closure.function), m, v)
        with pytest.warns(UserWarning, match=r"object mode to run _Plain\{n_carry=1\}|object mode to run .*_Plain") as record:
            fn = pytensor.function([v, m], out, mode="NUMBA")
        assert sum("object mode" in str(w.message) for w in record) == 1
        np.testing.assert_allclose(fn(np.array([1.0, 3.0]), 3), [8.0, 24.0])
        with pytest.raises(ValueError, match=r"_Plain.*no loop step semantics"):
            loop_plan(out.owner.op, out.owner)
    finally:
        FORMS.pop(_Plain)


def test_consumer_registered_after_loading_gets_generated_code():
    from pytensor.link.jax.dispatch import jax_funcify
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    from innergraph.backends.jax_generated import jax_funcify_generated
    from innergraph.backends.numba_generated import numba_funcify_generated

    from innergraph.ops.ifelse import IfElse

    for cls in (WhileLoop, ForiLoop, IfElse):  # innergraph's own consumers use the generated code
        assert numba_funcify_and_cache_key.registry[cls] is numba_funcify_generated
        assert jax_funcify.registry[cls] is jax_funcify_generated
    register_consumer(_Late, dataclasses.replace(FORMS[example.Repeat], make=lambda op, h, fns, g, args: _Late(len(g.get("carry", []))).make_node(fns[0], *h, *args)))
    try:
        assert numba_funcify_and_cache_key.registry[_Late] is numba_funcify_generated
        assert jax_funcify.registry[_Late] is jax_funcify_generated
        closure = innergraph.inner_graph(lambda s: s + 1.5, [v])
        out = _Late(1)(innergraph.fold_function(closure.function), m, v)
        for mode in ("NUMBA", "JAX"):
            with warnings.catch_warnings():
                warnings.filterwarnings("error", "Numba will use object mode")
                fn = pytensor.function([v, m], out, mode=mode)
            np.testing.assert_allclose(np.asarray(fn(np.array([1.0]), 4)), [7.0])
    finally:
        FORMS.pop(_Late)


def test_declarations_that_cannot_run_are_errors_naming_the_consumer():
    form = FORMS[example.Repeat]
    with pytest.raises(ValueError, match=r"register_consumer\(_Plain\).*for loops"):
        register_consumer(_Plain, dataclasses.replace(form, capabilities=Capabilities(), loop_key=None))
    with pytest.raises(ValueError, match=r"register_consumer\(_Plain\).*names bodies \[0, 1\]"):
        register_consumer(_Plain, dataclasses.replace(form, semantics=Iterate(pre_condition=1)))
    with pytest.raises(ValueError, match=r"register_consumer\(_Plain\).*Branch semantics are for lazy consumers of two bodies"):
        register_consumer(_Plain, dataclasses.replace(form, semantics=innergraph.consumer.Branch()))
    with pytest.raises(ValueError, match=r"register_consumer\(_Plain\).*semantics must be an Iterate"):
        register_consumer(_Plain, dataclasses.replace(form, semantics="while"))  # type: ignore[arg-type]  # the wrong type is the test
    assert _Plain not in FORMS
    # not counted, no condition, no bound: a loop that could never stop
    register_consumer(_Plain, dataclasses.replace(form, capabilities=Capabilities(loop=True), loop_key=None))
    try:
        closure = innergraph.inner_graph(lambda s: s * 2.0, [v])
        out = _Plain(1)(innergraph.fold_function(closure.function), m, v)
        with pytest.raises(ValueError, match=r"_Plain.*needs a post-condition"):
            loop_plan(out.owner.op, out.owner)
    finally:
        FORMS.pop(_Plain)


def test_a_body_output_read_by_two_slots_gives_two_arrays():
    """A while loop's stored-trace gradient at zero steps under Numba: the reverse step's zero branch
    outputs one constant twice, and the generated conditional returned one array for both outputs, so an
    in-place accumulation into one changed the other (``w``'s cotangent came out as ``x0``'s, 0.6 for 0)."""
    from pytensor.scan.op import Scan as NativeScan

    from innergraph.ops.ifelse import IfElse
    from innergraph.protocol.plans import branch_plan

    lim = pt.dscalar("lim")
    s = innergraph.while_loop(lambda s: s < lim, lambda s: s * a + pt.sin(s) * 0.1 + 0.05, x, max_steps=12)
    outs = [s, *grad(s**2, [x, a])]
    numba_fn = pytensor.function([x, a, lim], outs, mode=Mode(linker="numba", optimizer="fast_run"))
    py_fn = pytensor.function([x, a, lim], outs, mode=Mode(linker="py", optimizer="fast_run"))
    for limit in (-10.0, 0.5, 1e9):  # no step, a few, max_steps
        np.testing.assert_allclose(numba_fn(0.3, 1.1, limit), py_fn(0.3, 1.1, limit), rtol=1e-12)
    np.testing.assert_allclose(numba_fn(0.3, 1.1, -10.0), [0.3, 0.6, 0.0])
    repeated = []
    for scan in (n for n in numba_fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)):
        for node in (n for n in scan.op.fgraph.apply_nodes if isinstance(n.op, IfElse)):
            plan = branch_plan(node.op, node)
            for b in range(2):
                body_outputs = innergraph.body_of(node.inputs[plan.functions[b]]).outputs
                if len(set(body_outputs)) < len(body_outputs):
                    repeated.append(plan.outputs[b])
    assert repeated, "the graph no longer has a body outputting one variable twice: the test lost its subject"
    assert all(len(set(taken)) == len(taken) for taken in repeated), repeated
