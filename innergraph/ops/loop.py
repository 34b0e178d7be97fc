"""`WhileLoop` and `ForiLoop`: loops over carried state, written on the public consumer API only.

Terms
-----
carry
    The loop's state: read by every body, each step's new value returned by the
    step body; the loop's results are the final values.
while loop
    ``WhileLoop(...)(cond_fn, step_fn, [max_steps], *init, *cond_args, *step_args, *args)``:
    the design notes' ``Loop(pre_condition, update, post_condition)``. The condition
    body (the *pre-condition*) decides whether the first step runs; the step body
    returns the next carried values and, last, the *post-condition*: whether the next
    step runs. A while loop's post-condition is its condition on the new values (in
    the step body, so the two fuse into one pass over the data); a do-while's
    pre-condition is true. ``cond_args`` are read by the condition body only,
    ``step_args`` by the step body only, ``args`` by both. With ``max_steps`` the loop
    stops after that many steps whatever the conditions, and reverse mode is defined.
fori loop
    ``ForiLoop(n_seqs, n_carry)(step_fn, n_steps, *seqs, *init, *args)``: ``n_steps``
    steps, step ``t`` reading row ``t`` of each sequence (the loop index is a
    sequence over ``arange(lower, upper)``), a counted loop like Scan.

The two loops are what a contributor can write (``design/contributing.md``): every
name of innergraph they use is one the contributor API (`innergraph.consumer`)
re-exports; they import it from the module that defines it, as the consumer API sits
above the consumers (``tests/test_layers.py`` checks both).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import innergraph_pickle
import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op

from innergraph.core.errors import BodyTypeError
from innergraph.core.graph import body_of, is_function, params
from innergraph.core.instantiate import carried_shapes, fit_arguments
from innergraph.protocol.runtime import body_value, compiled_function, linker_for, make_body_thunk
from innergraph.protocol.semantics import Iterate
from innergraph.protocol.slots import Capabilities, Form, Meaning, Slot, SlotKind, register_consumer

__all__ = ["DERIVATIVES", "ForiLoop", "WhileLoop"]

#: The loops' pushforward and pullback (``"while_pullback"``, ...), registered by
#: `innergraph.ops.loop_derivatives`: they build loops, so this module cannot import them.
DERIVATIVES: dict[str, Callable[..., list[Variable]]] = {}


def _check_carry(where: str, init: Sequence[Variable], new_types: Sequence[Any]) -> None:
    if len(new_types) != len(init):
        raise BodyTypeError(
            f"{where}: the step body returns {len(new_types)} values for {len(init)} carried values"
        )
    for i, (x, t) in enumerate(zip(init, new_types, strict=True)):
        if x.type != t:
            raise BodyTypeError(f"{where}: the step body returns {t} for carried value {i} ({x}), of type {x.type}")


def _unaliased(results: list[Any], inputs: Sequence[Any]) -> list[Any]:
    """``results`` with a copy of every value that is one of ``inputs`` (a loop that ran no step).

    A node's outputs must not be its input arrays: later in-place Ops would
    overwrite the caller's values (the function's inputs, or another node's outputs).
    """
    return [np.copy(r) if any(r is v for v in inputs) else r for r in results]


class WhileLoop(Op):
    """A while (or do-while) loop; see the module docstring."""

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph
    __props__ = ("n_carry", "n_cond_args", "n_step_args", "do_while", "bounded")
    kind = "loop"

    def __init__(self, n_carry: int, n_cond_args: int, n_step_args: int, do_while: bool = False, bounded: bool = False):
        self.n_carry, self.n_cond_args, self.n_step_args = n_carry, n_cond_args, n_step_args
        self.do_while, self.bounded = do_while, bounded

    @property
    def n_header(self) -> int:
        return 2 + self.bounded

    def split(self, inputs: Sequence[Any]) -> dict[str, Any]:
        """Name the inputs: ``cond_fn``, ``step_fn``, ``max_steps`` (or None), ``init``, ``cond_args``, ``step_args``, ``args``."""
        rest = list(inputs[self.n_header :])
        c, a, s = self.n_carry, self.n_cond_args, self.n_step_args
        return {
            "cond_fn": inputs[0], "step_fn": inputs[1], "max_steps": inputs[2] if self.bounded else None,
            "init": rest[:c], "cond_args": rest[c : c + a], "step_args": rest[c + a : c + a + s], "args": rest[c + a + s :],
        }

    def make_node(self, *inputs: Any) -> Apply:
        parts = self.split(inputs)
        for pos, fn in ((0, parts["cond_fn"]), (1, parts["step_fn"])):
            if not isinstance(fn, Variable) or not is_function(fn):
                raise TypeError(f"{self}: input {pos} ({fn!r}) must be a function variable")
        init, shared = parts["init"], parts["args"]
        cond_t, step_t = parts["cond_fn"].type, parts["step_fn"].type
        cond_in = fit_arguments(cond_t.param_types, [*init, *parts["cond_args"], *shared], where=f"{self} condition")
        step_in = fit_arguments(step_t.param_types, [*init, *parts["step_args"], *shared], where=f"{self} step")
        for name, t in (("condition", cond_t.output_types[-1:]), ("step", step_t.output_types[-1:])):
            if [getattr(o, "dtype", None) for o in t] != ["bool"] or t[0].ndim != 0:
                raise BodyTypeError(f"{self}: the {name} body's last output must be a boolean scalar, it returns {t}")
        if len(cond_t.output_types) != 1:
            raise BodyTypeError(f"{self}: the condition body must return one value, it returns {cond_t.output_types}")
        _check_carry(str(self), step_in[: self.n_carry], step_t.output_types[:-1])
        if list(cond_t.param_types[: self.n_carry]) != list(step_t.param_types[: self.n_carry]):
            raise TypeError(f"{self}: the condition and step bodies take the carried values with different types")
        header = list(inputs[: self.n_header])
        if self.bounded:
            header[2] = pt.as_tensor_variable(header[2])
            if header[2].ndim != 0 or header[2].dtype not in pt.type.integer_dtypes:
                raise TypeError(f"{self}: max_steps {header[2]} must be an integer scalar")
        c = self.n_carry
        inputs_ = [*header, *step_in[:c], *cond_in[c : c + self.n_cond_args], *step_in[c:]]
        return Apply(self, inputs_, [x.type() for x in step_in[:c]])

    def _run(self, cond: Any, step: Any) -> Any:
        c, a, s = self.n_carry, self.n_cond_args, self.n_step_args

        def run(values: Sequence[Any]) -> list[Any]:
            limit = int(values[0]) if self.bounded else None
            rest = values[1:] if self.bounded else values
            carry, cond_args, step_args, shared = list(rest[:c]), rest[c : c + a], rest[c + a : c + a + s], rest[c + a + s :]
            steps = 0
            go = cond(*carry, *cond_args, *shared)[0]
            while go and (limit is None or steps < limit):
                *carry, go = step(*carry, *step_args, *shared)
                steps += 1
            return _unaliased(carry, values)

        return run

    def make_thunk(self, node: Apply, storage_map: Any, compute_map: Any, no_recycling: Any, impl: str | None = None) -> Any:
        linker = linker_for(impl)
        cond = compiled_function(body_value(node.inputs[0]), linker, trust_input=True)
        step = compiled_function(body_value(node.inputs[1]), linker, trust_input=True)
        return make_body_thunk(node, storage_map, compute_map, self._run(cond, step))

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: Any) -> None:
        cond = compiled_function(body_value(node.inputs[0]), "py", trust_input=True)
        step = compiled_function(body_value(node.inputs[1]), "py", trust_input=True)
        for cell, value in zip(output_storage, self._run(cond, step)(list(inputs[2:])), strict=True):
            cell[0] = value

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        n_out = len(node.outputs)
        return [[False] * n_out] * self.n_header + [[True] * n_out for _ in node.inputs[self.n_header :]]

    def infer_shape(self, node: Apply, input_shapes: Sequence[Any]) -> list[Any]:
        """The initial values' shapes, when the step provably keeps them (`consumer.carried_shapes`)."""
        c, a = self.n_carry, self.n_cond_args
        inputs, shapes = node.inputs[self.n_header :], input_shapes[self.n_header :]
        step_args = [*[None] * c, *inputs[c + a :]]
        step_shapes = [*shapes[:c], *shapes[c + a :]]
        return carried_shapes(node.inputs[1], step_args, step_shapes, range(c))

    def pushforward(self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
        return DERIVATIVES["while_pushforward"](self, inputs, tangents)

    def pullback(self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
        return DERIVATIVES["while_pullback"](self, inputs, outputs, cotangents)

    def __str__(self) -> str:
        return f"{'DoWhile' if self.do_while else 'While'}{{{self.n_carry} carried{', bounded' if self.bounded else ''}}}"


class ForiLoop(Op):
    """A counted loop over carried state; see the module docstring."""

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph
    __props__ = ("n_seqs", "n_carry")
    kind = "loop"

    def __init__(self, n_seqs: int, n_carry: int):
        self.n_seqs, self.n_carry = n_seqs, n_carry

    def split(self, inputs: Sequence[Any]) -> dict[str, Any]:
        """Name the inputs: ``step_fn``, ``n_steps``, ``seqs``, ``init``, ``args``."""
        rest = list(inputs[2:])
        s, c = self.n_seqs, self.n_carry
        return {"step_fn": inputs[0], "n_steps": inputs[1], "seqs": rest[:s], "init": rest[s : s + c], "args": rest[s + c :]}

    def make_node(self, *inputs: Any) -> Apply:
        parts = self.split(inputs)
        fn = parts["step_fn"]
        if not isinstance(fn, Variable) or not is_function(fn):
            raise TypeError(f"{self}: input 0 ({fn!r}) must be a function variable")
        n_steps = pt.as_tensor_variable(parts["n_steps"])
        if n_steps.ndim != 0 or n_steps.dtype not in pt.type.integer_dtypes:
            raise TypeError(f"{self}: n_steps {n_steps} must be an integer scalar")
        seqs = [pt.as_tensor_variable(s) for s in parts["seqs"]]
        for i, (seq, t) in enumerate(zip(seqs, fn.type.param_types, strict=False)):
            if seq.ndim != t.ndim + 1 or seq.dtype != t.dtype:
                raise BodyTypeError(f"{self}: sequence {i} ({seq}, {seq.type}) does not have rows of the step's param type {t}")
        fitted = fit_arguments(fn.type.param_types[self.n_seqs :], [*parts["init"], *parts["args"]], where=f"{self} step")
        _check_carry(str(self), fitted[: self.n_carry], fn.type.output_types)
        return Apply(self, [fn, n_steps, *seqs, *fitted], [x.type() for x in fitted[: self.n_carry]])

    def _run(self, step: Any) -> Any:
        s, c = self.n_seqs, self.n_carry

        def run(values: Sequence[Any]) -> list[Any]:
            n_steps, seqs, carry, args = int(values[0]), values[1 : 1 + s], list(values[1 + s : 1 + s + c]), values[1 + s + c :]
            for t in range(n_steps):
                carry = list(step(*(np.asarray(q[t]) for q in seqs), *carry, *args))
            return _unaliased(carry, values)

        return run

    def make_thunk(self, node: Apply, storage_map: Any, compute_map: Any, no_recycling: Any, impl: str | None = None) -> Any:
        step = compiled_function(body_value(node.inputs[0]), linker_for(impl), trust_input=True)
        return make_body_thunk(node, storage_map, compute_map, self._run(step))

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: Any) -> None:
        step = compiled_function(body_value(node.inputs[0]), "py", trust_input=True)
        for cell, value in zip(output_storage, self._run(step)(list(inputs[1:])), strict=True):
            cell[0] = value

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        n_out = len(node.outputs)
        return [[False] * n_out] * 2 + [[True] * n_out for _ in node.inputs[2:]]

    def infer_shape(self, node: Apply, input_shapes: Sequence[Any]) -> list[Any]:
        """The initial values' shapes, when the step provably keeps them (`consumer.carried_shapes`)."""
        s, c = self.n_seqs, self.n_carry
        rows = [None if shape is None else tuple(shape[1:]) for shape in input_shapes[2 : 2 + s]]
        args = [*[None] * (s + c), *node.inputs[2 + s + c :]]
        return carried_shapes(node.inputs[0], args, [*rows, *input_shapes[2 + s :]], range(s, s + c))

    def pushforward(self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
        return DERIVATIVES["fori_pushforward"](self, inputs, tangents)

    def pullback(self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
        return DERIVATIVES["fori_pullback"](self, inputs, outputs, cotangents)

    def __str__(self) -> str:
        return f"ForiLoop{{{self.n_carry} carried}}"


# --- declared as consumers -----------------------------------------------------


def _split_while(node: Apply) -> tuple[tuple[Variable, ...], list[Slot]]:
    op: WhileLoop = node.op
    parts = op.split(node.inputs)
    cond_b, step_b = body_of(parts["cond_fn"]), body_of(parts["step_fn"])
    cp, sp = params(cond_b.param_types), params(step_b.param_types)
    c, a, s = op.n_carry, op.n_cond_args, op.n_step_args
    step_types = step_b.type.output_types
    post = Slot("post", outputs=((1, step_b.outputs[-1]),), output_types=(step_types[-1],))
    slots = [
        Slot("carry", (x,), ((0, cp[i]), (1, sp[i])), ((1, step_b.outputs[i]),), (step_types[i],), (node.outputs[i],))
        for i, x in enumerate(parts["init"])
    ]
    slots += [Slot("cond_arg", (x,), ((0, cp[c + i]),)) for i, x in enumerate(parts["cond_args"])]
    slots += [Slot("step_arg", (x,), ((1, sp[c + i]),)) for i, x in enumerate(parts["step_args"])]
    slots += [Slot("arg", (x,), ((0, cp[c + a + i]), (1, sp[c + s + i]))) for i, x in enumerate(parts["args"])]
    slots += [Slot("cond", outputs=((0, cond_b.outputs[0]),), output_types=(cond_b.type.output_types[0],)), post]
    return tuple(node.inputs[2 : op.n_header]), slots


def _make_while(op: WhileLoop, header: tuple[Variable, ...], functions: list[Variable], groups: dict[str, list[Slot]], args: list[Variable]) -> Apply:
    n = {k: len(groups.get(k, [])) for k in ("carry", "cond_arg", "step_arg")}
    new = WhileLoop(n["carry"], n["cond_arg"], n["step_arg"], op.do_while, op.bounded)
    return new.make_node(*functions, *header, *args)


register_consumer(
    WhileLoop,
    Form(
        n_bodies=2,
        param_order=("carry", "cond_arg", "step_arg", "arg"),
        output_order=("cond", "carry", "post"),
        arg_order=("carry", "cond_arg", "step_arg", "arg"),
        result_order=("carry",),
        split=_split_while,
        make=_make_while,
        functions=lambda node: list(node.inputs[:2]),
        kinds=(
            SlotKind("carry", Meaning.CARRY, (0, 1)),
            SlotKind("cond_arg", Meaning.INVARIANT, (0,)),
            SlotKind("step_arg", Meaning.INVARIANT, (1,)),
            SlotKind("arg", Meaning.INVARIANT, (0, 1)),
            SlotKind("cond", Meaning.CONDITION, (0,)),
            SlotKind("post", Meaning.CONDITION, (1,)),
        ),
        capabilities=Capabilities(loop=True),
        semantics=lambda op: Iterate(update=1, pre_condition=0, bound=0 if op.bounded else None),
    ),
)


def _split_fori(node: Apply) -> tuple[tuple[Variable, ...], list[Slot]]:
    op: ForiLoop = node.op
    parts = op.split(node.inputs)
    body = body_of(parts["step_fn"])
    ps = params(body.param_types)
    s, c = op.n_seqs, op.n_carry
    slots = [Slot("seq", (x,), ((0, ps[i]),)) for i, x in enumerate(parts["seqs"])]
    slots += [
        Slot("carry", (x,), ((0, ps[s + i]),), ((0, body.outputs[i]),), (body.type.output_types[i],), (node.outputs[i],))
        for i, x in enumerate(parts["init"])
    ]
    slots += [Slot("arg", (x,), ((0, ps[s + c + i]),)) for i, x in enumerate(parts["args"])]
    return (node.inputs[1],), slots


def _make_fori(op: ForiLoop, header: tuple[Variable, ...], functions: list[Variable], groups: dict[str, list[Slot]], args: list[Variable]) -> Apply:
    return ForiLoop(len(groups.get("seq", [])), len(groups.get("carry", []))).make_node(functions[0], *header, *args)


def _fori_key(sig: Any) -> Hashable:
    return sig.header[0]


register_consumer(
    ForiLoop,
    Form(
        n_bodies=1,
        param_order=("seq", "carry", "arg"),
        output_order=("carry",),
        arg_order=("seq", "carry", "arg"),
        result_order=("carry",),
        split=_split_fori,
        make=_make_fori,
        functions=lambda node: [node.inputs[0]],
        kinds=(
            SlotKind("seq", Meaning.SEQUENCE),
            SlotKind("carry", Meaning.CARRY),
            SlotKind("arg", Meaning.INVARIANT),
        ),
        capabilities=Capabilities(loop=True, counted=True),
        loop_key=_fori_key,
        semantics=Iterate(),
    ),
)
