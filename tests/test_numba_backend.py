"""innergraph's Numba consumers: bodies inlined into one generated function per consumer.

Each program is compiled once for the module (Numba compiles slowly); the tests
call it with inputs that take each branch and compare with NumPy.
"""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

from innergraph.backends.numba import numba_body
from innergraph.backends.numba_generated import numba_funcify_generated as numba_funcify_ifelse
from innergraph.protocol import runtime
from innergraph.ops.ifelse import IfElse
from vanilla import vanilla_function
from typed import call, ifelse, recording

NUMBA = Mode(linker="numba", optimizer="fast_run")

x, s = pt.dvector("x"), pt.dscalar("s")


def branches():
    """Two outputs; the then branch returns a param as it is, the else branch a constant."""
    inner = ifelse(s > 2, pt.log1p(pt.exp(x)), pt.sin(x) * s)  # nested in the then branch
    then = [x, pt.exp(inner).sum()]
    other = [x[::-1] * s, pt.constant(2.5, dtype="float64")]
    return ifelse(s > 0, then, other)


def reference(xv, sv):
    if sv > 0:
        inner = np.log1p(np.exp(xv)) if sv > 2 else np.sin(xv) * sv
        return [xv, np.exp(inner).sum()]
    return [xv[::-1] * sv, 2.5]


@pytest.fixture(scope="module")
def branches_fn():
    return pytensor.function([x, s], branches(), mode=NUMBA)


def ifelse_nodes(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, IfElse)]


@pytest.mark.parametrize("sv", [3.0, 1.0, -2.0])
def test_values_of_each_branch(branches_fn, sv):
    xv = np.array([0.5, -1.0, 2.0])
    kept = xv.copy()
    got = branches_fn(xv, sv)
    for g, want in zip(got, reference(kept, sv), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-12)
    np.testing.assert_array_equal(xv, kept)  # in-place work in a branch never touches an argument


def test_a_returned_param_is_a_copy(branches_fn):
    xv = np.array([1.0, 2.0, 3.0])
    out = branches_fn(xv, 1.0)[0]
    assert out is not xv and not np.shares_memory(out, xv)


def test_a_conditional_is_one_function_with_both_bodies_inline(branches_fn):
    (outer,) = ifelse_nodes(branches_fn)  # the nested one is hidden in a body
    fn, key = numba_funcify_ifelse(outer.op, node=outer)
    src = getattr(fn, "py_func").__source__  # a Numba dispatcher
    assert src.count("def ") == 1 and "if i0:" in src and "else:" in src
    assert src.count("return ") == 2
    assert "t_f0(" in src and "e_f0(" in src  # each branch calls its own converted nodes
    assert key is not None


def test_cache_keys_tell_bodies_apart_and_repeat_across_builds():
    def key_of(program):
        fn = pytensor.function([x, s], program(), mode=NUMBA)
        (node,) = ifelse_nodes(fn)
        return numba_funcify_ifelse(node.op, node=node)[1]

    def one():
        return ifelse(s > 0, pt.exp(x).sum(), (x**2).sum())

    def other():
        return ifelse(s > 0, pt.exp(x).sum(), (x**3).sum())

    assert key_of(one) == key_of(one)
    assert key_of(one) != key_of(other)


def test_a_body_shared_by_two_conditionals_is_prepared_once(fresh_body_table):
    shared = (x**2).sum()
    out = ifelse(s > 0, pt.exp(x).sum(), shared) + ifelse(s > 1, pt.cos(x).sum(), shared)
    before = sum(runtime.compile_count.values())
    fn = pytensor.function([x, s], out, mode=NUMBA)
    assert sum(runtime.compile_count.values()) - before == 3  # three distinct bodies, not four
    xv = np.array([0.5, 1.5])
    for sv in (2.0, 0.5, -1.0):
        want = (np.exp(xv).sum() if sv > 0 else (xv**2).sum()) + (np.cos(xv).sum() if sv > 1 else (xv**2).sum())
        np.testing.assert_allclose(fn(xv, sv), want, rtol=1e-12)


def test_call_with_two_outputs_one_a_param():
    y = pt.dvector("y")
    out = call(lambda u, v: [u, pt.tanh(u) * v], x, y)
    fn = pytensor.function([x, y], out, mode=NUMBA)
    xv, yv = np.array([0.1, 0.2]), np.array([3.0, 4.0])
    got = fn(xv, yv)
    np.testing.assert_array_equal(got[0], xv)
    assert not np.shares_memory(got[0], xv)
    np.testing.assert_allclose(got[1], np.tanh(xv) * yv, rtol=1e-12)


