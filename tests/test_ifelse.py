# mypy: disable-error-code="override"
# (this file's Ops and linkers declare make_node with the arguments they take, as PyTensor's own do)
"""The in-graph IfElse: lazy in every linker, gradients, sharing, merging, lift/lower."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.ifelse import ifelse as vanilla_ifelse
from pytensor.raise_op import Assert

import innergraph
from innergraph import graph_stats, lift, lower
from innergraph.core.fold import folded_bodies
from innergraph.core.graph import scope_toposort
from innergraph.ops.ifelse import IfElse
from vanilla import vanilla_function
from typed import grad, ifelse

LINKERS = ["py", "cvm", "vm", "numba"]
#: innergraph installed, its rewrites excluded: the consumers run as they are (not vanilla).
IN_GRAPH = get_default_mode().excluding("innergraph")


def mode(linker):
    return Mode(linker=linker, optimizer="fast_run")


a, b = pt.dscalar("a"), pt.dvector("b")


def program(cond_fn):
    return cond_fn(a > 0, pt.exp(b).sum() * a, (b**2).sum() + a)


@pytest.mark.parametrize("linker", LINKERS)
def test_values_and_gradients_match_vanilla(linker):
    def with_grads(out):
        return [out, *grad(out, [a, b])]

    fn = pytensor.function([a, b], with_grads(program(ifelse)), mode=mode(linker))
    ref = vanilla_function(lambda: ([a, b], with_grads(program(vanilla_ifelse))), get_default_mode())
    for av in (1.5, -0.5):
        for got, want in zip(fn(av, [1.0, 2.0]), ref(av, [1.0, 2.0]), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gradient_through_a_branch_that_reads_an_integer():
    # the integer argument's own gradient is a float zero (PyTensor refuses integer
    # gradients): it used to be cast to the argument's dtype and fail
    k = pt.iscalar("k")

    def build(cond_fn):
        y = cond_fn(a > 0, pt.exp(b).sum() * k, (b**2).sum() + a)
        return [y, *grad(y, [a, b])]

    fn = pytensor.function([a, b, k], build(ifelse))
    ref = vanilla_function(lambda: ([a, b, k], build(vanilla_ifelse)), get_default_mode())
    for av in (1.5, -0.5):
        for got, want in zip(fn(av, [1.0, 2.0], 3), ref(av, [1.0, 2.0], 3), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


class CountCalls(Op):
    """Identity that records how often it runs."""

    __props__ = ()
    calls = 0

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        type(self).calls += 1
        outputs[0][0] = inputs[0].copy()


@pytest.fixture(scope="module", params=LINKERS)
def lazy_fn(request):
    x = pt.dscalar("x")
    guarded = Assert("the else branch ran")(x * 2, pt.lt(x, -100))  # raises unless x < -100
    counted = CountCalls()(pt.sqrt(x))
    out = ifelse(pt.gt(x, 0), counted, guarded)
    return pytensor.function([x], out, mode=mode(request.param))


def test_untaken_branch_with_an_assert_never_runs(lazy_fn):
    assert lazy_fn(4.0) == 2.0
    with pytest.raises(AssertionError, match="the else branch ran"):
        lazy_fn(-1.0)
    assert lazy_fn(-200.0) == -400.0


def test_untaken_branch_work_is_not_done(lazy_fn):
    CountCalls.calls = 0
    lazy_fn(-200.0)
    lazy_fn(-300.0)
    assert CountCalls.calls == 0
    lazy_fn(9.0)
    assert CountCalls.calls == 1


def test_pytensors_own_conditional_is_lazy_under_numba_and_left_to_pytensor():
    """PyTensor 3.3.6 makes its IfElse lazy under Numba (``LazyIfElse``): innergraph leaves it as vanilla compiles it."""
    def build():
        x = pt.dscalar("x")
        guarded = Assert("else ran")(x * 2, pt.lt(x, -100))
        return x, vanilla_ifelse(pt.gt(x, 0), pt.sqrt(x), guarded)

    x, out = build()
    ours = pytensor.function([x], out, mode=mode("numba"))
    with innergraph.uninstalled():  # the reference built, compiled and run uninstalled (tests/vanilla.py)
        x, out = build()
        vanilla = pytensor.function([x], out, mode=mode("numba"))
        eager = pytensor.function([x], out, mode=mode("numba").excluding("lazy_ifelse"))
        with pytest.raises(AssertionError):
            eager(4.0)  # PyTensor's eager form runs both branches (PyTensor issue #501)
    assert ours(4.0) == vanilla(4.0) == 2.0
    assert [type(n.op).__name__ for n in ours.maker.fgraph.toposort()] == [type(n.op).__name__ for n in vanilla.maker.fgraph.toposort()]


def test_work_the_outer_graph_computes_anyway_is_passed_in():
    shared = pt.exp(b).sum()
    out = ifelse(a > 0, shared * 2, (b**2).sum()) + shared
    fn = pytensor.function([a, b], out, mode=get_default_mode())
    exps = [n for n in fn.maker.fgraph.apply_nodes if _computes_exp(n)]
    assert len(exps) == 1  # computed once, outside the branch
    for _, body in folded_bodies(fn.maker.fgraph.outputs):
        assert not any(_computes_exp(n) for n in scope_toposort(body.outputs))
    np.testing.assert_allclose(fn(1.0, [0.0, 1.0]), 3 * (1 + np.e))
    np.testing.assert_allclose(fn(-1.0, [0.0, 1.0]), 1.0 + 1 + np.e)


def test_work_only_a_lazy_native_branch_computes_stays_inside():
    shared = pt.exp(b).sum()
    # the outer graph computes `shared` only when PyTensor's own (lazy) IfElse takes that branch
    rare = vanilla_ifelse(a < -10, shared, a)
    out = ifelse(a > 0, shared * 2, (b**2).sum()) + rare
    fn = pytensor.function([a, b], out, mode=mode("cvm"))
    bodies = [body for _, body in folded_bodies(fn.maker.fgraph.outputs)]
    assert any(_computes_exp(n) for body in bodies for n in scope_toposort(body.outputs))
    np.testing.assert_allclose(fn(1.0, [0.0, 1.0]), 2 * (1 + np.e) + 1.0)
    np.testing.assert_allclose(fn(-20.0, [0.0, 1.0]), 1.0 + 1 + np.e)


def _computes_exp(node):
    """Whether ``node`` computes an ``exp``: itself, or inside a fused node's inner graph (``Composite``, ``FusedElemwise``)."""
    import pytensor.scalar as ps

    op = getattr(node.op, "scalar_op", node.op)
    if isinstance(op, ps.Exp):
        return True
    inner = getattr(op, "fgraph", None) or getattr(node.op, "fgraph", None)
    return inner is not None and any(_computes_exp(n) for n in inner.apply_nodes)


