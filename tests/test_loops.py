"""while_loop, do_while and fori_loop: values against NumPy under py, cvm and numba; the generic
rewrites applied to each loop (asserted on the compiled graph); pushforward and pullback."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode
from pytensor.gradient import verify_grad
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.rewriting.shape import ShapeFeature

import innergraph
from innergraph.core.graph import body_of
from innergraph.ops.loop import ForiLoop, WhileLoop
from typed import grad, pushforward

LINKERS = ["py", "cvm", "numba"]


def mode_for(linker):
    return get_mode("NUMBA") if linker == "numba" else Mode(linker=linker, optimizer="fast_run")


def loops(fn, cls=(WhileLoop, ForiLoop)):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, cls)]


def body_ops(node, b):
    from innergraph.core.graph import scope_toposort

    return [type(n.op.scalar_op if hasattr(n.op, "scalar_op") else n.op).__name__ for n in scope_toposort(body_of(node.inputs[b]).outputs)]


x, a = pt.dscalar("x"), pt.dscalar("a")
v = pt.dvector("v")
lo, hi = pt.lscalar("lo"), pt.lscalar("hi")


def newton_sqrt(c, x0):
    """Newton's iteration for sqrt(c) until the step is tiny: a while loop over a dict state."""
    state = innergraph.while_loop(
        lambda s: pt.abs(s["x"] * s["x"] - c) > 1e-12,
        lambda s: {"x": 0.5 * (s["x"] + c / s["x"]), "n": s["n"] + 1},
        {"x": x0, "n": pt.constant(0, dtype="int64")},
    )
    return state["x"], state["n"]


@pytest.fixture(scope="module", params=LINKERS)
def compiled(request):
    """One compiled function per linker holding every loop checked by value (compiled once)."""
    root, steps = newton_sqrt(a, x)
    zero_steps = innergraph.while_loop(lambda s: s < 0.0, lambda s: s - 1.0, x)  # cond false at once
    at_least_once = innergraph.do_while(lambda s: s * 2.0, lambda s: s < 0.0, x)  # cond false, one step
    tup = innergraph.fori_loop(lo, hi, lambda i, s: (s[0] + pt.cast(i, "float64") * s[1][0], [s[1][0] * 2.0]), (x, [a]))
    vec = innergraph.fori_loop(0, 3, lambda i, s: s * a + v, v)
    bounded = innergraph.while_loop(lambda s: s < 1e9, lambda s: s * 2.0, x, max_steps=5)
    outputs = [root, steps, zero_steps, at_least_once, tup[0], tup[1][0], vec, bounded]
    return request.param, pytensor.function([x, a, v, lo, hi], outputs, mode=mode_for(request.param))


def reference(x0, c, vv, lo_, hi_):
    r, n = x0, 0
    while abs(r * r - c) > 1e-12:
        r, n = 0.5 * (r + c / r), n + 1
    s0, s1 = x0, c
    for i in range(lo_, hi_):
        s0, s1 = s0 + i * s1, s1 * 2.0
    w = vv.copy()
    for _ in range(3):
        w = w * c + vv
    b = x0
    for _ in range(5):
        b = b * 2.0
    return [r, n, x0, x0 * 2.0, s0, s1, w, b]


