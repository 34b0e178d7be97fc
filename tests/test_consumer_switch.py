"""The second consumer written from the docs: ``design/examples/switch.py``, an N-way lazy switch.

Values against NumPy under py, cvm, Numba (hand-written code, no object mode) and JAX;
laziness (an untaken branch's failing Assert never runs); merging of alpha-equivalent
switches; dead outputs and their operands removed; gradients against a vanilla nested
`ifelse` and finite differences; `check_inner_graph_op`.
"""

import importlib.util
import pathlib
import pickle
import sys
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode
from pytensor.ifelse import ifelse
from pytensor.raise_op import Assert

import innergraph
from innergraph.consumer import BodyTypeError, body_of
from innergraph.testing import OpCase, check_inner_graph_op
from typed import grad

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # design.examples.switch: its backends and pickles find it by name
from design.examples import switch as example  # noqa: E402

# Only the JAX cases skip without jax (an optional backend); the others run everywhere.
JAX = pytest.param("jax", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"))
LINKERS = ["py", "cvm", "numba", JAX]
_FUNCTIONS: dict = {}  # compiled once per (what, linker) for the whole module


def _mode(linker):
    return get_mode(linker.upper()) if linker in ("numba", "jax") else Mode(linker=linker, optimizer="fast_run")


def _compiled(what, linker, build):
    if (what, linker) not in _FUNCTIONS:
        inputs, outputs = build()
        with warnings.catch_warnings():
            warnings.filterwarnings("error", "Numba will use object mode")  # its Numba code is its own
            _FUNCTIONS[what, linker] = pytensor.function(inputs, outputs, mode=_mode(linker))
    return _FUNCTIONS[what, linker]


def _switches(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, example.IndexSwitch)]


# --- values ---------------------------------------------------------------------------------


def _three_branches():
    """Three branches, two outputs each; branch 0 captures ``a``, branch 2 captures ``b``."""
    i, x, w, a, b = pt.lscalar("i"), pt.dvector("x"), pt.dscalar("w"), pt.dscalar("a"), pt.dvector("b")
    out = example.switch(i, [
        lambda v, s: (pt.exp(v) * a, s * 2.0),
        lambda v, s: (v + s, s - 1.0),
        lambda v, s: (pt.sin(v) * b, pt.sum(v) * s),
    ], x, w)
    return [i, x, w, a, b], out


def _three_branches_numpy(i, x, w, a, b):
    k = min(max(i, 0), 2)
    return [(np.exp(x) * a, w * 2.0), (x + w, w - 1.0), (np.sin(x) * b, np.sum(x) * w)][k]


@pytest.mark.parametrize("linker", LINKERS)
def test_values_equal_numpy_for_every_index(linker):
    fn = _compiled("three", linker, _three_branches)
    (node,) = _switches(fn)  # one node, run by the linker (Numba: the hand-written function)
    assert node.op.n_branches == 3 and len(node.outputs) == 2
    x, b = np.array([0.3, -1.2, 2.0]), np.array([1.5, -0.5, 2.0])
    for i in [-3, 0, 1, 2, 7]:
        got = fn(i, x, 0.7, 1.9, b)
        for k, want in enumerate(_three_branches_numpy(i, x, 0.7, 1.9, b)):
            np.testing.assert_allclose(got[k], want, rtol=1e-12, err_msg=f"{linker}, index {i}, output {k}")


# --- laziness -------------------------------------------------------------------------------


def _guarded():
    """Branch 1 asserts ``a > 100`` on a captured value: only running branch 1 can raise."""
    i, x, a = pt.lscalar("i"), pt.dvector("x"), pt.dscalar("a")
    out = example.switch(i, [lambda v: v * 2.0, lambda v: v + Assert("a > 100")(a, pt.gt(a, 100.0)), lambda v: -v], x)
    return [i, x, a], out


