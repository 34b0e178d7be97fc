"""`call` evaluated against NumPy and vanilla PyTensor under every linker."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.gradient import verify_grad

from innergraph import body_of, graph_stats, inner_graph, unfold_inner_graphs
from innergraph.core.graph import scope_toposort
from innergraph.protocol import runtime
from typed import call, grad, pushforward

LINKERS = ["py", "cvm", "vm", "c|py", "numba"]


def mode(linker):
    return Mode(linker=linker, optimizer="fast_run")


x = pt.dvector("x")
a = pt.dscalar("a")

# f(x, a) = sum(sin(x) * a) + a**2, built with a captured outer variable `a`
f_out = call(lambda u: (pt.sin(u) * a).sum(), x) + a**2
grads = grad(f_out, [x, a])


def f_ref(xv, av):
    return np.sum(np.sin(xv) * av) + av**2, [np.cos(xv) * av, np.sum(np.sin(xv)) + 2 * av]


@pytest.fixture(scope="module", params=LINKERS)
def compiled(request):
    return pytensor.function([x, a], [f_out, *grads], mode=mode(request.param))


def test_values_and_gradients_match_numpy(compiled, rng):
    xv, av = rng.normal(size=5), rng.normal()
    value, gx, ga = compiled(xv, av)
    ref_value, (ref_gx, ref_ga) = f_ref(xv, av)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    np.testing.assert_allclose(gx, ref_gx, rtol=1e-12)
    np.testing.assert_allclose(ga, ref_ga, rtol=1e-12)


def test_matches_vanilla_opfromgraph():
    from pytensor.compile.builders import OpFromGraph

    u, v = pt.dvector(), pt.dscalar()
    ofg = OpFromGraph([u, v], [(pt.sin(u) * v).sum()])
    vanilla = ofg(x, a) + a**2
    fn = pytensor.function([x, a], [vanilla, *grad(vanilla, [x, a])], mode=mode("cvm"))
    ours = pytensor.function([x, a], [f_out, *grads], mode=mode("cvm"))
    xv, av = np.linspace(-1, 1, 4), 0.7
    for got, want in zip(ours(xv, av), fn(xv, av)):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_verify_grad(rng):
    def fn(u, v):
        return call(lambda p, q: pt.tanh(p) * q + p**2, u, v)

    verify_grad(fn, [rng.normal(size=3), rng.normal(size=3)], rng=rng)


def test_second_derivative(rng):
    y = call(lambda u: pt.exp(u) * u, a)
    d2 = grad(grad(y, a), a)
    av = rng.normal()
    assert pytensor.function([a], d2, mode=mode("cvm"))(av) == pytest.approx(np.exp(av) * (av + 2), rel=1e-12)


def test_pushforward_matches_numpy():
    v = pt.dvector("v")
    y = call(lambda u: pt.exp(u) * a, x)
    jvp = pytensor.function([x, v, a], pushforward(y, x, v), mode=mode("cvm"))
    xv, vv = np.array([0.0, 1.0]), np.array([1.0, 2.0])
    np.testing.assert_allclose(jvp(xv, vv, 2.0), np.exp(xv) * 2.0 * vv)


def test_gradient_of_a_disconnected_argument_is_zero():
    y = call(lambda u, w: u * 2, a, x)
    ga, gx = grad(y, [a, x], disconnected_inputs="ignore")
    fn = pytensor.function([a, x], [ga, gx], mode=mode("py"), on_unused_input="ignore")
    got_a, got_x = fn(1.0, np.ones(3))
    assert got_a == 2.0 and np.all(got_x == 0)


def test_infer_shape_does_not_run_the_body():
    m = pt.dmatrix("m")
    y = call(lambda u: pt.dot(u, u.T)[:, :2], m)
    fn = pytensor.function([m], y.shape, mode=mode("py"))
    assert list(fn(np.ones((4, 3)))) == [4, 2]
    assert graph_stats(fn)["consumers"]["call"] == 0


@pytest.mark.parametrize("linker", ["py", "cvm", "numba"])
def test_merged_bodies_compile_once(linker):
    v, w = pt.dvector("v"), pt.dvector("w")
    body = lambda u: pt.exp(u) + 1  # noqa: E731
    before = sum(runtime.compile_count.values())
    fn = pytensor.function([v, w], [call(body, v), call(body, w)], mode=mode(linker))
    np.testing.assert_allclose(fn([0.0], [1.0])[1], [np.e + 1])
    assert graph_stats(fn)["bodies"] == 1
    assert graph_stats(fn)["consumers"]["call"] == 2
    assert sum(runtime.compile_count.values()) - before == 1


def nested_program():
    """outer(u) = exp(u) + inner(3u, u), inner(w, z) = exp(w) * 2 + z; both bodies use param 0."""
    inner = inner_graph(lambda w, z: pt.exp(w) * 2 + z, [pt.dvector, pt.dvector])
    return call(lambda u: pt.exp(u) + call(inner, u * 3, u), x)


def nested_ref(xv):
    return np.exp(xv) + np.exp(3 * xv) * 2 + xv


@pytest.mark.parametrize("linker", LINKERS)
def test_nested_bodies_reusing_param_ids(linker, rng):
    fn = pytensor.function([x], nested_program(), mode=mode(linker))
    xv = rng.normal(size=4)
    np.testing.assert_allclose(fn(xv), nested_ref(xv), rtol=1e-12)


def test_nested_body_merged_with_parents_node(rng):
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.rewriting.basic import MergeOptimizer

    fg = FunctionGraph([x], [nested_program()], clone=True)
    unfold_inner_graphs(fg)  # as the rewrite pipeline does
    MergeOptimizer().rewrite(fg)
    outer = body_of(fg.outputs[0].owner.inputs[0])
    outer_nodes = scope_toposort(outer.outputs)
    (nested_fn,) = [v for n in outer_nodes for v in n.inputs if isinstance(v.type, type(outer.type))]
    nested_nodes = scope_toposort(body_of(nested_fn).outputs)
    shared = set(outer_nodes) & set(nested_nodes)
    assert any("Exp" in str(n.op) for n in shared), "exp(param 0) should be one node in both scopes"
    fn = pytensor.function(fg.inputs, fg.outputs[0], mode=mode("cvm"))
    xv = rng.normal(size=3)
    np.testing.assert_allclose(fn(xv), nested_ref(xv), rtol=1e-12)


def test_nested_gradient_matches_numpy(rng):
    y = nested_program().sum()
    g = pytensor.function([x], grad(y, x), mode=mode("cvm"))
    xv = rng.normal(size=3)
    np.testing.assert_allclose(g(xv), np.exp(xv) + 6 * np.exp(3 * xv) + 1, rtol=1e-12)


def _folded_bodies(fn):
    from innergraph.core.fold import folded_bodies

    return [body for _, body in folded_bodies(fn.maker.fgraph.outputs)]


def test_a_pipeline_body_compiles_without_the_passes_it_went_through():
    """A body the pipeline rewrote is marked and compiled with the later passes only;
    a user's body compiled without the pipeline (innergraph installed, its rewrites and
    fusion excluded) gets canonicalize at compile time."""
    from pytensor.scalar import Mul

    v = pt.dvector("v")
    y = call(lambda u: pt.exp(u) * 1.0 + 0.0, v)
    value = np.exp(np.arange(3.0))
    piped = pytensor.function([v], y, mode=mode("cvm"))
    plain = pytensor.function([v], y, mode=mode("cvm").excluding("innergraph", "fusion"))
    np.testing.assert_allclose(piped(np.arange(3.0)), value)
    np.testing.assert_allclose(plain(np.arange(3.0)), value)
    (piped_body,) = _folded_bodies(piped)
    (plain_body,) = _folded_bodies(plain)
    assert runtime.is_rewritten(piped_body) and not runtime.is_rewritten(plain_body)

    def muls(nodes):
        return sum(isinstance(getattr(n.op, "scalar_op", None), Mul) for n in nodes)

    def compiled_muls(body):
        return muls(runtime.compiled_function(body, "cvm").maker.fgraph.apply_nodes)

    # the user's body still multiplies by 1.0; compiling it (canonicalize) removes that
    assert muls(scope_toposort(plain_body.outputs)) == 1
    assert compiled_muls(plain_body) == 0
    # the pipeline removed it with the outer graph, before the body was folded
    assert muls(scope_toposort(piped_body.outputs)) == 0
    assert compiled_muls(piped_body) == 0
    def passes(body):
        return {getattr(r, "name", None) for r in runtime.body_rewriter(body, "cvm").data}

    assert {"canonicalize", "stabilize", "specialize", "elemwise_fusion"} <= passes(plain_body)
    assert not {"canonicalize", "stabilize", "specialize", "elemwise_fusion"} & passes(piped_body)
    assert "add_destroy_handler" in passes(piped_body)  # in-place rewriting still runs


@pytest.mark.filterwarnings("ignore:Failed to infer_shape")  # an unknown input shape, on purpose
def test_body_output_shapes_never_leave_a_placeholder_free():
    """With an argument's shape unknown, no placeholder dimension of the shape template leaks."""
    from pytensor.graph.traversal import graph_inputs

    from innergraph.core.instantiate import body_output_shapes

    v = pt.dvector("v")
    y = call(lambda u: pt.exp(u) + 1, v)
    function = y.owner.inputs[0]
    for arg_shapes in ([(v.shape[0],)], [None]):
        (shape,) = body_output_shapes(function, [v], arg_shapes)
        leaves = {str(x) for x in graph_inputs(list(shape))}
        assert not any(name.startswith("d0_") for name in leaves), leaves
        assert pytensor.function([v], shape[0])(np.ones(4)) == 4
