"""A map consumer outside innergraph: ``map_rows(fn, xs, *consts)``, like ``jax.lax.map``; no backend code.

Row ``i`` of each result is ``fn(xs[i], *consts)``'s output. Its Numba and JAX code is
generated from ``Iterate()`` (a counted loop whose results are per-step outputs), its
shapes come from the declaration (no ``infer_shape``), and every generic rewrite applies.
"""

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from innergraph.consumer import (
    Capabilities, Form, Iterate, Meaning, Slot, SlotKind, body_of, body_value, compiled_function, fit_arguments,
    fold_function, inner_graph, linker_for, make_body_thunk, params, register_consumer,
)


class MapRows(Op):
    """``MapRows(n_seq)(fn, n, *seqs, *consts)``: row ``t < n`` of each output is ``fn(*rows t of seqs, *consts)``."""
    __props__ = ("n_seq",)

    def __init__(self, n_seq):
        self.n_seq = n_seq

    def make_node(self, fn, n, *inputs):
        seqs = [pt.as_tensor(x) for x in inputs[: self.n_seq]]
        rows = [x.type.clone(shape=x.type.shape[1:])() for x in seqs]  # a row's type, to check fn's params
        consts = fit_arguments(fn.type.param_types, [*rows, *inputs[self.n_seq :]], where=f"{self} of {fn}")[self.n_seq :]
        outputs = [t.clone(shape=(None, *t.shape))() for t in fn.type.output_types]
        return Apply(self, [fn, pt.as_tensor(n, dtype="int64"), *seqs, *consts], outputs)

    def run(self, node, fn, n, *values):
        seqs, consts = values[: self.n_seq], values[self.n_seq :]
        rows = [fn(*(x[t] for x in seqs), *consts) for t in range(int(n))]
        if not rows:  # no step: no row to take the shape of, the static one (0 where unknown)
            return [np.zeros((0, *(d or 0 for d in o.type.shape[1:])), o.dtype) for o in node.outputs]
        return [np.stack(col).astype(o.dtype) for col, o in zip(zip(*rows), node.outputs)]

    def make_thunk(self, node, storage_map, compute_map, no_recycling, impl=None):
        fn = compiled_function(body_value(node.inputs[0]), linker_for(impl), trust_input=True)
        return make_body_thunk(node, storage_map, compute_map, lambda values: self.run(node, fn, *values))

    def perform(self, node, inputs, output_storage):
        fn = compiled_function(body_value(node.inputs[0]), "py")
        for cell, value in zip(output_storage, self.run(node, fn, *inputs[1:])):
            cell[0] = value


def split(node):  # a sequence per mapped input, an invariant per constant, a per-step output per result
    body, s, n = body_of(node.inputs[0]), node.op.n_seq, node.inputs[1]
    ps, types = params(body.param_types), body.type.output_types
    seqs = [Slot("row", (x,), ((0, p),)) for x, p in zip(node.inputs[2 : 2 + s], ps)]
    consts = [Slot("const", (x,), ((0, p),)) for x, p in zip(node.inputs[2 + s :], ps[s:])]
    outs = [Slot("out", (n,), (), ((0, o),), (t,), (r,)) for o, t, r in zip(body.outputs, types, node.outputs)]
    return (n,), seqs + consts + outs


register_consumer(MapRows, Form(
    n_bodies=1, param_order=("row", "const"), output_order=("out",), arg_order=("row", "const"), result_order=("out",),
    split=split, make=lambda op, header, fns, groups, args: MapRows(len(groups.get("row", []))).make_node(fns[0], *header, *args),
    functions=lambda node: [node.inputs[0]], semantics=Iterate(),  # Numba and JAX code from the declaration
    kinds=(SlotKind("row", Meaning.SEQUENCE), SlotKind("const", Meaning.INVARIANT), SlotKind("out", Meaning.PER_STEP_OUTPUT)),
    capabilities=Capabilities(loop=True, counted=True), loop_key=lambda sig: sig.header[0],
))


def map_rows(fn, xs, *consts):
    """``fn`` applied to each row of ``xs`` (and ``consts``); a result per output of ``fn`` (a list if several)."""
    xs = pt.as_tensor(xs)
    closure = inner_graph(fn, [xs[0].type(), *map(pt.as_tensor, consts)])
    return MapRows(1)(fold_function(closure.function), xs.shape[0], xs, *consts, *closure.captured)
