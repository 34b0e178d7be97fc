"""Buffer lengths in steps, and reads of a buffer's last row, proved from the graph.

Terms
-----
length offset
    A loop buffer's length minus the loop's ``n_steps``, when the graph proves it is
    a constant: ``alloc(0, n_steps + 1)`` has offset 1. PyTensor's gradient builds
    every mit-mot buffer this way (``inc_subtensor(zeros(n + span)[s:], ...)``,
    reversed with ``[::-1]``), and `pytensor.scan` every state buffer
    (``set_subtensor(empty(n + k)[:k], initial)``). The proof walks what keeps a
    length — a reversal or a full slice, ``inc/set_subtensor``, a broadcast with a
    vector of the same length, a loop's state result (as long as its buffer) —
    down to an allocation, and writes both lengths as one term plus a constant
    (``x.shape[0]`` or ``n_steps`` plus constants): the offset is known when the
    terms are the same. Anything else is unknown (None), never a guess.
binding
    Inside a body, a buffer and a step count may be params: PyTensor's
    loop-invariant motion hoists ``alloc(0, n_steps + 1)`` out of an enclosing
    loop, whose non-sequences then carry both. A binding maps such params to the
    enclosing consumer's arguments (the same value every step); the proof follows a
    bound param to its argument, and a body shared by several consumers is proved
    for each of their bindings (`length_offset`).
final-row read
    A ``Subtensor`` of a buffer that selects only rows among its last few, the
    same ones whatever the length (at least ``minimum``): ``buffer[-1]`` (a row),
    or a slice such as ``buffer[-2:]`` or ``buffer[:-3:-1]`` (what
    ``buffer[::-1][:2]``, the gradient of a two-tap initial value, canonicalizes
    to); rows are counted from the end (0 is the last).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar.basic import Add as ScalarAdd
from pytensor.tensor.basic import Alloc, AllocEmpty, get_underlying_scalar_constant_value
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import IncSubtensor, Subtensor, get_idx_list

from innergraph.protocol.slots import Meaning
from innergraph.protocol.signature import signature

__all__ = ["final_row_reads", "length_offset"]

#: Ops that hold a scalar unchanged (int64 <-> scalar, casts between integer types).
_TRANSPARENT = ("ScalarFromTensor", "TensorFromScalar")


def _constant(var: Any) -> int | None:
    value = get_underlying_scalar_constant_value(var, raise_not_constant=False)
    if value is None or isinstance(value, Variable):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _strip(var: Variable) -> Variable:
    while var.owner is not None and type(var.owner.op).__name__ in _TRANSPARENT:
        var = var.owner.inputs[0]
    return var


Bound = Mapping[Variable, Variable]
_NONE: Bound = {}


def _linear(value: Variable, bound: Bound = _NONE) -> tuple[Any, int] | None:
    """``value`` as ``(term, c)`` with ``value == term + c``; ``term`` is None for a constant, ``("len", v)``
    for the length of buffer ``v`` (found through length-keeping ops), else a variable."""
    value = _strip(value)
    if value.owner is None and value in bound:
        return _linear(bound[value], bound)
    c = _constant(value)
    if c is None:
        c = _minimum_of(value)
    if c is not None:
        return None, c
    node = value.owner
    if node is None:
        return value, 0
    op = node.op
    if isinstance(op, Elemwise) and isinstance(op.scalar_op, ScalarAdd):
        term: Any = None
        total = 0
        for part in node.inputs:
            found = _linear(part, bound)
            if found is None or (found[0] is not None and term is not None):
                return None
            term = found[0] if found[0] is not None else term
            total += found[1]
        return term, total
    source = _shape_of_first_axis(node)
    if source is not None:
        return _length_term(source, bound)
    return value, 0


def _shape_of_first_axis(node: Any) -> Variable | None:
    """``v`` when ``node`` computes ``v.shape[0]`` (``Shape_i{0}``, ``Squeeze(Shape(v))`` of a vector, ``Shape(v)[0]``)."""
    name = type(node.op).__name__
    if name == "Shape_i" and node.op.i == 0:
        return node.inputs[0]
    inner = node.inputs[0].owner if node.inputs else None
    if inner is None or type(inner.op).__name__ != "Shape":
        return None
    if name in ("Squeeze", "DimShuffle") and node.outputs[0].ndim == 0 and inner.inputs[0].ndim == 1:
        return inner.inputs[0]
    if isinstance(node.op, Subtensor) and len(node.op.idx_list) == 1 and _constant(node.inputs[1]) == 0:
        return inner.inputs[0]
    return None


def _length_term(buffer: Variable, bound: Bound = _NONE) -> tuple[Any, int] | None:
    """``len(buffer)`` in the form of `_linear`."""
    origin, length = _length(buffer, bound)
    if length is not None:
        return _linear(length, bound)
    return ("len", origin), 0


def _offset(length: tuple[Any, int] | None, n_steps: tuple[Any, int] | None) -> int | None:
    if length is None or n_steps is None or length[0] != n_steps[0]:
        return None
    return length[1] - n_steps[1]


def _minimum_of(var: Variable) -> int | None:
    """The value of ``minimum(a, b)`` when both are constants (a static shape counts), else None.

    PyTensor's gradient of a mit-sot allocates ``n_steps + minimum(taps, len(initial))`` rows.
    """
    node = _strip(var).owner
    if node is None or not isinstance(node.op, Elemwise) or type(node.op.scalar_op).__name__ not in ("Minimum", "ScalarMinimum"):
        return None
    values = [_constant(v) for v in node.inputs]
    return None if any(v is None for v in values) else min(v for v in values if v is not None)


def _length(buffer: Variable, bound: Bound = _NONE) -> tuple[Variable, Variable | None]:
    """The op-chain origin of ``buffer``'s length, and the allocated length when the chain ends in an allocation."""
    var = buffer
    for _ in range(32):
        node = var.owner
        if node is None and var in bound:
            var = bound[var]
            continue
        if node is None:
            return var, None
        op = node.op
        if isinstance(op, Alloc | AllocEmpty):
            shape = node.inputs[1:] if isinstance(op, Alloc) else node.inputs
            return var, (shape[0] if len(shape) == getattr(var.type, "ndim", -1) else None)
        if isinstance(op, IncSubtensor):
            var = node.inputs[0]
        elif isinstance(op, Subtensor):
            (index, *rest) = get_idx_list(node.inputs, op.idx_list)
            if rest or not isinstance(index, slice) or index.start is not None or index.stop is not None:
                return var, None
            if index.step is not None and _constant(index.step) not in (1, -1):
                return var, None
            var = node.inputs[0]
        elif isinstance(op, Elemwise) and type(op.scalar_op).__name__ == "Second":
            first, second = node.inputs[:2]
            if second.ndim == first.ndim and not second.type.broadcastable[0] and first.type.broadcastable[0]:
                return var, None  # second(x, y) has x's length unless y broadcasts x
            var = first
        else:
            state_buffer = _state_buffer(var)
            if state_buffer is None:
                return var, None
            var = state_buffer
    return var, None