@pytest.mark.parametrize("linker", ["py", "cvm", "numba"])  # JAX drops Asserts (PyTensor's JAX backend)
def test_an_untaken_branch_never_runs(linker):
    fn = _compiled("guarded", linker, _guarded)
    outer = [type(n.op).__name__ for n in fn.maker.fgraph.apply_nodes]
    assert "CheckAndRaise" not in outer and "Assert" not in outer, outer  # the assert stayed in its branch
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(fn(0, x, 0.0), 2 * x)
    np.testing.assert_allclose(fn(5, x, 0.0), -x)
    with pytest.raises(AssertionError, match="a > 100"):
        fn(1, x, 0.0)  # the branch that runs does raise
    np.testing.assert_allclose(fn(1, x, 101.0), x + 101.0)


# --- generic rewrites -----------------------------------------------------------------------


def _twins_and_dead():
    """Two alpha-equivalent switches (built twice), one output of a third switch unused."""
    i, x, w = pt.lscalar("i"), pt.dvector("x"), pt.dvector("w")
    one = example.switch(i, [lambda v: pt.exp(v), lambda v: pt.log1p(v * v)], x)
    two = example.switch(i, [lambda u: pt.exp(u), lambda u: pt.log1p(u * u)], x)
    used, _unused = example.switch(i, [lambda v, s: (v * 3.0, pt.cosh(s)), lambda v, s: (v - 1.0, pt.sinh(s))], x, w)
    return [i, x, w], [one, two, used]


@pytest.mark.parametrize("linker", ["cvm", "numba"])
def test_twins_merge_and_dead_outputs_go(linker):
    fn = _compiled("rewrites", linker, _twins_and_dead)
    nodes = _switches(fn)
    assert len(nodes) == 2, nodes  # the twins are one node
    assert [(len(n.outputs), n.op.n_operands) for n in nodes] == [(1, 1), (1, 1)], [n.op for n in nodes]  # cosh/sinh and w gone
    assert not any(v.name == "w" for n in nodes for v in n.inputs)
    x = np.array([0.5, 1.5])
    for i in [0, 1]:
        got = fn(i, x, np.array([9.0]))
        want = [np.exp(x), np.log1p(x * x)][i]
        np.testing.assert_allclose(got[0], want, rtol=1e-12)
        np.testing.assert_allclose(got[1], want, rtol=1e-12)
        np.testing.assert_allclose(got[2], [x * 3.0, x - 1.0][i], rtol=1e-12)


def _pass_through():
    i, x, w = pt.lscalar("i"), pt.dvector("x"), pt.dvector("w")
    some = example.switch(i, [lambda v, u: v, lambda v, u: u, lambda v, u: v * 2.0], x, w)  # branch 1 returns w
    every = example.switch(i, [lambda v, u: v, lambda v, u: v, lambda v, u: v], x, w)  # x whatever the index
    return [i, x, w], [some, every]


def test_only_a_pass_through_of_every_branch_is_forwarded():
    fn = _compiled("forward", "cvm", _pass_through)
    (node,) = _switches(fn)  # `every` is x itself, no switch
    assert len(node.outputs) == 1 and fn.maker.fgraph.outputs[0].owner is node
    x, w = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    for i, want in [(0, x), (1, w), (2, 2 * x), (9, 2 * x)]:
        some, every = fn(i, x, w)
        np.testing.assert_array_equal(some, want)
        np.testing.assert_array_equal(every, x)


# --- gradients ------------------------------------------------------------------------------


def _gradient():
    i, x, a = pt.lscalar("i"), pt.dvector("x"), pt.dscalar("a")
    y, z = example.switch(i, [lambda v: (pt.exp(v) * a, v.sum()), lambda v: (v * v, pt.sum(v) * a), lambda v: (pt.sin(v), a * 1.0)], x)
    cost = (y * y).sum() + 3.0 * z
    return [i, x, a], grad(cost, [x, a])