def test_numba_body_is_the_body_as_a_function():
    fn = pytensor.function([x, s], ifelse(s > 0, pt.exp(x).sum() * s, s), mode=NUMBA)
    (node,) = ifelse_nodes(fn)
    then_body = node.inputs[1].data
    jitted, key = numba_body(then_body)
    assert numba_body(then_body)[0] is jitted and key is not None
    from_python = numba.njit(lambda a, b: jitted(a, b))  # jitted bodies have no Python entry point
    xv = np.array([0.0, 1.0])
    np.testing.assert_allclose(from_python(xv, np.array(2.0)), np.exp(xv).sum() * 2.0, rtol=1e-12)  # scalars are 0-d arrays


def test_bodies_in_one_conversion_share_equal_nodes_and_late_passes(monkeypatch, fresh_body_table):
    import innergraph.backends.numba_code as code

    converted: list = []
    queried: list = []
    convert, query = code.numba_funcify_ensure_cache, code.body_rewriter
    monkeypatch.setattr(code, "numba_funcify_ensure_cache", recording(converted, convert))
    monkeypatch.setattr(code, "body_rewriter", recording(queried, query, whole=True))
    # three distinct bodies, each with a sum of a float64 vector (PyTensor 3.3 makes it a scalar-output ScalarSum)
    out = ifelse(s > 0, pt.exp(x.sum()), x.sum() * 3) + ifelse(s > 1, pt.cos(x.sum()), s)
    fn = pytensor.function([x, s], out, mode=NUMBA)
    sums = [op for op in converted if "Sum" in str(op)]
    assert len(sums) == 1
    assert len(queried) == 1  # one lookup of the late passes for the three bodies
    xv = np.array([0.25, 0.5])
    for sv in (2.0, 0.5, -1.0):
        want = (np.exp(xv.sum()) if sv > 0 else xv.sum() * 3) + (np.cos(xv.sum()) if sv > 1 else sv)
        np.testing.assert_allclose(fn(xv, sv), want, rtol=1e-12)


def test_a_body_graph_reading_a_free_variable_is_refused_by_name():
    from pytensor.graph.fg import FunctionGraph

    from innergraph import FreeVariableError
    from innergraph.backends.numba_code import body_code

    free = pt.dscalar("free")
    fg = FunctionGraph([x, free], [pt.exp(x) * free], clone=False)
    fg.inputs.remove(free)  # now neither a param nor a constant of the body
    with pytest.raises(FreeVariableError, match="free"):
        body_code(fg)


def test_a_body_holding_an_op_that_does_not_pickle_compiles():
    """A body is keyed by its code, not its pickle: one holding an Op that does not pickle compiles, and is cacheable.

    pymc-extras' SARIMAX gradient holds an OpFromGraph whose override is a local
    function; in a lifted conditional's body it made the Numba conversion fail when
    PyTensor keyed the body constant by its pickle. The override decides no code: the
    key is the body's code key, the same every time.
    """
    import pickle

    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph
    from pytensor.ifelse import ifelse as vanilla_ifelse
    from pytensor.link.numba.dispatch import basic as numba_basic

    import innergraph
    import innergraph.backends.numba  # noqa: F401  (what the first Numba link loads)

    xi = pt.dvector("xi")
    twice = OpFromGraph([xi], [pt.exp(xi) * 2], pullback=lambda inputs, outputs, grads: [grads[0] * outputs[0]])
    x, c = pt.dvector("x"), pt.dscalar("c")
    body = innergraph.body_of(innergraph.inner_graph(lambda v: pt.tanh(twice(v)).sum(), [x]).function)
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        pickle.dumps(body)
    first, second = numba_basic.cache_key_for_constant(body), numba_basic.cache_key_for_constant(body)
    assert first == second == f"body {innergraph.backends.numba.numba_body_code(body).key}"

    out = innergraph.ifelse(c > 0, pt.tanh(twice(x)).sum(), x.sum())
    fn = pytensor.function([x, c], out, mode="NUMBA")
    reference = vanilla_function(lambda: ([x, c], vanilla_ifelse(c > 0, pt.tanh(twice(x)).sum(), x.sum())),
                                 pytensor.compile.mode.get_mode("NUMBA"), first_call=(np.linspace(0, 1, 4), 1.0))
    for cv in (1.0, -1.0):
        np.testing.assert_allclose(fn(np.linspace(0, 1, 4), cv), reference(np.linspace(0, 1, 4), cv), rtol=1e-12)
