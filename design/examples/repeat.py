"""A consumer outside innergraph: ``repeat(n, f, init)`` applies ``f`` to the state ``n`` times."""

import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from innergraph.consumer import (
    Capabilities, Form, Iterate, Meaning, Slot, SlotKind, body_of, body_value, carried_shapes, compiled_function,
    fit_arguments, fold_function, inner_graph, linker_for, make_body_thunk, params, register_consumer,
)


class Repeat(Op):
    """``Repeat(n_carry)(step_fn, n, *init, *args)``: ``carry = step(*carry, *args)``, ``n`` times."""
    __props__ = ("n_carry",)

    def __init__(self, n_carry):
        self.n_carry = n_carry

    def make_node(self, fn, n, *inputs):
        inputs = fit_arguments(fn.type.param_types, inputs, where=f"{self} of {fn}")
        return Apply(self, [fn, pt.as_tensor(n, dtype="int64"), *inputs], [x.type() for x in inputs[: self.n_carry]])

    def run(self, fn, n, *values):
        carry, args = [x.copy() for x in values[: self.n_carry]], values[self.n_carry :]  # never the inputs
        for _ in range(int(n)):
            carry = list(fn(*carry, *args))
        return carry

    def make_thunk(self, node, storage_map, compute_map, no_recycling, impl=None):
        fn = compiled_function(body_value(node.inputs[0]), linker_for(impl), trust_input=True)
        return make_body_thunk(node, storage_map, compute_map, lambda values: self.run(fn, *values))

    def infer_shape(self, node, input_shapes):  # the initial shapes, if the step provably keeps them
        c = self.n_carry
        return carried_shapes(node.inputs[0], [None] * c + node.inputs[2 + c :], input_shapes[2:], range(c))

    def perform(self, node, inputs, output_storage):
        fn = compiled_function(body_value(node.inputs[0]), "py")
        for cell, value in zip(output_storage, self.run(fn, *inputs[1:])):
            cell[0] = value


def split(node):  # the node as slots: one carry per state value, one invariant per captured argument
    body, c = body_of(node.inputs[0]), node.op.n_carry
    ps, types = params(body.param_types), body.type.output_types
    carry = [Slot("carry", (x,), ((0, ps[i]),), ((0, body.outputs[i]),), (types[i],), (node.outputs[i],)) for i, x in enumerate(node.inputs[2 : 2 + c])]
    return (node.inputs[1],), carry + [Slot("arg", (x,), ((0, p),)) for x, p in zip(node.inputs[2 + c :], ps[c:])]


register_consumer(Repeat, Form(
    n_bodies=1, param_order=("carry", "arg"), output_order=("carry",), arg_order=("carry", "arg"), result_order=("carry",),
    split=split, make=lambda op, header, fns, groups, args: Repeat(len(groups.get("carry", []))).make_node(fns[0], *header, *args),
    functions=lambda node: [node.inputs[0]], semantics=Iterate(),  # Numba and JAX code from the declaration
    kinds=(SlotKind("carry", Meaning.CARRY), SlotKind("arg", Meaning.INVARIANT)),
    capabilities=Capabilities(loop=True, counted=True), loop_key=lambda sig: sig.header[0],
))


def repeat(n, f, init):
    """``f`` applied ``n`` times to the list of tensors ``init``; the final state, as a list."""
    closure = inner_graph(f, [pt.as_tensor(x) for x in init])
    out = Repeat(len(init))(fold_function(closure.function), n, *init, *closure.captured)
    return out if isinstance(out, list) else [out]
