"""A second consumer outside innergraph: ``switch(index, branches, *operands)``, an N-way lazy conditional.

Like ``jax.lax.switch``: ``index`` is clipped to ``[0, N-1]``, exactly one branch runs on
the operands, every branch returns the same number of outputs with the same dtypes and
ranks. Written from ``design/contributing.md`` and the public names of
``innergraph.consumer`` only; ``switch_numba.py`` and ``switch_jax.py`` next to it hold its
Numba and JAX code, each imported on the first link of its backend (``load_on_link``).

Layout of a node of ``IndexSwitch(n_operands, n_captured)``, for ``N = len(n_captured)``::

    inputs:  f_0 .. f_{N-1}, index, *operands, *captured_0, ..., *captured_{N-1}
    body b:  params (*operands, *captured_b), outputs (o_0, ..., o_{k-1})
    outputs: the outputs of the branch ``clip(index, 0, N-1)``

A form's kinds and number of bodies are fixed per class, so each ``N`` has its own
class (``switch_class(N)``), made on first use; instances pickle as ``switch_op(...)``.
"""

from __future__ import annotations

from typing import Any, cast

import pytensor
import pytensor.tensor as pt
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.tensor.type import TensorType, float_dtypes, integer_dtypes

from innergraph.consumer import (
    BodyTypeError,
    Capabilities,
    Form,
    Meaning,
    Slot,
    SlotKind,
    body_of,
    body_output_shapes,
    body_value,
    compiled_function,
    fit_arguments,
    fold_function,
    inner_graph,
    instantiate,
    is_function,
    linker_for,
    load_on_link,
    make_body_thunk,
    params,
    register_consumer,
    same_shape,
)

PACKAGE = __name__.rpartition(".")[0]  # the backends are modules next to this one, loaded on link
load_on_link("numba", f"{PACKAGE}.switch_numba".lstrip("."))
load_on_link("jax", f"{PACKAGE}.switch_jax".lstrip("."))