def _vanilla_gradient():
    """The same, as nested PyTensor ifelses, compiled and run with innergraph uninstalled."""
    with innergraph.uninstalled():
        i, x, a = pt.lscalar("i"), pt.dvector("x"), pt.dscalar("a")
        k = pt.clip(i, 0, 2)
        y = ifelse(pt.eq(k, 0), pt.exp(x) * a, ifelse(pt.eq(k, 1), x * x, pt.sin(x)))
        z = ifelse(pt.eq(k, 0), x.sum(), ifelse(pt.eq(k, 1), pt.sum(x) * a, a * 1.0))
        cost = (y * y).sum() + 3.0 * z
        return pytensor.function([i, x, a], grad(cost, [x, a]), mode=Mode(linker="cvm", optimizer="fast_run"))


def _cost_numpy(i, x, a):
    y, z = [(np.exp(x) * a, x.sum()), (x * x, x.sum() * a), (np.sin(x), a)][min(max(i, 0), 2)]
    return (y * y).sum() + 3.0 * z


@pytest.mark.parametrize("linker", LINKERS)
def test_gradient_equals_vanilla_ifelse_and_finite_differences(linker):
    fn = _compiled("gradient", linker, _gradient)
    assert _switches(fn), "the gradient is a switch of the branches' gradients"
    if "vanilla" not in _FUNCTIONS:
        _FUNCTIONS["vanilla"] = _vanilla_gradient()
    x, a, eps = np.array([0.3, -0.4, 1.1]), 0.8, 1e-6
    for i in [-1, 1, 2]:
        got = fn(i, x, a)
        with innergraph.uninstalled():
            want = _FUNCTIONS["vanilla"](i, x, a)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, err_msg=f"{linker}, index {i}, d/dx")
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, err_msg=f"{linker}, index {i}, d/da")
        fd_a = (_cost_numpy(i, x, a + eps) - _cost_numpy(i, x, a - eps)) / (2 * eps)
        fd_x = [(_cost_numpy(i, x + eps * e, a) - _cost_numpy(i, x - eps * e, a)) / (2 * eps) for e in np.eye(3)]
        np.testing.assert_allclose(got[1], fd_a, rtol=1e-6)
        np.testing.assert_allclose(got[0], fd_x, rtol=1e-6)


def _in_a_loop():
    """A switch in a scan step, one of its branches a switch itself, and the gradient."""
    xs, a = pt.dvector("xs"), pt.dscalar("a")

    def step(x, s):
        i = pt.cast(pt.floor(x), "int64")
        inner = [lambda u: -u, lambda u: u * u]
        return s + example.switch(i, [lambda v: v * a, lambda v: pt.exp(v) - a, lambda v: example.switch(i - 2, inner, v)], s * 0.5 + x)

    last = pytensor.scan(step, sequences=[xs], outputs_info=[pt.as_tensor(np.float64(0.0))], return_updates=False)[-1]
    return [xs, a], [last, *grad(last, [xs, a])]


def _in_a_loop_numpy(xs, a):
    s = 0.0
    for x in xs:
        i, v = int(np.floor(x)), s * 0.5 + x
        s += [v * a, np.exp(v) - a, -v if i - 2 <= 0 else v * v][min(max(i, 0), 2)]
    return s


@pytest.mark.parametrize("linker", ["cvm", "numba", JAX])
def test_nested_in_a_loop_body_with_gradient(linker):
    fn = _compiled("loop", linker, _in_a_loop)
    xs, a, eps = np.array([0.2, 1.5, 2.3, 3.7, -0.4, 1.1]), 0.7, 1e-6
    last, _, grad_a = fn(xs, a)
    np.testing.assert_allclose(last, _in_a_loop_numpy(xs, a), rtol=1e-12)
    np.testing.assert_allclose(grad_a, (_in_a_loop_numpy(xs, a + eps) - _in_a_loop_numpy(xs, a - eps)) / (2 * eps), rtol=1e-6)


