"""Duplicate and constant arguments.

Two input slots of the same kind that bind the same outer variable (identity,
after MergeOptimizer) become one param. A constant argument is inlined into the
body — the param replaced by the constant — so constant folding reaches it. A
sequence whose rows are all equal (a constant, or an ``Alloc`` along time) is a
non-sequence: each step reads the same row. Large constants go the other way:
a call or branch body receives them as arguments (`pass_large_constants`), because
compiled bodies would otherwise hold them as globals, which Numba cannot cache.
Input slots are those that only bind params: sequences, non-sequences, call and
branch arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import Alloc
from pytensor.tensor.variable import TensorConstant

from innergraph.graph import scope_toposort
from innergraph.rewriting.signature import Signature, Slot, consumers, replace_consumer

__all__ = ["LARGE_CONSTANT", "inline_constant", "invariant_row", "merge_arguments", "pass_large_constants"]

INPUT_KINDS = ("seq", "non_seq", "arg", "then_arg", "else_arg")


#: Constants with more elements than this are passed to bodies, not inlined into them:
#: compiled bodies (Numba) would hold them as globals, which defeats Numba's disk cache.
LARGE_CONSTANT = 64

#: The input-slot kind that binds a param of body ``b``, per consumer kind.
ARGUMENT_KINDS = {"call": ("arg",), "ifelse": ("then_arg", "else_arg")}


def _large(value: Any) -> bool:
    return isinstance(value, Constant) and np.asarray(value.data).size > LARGE_CONSTANT


def inline_constant(slot: Slot) -> Variable | None:
    """The constant an input slot binds, typed as its param, if it binds a small one."""
    (arg,), ((_, p),) = slot.args, slot.params
    if slot.kind == "seq" or not isinstance(arg, Constant) or _large(arg):
        return None
    try:
        return TensorConstant(p.type, p.type.filter(arg.data))
    except (TypeError, ValueError, AttributeError):
        return None


def invariant_row(sig: Signature, slot: Slot) -> Variable | None:
    """The row every step reads from a sequence whose rows are all equal, if it is one.

    Such a sequence is a constant with equal rows (at least ``n_steps`` long), or an
    ``Alloc`` that broadcasts a value along time.
    """
    seq: Any = slot.args[0]
    ((_, p),) = slot.params
    n_steps = sig.header[0]
    if isinstance(seq, Constant):
        data = np.asarray(seq.data)
        if not isinstance(n_steps, Constant) or data.ndim == 0 or len(data) < int(n_steps.data) or not len(data) or not (data == data[:1]).all():
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


def pass_large_constants(fgraph: FunctionGraph) -> int:
    """Make the large constants of call and branch bodies arguments; return how many consumers changed."""
    changed = 0
    for sig in consumers(fgraph):
        kinds = ARGUMENT_KINDS.get(getattr(sig.node.op, "kind", ""))
        if kinds is None:
            continue
        new: list[Slot] = []
        replace: dict[int, dict[Variable, Variable]] = {}
        for b, kind in enumerate(kinds):
            outputs = [v for s in sig.slots for bb, v in s.outputs if bb == b]
            found = [v for n in scope_toposort(outputs) for v in n.inputs if _large(v)]
            found += [v for v in outputs if _large(v)]
            for const in dict.fromkeys(found):
                param = replace.setdefault(b, {}).setdefault(const, const.type())
                new.append(Slot(kind, (const,), ((b, param),)))
        if new:
            replace_consumer(fgraph, sig, [*sig.slots, *new], replace=replace, reason="pass_large_constants")
            changed += 1
    return changed


def merge_arguments(fgraph: FunctionGraph) -> int:
    """Merge duplicate and inline constant arguments of every consumer; return how many changed."""
    changed = 0
    for sig in consumers(fgraph):
        keep: list[Slot] = []
        replace: dict[int, dict[Variable, Variable]] = {b: {} for b in range(sig.n_bodies)}
        first: dict[tuple, Slot] = {}
        for slot in sig.slots:
            if slot.kind not in INPUT_KINDS:
                keep.append(slot)
                continue
            (b, p), = slot.params
            value = inline_constant(slot)
            row = invariant_row(sig, slot) if slot.kind == "seq" else None
            twin = first.setdefault((slot.kind, slot.in_taps, slot.args[0]), slot)
            if value is not None:
                replace[b][p] = value
            elif row is not None:
                keep.append(Slot("non_seq", (row,), slot.params))
            elif twin is not slot:
                replace[b][p] = twin.params[0][1]
            else:
                keep.append(slot)
        if len(keep) < len(sig.slots) or any(a is not b for a, b in zip(keep, sig.slots)):
            replace_consumer(fgraph, sig, keep, replace=replace, reason="merge_arguments")
            changed += 1
    return changed