class IndexSwitch(Op):
    """``IndexSwitch(n_operands, n_captured)(*fns, index, *operands, *captured)``: run branch ``clip(index)``."""

    __props__ = ("n_operands", "n_captured")
    n_branches = 0  # set by each class `switch_class` makes

    def __init__(self, n_operands: int, n_captured: tuple[int, ...]):
        if len(n_captured) != self.n_branches:
            raise ValueError(f"{type(self).__name__}: {len(n_captured)} captured counts for {self.n_branches} branches")
        self.n_operands, self.n_captured = n_operands, tuple(n_captured)

    def __reduce__(self):
        return switch_op, (self.n_operands, self.n_captured)

    def captured_of(self, args, b):
        """The captured arguments of branch ``b`` in ``args`` (the inputs after the index)."""
        start = self.n_operands + sum(self.n_captured[:b])
        return list(args[start : start + self.n_captured[b]])

    def make_node(self, *inputs):
        n = self.n_branches
        if len(inputs) != n + 1 + self.n_operands + sum(self.n_captured):
            raise TypeError(f"{self}: {len(inputs)} inputs, expected {n + 1 + self.n_operands + sum(self.n_captured)}")
        fns, index, args = inputs[:n], pt.as_tensor(inputs[n]), inputs[n + 1 :]
        for b, fn in enumerate(fns):
            if not is_function(fn):
                raise BodyTypeError(f"{self}: input {b} ({fn}) must be a function variable (branch {b})")
        if index.ndim != 0 or index.dtype not in integer_dtypes:
            raise TypeError(f"{self}: the index ({index}, input {n}) must be an integer scalar, got {index.type}")
        operands = fit_arguments(fns[0].type.param_types[: self.n_operands], args[: self.n_operands], where=f"{self} operands")
        fitted = [fit_arguments(fn.type.param_types, operands + self.captured_of(args, b), where=f"{self} branch {b} ({fn})") for b, fn in enumerate(fns)]
        captured = [x for b in range(n) for x in fitted[b][self.n_operands :]]
        return Apply(self, [*fns, pt.cast(index, "int64"), *operands, *captured], [t() for t in output_types(fns)])

    def run(self, fns, index, *args):
        b = min(max(int(index), 0), self.n_branches - 1)
        return fns[b](*args[: self.n_operands], *self.captured_of(args, b))

    def make_thunk(self, node, storage_map, compute_map, no_recycling, impl=None):
        fns = [compiled_function(body_value(f), linker_for(impl), trust_input=True) for f in node.inputs[: self.n_branches]]
        return make_body_thunk(node, storage_map, compute_map, lambda values: self.run(fns, *values))

    def infer_shape(self, node, input_shapes):
        """The branches' output shapes, when every branch provably gives the same (else PyTensor reads the result's)."""
        n, args, shapes = self.n_branches, node.inputs[self.n_branches + 1 :], input_shapes[self.n_branches + 1 :]
        per_branch = [
            body_output_shapes(fn, args[: self.n_operands] + self.captured_of(args, b), shapes[: self.n_operands] + self.captured_of(shapes, b))
            for b, fn in enumerate(node.inputs[:n])
        ]
        if not all(same_shape(s, t) for other in per_branch[1:] for s, t in zip(per_branch[0], other, strict=True)):
            raise NotImplementedError(f"{self}: the branches' output shapes may differ")
        return per_branch[0]

    def perform(self, node, inputs, output_storage):
        fns = [compiled_function(body_value(f), "py") for f in node.inputs[: self.n_branches]]
        for cell, value in zip(output_storage, self.run(fns, *inputs[self.n_branches :])):
            cell[0] = value

    def connection_pattern(self, node):
        """Functions and the index are not differentiable inputs; a float argument may reach every output."""
        args = node.inputs[self.n_branches + 1 :]
        return [[False] * len(node.outputs)] * (self.n_branches + 1) + [[x.dtype in float_dtypes] * len(node.outputs) for x in args]

    def pullback(self, inputs, outputs, cotangents):
        """A switch of the branches' pullbacks, on the same index (each branch: zeros for the others' captures)."""
        n, fns, index, args = self.n_branches, inputs[: self.n_branches], inputs[self.n_branches], inputs[self.n_branches + 1 :]
        cts = [pt.zeros_like(o) if isinstance(c.type, pytensor.gradient.DisconnectedType) else c for o, c in zip(outputs, cotangents)]
        wrt = [i for i, x in enumerate(args) if x.dtype in float_dtypes]
        if not wrt:
            return [disconnected_type() for _ in inputs]
        branches = [_pullback_branch(self, fns[b], b, args, wrt) for b in range(n)]
        grads = switch(index, branches, *args, *cts)
        grads = grads if isinstance(grads, list) else [grads]
        by_arg = dict(zip(wrt, grads))
        return [disconnected_type() for _ in range(n + 1)] + [by_arg.get(i, disconnected_type()) for i in range(len(args))]


def _pullback_branch(op, fn, b, args, wrt):
    """Branch ``b``'s pullback, of ``(*args, *cotangents)``: the gradient of every argument in ``wrt``."""
    start = op.n_operands + sum(op.n_captured[:b])
    mine = set(range(op.n_operands)) | set(range(start, start + op.n_captured[b]))

    def pullback(*values):
        xs, cts = values[: len(args)], values[len(args) :]
        outs = instantiate(fn, list(xs[: op.n_operands]) + op.captured_of(xs, b))
        known = {o: ct for o, ct in zip(outs, cts) if getattr(o, "dtype", None) in float_dtypes}
        reads = [i for i in wrt if i in mine]
        grads = pytensor.grad(None, [xs[i] for i in reads], known_grads=known, disconnected_inputs="ignore", return_disconnected="zero") if known else []
        by_arg: dict[int, Any] = dict(zip(reads, cast(list, grads))) if known else {}
        return [by_arg[i].astype(xs[i].dtype) if i in by_arg else pt.zeros_like(xs[i]) for i in wrt]

    return pullback


