"""Output shapes from a consumer's declaration: the default ``infer_shape`` of every registered consumer.

A registered consumer (`innergraph.protocol.slots.register_consumer`) whose class
defines no ``infer_shape`` gets `declared_infer_shape`: its slots say what each
output is, so its shape follows without running the node:

* a `CARRY` result has its initial value's shape when every body returning its next
  value provably keeps that shape (`innergraph.core.instantiate.same_shape`);
* a `PER_STEP_OUTPUT` result is its argument (the number of rows) rows of the shape
  the body gives its step output;
* an `OUTPUT` result has the shape of its body output when every body that may give
  it (a conditional's branches) provably gives the same one;
* a `BUFFER` result has its argument's shape.

Anything else (a `TRACE`, whose length depends on the steps; a shape that depends
on a value the loop changes) is ``None`` for that output: PyTensor's `ShapeFeature`
then reads that output's shape from the computed output, which is right but runs
the consumer. A node whose form gives no slots raises PyTensor's ``ShapeError``
(every output falls back so). A consumer that knows better defines its own
``infer_shape`` (it may call `declared_shapes` for the outputs it does not know).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Apply, Variable
from pytensor.tensor.exceptions import ShapeError

from innergraph.core.graph import body_of, params
from innergraph.core.instantiate import same_shape, step_output_shapes
from innergraph.protocol.slots import FORMS, ON_REGISTER, Form, Meaning, form_of

__all__ = ["declared_infer_shape", "declared_shapes", "give_default_infer_shape"]

Shape = tuple[Any, ...]


def declared_shapes(node: Apply, input_shapes: Sequence[Any]) -> list[Shape | None]:
    """Each output's shape as the node's slots declare it (module docstring), or None where it is not known.

    Raises
    ------
    ShapeError
        When the node's Op is not a registered consumer, or its form gives no slots
        for the node.
    """
    form = form_of(node.op)
    split = form.split(node) if form is not None else None
    if form is None or split is None:
        raise ShapeError(f"{node.op}: no slots declared for {node}, no shapes to infer from them")
    _, slots = split
    shape_of = {id(v): s for v, s in zip(node.inputs, input_shapes, strict=True)}
    bodies = [body_of(f) for f in form.functions(node)]
    steps = _step_shapes(bodies, form, slots, shape_of)
    found: dict[int, Shape | None] = {}
    for slot in slots:
        meaning = form.meaning(slot)
        if not slot.results:
            continue
        if meaning is Meaning.CARRY:
            initial = shape_of[id(slot.args[0])]
            kept = all(same_shape(initial, steps[b][_index(bodies, b, o)]) for b, o in slot.outputs)
            shape = tuple(initial) if kept else None
        elif meaning is Meaning.PER_STEP_OUTPUT:
            ((b, o),) = slot.outputs
            row = steps[b][_index(bodies, b, o)]
            shape = (slot.args[0], *row) if row is not None and _known(row) else None
        elif meaning is Meaning.OUTPUT:
            shapes = [steps[b][_index(bodies, b, o)] for b, o in slot.outputs]
            first = shapes[0]
            shape = tuple(first) if first is not None and _known(first) and all(same_shape(first, s) for s in shapes[1:]) else None
        elif meaning is Meaning.BUFFER:
            shape = tuple(shape_of[id(slot.args[0])])
        else:
            shape = None
        for result in slot.results:
            found[node.outputs.index(result)] = shape
    return [found.get(k) for k in range(len(node.outputs))]


def declared_infer_shape(self: Any, node: Apply, input_shapes: Sequence[Any]) -> list[Shape | None]:
    """The default ``infer_shape`` of a registered consumer: `declared_shapes`."""
    return declared_shapes(node, input_shapes)


def give_default_infer_shape(op_class: type, form: Form) -> None:
    """Make `declared_infer_shape` ``op_class``'s ``infer_shape`` unless it (or a base) defines one."""
    if getattr(op_class, "infer_shape", None) is None:
        op_class.infer_shape = declared_infer_shape  # type: ignore[attr-defined]  # a method given at registration


def _known(shape: Shape | None) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _index(bodies: Sequence[Any], b: int, output: Variable) -> int:
    """The position of ``output`` among body ``b``'s outputs."""
    return next(i for i, o in enumerate(bodies[b].outputs) if o is output)


def _step_shapes(bodies: Sequence[Any], form: Form, slots: Sequence[Any], shape_of: dict[int, Any]) -> list[list[Shape | None]]:
    """Per body, the shape of each output for one evaluation, its params bound as the slots say.

    An `INVARIANT` param is its argument; a `SEQUENCE` param is a row of its argument;
    a carried param (a `CARRY`, a tap of a `TRACE` or `BUFFER`) changes every step, so
    only its shape is known: the initial value's (a row of the initial rows, for taps).
    """
    args: list[list[Variable | None]] = [[None] * len(b.param_types) for b in bodies]
    arg_shapes: list[list[Any]] = [[None] * len(b.param_types) for b in bodies]
    lists = [params(b.param_types) for b in bodies]
    for slot in slots:
        meaning = form.meaning(slot)
        for b, p in slot.params:
            i = lists[b].index(p)
            shape = shape_of.get(id(slot.args[0])) if slot.args else None
            if meaning is Meaning.INVARIANT:
                args[b][i], arg_shapes[b][i] = slot.args[0], shape
            elif meaning is Meaning.CARRY:
                arg_shapes[b][i] = shape
            elif shape is not None:  # a row: a sequence's, a trace's or a buffer's tap
                arg_shapes[b][i] = tuple(shape[1:])
    result: list[list[Shape | None]] = []
    for b, body in enumerate(bodies):
        if any(s is None for s in arg_shapes[b]):
            result.append([None] * len(body.outputs))
            continue
        result.append(step_output_shapes(body, args[b], arg_shapes[b]))
    return result


for _cls, _form in list(FORMS.items()):
    give_default_infer_shape(_cls, _form)
ON_REGISTER.append(give_default_infer_shape)
