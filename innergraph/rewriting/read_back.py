"""Reading back the region a set/inc-subtensor just wrote: ``set_subtensor(x[i], y)[i]`` -> ``y``.

A gradient of a state buffer built by ``pytensor.scan``
(``set_subtensor(empty(n + 1)[:1], x0)``) is a cotangent for the whole buffer of
which only the initial rows matter: the gradient of ``x0`` is ``g_buffer[:1]``.
When ``g_buffer`` is itself ``inc_subtensor(zeros(n + 1)[:1], g0)`` (what
`innergraph.ops.checkpoint` returns, so that no O(n) array is needed), the read
gives ``g0`` back and the ``zeros(n + 1)`` go away with it.

`local_read_of_written_region`: ``Subtensor(IncSubtensor(x, y, idx), idx)`` with
the same index (Ops equal and index inputs identical), where the IncSubtensor
sets, or increments zeros, -> ``y`` broadcast to the region's shape (``y``
itself when the shape feature proves the shapes equal). Registered in
``canonicalize`` under the ``innergraph`` tag (`innergraph.rewriting.db`); returns
nothing while innergraph is uninstalled (see `innergraph.rewriting.outer`).
"""

from __future__ import annotations

from typing import Any

import pytensor.tensor as pt
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.subtensor import IncSubtensor, Subtensor
from innergraph.core.hooks import installed

__all__ = ["local_read_of_written_region"]


def _is_zero(var: Any) -> bool:
    try:
        return bool(get_underlying_scalar_constant_value(var) == 0)
    except NotScalarConstantError:
        return False


@node_rewriter([Subtensor])
def local_read_of_written_region(fgraph: Any, node: Any) -> list[Any] | None:
    written = node.inputs[0].owner
    if not installed() or written is None or not isinstance(written.op, IncSubtensor):
        return None
    if tuple(written.op.idx_list) != tuple(node.op.idx_list) or list(written.inputs[2:]) != list(node.inputs[1:]):
        return None
    x, y = written.inputs[:2]
    if not written.op.set_instead_of_inc and not _is_zero(x):
        return None
    out = node.outputs[0]
    value = pt.cast(y, out.type.dtype) if y.type.dtype != out.type.dtype else y
    shape_feature = getattr(fgraph, "shape_feature", None)
    if value.type == out.type and shape_feature is not None and shape_feature.same_shape(value, out):
        return [value]
    return [pt.broadcast_to(value, out.shape)]
