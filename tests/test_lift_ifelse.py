"""Plain `pytensor.ifelse.ifelse` lifted by the pipeline (innergraph_lift_ifelse): laziness,
values and gradients against vanilla, shared work, the IfElse rewrites' effects, the off switch."""

import io

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.ifelse import IfElse as NativeIfElse
from pytensor.ifelse import ifelse
from pytensor.raise_op import Assert

from innergraph.fold import folded_bodies
from innergraph.graph import scope_toposort
from innergraph.ops.ifelse import IfElse

LINKERS = ["py", "cvm", "vm", "numba"]


def mode(linker):
    return Mode(linker=linker, optimizer="fast_run")


def vanilla(linker):
    return mode(linker).excluding("innergraph")


class CountCalls(Op):
    """Identity that records how often it runs."""

    __props__ = ()
    calls = 0

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        type(self).calls += 1
        outputs[0][0] = np.array(inputs[0], copy=True)


x, c = pt.dvector("x"), pt.dscalar("c")


def lazy_program():
    """The else branch asserts and counts; it is taken only when ``c <= 0``."""
    guarded = Assert("the untaken branch ran")(pt.exp(x), pt.all(x > 100)).sum()
    counted = CountCalls()(pt.log1p(x)).sum()
    return ifelse(c > 0, (x**2).sum(), guarded + counted)


@pytest.fixture(scope="module", params=LINKERS)
def lazy_fn(request):
    return request.param, pytensor.function([c, x], lazy_program(), mode=mode(request.param))


def test_untaken_branch_never_runs(lazy_fn):
    linker, fn = lazy_fn
    CountCalls.calls = 0
    assert fn(1.0, [1.0, 2.0]) == 5.0  # the Assert would fire, the counter would count
    assert CountCalls.calls == 0
    with pytest.raises(AssertionError, match="untaken branch ran"):
        fn(-1.0, [1.0, 2.0])  # taken, it runs


def test_vanilla_numba_runs_the_untaken_branch():
    # what the lift changes (PyTensor issue #501), so the laziness tests can fail
    fn = pytensor.function([c, x], lazy_program(), mode=vanilla("numba"))
    with pytest.raises(AssertionError, match="untaken branch ran"):
        fn(1.0, [1.0, 2.0])


def natives(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if type(n.op) is NativeIfElse]


def consumers(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IfElse)]


def body_nodes(fn):
    return [n for _, body in folded_bodies(fn.maker.fgraph.outputs) for n in scope_toposort(body.outputs)]


def test_the_off_switch():
    fn_on = pytensor.function([c, x], lazy_program(), mode=mode("numba"))
    assert len(consumers(fn_on)) == 1 and not natives(fn_on)
    for tag in ("innergraph_lift_ifelse", "innergraph"):
        fn = pytensor.function([c, x], lazy_program(), mode=mode("numba").excluding(tag))
        assert len(natives(fn)) == 1 and not consumers(fn)
        with pytest.raises(AssertionError):
            fn(1.0, [1.0, 2.0])


def differential_program():
    """Work shared with the outer graph, work both branches need, work the condition needs,
    a branch value that is an output, two outputs, a nested conditional."""
    shared = pt.exp(x).sum()  # outer output and then branch
    both = pt.sin(x) ** 2  # both branches, nowhere else
    cond = pt.log(pt.abs(c) + 1) > 0.5  # condition's own work
    inner = ifelse(c > 2, pt.tanh(x).sum(), pt.cosh(x).sum())  # nested, in the then branch
    t1, t2 = shared * both.sum() + inner, both / 3
    e1, e2 = (x**3).sum() / (c + 7), both * 2
    o1, o2 = ifelse(cond, [t1, t2], [e1, e2])
    return [o1, o2, shared]


@pytest.fixture(scope="module")
def differential_fns():
    outs = differential_program()
    cost = outs[0] + outs[1].sum() * 0.5 + outs[2]
    grads = pytensor.grad(cost, [x, c])
    ours = pytensor.function([c, x], [*outs, *grads], mode=mode("numba"))
    ref = pytensor.function([c, x], [*outs, *grads], mode=vanilla("cvm"))  # C code cached on disk
    return ours, ref


