"""The consumer protocol: a consumer declares its slots once, and generic code reads and rebuilds it.

The consumer below is written for these tests and declared as step 12's call is:
one body, its arguments invariant slots, its outputs output slots. Nothing here
knows its class: the signature, the rebuild, the shapes, the compiled bodies and
the lift and lower tables go through its declaration.
"""

import numpy as np
import pytest

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.innergraph.core.build import inner_graph
from pytensor.innergraph.core.fold import fold_function, fold_inner_graphs
from pytensor.innergraph.core.graph import body_of, params
from pytensor.innergraph.core.instantiate import fit_arguments
from pytensor.innergraph.protocol.conversion import LIFTERS, LOWERERS, lift, lower
from pytensor.innergraph.protocol.runtime import compile_count, compiled_function
from pytensor.innergraph.protocol.shapes import declared_shapes
from pytensor.innergraph.protocol.signature import rebuild, signature
from pytensor.innergraph.protocol.slots import (
    Form,
    Meaning,
    Slot,
    SlotKind,
    form_of,
    register_consumer,
)


class ApplyBody(Op):
    """Apply a body to its arguments (a consumer for these tests)."""

    __props__ = ()

    def make_node(self, function, *args):
        body = body_of(function)
        args = fit_arguments(body.param_types, args, where="ApplyBody")
        return Apply(self, [function, *args], [t() for t in body.type.output_types])

    def perform(self, node, inputs, output_storage):
        body, *args = inputs
        results = compiled_function(body, "py")(*args)
        if not isinstance(results, list):
            results = [results]
        for cell, value in zip(output_storage, results, strict=True):
            cell[0] = value


def split(node):
    body = body_of(node.inputs[0])
    slots = [
        Slot("arg", (a,), ((0, p),))
        for a, p in zip(node.inputs[1:], params(body.param_types), strict=True)
    ]
    slots += [
        Slot("out", outputs=((0, o),), output_types=(t,), results=(r,))
        for o, t, r in zip(
            body.outputs, body.type.output_types, node.outputs, strict=True
        )
    ]
    return (), slots


def make(op, header, functions, slots_by_kind, args):
    return ApplyBody().make_node(functions[0], *args)


FORM = register_consumer(
    ApplyBody,
    Form(
        1,
        ("arg",),
        ("out",),
        ("arg",),
        ("out",),
        split,
        make,
        lambda node: [node.inputs[0]],
        kinds=(SlotKind("arg", Meaning.INVARIANT), SlotKind("out", Meaning.OUTPUT)),
    ),
)


class TwiceNative(Op):
    """A native Op standing for ``2 * x``, which the lift rule turns into the consumer."""

    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = 2 * inputs[0]


def lift_twice(op, inputs):
    (x,) = inputs
    function = inner_graph(lambda v: 2 * v, [x.type]).function
    return ApplyBody()(function, x, return_list=True)


def lower_apply(op, inputs):
    function, *args = inputs
    if body_of(function) != body_of(
        inner_graph(lambda v: 2 * v, [args[0].type]).function
    ):
        return None
    return [TwiceNative()(args[0])]


LIFTERS[TwiceNative] = lift_twice
LOWERERS[ApplyBody] = lower_apply


def sum_and_product():
    return inner_graph(lambda u, v: [u + v, u * v], [pt.dvector, pt.dvector]).function


def run(outputs, inputs, values):
    """Compile ``outputs`` with the py linker after folding their bodies (in a copy), and call it."""
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    fold_inner_graphs(fgraph)
    mode = Mode(linker="py", optimizer=None)
    return pytensor.function(fgraph.inputs, fgraph.outputs, mode=mode)(*values)


def test_a_registered_consumer_is_read_as_slots():
    x, y = pt.dvectors("x", "y")
    node = ApplyBody()(sum_and_product(), x, y)[0].owner
    sig = signature(node)

    assert form_of(node.op) is FORM
    assert [sig.meaning(s) for s in sig.slots] == [Meaning.INVARIANT] * 2 + [
        Meaning.OUTPUT
    ] * 2
    assert [s.args for s in sig.having(Meaning.INVARIANT)] == [(x,), (y,)]
    assert sig.bodies == [body_of(node.inputs[0])]
    assert signature(pt.exp(x).owner) is None


def test_a_consumer_rebuilt_without_a_slot_loses_it_in_its_body():
    x, y = pt.dvectors("x", "y")
    total, product = ApplyBody()(sum_and_product(), x, y)
    sig = signature(total.owner)
    kept = [s for s in sig.slots if product not in s.results]

    node, mapping = rebuild(sig, kept)

    assert len(node.outputs) == 1
    assert len(body_of(node.inputs[0]).outputs) == 1
    assert mapping == {total: node.outputs[0]}
    x_val, y_val = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    (result,) = run([mapping[total]], [x, y], [x_val, y_val])
    np.testing.assert_allclose(result, x_val + y_val)


def test_a_registered_consumer_gets_its_output_shapes_from_its_slots():
    x = pt.dvector("x")
    m = pt.dmatrix("m")
    function = inner_graph(lambda v, w: [v * 2, w.sum(axis=0)], [x, m]).function
    node = ApplyBody()(function, x, m)[0].owner
    n, k, r = pt.lscalars("n", "k", "r")

    shapes = declared_shapes(node, [(), (n,), (r, k)])

    assert [len(s) for s in shapes] == [1, 1]
    fn = pytensor.function(
        [n, r, k], [shapes[0][0], shapes[1][0]], on_unused_input="ignore"
    )
    assert fn(4, 5, 6) == [4, 6]
    assert ApplyBody.infer_shape.__name__ == "declared_infer_shape"


def test_a_body_is_compiled_once_per_linker_and_its_arguments_checked():
    body = body_of(sum_and_product())
    first = compiled_function(body, "py")
    again = compiled_function(body, "py")

    assert first is again
    assert compile_count[(id(body), "py")] == 1
    total, product = first(np.array([2.0]), np.array([3.0]))
    np.testing.assert_allclose([total, product], [[5.0], [6.0]])
    with pytest.raises(TypeError, match="does not fit param 1"):
        first(np.array([2.0]), np.zeros((2, 2)))


def test_the_lift_and_lower_tables_convert_a_native_node_and_back():
    x = pt.dvector("x")
    fgraph = FunctionGraph([x], [TwiceNative()(pt.exp(x))], clone=False)

    assert lift(fgraph, only={TwiceNative}) == 1
    (consumer,) = [n for n in fgraph.apply_nodes if isinstance(n.op, ApplyBody)]
    assert signature(consumer) is not None
    x_val = np.array([0.0, 1.0])
    (lifted,) = run(list(fgraph.outputs), [x], [x_val])
    np.testing.assert_allclose(lifted, 2 * np.exp(x_val))

    assert lower(fgraph, only={ApplyBody}) == 1
    assert not any(isinstance(n.op, ApplyBody) for n in fgraph.apply_nodes)
    assert any(isinstance(n.op, TwiceNative) for n in fgraph.apply_nodes)


def test_a_folded_consumer_is_rebuilt_folded():
    x, y = pt.dvectors("x", "y")
    total, product = ApplyBody()(fold_function(sum_and_product()), x, y)
    sig = signature(total.owner)
    node, _ = rebuild(sig, [s for s in sig.slots if product not in s.results])
    assert node.inputs[0].owner is None  # a constant: no body node joins the graph
