"""Increments of buffers of zeros that feed another increment: one increment of the outer buffer.

Gradients of indexing build their cotangents as increments of zero buffers, and a
gradient of a gradient nests them: PyTensor issue #1669's backward loop starts from
``inc_subtensor(zeros(5)[1:], inc_subtensor(zeros(4)[-1], 1.0))``, a one-hot of length
4 added into rows 1..4 of another zero buffer. Adding a buffer that is zero outside
the region it was incremented at is adding that region's values alone, so

* `local_nested_zero_increments`: ``inc_subtensor(x[i1], inc_subtensor(zeros[i2], y))``,
  the inner buffer of zeros the shape of the region ``x[i1]`` and read by this increment
  only, is ``inc_subtensor(x[i1 ∘ i2], y)``: one increment of the outer buffer at the
  composed index (``x[i1][i2]`` as one index of ``x``). ``y`` is any value (a row, a
  block, a scalar); both indices are basic and constant, and ``x``'s lengths on the
  axes they touch are proved constant by the shape feature. The outer node may also be
  a ``set_subtensor`` when ``x`` is zeros: writing into zeros is adding to them.
* `local_one_hot_increment`: a *one-hot* buffer, ``inc_subtensor(zeros[i], v)`` or
  ``set_subtensor`` with an integer on every axis, ``i`` symbolic, read only by an
  increment ``inc_subtensor(x[i1], one_hot)`` with a constant basic ``i1``, is the
  single-element increment ``inc_subtensor(x[j], v)``. On an axis that ``i1`` slices,
  ``j`` is ``rows[i]``, where ``rows`` is the constant vector of the rows the slice
  selects: indexing it raises exactly when ``i`` is out of the one-hot's bounds, as the
  original did, and reads a negative ``i`` from the end of the region. (A constant
  ``i`` is the first rewrite's case: it composes to a constant.)

Both need the inner buffer's shape to be the region's, proved constant, so a broadcast
of the inner buffer never reaches them; both keep dtypes (the inner buffer's is the
outer's, so no cast moves). Registered in ``specialize`` (`innergraph.rewriting.db`),
after the consumer rewrites and lowering: `innergraph.rewriting.lengths` proves
cotangent buffer lengths by walking exactly these nested increments, and the rewrites
need the shape feature's constant lengths. They return nothing while innergraph is
uninstalled (see `innergraph.rewriting.outer`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.subtensor import IncSubtensor, get_constant_idx, inc_subtensor
from pytensor.tensor.type import integer_dtypes

from innergraph.core.hooks import installed

__all__ = ["compose_index", "local_nested_zero_increments", "local_one_hot_increment"]

Index = list[Any]  # per axis: an int, a slice of ints, or (one-hot) a symbolic integer


def _is_zero(var: Variable) -> bool:
    """Whether ``var`` is zeros (a constant or an ``alloc`` of a zero)."""
    try:
        return bool(get_underlying_scalar_constant_value(var) == 0)
    except NotScalarConstantError:
        return False


def _constant_index(node: Apply) -> Index | None:
    """The constant basic index of an ``IncSubtensor``, or None when an entry is symbolic (the written value stands for the indexed input)."""
    try:
        return list(get_constant_idx(node.op.idx_list, node.inputs[1:], only_process_constants=False))
    except NotScalarConstantError:
        return None


def _lengths(fgraph: FunctionGraph, x: Variable) -> list[int | None]:
    """``x``'s lengths that the static type or the shape feature proves constant (None where not)."""
    shape_feature = getattr(fgraph, "shape_feature", None)
    lengths: list[int | None] = []
    for axis, static in enumerate(x.type.shape):
        if static is None and shape_feature is not None:
            try:
                static = int(get_underlying_scalar_constant_value(shape_feature.get_shape(x, axis)))
            except NotScalarConstantError:
                static = None
        lengths.append(static)
    return lengths


def _region(index: Index, lengths: list[int | None]) -> list[range] | None:
    """The rows of each axis that ``index`` keeps (an integer drops its axis), or None if a length is unknown."""
    kept: list[range] = []
    for axis, length in enumerate(lengths):
        entry = index[axis] if axis < len(index) else slice(None)
        if isinstance(entry, slice):
            if length is None:
                return None
            kept.append(range(length)[entry])
    return kept