@pytest.mark.parametrize("bounds", [(0, 4), (2, 7), (5, 5), (6, 2)])
def test_values_against_numpy(compiled, bounds):
    linker, fn = compiled
    args = (1.5, 2.0, np.array([0.5, -1.0]), *bounds)
    for got, want in zip(fn(*args), reference(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert len(loops(fn)) >= 5, linker


def test_numba_runs_without_object_mode():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # object mode warns
        fn = pytensor.function([x, a], newton_sqrt(a, x), mode="NUMBA")
    np.testing.assert_allclose(fn(1.0, 2.0)[0], np.sqrt(2.0))


def test_pytree_structure_and_type_errors():
    out = innergraph.while_loop(lambda s: s[0] < 3.0, lambda s: (s[0] + 1.0, {"k": s[1]["k"] * 2}), (x, {"k": pt.constant(1, dtype="int64")}))
    assert isinstance(out, tuple) and isinstance(out[1], dict)
    with pytest.raises(innergraph.BodyTypeError, match=r"body_fun returns a single tensor, but the state \(init_val\) is a tuple \(tensor, tensor\)"):
        innergraph.while_loop(lambda s: s[0] < 3.0, lambda s: s[0], (x, x))
    with pytest.raises(innergraph.BodyTypeError, match="carried value 0"):
        innergraph.fori_loop(0, 3, lambda i, s: pt.dvector(), x)
    with pytest.raises(TypeError, match="lower"):
        innergraph.fori_loop(0.5, 3, lambda i, s: s, x)
    with pytest.raises(innergraph.BodyTypeError, match="scalar"):
        innergraph.while_loop(lambda s: s > 0, lambda s: s, v)


@pytest.mark.parametrize("builder", ["while_loop", "do_while", "loop_pre", "loop_post"])
@pytest.mark.parametrize("condition", ["float", "int", "python_int", "python_bool"])
def test_a_condition_that_is_not_boolean_is_refused(builder, condition):
    """A float or integer condition is a TypeError naming the condition and its type, never compared with zero silently.

    JAX's ``lax.while_loop`` accepts boolean scalars only; so do the builders, which
    used to convert any number with ``c != 0``.
    """
    make = {"float": lambda s: s * 1.0, "int": lambda s: pt.cast(s, "int64"), "python_int": lambda s: 1, "python_bool": lambda s: s != 0}[condition]
    step = lambda s: s - 1.0
    build = {
        "while_loop": lambda: innergraph.while_loop(make, step, x),
        "do_while": lambda: innergraph.do_while(step, make, x),
        "loop_pre": lambda: innergraph.loop(make, step, None, x),
        "loop_post": lambda: innergraph.loop(None, step, make, x, max_steps=3),
    }[builder]
    name = {"while_loop": "cond_fun", "do_while": "cond_fun", "loop_pre": "pre_condition", "loop_post": "post_condition"}[builder]
    said = {"float": "float64", "int": "int64", "python_int": "int8", "python_bool": "the Python bool True"}[condition]
    with pytest.raises(TypeError, match=rf"{builder.split('_')[0]}.*: {name} must return a boolean scalar.*{said}.*pt\.neq\(x, 0\)"):
        build()


def test_a_boolean_condition_still_builds_and_runs():
    """The refusal above is of the type only: ``pt.lt`` and ``pt.neq`` (booleans) build and run."""
    n = pt.lscalar("n")
    by_comparison = innergraph.while_loop(lambda s: pt.lt(s, 10.0), lambda s: s * 2.0, x)
    by_nonzero = innergraph.while_loop(lambda s: pt.neq(s[0], 0), lambda s: (s[0] - 1, s[1] + 1.0), (n, x))[1]
    bounded = innergraph.loop(None, lambda s: s + 1.0, lambda s: pt.gt(s, 0.0), x, max_steps=3)
    fn = pytensor.function([x, n], [by_comparison, by_nonzero, bounded], mode=Mode(linker="py", optimizer="fast_run"))
    np.testing.assert_allclose(fn(1.5, 4), [12.0, 5.5, 4.5])


# --- the generic rewrites, applied to each loop ----------------------------------------------


kk = pt.dscalar("kk")


@pytest.fixture(scope="module", params=LINKERS)
def structure(request):
    """Each loop built with a dead carry, two pass-through carries of one value and invariant work; plus a fori twin.

    The pass-through carries become arguments (forwarding) — for the while loop one
    that both bodies read —, the two then merge (duplicate arguments), the counter
    dies (dead slots), ``cosh(exp(a))`` and ``kk * 100`` leave the bodies (hoisting),
    and the twin merges into the fori loop (merging loops).
    """
    w_out = innergraph.while_loop(
        lambda s: s[0] < s[1] * 100.0,
        lambda s: (s[0] * pt.cosh(pt.exp(a)) + s[2], s[1], s[2], s[3] + 1.0),
        (x, kk, kk, x),
    )
    f_out = innergraph.fori_loop(lo, hi, lambda i, s: (s[0] * pt.cosh(pt.exp(a)) + s[1], s[1], s[2] + 1.0), (x, kk, x))
    twin = innergraph.fori_loop(lo, hi, lambda i, s: s * pt.cosh(pt.exp(a)) + kk, a)  # alpha-equivalent to f's first carry
    outputs = [w_out[0], f_out[0], twin]
    return request.param, pytensor.function([x, a, kk, lo, hi], outputs, mode=mode_for(request.param))


def test_rewrites_apply_to_each_loop(structure):
    linker, fn = structure
    (w,) = loops(fn, WhileLoop)
    (f,) = loops(fn, ForiLoop)  # the twin merged into the fori loop (merge_loops)
    wp, fp = w.op.split(w.inputs), f.op.split(f.inputs)
    assert w.op.n_carry == 1 and [v.name for v in wp["args"]] == ["kk"], (linker, w.op, wp)
    assert f.op.n_carry == 2 and f.op.n_seqs == 0 and [v.name for v in fp["args"]].count("kk") == 1, (linker, f.op, fp)
    assert "Cosh" not in body_ops(w, 1) and "Cosh" not in body_ops(f, 0), linker
    assert "Mul" not in body_ops(w, 0) and len(wp["cond_args"]) == 1, (linker, body_ops(w, 0))
    c = np.cosh(np.exp(0.3))
    r = 1.5
    while r < 2.0 * 100.0:
        r = r * c + 2.0
    f0, t0 = 1.5, 0.3
    for _ in range(3):
        f0, t0 = f0 * c + 2.0, t0 * c + 2.0
    np.testing.assert_allclose(fn(1.5, 0.3, 2.0, 1, 4), [r, f0, t0], rtol=1e-12)


def test_merging_respects_dependence_and_while_loops_never_merge():
    first = innergraph.fori_loop(0, 3, lambda i, s: s * 2.0, x)
    second = innergraph.fori_loop(0, 3, lambda i, s: s * 2.0, first)  # reads the first: no merge
    w1 = innergraph.while_loop(lambda s: s < 10.0, lambda s: s * 2.0, x)
    w2 = innergraph.while_loop(lambda s: s < 10.0, lambda s: s * 3.0, x)
    fn = pytensor.function([x], [second, w1, w2], mode=mode_for("cvm"))
    assert len(loops(fn, ForiLoop)) == 2 and len(loops(fn, WhileLoop)) == 2
    np.testing.assert_allclose(fn(1.0), [64.0, 16.0, 27.0])


def test_sequence_work_pushed_out_of_fori():
    """The index is a sequence: row-wise work on it (the cast) leaves the loop (push_out_sequence_work)."""
    out = innergraph.fori_loop(0, 5, lambda i, s: s * a + pt.cast(i, "float64") ** 2, x)
    fn = pytensor.function([x, a], out, mode=mode_for("cvm"))
    (f,) = loops(fn)
    assert "Cast" not in body_ops(f, 0) and "Pow" not in body_ops(f, 0) and "Sqr" not in body_ops(f, 0)
    ref = 1.0
    for i in range(5):
        ref = ref * 0.5 + i**2
    np.testing.assert_allclose(fn(1.0, 0.5), ref)


# --- derivatives -------------------------------------------------------------------------------


def test_fori_pullback_static_and_symbolic_trip_count_against_scan():
    def loop(x_, a_, n_):
        return innergraph.fori_loop(0, n_, lambda i, s: pt.sin(s) * a_ + pt.cast(i, "float64"), x_)

    rng = np.random.default_rng(0)
    verify_grad(lambda x_, a_: loop(x_, a_, 4), [np.array(0.3), np.array(1.5)], rng=rng)
    n = pt.lscalar("n")
    ours = loop(x, a, n)
    scan = pytensor.scan(lambda i, s: pt.sin(s) * a + pt.cast(i, "float64"), sequences=[pt.arange(n)], outputs_info=[x], return_updates=False)[-1]
    fn = pytensor.function([x, a, n], [*grad(ours, [x, a]), *grad(scan, [x, a])], mode=mode_for("cvm"))
    g = fn(0.3, 1.5, 6)
    np.testing.assert_allclose(g[:2], g[2:], rtol=1e-12)
    zero = pytensor.function([x, a, n], grad(ours, [x, a]), mode=mode_for("cvm"))(0.3, 1.5, 0)
    np.testing.assert_allclose(zero, [1.0, 0.0])


def test_while_pullback_with_max_steps():
    def loop(x_, a_):
        return innergraph.while_loop(lambda s: s < 10.0, lambda s: s * a_ + 1.0, x_, max_steps=50)

    verify_grad(loop, [np.array(1.0), np.array(2.0)], rng=np.random.default_rng(0))
    y = loop(x, a)
    fn = pytensor.function([x, a], [y, *grad(y, [x, a])], mode=mode_for("cvm"))
    np.testing.assert_allclose(fn(1.0, 2.0), [15.0, 8.0, 17.0])  # x a^3 + a^2 + a + 1
    np.testing.assert_allclose(fn(20.0, 2.0), [20.0, 1.0, 0.0])  # zero steps
    dw = innergraph.do_while(lambda s: s * a + 1.0, lambda s: s < 10.0, x, max_steps=50)
    np.testing.assert_allclose(pytensor.function([x, a], grad(dw, [x, a]), mode=mode_for("cvm"))(20.0, 2.0), [2.0, 20.0])


def test_while_pullback_without_bound_names_the_loop_and_what_to_pass():
    y = innergraph.while_loop(lambda s: s < 10.0, lambda s: s * a, x)
    with pytest.raises(ValueError, match=r"While\{1 carried\}.*pass max_steps="):
        grad(y, x)


@pytest.mark.parametrize("which", ["while", "do_while", "fori"])
def test_pushforward_against_finite_differences(which):
    build = {
        "while": lambda x_: innergraph.while_loop(lambda s: s < 10.0, lambda s: s * a + pt.sin(s), x_),
        "do_while": lambda x_: innergraph.do_while(lambda s: s * a + pt.sin(s), lambda s: s < 10.0, x_),
        "fori": lambda x_: innergraph.fori_loop(0, 4, lambda i, s: s * a + pt.sin(s), x_),
    }[which]
    t = pt.dscalar("t")
    y = build(x)
    jvp = pushforward(y, [x, a], [t, pt.constant(0.5)], use_op_pushforward=True)
    fn = pytensor.function([x, a, t], jvp, mode=mode_for("cvm"))
    f = pytensor.function([x, a], y, mode=mode_for("cvm"))
    eps = 1e-6
    fd = (f(1.0 + eps, 1.5 + 0.5 * eps) - f(1.0 - eps, 1.5 - 0.5 * eps)) / (2 * eps)
    np.testing.assert_allclose(fn(1.0, 1.5, 1.0), fd, rtol=1e-5)


@pytest.mark.parametrize("which, linker", [("while", "cvm"), ("while", "numba"), ("fori", "cvm"), ("fori", "numba")])
def test_loops_pass_check_inner_graph_op(which, linker):
    from innergraph.testing import check_inner_graph_op
    from innergraph.testing.kit import OpCase

    def build(bodies, args):
        (step,) = bodies
        if which == "fori":
            return innergraph.fori_loop(0, 3, lambda i, s: step(s, args[1]), args[0])
        return innergraph.while_loop(lambda s: pt.sum(s) < 50.0, lambda s: step(s, args[1]), args[0], max_steps=20)

    def reference(args):
        if which == "fori":
            return pytensor.scan(lambda s: s * args[1] + 1.0, outputs_info=[args[0]], n_steps=3, return_updates=False)[-1]
        out = args[0]
        for _ in range(3):  # the sample below stops after three steps
            out = out * args[1] + 1.0
        return out

    case = OpCase(
        build=build,
        arg_types=[pt.dvector, pt.dscalar],
        bodies=[lambda s, k: s * k + 1.0],
        rewritten=[lambda s, k: (s * k + 1.0) * 1.0],
        changed=[lambda s, k: s * k + 2.0],
        reference=reference,
        sample=lambda rng: [np.array([1.0, 2.0]), 2.5],
        differentiable=(0, 1),
    )
    check_inner_graph_op(case, mode=mode_for(linker))


@pytest.mark.parametrize("which", ["while", "fori"])
def test_a_loops_shape_is_inferred_without_running_it(which):
    from pytensor.graph.traversal import ancestors

    x, k = pt.dvector("x"), pt.dscalar("k")
    if which == "fori":
        out = innergraph.fori_loop(0, 3, lambda i, s: s * k + 1.0, x)
    else:
        out = innergraph.while_loop(lambda s: pt.sum(s) < 50.0, lambda s: s * k + 1.0, x, max_steps=20)
    fgraph = FunctionGraph([x, k], [out], clone=False, features=[ShapeFeature()])
    (length,) = fgraph.shape_feature.shape_tuple(out)
    assert out not in set(ancestors([length]))  # the shape does not read the loop's result


def test_a_loop_whose_step_changes_a_shape_reads_it_from_the_result():
    """A step that grows its carried vector: the initial shape would be wrong, so infer_shape refuses and PyTensor reads the result."""
    from pytensor.graph.traversal import ancestors

    x = pt.dvector("x")
    out = innergraph.fori_loop(0, 3, lambda i, s: pt.concatenate([s, s[:1]]), x)
    fgraph = FunctionGraph([x], [out], clone=False, features=[ShapeFeature()])
    (length,) = fgraph.shape_feature.shape_tuple(out)
    assert out in set(ancestors([length]))
    assert pytensor.function([x], out.shape, mode=Mode(linker="py", optimizer="fast_run"))(np.ones(2)).tolist() == [5]
