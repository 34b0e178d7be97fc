"""Duplicate and constant arguments.

Two input slots of the same kind that bind the same outer variable (identity,
after MergeOptimizer) become one param. A constant argument is inlined into the
body — the param replaced by the constant — so constant folding reaches it. A
sequence whose rows are all equal (a constant, or an ``Alloc`` along time) is a
non-sequence: each step reads the same row. Large constants go the other way:
a call or branch body receives them as arguments (`pass_large_constants`), because
compiled bodies would otherwise hold them as globals, which Numba cannot cache.
Input slots are those that only bind params (`Meaning.INVARIANT`, `Meaning.SEQUENCE`);
a slot may bind one param in each of several bodies (a loop's condition and step
both reading one argument), and two slots are duplicates when they have the same
kind (so the same bodies), taps and argument.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import Subtensor
from pytensor.tensor.variable import TensorConstant

from innergraph.core.canonical import template
from innergraph.core.fold import visible_nodes
from innergraph.core.graph import body_of, scope_toposort
from innergraph.core.instantiate import LARGE_CONSTANT, is_large_constant, is_small_tensor_constant, small_constant_key
from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer
from innergraph.protocol.slots import INPUT_MEANINGS, Meaning
from innergraph.core.types import Body

__all__ = [
    "LARGE_CONSTANT",
    "argument_kinds",
    "inline_constant",
    "inlined_row",
    "invariant_row",
    "merge_arguments",
    "outline_constants",
    "pass_large_constants",
    "pass_nested_large_constants",
]

def argument_kinds(sig: Signature) -> list[str] | None:
    """Per body, the invariant kind binding only that body, for consumers that are not loops.

    The kinds that large and outlined constants become arguments of; None when the
    consumer is a loop (constants stay in loop bodies) or a body has no such kind.
    """
    if sig.capabilities.loop:
        return None
    kinds = [sig.form.kind_for(Meaning.INVARIANT, (b,)) for b in range(sig.n_bodies)]
    return None if None in kinds else [k for k in kinds if k is not None]


def inline_constant(slot: Slot, meaning: Meaning = Meaning.INVARIANT) -> dict[Variable, Variable] | None:
    """Each param of an invariant input slot -> the constant it binds, typed as the param, if a small one."""
    (arg,) = slot.args
    if meaning is not Meaning.INVARIANT or not isinstance(arg, Constant) or is_large_constant(arg):
        return None
    try:
        return {p: TensorConstant(p.type, p.type.filter(arg.data)) for _, p in slot.params}
    except (TypeError, ValueError, AttributeError):
        return None


def invariant_row(sig: Signature, slot: Slot) -> Variable | None:
    """The row every step reads from a sequence whose rows are all equal, if it is one.

    Such a sequence is a constant with equal rows (or rows ``k:`` of one: what carrying
    a zero cotangent leaves), or an ``Alloc`` that broadcasts a
    value along time. A constant's length is checked against ``n_steps`` only when
    that is a constant too: otherwise, as for the ``Alloc``, a valid graph's sequence
    is long enough (PyTensor's ``scan_inline_invariant_constants`` makes the same
    assumption, and would otherwise rebuild the lowered Scan to do this).
    """
    seq: Any = slot.args[0]
    ((_, p),) = slot.params
    n_steps = sig.header[0]
    sliced = _slice_of_constant(seq)
    if isinstance(seq, Constant) or sliced is not None:
        data = np.asarray(seq.data if sliced is None else sliced.data)
        if data.ndim == 0 or not len(data) or not (data == data[:1]).all():
            return None
        if sliced is None and isinstance(n_steps, Constant) and len(data) < int(n_steps.data):
            return None
        return TensorConstant(p.type, p.type.filter(data[0]))
    node = seq.owner
    if node is None or not isinstance(node.op, Alloc):
        return None
    value: Any
    value, _, *rest = node.inputs  # the length is not checked: a valid graph's is >= n_steps
    if value.ndim == seq.ndim:
        if value.type.shape[0] != 1:
            return None
        value = value[0] if not isinstance(value, Constant) else pt.constant(np.asarray(value.data)[0])
    if isinstance(value, Constant) and all(isinstance(r, Constant) for r in rest):
        shape = [int(r.data) for r in rest]
        return TensorConstant(p.type, p.type.filter(np.broadcast_to(np.asarray(value.data), shape)))
    row: Any = pt.alloc(value, *rest) if rest else value
    try:
        return p.type.filter_variable(row)
    except TypeError:
        return None


def _slice_of_constant(seq: Any) -> Constant | None:
    """The constant ``c`` when ``seq`` is ``c[start:stop]`` (a slice along time only), else None."""
    node = seq.owner
    if node is None or not isinstance(node.op, Subtensor) or not isinstance(node.inputs[0], Constant):
        return None
    if len(node.op.idx_list) != 1 or not isinstance(node.op.idx_list[0], slice):
        return None
    return node.inputs[0]


def _invariant_row(sig: Signature, slot: Slot) -> tuple[Variable, str] | None:
    """A counted loop's sequence whose rows are all equal: the row and the invariant kind it becomes."""
    kind = sig.form.kind_for(Meaning.INVARIANT, slot.bodies)
    if not sig.capabilities.counted or kind is None or len(slot.params) != 1:
        return None
    row = invariant_row(sig, slot)
    return None if row is None else (row, kind)