def output_types(fns):
    """The node's output types: every branch's outputs must agree in number, dtype and rank."""
    per_branch = [fn.type.output_types for fn in fns]
    for b, types in enumerate(per_branch[1:], 1):
        if len(types) != len(per_branch[0]):
            raise BodyTypeError(f"switch: branch {b} ({fns[b]}) returns {len(types)} outputs, branch 0 returns {len(per_branch[0])}")
        for k, (t0, t) in enumerate(zip(per_branch[0], types)):
            if not (isinstance(t, TensorType) and isinstance(t0, TensorType) and (t.dtype, t.ndim) == (t0.dtype, t0.ndim)):
                raise BodyTypeError(f"switch: output {k} of branch {b} ({fns[b]}) is {t}, branch 0's is {t0}")
    return [TensorType(ts[0].dtype, shape=tuple(s[0] if len(set(s)) == 1 else None for s in zip(*(t.shape for t in ts)))) for ts in zip(*per_branch)]


def split(node):
    """The node as slots: one shared operand kind, one captured kind per branch, one output kind."""
    op, n = node.op, node.op.n_branches
    bodies = [body_of(f) for f in node.inputs[:n]]
    ps = [params(body.param_types) for body in bodies]
    args = node.inputs[n + 1 :]
    slots = [Slot("operand", (x,), tuple((b, ps[b][i]) for b in range(n))) for i, x in enumerate(args[: op.n_operands])]
    for b in range(n):
        slots += [Slot(f"captured{b}", (x,), ((b, p),)) for x, p in zip(op.captured_of(args, b), ps[b][op.n_operands :])]
    for k, result in enumerate(node.outputs):
        outs = tuple((b, bodies[b].outputs[k]) for b in range(n))
        slots.append(Slot("out", (), (), outs, tuple(bodies[b].type.output_types[k] for b in range(n)), (result,)))
    return (node.inputs[n],), slots


def make(template, header, fns, groups, args):
    """The node with exactly these slots (``args`` in ``arg_order``: operands, then each branch's captures)."""
    n = template.n_branches
    op = switch_op(len(groups.get("operand", [])), tuple(len(groups.get(f"captured{b}", [])) for b in range(n)))
    return op.make_node(*fns, *header, *args)


_CLASSES: dict[int, type] = {}


def switch_class(n: int) -> type:
    """The consumer class of ``n`` branches, registered on first use."""
    if n not in _CLASSES:
        cls = type(f"IndexSwitch{n}", (IndexSwitch,), {"n_branches": n, "__module__": __name__})
        captured = tuple(f"captured{b}" for b in range(n))
        register_consumer(cls, Form(
            n_bodies=n, param_order=("operand", *captured), output_order=("out",), arg_order=("operand", *captured),
            result_order=("out",), split=split, make=make, functions=lambda node: list(node.inputs[: node.op.n_branches]),
            kinds=(SlotKind("operand", Meaning.INVARIANT, tuple(range(n))),
                   *(SlotKind(name, Meaning.INVARIANT, (b,)) for b, name in enumerate(captured)),
                   SlotKind("out", Meaning.OUTPUT, tuple(range(n)))),
            capabilities=Capabilities(lazy=True),
        ))
        _CLASSES[n] = cls
    return _CLASSES[n]


def switch_op(n_operands: int, n_captured: tuple[int, ...]) -> IndexSwitch:
    """The Op of a switch over ``len(n_captured)`` branches (what instances pickle as)."""
    return switch_class(len(n_captured))(n_operands, tuple(n_captured))


def switch(index, branches, *operands):
    """The outputs of ``branches[clip(index, 0, N-1)](*operands)``; only that branch runs.

    Parameters
    ----------
    index
        An integer scalar, clipped to ``[0, len(branches) - 1]``.
    branches
        At least two Python callables of the operands, each returning a variable or a
        sequence of them (the same number for every branch, the same dtypes and ranks).
    operands
        The arguments every branch receives.

    Returns
    -------
    The output variable, or a list of them when the branches return several.
    """
    if len(branches) < 2:
        raise ValueError(f"switch: needs at least two branches, got {len(branches)}")
    tensors = [pt.as_tensor(x) for x in operands]
    closures = [inner_graph(f, tensors, capture="leaves") for f in branches]  # lazy: work stays in its branch
    op = switch_op(len(tensors), tuple(len(c.captured) for c in closures))
    out = op(*[fold_function(c.function) for c in closures], index, *tensors, *[x for c in closures for x in c.captured])
    return out
