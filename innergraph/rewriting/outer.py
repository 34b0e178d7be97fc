"""Small outer-graph rewrites for what gradients of loops leave around them.

``pytensor.scan`` writes an initial value into a state buffer as
``set_subtensor(buffer[:1], x0[None])``; the gradient of that is a ``Sum`` over a
one-row slice of the backward loop's result. Neither is wrong, but each costs a
node per state and hides the single row from the rewrites that follow.

* `local_set_row_of_expand_dims`: ``set/inc_subtensor(x[a:a+1], v[None])`` ->
  ``set/inc_subtensor(x[a], v)`` (``a`` a constant, written in the smallest unsigned
  dtype, as PyTensor's Numba and JAX modes would rewrite it next; an empty slice is a
  shape error either way).
* `local_sum_of_one_row`: ``x[s].sum(axis=0)`` where the constant slice ``s``
  selects exactly one row of ``x``, whose length the shape feature proves
  constant -> ``x[i]``.
* `local_fill_read_by_consumers`: ``second(x, c)`` (``fill``), ``c`` a constant, read
  only by in-graph consumers, where the shape feature proves ``x``'s shape constant
  -> the constant ``full(shape, c)``. The gradient of a sum sends such ones into a
  reverse loop. Stabilize would make the same constant (``local_second_to_alloc``,
  then constant folding of the ``Alloc``, which folds when no client can absorb an
  ``Alloc``: an in-graph consumer cannot), but that change costs stabilize a second
  round over the whole graph, bodies included; made in canonicalize, it costs none.
* `local_merge_slices_of_known_length`: ``x[s1][s2]`` with constant slices, where
  ``x``'s length is provably constant -> ``x[s]`` (PyTensor's own slice merge
  declines the reversed slices that gradients of loops produce, like
  ``x[3:-6:-1][:4]``).

All are registered under the ``innergraph`` tag (`innergraph.rewriting.db`).
`local_sum_of_one_row` and `local_fill_read_by_consumers` are in ``canonicalize``. `local_set_row_of_expand_dims` runs
after PyTensor's Scan save-memory rewrites (which recognise a state's initial value
by the ``x0[None]`` pattern and must see it), in one walk right after
``specialize``. `local_merge_slices_of_known_length` is in ``specialize``, after
canonicalize's own slice merging. Those in canonicalize and specialize return nothing while innergraph is
uninstalled: rewrite databases copied from PyTensor's while it was installed (PyMC
copies canonicalize into its logprob database when it is imported) keep them, and
`innergraph.uninstall` cannot reach such copies. In canonicalize it raced PyTensor's
``local_subtensor_merge_slice``: the slices it made were merged again symbolically,
which cost #1669's 2nd derivative about 50 ms of compile time and a node; run
afterwards it only composes what is left.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.scalar import constant as scalar_constant
from pytensor.tensor.basic import get_underlying_scalar_constant_value, second
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.math import Sum
from pytensor.tensor.subtensor import IncSubtensor, Subtensor, get_constant_idx, inc_subtensor, set_subtensor

from innergraph.core.hooks import installed
from innergraph.protocol.slots import form_of

__all__ = [
    "first_row",
    "local_fill_read_by_consumers",
    "local_merge_slices_of_known_length",
    "local_set_row_of_expand_dims",
    "local_sum_of_one_row",
    "rows_of",
]


def _constant_slices(node: Apply) -> list[Any] | None:
    """The constant indices of a (Inc)Subtensor node, or None."""
    inputs = node.inputs[1:] if isinstance(node.op, IncSubtensor) else node.inputs  # skip the written value
    try:
        return list(get_constant_idx(node.op.idx_list, inputs, only_process_constants=False))
    except NotScalarConstantError:
        return None


def _single_slice(node: Apply) -> slice | None:
    """The index of a (Inc)Subtensor node that takes one constant slice of the first axis, or None."""
    idx = _constant_slices(node)
    return idx[0] if idx is not None and len(idx) == 1 and isinstance(idx[0], slice) else None


def _under_expand_dims(y: Any) -> Variable | None:
    """``v`` when ``y`` is ``v[None]`` (a new leading axis), else None."""
    if y.owner is not None and isinstance(y.owner.op, DimShuffle) and tuple(y.owner.op.new_order) == ("x", *range(y.ndim - 1)):
        value: Variable = y.owner.inputs[0]
        return value
    return None


def first_row(buffer: Variable) -> Variable:
    """``buffer[0]``, read from where it was written when ``buffer`` is a state buffer.

    ``pytensor.scan`` builds ``set_subtensor(x[:k], v[None])`` (and
    `local_set_row_of_expand_dims` makes that ``set_subtensor(x[0], v)``; for a
    constant ``v``, canonicalize folds ``v[None]`` into a constant); row 0 of each
    is ``v``, without the buffer, when ``v`` has the row's type (a write may
    cast). Otherwise ``buffer[0]``.
    """
    node = buffer.owner
    row_type = buffer.type.clone(shape=buffer.type.shape[1:])
    if node is not None and isinstance(node.op, IncSubtensor) and node.op.set_instead_of_inc:
        y: Any = node.inputs[1]
        idx = _constant_slices(node)
        if idx is not None and len(idx) == 1:
            (i,) = idx
            written = None
            if not isinstance(i, slice) and i == 0:
                written = y
            elif isinstance(i, slice) and i.start in (None, 0) and i.step in (None, 1) and (i.stop is None or i.stop >= 1):
                written = _under_expand_dims(y)
                if written is None and isinstance(y, Constant) and y.data.ndim >= 1 and y.data.shape[0] >= 1:
                    written = pt.constant(y.data[0], dtype=str(y.data.dtype))  # canonicalize folded v[None] of a constant
            if written is not None and (row_type.in_same_class(written.type) or row_type.is_super(written.type)):
                return written
    return rows_of(buffer, 0)


def rows_of(buffer: Variable, index: int | slice) -> Variable:
    """``buffer[index]``, a constant when ``buffer`` is one.

    The rewrites that run after canonicalize build such reads of constant state
    buffers (a zero cotangent's); left as nodes, PyTensor's second Scan pass folds
    them and then runs again over the whole graph.
    """
    result: Variable = buffer[index]  # type: ignore[index]
    if not isinstance(buffer, Constant):
        return result
    data = np.array(np.asarray(buffer.data)[index], order="C")  # a contiguous copy (Numba caches no strided global)
    return result.type.filter_variable(pt.constant(data, dtype=result.type.dtype))


@node_rewriter([IncSubtensor])
def local_set_row_of_expand_dims(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    x: Any = node.inputs[0]
    y: Any = node.inputs[1]
    s = _single_slice(node)
    if s is None or node.op.inplace:
        return None
    start = 0 if s.start is None else s.start
    if s.step not in (None, 1) or not isinstance(start, int) or start < 0 or s.stop != start + 1:
        return None
    value = _under_expand_dims(y)
    if value is None:
        return None
    write = set_subtensor if node.op.set_instead_of_inc else inc_subtensor
    written: Any = write(x[start], value).owner
    # the row as the smallest unsigned constant, as PyTensor's `local_uint_constant_indices`
    # (Numba, JAX) would rewrite it afterwards: one replacement, not two
    row = scalar_constant(np.array(start, dtype=np.min_scalar_type(start)))
    return [written.op(*written.inputs[:2], row)]


@node_rewriter([Sum])
def local_sum_of_one_row(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    if not installed():  # a copy of canonicalize made while installed (PyMC's logprob database) outlives uninstall
        return None
    sliced: Any = node.inputs[0]
    if node.op.axis not in (None, (0,)) or (node.op.axis is None and sliced.ndim != 1):
        return None
    if sliced.owner is None or not isinstance(sliced.owner.op, Subtensor) or node.outputs[0].type.dtype != sliced.dtype:
        return None
    s = _single_slice(sliced.owner)
    if s is None:
        return None
    x: Any = sliced.owner.inputs[0]
    length = _constant_length(fgraph, x)
    if length is None:
        return None
    rows = range(length)[s]
    if len(rows) != 1:
        return None
    return [x[rows[0]]]


@node_rewriter([second])
def local_fill_read_by_consumers(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    if not installed():  # as in `local_sum_of_one_row`
        return None
    if not isinstance(node.inputs[1], Constant):
        return None
    out = node.outputs[0]
    value: Any = node.inputs[1]
    if value.type.dtype == out.type.dtype and value.type.broadcastable == out.type.broadcastable:
        return None  # PyTensor's `local_useless_fill` makes it ``c``
    if not all(form_of(client.op) is not None for client, _ in fgraph.clients[out]):
        return None  # an Elemwise (or other) client can absorb the broadcast: stabilize keeps an Alloc there
    shape = _constant_shape(fgraph, out)
    if shape is None:
        return None
    data = np.full(shape, np.asarray(value.data), dtype=out.type.dtype)
    return [out.type.filter_variable(pt.constant(data, dtype=out.type.dtype))]


def _constant_shape(fgraph: FunctionGraph, x: Variable) -> tuple[int, ...] | None:
    """``x``'s shape if the shape feature proves every dimension constant."""
    dims = [_proved_dim(fgraph, x, i) for i in range(x.type.ndim)]
    return None if None in dims else tuple(d for d in dims if d is not None)


def _proved_dim(fgraph: FunctionGraph, x: Variable, i: int) -> int | None:
    """Dimension ``i`` of ``x`` if the graph's shape feature proves it constant."""
    shape_feature = getattr(fgraph, "shape_feature", None)
    if shape_feature is None:
        return None
    try:
        return int(get_underlying_scalar_constant_value(shape_feature.get_shape(x, i)))
    except NotScalarConstantError:
        return None


@node_rewriter([Subtensor])
def local_merge_slices_of_known_length(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    if not installed():  # as in `local_sum_of_one_row`
        return None
    inner = node.inputs[0]
    if inner.owner is None or not isinstance(inner.owner.op, Subtensor):
        return None
    outer_slice, inner_slice = _single_slice(node), _single_slice(inner.owner)
    if outer_slice is None or inner_slice is None:
        return None
    x = inner.owner.inputs[0]
    length = _constant_length(fgraph, x)
    if length is None:
        return None
    rows = range(length)[inner_slice][outer_slice]
    stop = rows.stop if rows.stop >= 0 else None  # a negative stop of a reversed range means "past row 0"
    return [x[rows.start : stop : rows.step]] if len(rows) else None


def _constant_length(fgraph: FunctionGraph, x: Variable) -> int | None:
    """The length of ``x``'s first axis if the shape feature or a constant slice proves it."""
    proved = _proved_dim(fgraph, x, 0)
    if proved is not None:
        return proved
    if x.owner is not None and isinstance(x.owner.op, Subtensor):
        idx = _constant_slices(x.owner)
        if idx and isinstance(idx[0], slice):
            inner = _constant_length(fgraph, x.owner.inputs[0])
            if inner is not None:
                return len(range(*idx[0].indices(inner)))
    return None