def inlined_row(sig: Signature, slot: Slot) -> dict[Variable, Variable] | None:
    """Each param of a sequence ``slot`` of ``sig`` -> the constant row, if every step reads one small constant.

    What `merge_arguments` makes of such a sequence (`invariant_row`, then
    `inline_constant`). A rewrite that makes such a sequence inlines it at once:
    left to `merge_arguments`, it costs the consumer rewrites another round.
    """
    row = _invariant_row(sig, slot)
    return None if row is None else inline_constant(Slot(row[1], (row[0],), slot.params))


def _large_constants(body: Body) -> list[Constant]:
    """The large constants of ``body``'s own scope, in first-use order."""
    found = [v for n in scope_toposort(body.outputs) for v in n.inputs if is_large_constant(v)]
    found += [v for v in body.outputs if is_large_constant(v)]
    return list(dict.fromkeys(found))


def pass_large_constants(fgraph: FunctionGraph, nested_only: bool = False) -> int:
    """Make the large constants of call and branch bodies arguments; return how many consumers changed.

    With ``nested_only=True`` only consumers inside bodies change: the pipeline
    passes the outer consumers' constants when it folds their bodies
    (`outline_constants`).
    """
    visible = visible_nodes(fgraph) if nested_only else None
    changed = 0
    for sig in consumers(fgraph):
        kinds = argument_kinds(sig)
        if kinds is None or (visible is not None and sig.node in visible):
            continue
        new: list[Slot] = []
        replace: dict[int, dict[Variable, Variable]] = {}
        for b, (kind, body) in enumerate(zip(kinds, sig.bodies, strict=True)):
            for const in _large_constants(body):
                param = replace.setdefault(b, {}).setdefault(const, const.type())
                new.append(Slot(kind, (const,), ((b, param),)))
        if new:
            replace_consumer(fgraph, sig, [*sig.slots, *new], replace=replace, reason="pass_large_constants")
            changed += 1
    return changed


def pass_nested_large_constants(fgraph: FunctionGraph) -> int:
    """`pass_large_constants` for the consumers inside bodies only."""
    return pass_large_constants(fgraph, nested_only=True)


def merge_arguments(fgraph: FunctionGraph) -> int:
    """Merge duplicate and inline constant arguments of every consumer; return how many changed."""
    changed = 0
    for sig in consumers(fgraph):
        keep: list[Slot] = []
        replace: dict[int, dict[Variable, Variable]] = {b: {} for b in range(sig.n_bodies)}
        first: dict[tuple, Slot] = {}
        for slot in sig.slots:
            meaning = sig.meaning(slot)
            if meaning not in INPUT_MEANINGS:
                keep.append(slot)
                continue
            values = inline_constant(slot, meaning)
            row = _invariant_row(sig, slot) if meaning is Meaning.SEQUENCE else None
            twin = first.setdefault((slot.kind, slot.in_taps, slot.args[0]), slot)
            if values is not None:
                for b, p in slot.params:
                    replace[b][p] = values[p]
            elif row is not None:
                invariant = Slot(row[1], (row[0],), slot.params)
                inlined = inline_constant(invariant)  # a constant row goes into the body now, not next round
                if inlined is None:
                    keep.append(invariant)
                else:
                    for b, p in slot.params:
                        replace[b][p] = inlined[p]
            elif twin is not slot:
                for (b, p), (_, q) in zip(slot.params, twin.params, strict=True):
                    replace[b][p] = q
            else:
                keep.append(slot)
        if len(keep) < len(sig.slots) or any(a is not b for a, b in zip(keep, sig.slots)):
            replace_consumer(fgraph, sig, keep, replace=replace, reason="merge_arguments")
            changed += 1
    return changed