def test_identical_conditionals_built_separately_merge():
    fg = FunctionGraph([a, b], [program(ifelse), program(ifelse)], clone=True)
    MergeOptimizer().rewrite(fg)
    assert fg.outputs[0] is fg.outputs[1]
    assert graph_stats(fg)["consumers"]["ifelse"] == 1


def test_infer_shape_without_running_a_branch():
    out = ifelse(a > 0, pt.exp(b), b[::-1] * 2)
    fn = pytensor.function([a, b], out.shape, mode=mode("py"))
    assert list(fn(1.0, np.ones(3))) == [3]
    assert graph_stats(fn)["consumers"]["ifelse"] == 0


def test_infer_shape_of_branches_with_different_shapes_stays_lazy():
    out = ifelse(a > 0, b[:2], Assert("else ran")(b, pt.lt(a, -100)))
    fn = pytensor.function([a, b], out.shape, mode=mode("numba"))
    assert list(fn(1.0, np.ones(5))) == [2]


def test_lift_and_lower_native_ifelse():
    theirs = program(vanilla_ifelse)
    fg = FunctionGraph([a, b], [theirs], clone=True)
    assert lift(fg) == 1
    assert graph_stats(fg)["consumers"]["ifelse"] == 1
    lifted = pytensor.function(fg.inputs, fg.outputs, mode=IN_GRAPH)
    assert lower(fg) == 1
    assert not any(isinstance(n.op, IfElse) for n in fg.apply_nodes)
    lowered = pytensor.function(fg.inputs, fg.outputs, mode=IN_GRAPH)
    ref = vanilla_function(lambda: ([a, b], program(vanilla_ifelse)), get_default_mode())
    for av in (1.5, -0.5):
        assert lifted(av, [1.0, 2.0]) == ref(av, [1.0, 2.0]) == lowered(av, [1.0, 2.0])


def test_the_pipeline_never_lifts_a_native_conditional():
    """PyTensor's own IfElse stays PyTensor's under every linker: lazy under the VMs and, since 3.3.6, Numba and JAX."""
    out = program(vanilla_ifelse)
    for linker in ("numba", "cvm", "py"):
        fn = pytensor.function([a, b], out, mode=mode(linker))
        assert not [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IfElse)], linker


def test_ifelse_signature_and_errors():
    single = ifelse(a > 0, a, a * 2)
    assert isinstance(single, pt.TensorVariable)
    pair = ifelse(a > 0, [a, b], [a * 2, b])
    assert isinstance(pair, list) and len(pair) == 2
    with pytest.raises(innergraph.BodyTypeError, match="output 0"):
        ifelse(a > 0, a, b)
    with pytest.raises(innergraph.BodyTypeError, match="scalar"):
        ifelse(b, a, a)
