"""Calls on the generated path (innergraph.protocol.semantics.Once): `Call`'s Numba and JAX code comes from its
declaration, like the loops' and the conditional's. Values under py, cvm, numba and jax against NumPy for
plain, multi-output, nested and overridden calls (a lifted OpFromGraph whose gradient-override functions are
inputs the call never runs) and calls inside loop bodies, with gradients; the Numba cache key; no object mode."""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_mode

import innergraph
from innergraph.lifting.rules import lift_graph
from innergraph.ops.call import Call
from innergraph.protocol.plans import once_plan
from typed import call, grad, pushforward

x, a = pt.dvector("x"), pt.dscalar("a")


def overridden():
    """``sin`` as an OpFromGraph whose pullback (``10 g``) and pushforward (``3 t``) are overridden, lifted to a `Call`."""
    xi = pt.dvector("xi")
    ofg = OpFromGraph([xi], [pt.sin(xi)], pullback=lambda ins, outs, gs: [gs[0] * 10.0], pushforward=lambda ins, ts: [ts[0] * 3.0])
    (out,) = lift_graph(ofg.make_node(x).outputs)
    assert isinstance(out.owner.op, Call) and out.owner.op.n_functions == 3
    return out


def graph():
    plain = call(lambda v: (v**2).sum() * a, x)
    pair = call(lambda v: (v * 2.0, v.sum()), x)
    nested = call(lambda v: call(lambda w: pt.exp(w) * a, v) * 2.0 + 1.0, x)
    over = overridden()
    in_fori = innergraph.fori_loop(0, 3, lambda i, s: call(lambda w: w * a + 1.0, s), x)
    in_while = innergraph.while_loop(lambda s: s.sum() < 100.0, lambda s: call(lambda w: w * 2.0 + 1.0, s), x)
    values = [plain, *pair, nested, over, in_fori, in_while]
    cost = plain + pt.sum(nested) + pt.sum(over) + pt.sum(in_fori)
    grads = grad(cost, [x, a])
    tangent = pushforward(over, [x], [pt.ones_like(x)], use_op_pushforward=True)
    return [*values, *grads, tangent]


def reference(xv, av):
    fori = xv.copy()
    for _ in range(3):
        fori = fori * av + 1.0
    w = xv.copy()
    while w.sum() < 100.0:
        w = w * 2.0 + 1.0
    values = [(xv**2).sum() * av, xv * 2.0, xv.sum(), np.exp(xv) * av * 2.0 + 1.0, np.sin(xv), fori, w]
    dx = 2.0 * xv * av + 2.0 * av * np.exp(xv) + 10.0 + av**3
    da = (xv**2).sum() + 2.0 * np.exp(xv).sum() + np.sum(3 * av**2 * xv + 2 * av + 1)
    return [*values, dx, da, 3.0 * np.ones_like(xv)]


MODES = {
    "py": Mode(linker="py", optimizer="fast_run"),
    "cvm": Mode(linker="cvm", optimizer="fast_run"),
    "numba": get_mode("NUMBA"),
    "jax": get_mode("JAX"),
}


_FUNCTIONS: dict = {}  # one compilation per backend for the module


def _compiled(backend):
    if backend not in _FUNCTIONS:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", "Numba will use object mode")  # every call has generated code
            _FUNCTIONS[backend] = pytensor.function([x, a], graph(), mode=MODES[backend])
    return _FUNCTIONS[backend]


@pytest.fixture(scope="module", params=list(MODES))
def compiled(request):
    return request.param, _compiled(request.param)


def _calls(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Call)]


@pytest.mark.parametrize("args", [(np.array([0.5, -1.0, 2.0]), 1.5), (np.array([3.0]), -0.25)])
def test_values_and_derivatives_against_numpy(compiled, args):
    backend, fn = compiled
    for i, (got, want) in enumerate(zip(fn(*args), reference(*args), strict=True)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, err_msg=f"{backend}: output {i}")


def test_calls_stay_calls_with_overrides_kept(compiled):
    backend, fn = compiled
    calls = _calls(fn)
    assert len(calls) >= 3, backend
    assert any(c.op.n_functions == 3 for c in calls), backend  # the overridden call runs with its override functions as data


def test_generated_numba_code_has_a_disk_cache_key_per_body():
    fn = _compiled("numba")
    from innergraph.backends.numba_generated import numba_funcify_generated

    keys = {}
    for node in _calls(fn):
        plan = once_plan(node.op, node)
        assert plan.function == 0 and len(plan.roles) == len(node.inputs) - node.op.n_functions
        _, key = numba_funcify_generated(node.op, node)
        assert key is not None, node
        keys[node] = key
    assert len(set(keys.values())) == len(keys)  # different bodies, different keys


def test_call_conversions_are_the_generated_ones():
    from pytensor.link.jax.dispatch import jax_funcify
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    from innergraph.backends.jax_generated import jax_funcify_generated
    from innergraph.backends.numba_generated import numba_funcify_generated

    assert numba_funcify_and_cache_key.registry[Call] is numba_funcify_generated
    assert jax_funcify.registry[Call] is jax_funcify_generated


def test_a_call_whose_slots_do_not_bind_every_param_is_an_error_naming_it():
    from innergraph.protocol.slots import FORMS

    node = call(lambda v, w: v + w, x, x).owner
    split = FORMS[Call].split(node)
    assert split is not None
    header, slots = split
    with pytest.MonkeyPatch.context() as mp:
        import dataclasses

        from innergraph.protocol.semantics import Once

        mp.setitem(FORMS, Call, dataclasses.replace(FORMS[Call], semantics=Once(slots=lambda n: (header, slots[1:]))))
        with pytest.raises(ValueError, match=r"Call.*body 0's params and outputs must each be bound by one slot"):
            once_plan(node.op, node)