def _state_buffer(result: Variable) -> Variable | None:
    """The buffer a loop state's result was made from (the two have one length), or None."""
    sig = signature(result.owner) if result.owner is not None else None
    if sig is None:
        return None
    for slot in sig.slots:
        if slot.results and slot.results[0] is result and sig.meaning(slot) in (Meaning.TRACE, Meaning.BUFFER):
            return slot.args[0]
    return None


def length_offset(buffer: Variable, n_steps: Variable, bindings: Sequence[Bound] = ()) -> int | None:
    """``len(buffer) - n_steps`` when the graph proves it constant, else None.

    With ``bindings`` (the params of the body ``buffer`` and ``n_steps`` live in,
    mapped to each enclosing consumer's arguments), the offset must be proved, and
    the same, under every binding.
    """
    if not bindings:
        return _offset(_length_term(buffer), _linear(n_steps))
    offsets = {_offset(_length_term(buffer, bound), _linear(n_steps, bound)) for bound in bindings}
    return offsets.pop() if len(offsets) == 1 else None


def _rows_from_end(index: Any, minimum: int, reversed_: bool, rows: int) -> tuple[int, ...] | int | None:
    """The rows ``index`` selects, counted from the end of the buffer, when they are among its last ``rows``.

    An integer index gives the row (an int), a slice the tuple of rows in the order
    it selects them, for every buffer of ``minimum`` rows or more; ``reversed_``
    when ``index`` applies to ``buffer[::-1]``. None otherwise.
    """
    if not isinstance(index, slice):
        c = _constant(index)
        if c is None:
            return None
        from_end = c if reversed_ else -c - 1
        return from_end if 0 <= from_end < rows else None
    parts = [index.start, index.stop, index.step]
    values = [None if p is None else _constant(p) for p in parts]
    if any(v is None and p is not None for v, p in zip(values, parts, strict=True)) or values[2] == 0:
        return None
    # each bound resolves from the start or from the end; past the largest bound that
    # choice is fixed, so these lengths decide every length
    reach = max([abs(v) for v in values if v is not None] + [0]) + 3
    found: tuple[int, ...] | None = None
    for n in range(max(minimum, 1), max(minimum, 1) + reach):
        picked = tuple(r if reversed_ else n - 1 - r for r in range(n)[slice(*values)])
        if found is not None and picked != found or not picked or max(picked) >= rows:
            return None
        found = picked
    return found


def _full_reversal(node: Any) -> bool:
    if not isinstance(node.op, Subtensor) or len(node.op.idx_list) != 1:
        return False
    (index,) = get_idx_list(node.inputs, node.op.idx_list)
    return isinstance(index, slice) and index.start is None and index.stop is None and _constant(index.step) == -1


def final_row_reads(
    fgraph: FunctionGraph, buffer: Variable, rows: int, minimum: int = 1, reversed_: bool = False
) -> dict[Variable, tuple[int, ...] | int] | None:
    """Each read of ``buffer`` -> the rows it selects, counted from the end, if all are among the last ``rows``.

    A read is a ``Subtensor`` with one index: an int (the row) or a slice (a tuple
    of rows, in the order selected); a reversal (``buffer[::-1]``) counts through its
    own reads. None when something else reads ``buffer`` (or nothing does);
    ``minimum`` is the fewest rows the buffer can have.
    """
    reads: dict[Variable, tuple[int, ...] | int] = {}
    for client, _ in fgraph.clients.get(buffer, []):
        op = getattr(client, "op", None)
        if not isinstance(op, Subtensor) or client.inputs[0] is not buffer or len(op.idx_list) != 1:
            return None
        if _full_reversal(client):
            inner = final_row_reads(fgraph, client.outputs[0], rows, minimum, not reversed_)
            if inner is None:
                return None
            reads.update(inner)
            continue
        (index,) = get_idx_list(client.inputs, op.idx_list)
        picked = _rows_from_end(index, minimum, reversed_, rows)
        if picked is None:
            return None
        reads[client.outputs[0]] = picked
    return reads or None
