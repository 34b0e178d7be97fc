"""OpFromGraph in the in-graph form: op_from_graph, lift/lower, overrides, pruning."""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.fg import FunctionGraph

import innergraph
from innergraph import graph_stats, lift, lower, op_from_graph
from innergraph.core.graph import body_of
from innergraph.protocol import runtime
from innergraph.ops.call import Call
from innergraph.rewriting.dce import remove_dead_slots
from vanilla import vanilla_function, vanilla_values
from typed import call, grad, pushforward

#: innergraph installed, its rewrites excluded: the consumers run as they are (not vanilla).
IN_GRAPH = get_default_mode().excluding("innergraph")
x, y = pt.dscalar("x"), pt.dscalar("y")


def scaled_pullback(inputs, outputs, grads):
    (g,) = grads
    return [g * 3.0, g * 5.0]


def build(ofg_class, **kwargs):
    u, v = pt.dscalar("u"), pt.dscalar("v")
    return ofg_class([u, v], [pt.exp(u) * v + u], **kwargs)


OVERRIDES: dict[str, dict[str, Any]] = {
    "plain": {},
    "pullback-callable": {"pullback": scaled_pullback},
    "pullback-list": {"pullback": [lambda i, o, g: g[0] * 7.0, None]},
    "inline": {"inline": True},
    "lop_overrides": {"lop_overrides": scaled_pullback},  # 3.0's deprecated spelling
}


@pytest.mark.filterwarnings("ignore:lop_overrides is deprecated")
@pytest.mark.parametrize("kind", list(OVERRIDES))
def test_op_from_graph_matches_vanilla_with_gradients(kind):
    def with_grads(ofg_class):
        out = build(ofg_class, **OVERRIDES[kind])(x, y)
        return [x, y], [out, *grad(out, [x, y], disconnected_inputs="ignore")]

    f = pytensor.function(*with_grads(op_from_graph))
    g = vanilla_function(lambda: with_grads(OpFromGraph), get_default_mode(), first_call=(0.3, 1.7))
    for got, want in zip(f(0.3, 1.7), g(0.3, 1.7), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_pushforward_override_is_used():
    def jvp(inputs, tangents):
        return [tangents[0] * 11.0 + tangents[1]]

    tx, ty = pt.dscalar("tx"), pt.dscalar("ty")

    def tangent(ofg_class):
        out = build(ofg_class, pushforward=jvp)(x, y)
        return [x, y, tx, ty], pushforward(out, [x, y], [tx, ty], use_op_pushforward=True)

    f = pytensor.function(*tangent(op_from_graph))
    g = vanilla_function(lambda: tangent(OpFromGraph), get_default_mode(), first_call=(0.3, 1.7, 1.0, 2.0))
    assert f(0.3, 1.7, 1.0, 2.0) == g(0.3, 1.7, 1.0, 2.0) == 13.0


def test_same_body_at_several_call_sites_is_one_body_compiled_once():
    helper = op_from_graph([x], [pt.tanh(x) * 2 + x])
    a, b, c = pt.dscalars("a", "b", "c")
    before = sum(runtime.compile_count.values())
    fn = pytensor.function([a, b, c], helper(a) + helper(b) * helper(c), mode=Mode(linker="cvm", optimizer="fast_run"))
    def ref(v):
        return np.tanh(v) * 2 + v

    assert fn(0.1, 0.2, 0.3) == pytest.approx(ref(0.1) + ref(0.2) * ref(0.3))
    stats = graph_stats(fn)
    assert stats["consumers"]["call"] == 3 and stats["bodies"] == 1
    assert sum(runtime.compile_count.values()) - before == 1


def test_shared_variables_are_refused_as_pytensor_refuses_them_and_work_as_inputs():
    """PyTensor 3.3's OpFromGraph refuses an inner graph that reads a shared variable it is not given."""
    from pytensor.graph.utils import MissingInputError

    w = pytensor.shared(np.float64(2.0), name="w")
    with pytest.raises(MissingInputError, match="shared variable w"):
        OpFromGraph([x], [x * w])
    with pytest.raises(MissingInputError, match="shared variable w"):
        op_from_graph([x], [x * w])
    v = pt.dscalar("v")
    helper = op_from_graph([x, v], [x * v])
    out = helper(y, w)
    assert isinstance(out.owner.op, Call) and w in out.owner.inputs
    fn = pytensor.function([y], out)
    assert fn(3.0) == 6.0
    w.set_value(4.0)
    assert fn(3.0) == 12.0


@pytest.mark.parametrize("kind", ["plain", "pullback-callable", "pullback-list"])
def test_lift_then_lower_round_trip(kind):
    def graph() -> tuple[list, Any]:
        out = build(OpFromGraph, **OVERRIDES[kind])(x, y)
        return [x, y], [out, *grad(out, [x, y], disconnected_inputs="ignore")]

    fg = FunctionGraph(*graph(), clone=True)
    expected = vanilla_values(graph, (0.3, 1.7), get_default_mode())
    assert lift(fg) >= 1
    assert not any(type(n.op) is OpFromGraph for n in fg.apply_nodes)
    lifted = pytensor.function(fg.inputs, fg.outputs, mode=IN_GRAPH)(0.3, 1.7)
    assert lower(fg) >= 1
    assert not any(isinstance(n.op, Call) for n in fg.apply_nodes)
    lowered = pytensor.function(fg.inputs, fg.outputs, mode=IN_GRAPH)(0.3, 1.7)
    for got_l, got_w, want in zip(lifted, lowered, expected, strict=True):
        np.testing.assert_allclose(got_l, want, rtol=1e-12)
        np.testing.assert_allclose(got_w, want, rtol=1e-12)


def test_subclasses_with_a_fixed_signature_are_not_lifted():
    class Fixed(OpFromGraph):
        """Stands for an Op with a fixed signature (AllocDiag, Einsum, ...)."""

    out = build(Fixed)(x, y)
    fg = FunctionGraph([x, y], [out], clone=True)
    assert lift(fg) == 0
    assert any(isinstance(n.op, Fixed) for n in fg.apply_nodes)


def test_dead_outputs_and_unused_params_are_pruned():
    z = pt.dscalar("z")
    used, _ = call(lambda p, q, r: [pt.exp(p) * q, pt.log(r)], x, y, z)
    fg = FunctionGraph([x, y, z], [used], clone=True)
    assert remove_dead_slots(fg) == 1
    (node,) = [n for n in fg.apply_nodes if isinstance(n.op, Call)]
    assert len(node.outputs) == 1 and len(node.inputs) == 3  # function, x, y
    assert len(body_of(node.inputs[0]).param_types) == 2
    fn = pytensor.function(fg.inputs, fg.outputs, mode=IN_GRAPH, on_unused_input="ignore")
    assert fn(0.0, 2.0, 5.0) == [2.0]


def test_calls_with_overrides_keep_their_signature():
    out = build(op_from_graph, pullback=scaled_pullback)(x, y)
    fg = FunctionGraph([x, y], [out], clone=True)
    assert remove_dead_slots(fg) == 0