def compose_index(outer: Index, lengths: list[int | None], inner: Index) -> Index | None:
    """One index of ``x`` for ``x[outer][inner]``, ``lengths`` being ``x``'s; None when not composable.

    ``outer`` is constant and basic (ints and slices); ``inner`` indexes the region
    ``x[outer]`` with ints, slices or symbolic integers. An axis ``outer`` slices and
    ``inner`` leaves whole stays ``outer``'s slice; a constant entry of ``inner``
    composes with the region's rows (a slice, or the row); a symbolic one becomes
    ``rows[i]``, ``rows`` the region's rows as a constant vector (``i`` itself when
    the region has the axis whole).
    """
    region = _region(outer, lengths)
    if region is None or len(inner) > len(region):
        return None
    composed: Index = []
    kept = 0
    for axis in range(len(lengths)):
        entry = outer[axis] if axis < len(outer) else slice(None)
        if not isinstance(entry, slice):
            composed.append(entry)
            continue
        rows, sub = region[kept], inner[kept] if kept < len(inner) else slice(None)
        kept += 1
        if isinstance(sub, slice):
            part = rows[sub]
            composed.append(slice(part.start, part.stop if part.stop >= 0 else None, part.step))
        elif isinstance(sub, int | np.integer):
            if not -len(rows) <= sub < len(rows):
                return None  # out of the region: the original raises, leave it
            composed.append(rows[sub])
        elif rows == range(rows.stop):
            composed.append(sub)  # a whole axis: the same bounds, the same negative rows
        else:
            composed.append(pt.constant(np.asarray(rows, dtype="int64"))[sub])
    return composed


def _nested_parts(fgraph: FunctionGraph, node: Apply) -> tuple[Any, Apply] | None:
    """``(x, inner)`` when ``node`` increments ``x`` (or writes into zeros) by an increment of zeros read only here."""
    x, y = node.inputs[:2]
    inner = y.owner
    if not installed() or node.op.inplace or inner is None or not isinstance(inner.op, IncSubtensor) or inner.op.inplace:
        return None
    if node.op.set_instead_of_inc and not _is_zero(x):
        return None
    zeros = inner.inputs[0]
    if len(fgraph.clients[y]) != 1 or zeros.type.dtype != x.type.dtype or not _is_zero(zeros):
        return None
    return x, inner


def _same_shape(fgraph: FunctionGraph, zeros: Variable, region: list[range]) -> bool:
    """Whether the inner buffer of zeros has exactly the region's (proved constant) shape."""
    return _lengths(fgraph, zeros) == [len(rows) for rows in region]


def _increment(node: Apply, x: Any, index: Index, value: Any) -> list[Variable]:
    """``inc_subtensor(x[index], value)``, typed as ``node``'s output."""
    out = node.outputs[0]
    return [out.type.filter_variable(inc_subtensor(x[tuple(index)], value))]


def _composed_increment(
    fgraph: FunctionGraph, node: Apply, x: Any, inner: Apply, outer_index: Index, inner_index: Index
) -> list[Variable] | None:
    """``node`` as one increment of ``x`` at ``inner_index`` within ``x[outer_index]``, when ``inner``'s zeros are exactly that region."""
    lengths = _lengths(fgraph, x)
    region = _region(outer_index, lengths)
    if region is None or not _same_shape(fgraph, inner.inputs[0], region):
        return None
    composed = compose_index(outer_index, lengths, inner_index)
    return None if composed is None else _increment(node, x, composed, inner.inputs[1])


@node_rewriter([IncSubtensor])
def local_nested_zero_increments(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    parts = _nested_parts(fgraph, node)
    if parts is None:
        return None
    x, inner = parts
    outer_index, inner_index = _constant_index(node), _constant_index(inner)
    if outer_index is None or inner_index is None:
        return None
    return _composed_increment(fgraph, node, x, inner, outer_index, inner_index)


def _one_hot_index(inner: Apply) -> Index | None:
    """The one-hot's index when it has an integer on every axis and one entry at least is symbolic."""
    zeros: Any = inner.inputs[0]
    if len(inner.op.idx_list) != zeros.type.ndim or any(isinstance(e, slice) for e in inner.op.idx_list):
        return None
    # allow_partial: a symbolic entry is returned as it is, never raised
    return list(get_constant_idx(inner.op.idx_list, inner.inputs[1:], allow_partial=True, only_process_constants=False))


@node_rewriter([IncSubtensor])
def local_one_hot_increment(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    parts = _nested_parts(fgraph, node)
    if parts is None:
        return None
    x, inner = parts
    one_hot, outer_index = _one_hot_index(inner), _constant_index(node)
    if one_hot is None or outer_index is None or all(isinstance(i, int | np.integer) for i in one_hot):
        return None  # a constant one-hot is `local_nested_zero_increments`'
    if not all(isinstance(i, int | np.integer) or i.type.dtype in integer_dtypes for i in one_hot):
        return None
    return _composed_increment(fgraph, node, x, inner, outer_index, one_hot)
