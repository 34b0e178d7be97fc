"""A fixed point outside innergraph: ``fixed_point(f, x0, *params)`` iterates ``x = f(x, *params)`` until it settles.

A while loop of one body (``Iterate(bound=0)``: at most ``max_steps`` steps, stopping when
the step's post-condition is false), generated for Numba and JAX from the declaration.
Its gradient uses the implicit function theorem: at ``x* = f(x*, p)``, the cotangent
``u`` of ``x*`` solves ``u = g + (df/dx)^T u`` (itself a fixed point, of the adjoint),
and ``p``'s cotangent is ``(df/dp)^T u``: no step of the forward loop is stored.
"""

import pytensor
import pytensor.tensor as pt
from pytensor.gradient import disconnected_grad, disconnected_type
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from innergraph.consumer import (
    Capabilities, Form, Iterate, Meaning, Slot, SlotKind, body_of, body_value, compiled_function, fit_arguments,
    fold_function, inner_graph, instantiate, linker_for, make_body_thunk, params, register_consumer,
)

TOL, MAX_STEPS = 1e-13, 10_000


class FixedPoint(Op):
    """``FixedPoint()(step_fn, max_steps, x0, *params)``: ``x, go = step(x, *params)`` while ``go``, at most ``max_steps`` times."""
    __props__ = ()

    def make_node(self, fn, max_steps, x0, *args):
        x0, *args = fit_arguments(fn.type.param_types, [x0, *args], where=f"{self} of {fn}")
        return Apply(self, [fn, pt.as_tensor(max_steps, dtype="int64"), x0, *args], [x0.type()])

    def run(self, fn, max_steps, x, *args):
        for _ in range(int(max_steps)):
            x, go = fn(x, *args)
            if not go:
                break
        return [x]

    def make_thunk(self, node, storage_map, compute_map, no_recycling, impl=None):
        fn = compiled_function(body_value(node.inputs[0]), linker_for(impl), trust_input=True)
        return make_body_thunk(node, storage_map, compute_map, lambda values: self.run(fn, *values))

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = self.run(compiled_function(body_value(node.inputs[0]), "py"), *inputs[1:])[0]

    def connection_pattern(self, node):  # x* depends on the params only (not on x0, the body or the bound)
        return [[False], [False], [False], *[[True]] * (len(node.inputs) - 3)]

    def pullback(self, inputs, outputs, cotangents):
        fn, _, x0, *args = inputs
        (x_star,), (g,) = outputs, cotangents
        step = lambda x, *a: instantiate(fn, [x, *a])[0]  # f, its condition dropped
        u = fixed_point(lambda u, x, *a: g + pytensor.grad(None, x, known_grads={step(x, *a): u}), g, x_star, *args)
        at = disconnected_grad(x_star)  # df/dp at x*: the chain through x* is u's job
        grads = pytensor.grad(None, args, known_grads={step(at, *args): u}, disconnected_inputs="ignore")
        return [disconnected_type(), disconnected_type(), disconnected_type(), *grads]


def split(node):  # the state carried, each param an invariant, the step's second output the condition
    body = body_of(node.inputs[0])
    (p_x, *ps), (x_next, go) = params(body.param_types), body.outputs
    state = Slot("state", (node.inputs[2],), ((0, p_x),), ((0, x_next),), (body.type.output_types[0],), (node.outputs[0],))
    return (node.inputs[1],), [state, Slot("go", outputs=((0, go),), output_types=(go.type,)), *[Slot("param", (a,), ((0, p),)) for a, p in zip(node.inputs[3:], ps)]]


register_consumer(FixedPoint, Form(
    n_bodies=1, param_order=("state", "param"), output_order=("state", "go"), arg_order=("state", "param"), result_order=("state",),
    split=split, make=lambda op, header, fns, groups, args: FixedPoint().make_node(fns[0], *header, *args),
    functions=lambda node: [node.inputs[0]], semantics=Iterate(bound=0),  # Numba and JAX code from the declaration
    kinds=(SlotKind("state", Meaning.CARRY), SlotKind("go", Meaning.CONDITION), SlotKind("param", Meaning.INVARIANT)),
    capabilities=Capabilities(loop=True),
))


def fixed_point(f, x0, *params):
    """``x*`` with ``x* = f(x*, *params)``, iterated from ``x0`` until a step moves ``x`` by at most ``TOL``."""
    def step(x, *p):
        new = f(x, *p)
        return [new, pt.gt(pt.max(pt.abs(new - x)), TOL)]

    x0 = pt.as_tensor(x0)
    closure = inner_graph(step, [x0, *map(pt.as_tensor, params)])
    return FixedPoint()(fold_function(closure.function), MAX_STEPS, x0, *params, *closure.captured)