def _value_constants(body: Body) -> dict[Any, list[Constant]]:
    """The small constants of ``body``'s scope that only elementwise nodes read, by value (`small_constant_key`).

    Such a constant can become a param of its own type without changing any type in
    the body: elementwise output types depend only on the input types.
    """
    found: dict[Any, list[Constant]] = {}
    other: set[Any] = set()
    for node in scope_toposort(body.outputs):
        for v in node.inputs:
            if is_small_tensor_constant(v):
                key = small_constant_key(v)
                if isinstance(node.op, Elemwise) and key not in other:
                    found.setdefault(key, [])
                    if v not in found[key]:
                        found[key].append(v)
                else:
                    other.add(key)
                    found.pop(key, None)
    for v in body.outputs:  # an output keeps its declared type only as itself
        if is_small_tensor_constant(v):
            found.pop(small_constant_key(v), None)
    return found


def _template_with_holes(body: Body) -> tuple[Any, tuple[Constant, ...], list[list[Constant]]]:
    """``(template, holes, the constants each hole stands for)`` of a body (`outline_constants`)."""
    values = _value_constants(body)

    def hole_key(c: Constant) -> Any:
        if is_large_constant(c):
            return ("large", id(c))  # always outlined: never hash its data
        key = small_constant_key(c)
        return key if key in values else None

    key, holes = template(body, hole_key)
    stands_for = [[c] if is_large_constant(c) else values[small_constant_key(c)] for c in holes]
    return key, tuple(holes), stands_for


def outline_constants(fgraph: FunctionGraph) -> int:
    """Fold the bodies of visible calls and branches with constants made arguments; return how many changed.

    Two kinds of constants become arguments, bound by the consumer to the constant:

    * large ones (`LARGE_CONSTANT`), as `pass_large_constants` does;
    * small ones only elementwise nodes read, when they are all that tells bodies
      apart. Bodies whose templates (`innergraph.core.canonical.template`, with holes at
      those constants) are equal get a param for each hole whose value differs
      among them, and are then one body: ``ifelse(c, x.sum() + i, ...)`` for
      ``i = 1, 2, 3`` becomes three conditionals over one ``then`` body. Equal
      constants of one body are one hole (after merging they are one variable),
      so ``x * 2.0 + 2.0`` and ``x * 2.0 + 1.0`` have different templates.

    The changed consumers get folded functions, so no body node is imported (and
    shape-inferred) again: the pipeline runs this as it folds bodies, after every
    rewrite that could use a constant's value inside one.
    """
    visible = visible_nodes(fgraph)
    kinds_of: dict[Apply, list[str]] = {}  # per consumer, the argument kind of each body
    members = []  # (signature, body index, template, holes, the constants each hole stands for)
    seen: dict[Variable, Any] = {}  # one template per function variable, however many consumers read it (issue 22)
    for sig in consumers(fgraph):
        kinds = argument_kinds(sig)
        if sig.node not in visible or kinds is None:
            continue
        kinds_of[sig.node] = kinds
        for b, function in enumerate(sig.form.functions(sig.node)):
            if function not in seen:  # by identity: the holes are that body's own constants
                seen[function] = _template_with_holes(body_of(function))
            members.append((sig, b, *seen[function]))
    groups: dict[Any, list[tuple[Constant, ...]]] = {}
    for _, _, key, holes, _ in members:
        groups.setdefault(key, []).append(holes)
    outlined = {  # per template, the holes to make arguments: large ones, and values that differ
        key: {i for i, column in enumerate(zip(*group)) if is_large_constant(column[0]) or len({small_constant_key(c) for c in column}) > 1}
        for key, group in groups.items()
    }
    new: dict[Apply, tuple[Signature, list[Slot], dict[int, dict[Variable, Variable]]]] = {}
    templates: dict[Apply, dict[int, Any]] = {}
    for sig, b, key, holes, stands_for in members:
        templates.setdefault(sig.node, {})[b] = key
        for i, const in enumerate(holes):
            if i not in outlined[key]:
                continue  # the same value in every body of the group: it stays inside
            _, slots, replace = new.setdefault(sig.node, (sig, [], {}))
            param = const.type()
            replace.setdefault(b, {}).update(dict.fromkeys(stands_for[i], param))
            slots.append(Slot(kinds_of[sig.node][b], (const,), ((b, param),)))
    for sig, slots, replace in new.values():
        # bodies with one template, their holes made params in hole order, are one function
        replace_consumer(
            fgraph, sig, [*sig.slots, *slots], replace=replace, reason="outline_constants", fold=True, same_as=templates[sig.node]
        )
    return len(new)