# --- the kit --------------------------------------------------------------------------------


def _reference(args):
    i, x, a = args
    k = pt.clip(i, 0, 2)  # an eager elementwise switch: vanilla JAX cannot differentiate nested ifelses
    return pt.switch(pt.eq(k, 0), pt.exp(x) * a, pt.switch(pt.eq(k, 1), x * a + 1.0, pt.sin(x) * 2.0))


CASE = OpCase(
    build=lambda bodies, args: example.switch(args[0], bodies, args[1], args[2]),
    arg_types=[pt.lscalar, pt.dvector, pt.dscalar],
    bodies=[lambda v, a: pt.exp(v) * a, lambda v, a: v * a + 1.0, lambda v, a: pt.sin(v) * 2.0],
    rewritten=[lambda v, a: pt.exp(v) * a * 1.0, lambda v, a: (v * a + 1.0) + 0.0, lambda v, a: -(-pt.sin(v)) * 2.0],
    changed=[lambda v, a: pt.exp(v) * a, lambda v, a: v * a + 2.0, lambda v, a: pt.sin(v) * 2.0],
    reference=_reference,
    sample=lambda rng: [rng.integers(-1, 4), rng.normal(size=3), 0.7],
    differentiable=[1, 2],
)


def test_the_switchs_shape_is_inferred_without_running_it():
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.rewriting.shape import ShapeFeature

    i, x, a = pt.lscalar("i"), pt.dvector("x"), pt.dscalar("a")
    out = CASE.build(CASE.bodies, [i, x, a])
    fgraph = FunctionGraph([i, x, a], [out], clone=False, features=[ShapeFeature()])
    (length,) = fgraph.shape_feature.shape_tuple(out)
    assert out not in set(ancestors([length]))  # the shape does not read the switch's result


# the laws under the default linker, whose code is the hand-written one (no object mode);
# the thunk linkers' values are checked by the tests above (CI's time budget)
@pytest.mark.parametrize("linker", ["numba"])
def test_check_inner_graph_op(linker):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "Numba will use object mode")
        check_inner_graph_op(CASE, mode=_mode(linker))


def test_law_4_can_fail_for_it():
    """Bodies not equal up to canonicalization (not only in a constant: constants become arguments): the kit says so."""
    wrong = OpCase(**{**CASE.__dict__, "rewritten": [CASE.bodies[0], lambda v, a: pt.cos(v) * a + 1.0, CASE.bodies[2]]})
    with pytest.raises(AssertionError, match="law 4"):
        check_inner_graph_op(wrong, mode=_mode("py"))


# --- building -------------------------------------------------------------------------------


def test_bad_input_names_the_offending_branch_or_variable():
    x, f = pt.dvector("x"), pt.fvector("f")
    with pytest.raises(ValueError, match="at least two branches"):
        example.switch(0, [lambda v: v], x)
    with pytest.raises(BodyTypeError, match="branch 1 .* returns 2 outputs, branch 0 returns 1"):
        example.switch(0, [lambda v: v, lambda v: (v, v)], x)
    with pytest.raises(BodyTypeError, match="output 0 of branch 2 .*float32"):
        example.switch(0, [lambda v: v, lambda v: v, lambda v: f], x)
    with pytest.raises(TypeError, match=r"the index \(x, input 2\) must be an integer scalar"):
        example.switch(x, [lambda v: v, lambda v: v], x)


def test_op_pickles_and_compares_by_props():
    op = example.switch_op(2, (1, 0, 3))
    assert pickle.loads(pickle.dumps(op)) == op and hash(pickle.loads(pickle.dumps(op))) == hash(op)
    assert example.switch_op(2, (1, 0, 3)) == op != example.switch_op(2, (0, 1, 3))
    assert type(op) is example.switch_class(3) and type(op) is not example.switch_class(2)