@pytest.mark.parametrize("cv", [3.0, 1.0, 0.1, -5.0])
def test_values_and_gradients_equal_vanilla(differential_fns, cv):
    ours, ref = differential_fns
    xv = np.array([0.3, -1.2, 2.0])
    for got, want in zip(ours(cv, xv), ref(cv, xv), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_work_is_placed_where_it_is_needed():
    # forward only: a gradient's chain rule runs outside the conditional it differentiates
    # (PyTensor's IfElse pullback selects the cotangent), in both variants
    fn = pytensor.function([c, x], differential_program(), mode=mode("numba"))
    assert len(consumers(fn)) == 1 and not natives(fn)  # the nested one went into a body
    visible = list(fn.maker.fgraph.apply_nodes)
    # the shared exp and the condition's log run outside the conditional, once
    assert sum(_has_scalar(n, "exp") for n in visible) == 1
    assert sum(_has_scalar(n, "log") or _has_scalar(n, "log1p") for n in visible) == 1  # log(|c| + 1) -> log1p
    # sin (both branches), tanh and cosh (nested) are only ever computed inside bodies
    for name in ("sin", "tanh", "cosh"):
        assert not any(_has_scalar(n, name) for n in visible)
        assert any(_has_scalar(n, name) for n in body_nodes(fn))


def _has_scalar(node, name):
    scalar_op = getattr(node.op, "scalar_op", None)
    if scalar_op is None:
        return False
    inner = getattr(scalar_op, "fgraph", None)
    ops = [n.op for n in inner.toposort()] if inner is not None else [scalar_op]
    return any(type(op).__name__.lower() == name for op in ops)


@pytest.mark.parametrize("linker", ["py", "numba"])
def test_two_conditionals_on_one_condition_become_one(linker):
    # CondMerge / cond_merge_random_op (not registered in PyTensor 3.0.7): one conditional
    z1 = ifelse(c > 0, pt.exp(x).sum(), pt.log1p(x**2).sum())
    z2 = ifelse(c > 0, pt.sinh(x).sum(), pt.cosh(x).sum())
    out = z1 * z2
    fn = pytensor.function([c, x], out, mode=mode(linker))
    ref = pytensor.function([c, x], out, mode=vanilla(linker))
    (node,) = consumers(fn)
    assert len(node.outputs) == 2 and not natives(fn)
    assert len(natives(ref)) == 2
    for cv in (1.0, -1.0):
        np.testing.assert_allclose(fn(cv, [0.5, 1.5]), ref(cv, [0.5, 1.5]), rtol=1e-12)


def test_nested_conditionals_on_the_same_condition_resolve():
    # cond_merge_ifs_true / _false (PyTensor's skipped test_merge_ifs_true_false): one conditional,
    # no conditional left inside its bodies
    # vectors of unknown length: the exp is work (over scalars it would not be, SMALL_STATIC_SIZE)
    x1, x2, y1, y2, w1, w2 = (pt.dvector(n) for n in ("x1", "x2", "y1", "y2", "w1", "w2"))
    cond = c > 0
    out = ifelse(
        cond,
        pt.exp(ifelse(cond, x1, x2) + ifelse(cond, y1, y2) + w1),
        pt.exp(ifelse(cond, x1, x2) + ifelse(cond, y1, y2) + w2),
    )
    ins = [x1, x2, y1, y2, w1, w2, c]
    fn = pytensor.function(ins, out, mode=mode("numba"))
    assert len(consumers(fn)) == 1 and not natives(fn)
    assert not any(isinstance(n.op, IfElse | NativeIfElse) for n in body_nodes(fn))
    vals = [[0.1], [0.2], [0.3], [0.4], [0.5], [0.6]]
    np.testing.assert_allclose(fn(*vals, 1.0), [np.exp(0.1 + 0.3 + 0.5)])
    np.testing.assert_allclose(fn(*vals, -1.0), [np.exp(0.2 + 0.4 + 0.6)])


def test_identical_output_pairs_become_one_output():
    # cond_remove_identical (PyTensor's skipped test_remove_useless_inputs2)
    e, f = pt.exp(x).sum(), pt.log1p(x**2).sum()
    outs = ifelse(c > 0, [e, e, f], [f, f, e])
    fn = pytensor.function([c, x], outs, mode=mode("numba"))
    (node,) = consumers(fn)
    assert len(node.outputs) == 2
    got = fn(1.0, [0.5, 1.5])
    np.testing.assert_allclose(got[0], got[1])
    np.testing.assert_allclose(got[0], np.exp([0.5, 1.5]).sum())


def test_work_after_a_conditional_runs_once():
    # ifelse_lift_single_if_through_acceptable_ops (not registered) would move `exp` into
    # both branches; after the conditional it runs once either way
    out = pt.exp(ifelse(c > 0, pt.tanh(x), pt.cosh(x)))
    fn = pytensor.function([c, x], out, mode=mode("numba"))
    visible = list(fn.maker.fgraph.apply_nodes)
    assert sum(_has_scalar(n, "exp") for n in visible) == 1
    np.testing.assert_allclose(fn(1.0, [0.5]), np.exp(np.tanh([0.5])))


def test_conditionals_without_work_stay_native_and_in_place():
    # nothing to skip: the native node stays, and cond_make_inplace (95) makes it a view as vanilla
    y = pt.dvector("y")
    out = ifelse(c > 0, x, y[1:] * 2)
    fn = pytensor.function([c, x, y], out, mode=mode("numba"))
    ref = pytensor.function([c, x, y], out, mode=vanilla("numba"))
    (node,) = natives(fn)
    assert node.op == NativeIfElse(1, as_view=True) and not consumers(fn)
    assert _printed(fn) == _printed(ref)


def test_statically_small_work_stays_native():
    # exp over scalars (or a few elements) costs nanoseconds run eagerly; a lifted branch costs
    # a body of its own at compile time: the graph is vanilla's, and so are the values
    s, v3 = pt.dscalar("s"), pt.tensor("v3", shape=(3,), dtype="float64")
    outs = [ifelse(c > 0, pt.exp(s) * 2, pt.log1p(s**2)) * s, ifelse(c > 0, pt.exp(v3).sum(), pt.tanh(v3).max())]
    fn = pytensor.function([c, s, v3], outs, mode=mode("numba"))
    ref = pytensor.function([c, s, v3], outs, mode=vanilla("numba"))
    assert not consumers(fn) and len(natives(fn)) == 2
    assert _printed(fn) == _printed(ref)
    for cv in (1.0, -1.0):
        for got, want in zip(fn(cv, 0.5, [0.1, 0.2, 0.3]), ref(cv, 0.5, [0.1, 0.2, 0.3]), strict=True):
            np.testing.assert_array_equal(got, want)


def test_small_work_with_an_assert_is_lifted():
    # an Assert is work whatever the size: laziness decides whether it raises
    s = pt.dscalar("s")
    out = ifelse(c > 0, s * 2, Assert("untaken scalar branch ran")(pt.exp(s), pt.gt(s, 10)))
    fn = pytensor.function([c, s], out, mode=mode("numba"))
    assert consumers(fn) and not natives(fn)
    assert fn(1.0, 0.5) == 1.0
    with pytest.raises(AssertionError, match="untaken scalar branch ran"):
        fn(-1.0, 0.5)


def test_the_lift_keeps_the_shapes_the_shape_feature_knows(monkeypatch):
    # the conditional replaces native nodes whose output shapes are known: the in-graph
    # conditional's infer_shape (a shape inference over both bodies) is not run again
    calls = []
    original = IfElse.infer_shape
    monkeypatch.setattr(IfElse, "infer_shape", lambda self, *a, **k: calls.append(self) or original(self, *a, **k))
    out = ifelse(c > 0, pt.exp(x) * 2, pt.log1p(x**2))
    fn = pytensor.function([c, x], out, mode=mode("numba"))
    assert consumers(fn) and not calls
    np.testing.assert_allclose(fn(1.0, [0.5, 1.0]), np.exp([0.5, 1.0]) * 2)
    np.testing.assert_allclose(fn(-1.0, [0.5, 1.0]), np.log1p([0.25, 1.0]))


def test_a_shape_computed_by_branch_work_is_not_carried(monkeypatch):
    # the then branch's length is computed by work the lift moves into a body: a shape read
    # from outside would run that work eagerly again, so the conditional infers its own
    calls = []
    original = IfElse.infer_shape
    monkeypatch.setattr(IfElse, "infer_shape", lambda self, *a, **k: calls.append(self) or original(self, *a, **k))
    n = pt.cast(pt.exp(x).sum(), "int64") % 2 + 1
    out = ifelse(c > 0, pt.exp(x[:n]), pt.log1p(x**2))
    fn = pytensor.function([c, x], out, mode=mode("numba"))
    assert consumers(fn) and calls
    xv = np.array([0.5, 1.0, 2.0])
    n_value = int(np.exp(xv).sum()) % 2 + 1
    np.testing.assert_allclose(fn(1.0, xv), np.exp(xv[:n_value]))
    np.testing.assert_allclose(fn(-1.0, xv), np.log1p(xv**2))


def test_an_in_place_conditional_built_by_hand_is_lifted():
    out = NativeIfElse(1, as_view=True)(c > 0, pt.exp(x), x)
    fn = pytensor.function([c, x], out, mode=mode("numba"))
    assert consumers(fn) and not natives(fn)
    xv = np.array([0.5, 1.0])
    np.testing.assert_allclose(fn(1.0, xv), np.exp(xv))
    np.testing.assert_allclose(fn(-1.0, xv), xv)
    np.testing.assert_allclose(xv, [0.5, 1.0])  # the input is not written


def test_branches_of_different_static_shapes():
    # the in-graph conditional's shape picks the taken branch's dims lazily; an int8
    # static dim against an int64 symbolic one used to raise BodyTypeError
    x2 = pt.tensor("x2", shape=(32,), dtype="float64")  # more than SMALL_STATIC_SIZE elements: work
    out = ifelse(c > 0, pt.exp(x2) / 3, x)
    fn = pytensor.function([c, x2, x], [out, out.shape[0]], mode=mode("numba"))
    assert consumers(fn)
    value, length = fn(1.0, np.zeros(32), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(value, np.full(32, 1 / 3))
    assert length == 32
    assert fn(-1.0, np.zeros(32), [1.0, 2.0, 3.0])[1] == 3


def test_ifelse_in_a_scan_body_is_lifted():
    def step(xt, acc):
        guarded = Assert("untaken step branch ran")(pt.exp(acc) * xt, pt.gt(acc, 1e6))
        return ifelse(xt > 0, acc + xt, guarded)

    init = pt.constant(0.0, dtype="float64")
    ys = pytensor.scan(step, sequences=[x], outputs_info=[init], return_updates=False)
    fn = pytensor.function([x], ys, mode=mode("numba"))
    np.testing.assert_allclose(fn([1.0, 2.0]), [1.0, 3.0])
    (loop,) = [n for n in fn.maker.fgraph.apply_nodes if type(n.op).__name__ == "Scan"]
    inner = loop.op.fgraph.toposort()
    assert any(isinstance(n.op, IfElse) for n in inner)  # lifted with the Scan's body
    assert not any(type(n.op) is NativeIfElse for n in inner)


def _printed(fn):
    out = io.StringIO()
    pytensor.dprint(fn, file=out)
    return out.getvalue()


def test_compiling_twice_gives_the_same_graph():
    first, second = (pytensor.function([c, x], differential_program(), mode=mode("numba")) for _ in range(2))
    assert _printed(first) == _printed(second)


def test_default_mode_lifts():
    fn = pytensor.function([c, x], lazy_program(), mode=get_default_mode())
    assert consumers(fn) and not natives(fn)


@pytest.mark.parametrize("linker", ["cvm", "vm"])
def test_vm_linkers_keep_the_native_conditional(linker):
    # the VM runs PyTensor's IfElse lazily already; lazy=False asks for eager evaluation
    from pytensor.link.vm import VMLinker

    for m in (mode(linker), Mode(linker=VMLinker(lazy=False, use_cloop=False), optimizer="fast_run")):
        fn = pytensor.function([c, x], lazy_program(), mode=m)
        assert len(natives(fn)) == 1 and not consumers(fn)


def test_a_conditional_inside_a_lifted_call_stays_as_it_is():
    """Only visible conditionals are lifted (found by the thorough differential run).

    A native conditional inside an OpFromGraph the pipeline lifted (an unused input:
    the lift gains) was lifted with the outer graph's always-computed work and broke
    the call body's closure at the fold.
    """
    from pytensor.compile.builders import OpFromGraph

    a, b = pt.dscalar("a"), pt.dscalar("b")
    p0, p1, p2 = pt.dscalar("p0"), pt.dscalar("p1"), pt.dscalar("p2")
    op = OpFromGraph([p0, p1, p2], [ifelse(p0 > 0, pt.exp(p0), -p2)], on_unused_input="ignore")
    out = op(a, a, b)
    outputs = [out, *pytensor.grad(out, [a, b])]
    ours = pytensor.function([a, b], outputs, mode=mode("numba"))
    reference = pytensor.function([a, b], outputs, mode=vanilla("numba"))
    for av in (0.5, -0.5):
        for got, want in zip(ours(av, 2.0), reference(av, 2.0), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_branch_holding_an_op_that_does_not_pickle_stays_native():
    """Numba keys a folded body by its pickle: a body holding such an Op would be recompiled in every process.

    pymc-extras' SARIMAX gradient (an OpFromGraph whose override is a local function):
    its first call was 95x vanilla's. The conditional stays PyTensor's, as in vanilla.
    """
    from pytensor.compile.builders import OpFromGraph

    xi = pt.dvector("xi")
    twice = OpFromGraph([xi], [pt.exp(xi) * 2], pullback=lambda inputs, outputs, grads: [grads[0] * outputs[0]])
    x, c = pt.dvector("x"), pt.dscalar("c")
    out = ifelse(c > 0, pt.tanh(twice(x)).sum(), x.sum())
    ours = pytensor.function([x, c], out, mode=mode("numba"))
    assert any(type(n.op) is NativeIfElse for n in ours.maker.fgraph.apply_nodes)
    reference = pytensor.function([x, c], out, mode=vanilla("numba"))
    for cv in (1.0, -1.0):
        np.testing.assert_allclose(ours(np.linspace(0, 1, 4), cv), reference(np.linspace(0, 1, 4), cv), rtol=1e-12)
