"""Carries whose final value an in-place Op may overwrite start from a fresh buffer.

Terms
-----
carry
    A loop state read and written each step whose result is its last value
    (`Meaning.CARRY`; PyTensor's untraced sit-sot once lowered).
overwriting reader
    An outer node that could work in place on the carry's result: its Op offers
    an in-place form for that input (PyTensor's ``inplace_on_inputs`` protocol:
    the linear-algebra Ops, ``Blockwise``), e.g. ``SolveTriangular``'s ``overwrite_b``.

PyTensor's Scan declares each untraced sit-sot's result a *view* of its initial
value (a loop of zero steps returns that value itself). When the initial value is
a constant — the zero `innergraph.rewriting.carry_from_zero` starts a carried
cotangent from, or one ``carry_cotangents`` reads off a constant buffer — the
result is a view of a constant, which no Op may overwrite: the in-place pass
leaves the reader out of place, and under Numba the out-of-place signature costs
one more object-mode helper compilation (SARIMAX's gradient: one
``SolveTriangular`` with ``overwrite_b=False`` where vanilla's, reading a fresh
``Sum``, is in place).

`fresh_carries` (``innergraph_fresh_carries``, position 49.3: after the last pass
that folds constants, before the in-place passes) gives each untraced sit-sot of a
native Scan whose initial value is a constant array (``ndim >= 1``) and whose result
has an overwriting reader a fresh buffer holding the same values:
``set_subtensor(empty(shape)[:], constant)``, an ``AllocEmpty`` and an
``IncSubtensor`` that the in-place pass then makes write into the allocation. Earlier
it would not survive: canonicalize and specialize turn the full-slice write into the
constant again (``local_useless_inc_subtensor``), as constant folding does an
``Alloc`` of a constant shape whose client is a Scan. The loop and its values are
unchanged; the reader may then overwrite the result. Untraced sit-sots without such
a reader are left alone, so no other graph gains a node.
"""

from __future__ import annotations

from typing import Any

import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan
from pytensor.tensor.subtensor import set_subtensor


__all__ = ["fresh_carries", "may_overwrite"]


def may_overwrite(node: Apply, i: int) -> bool:
    """Whether ``node``'s Op (a ``Blockwise``'s core Op) has an in-place form that overwrites its input ``i``."""
    op = getattr(node.op, "core_op", node.op)  # ``blockwise_inplace`` asks the core Op, with the same input positions
    inplace_on_inputs = getattr(op, "inplace_on_inputs", None)
    if inplace_on_inputs is None or getattr(op, "destroy_map", None):
        return False
    try:
        inplace = inplace_on_inputs(allowed_inplace_inputs=[i])
    except (TypeError, ValueError, NotImplementedError):
        return False
    return any(i in inputs for inputs in getattr(inplace, "destroy_map", {}).values())


def _fresh(value: Constant) -> Variable:
    """A new buffer holding ``value``'s data, of its type (nothing folds it into a constant)."""
    v: Any = value
    empty: Any = pt.empty(tuple(int(d) for d in v.data.shape), dtype=v.type.dtype)  # a constant shape: no shape nodes
    return v.type.filter_variable(set_subtensor(empty[:], v))


def fresh_carries(fgraph: FunctionGraph) -> int:
    """Start the constant-initialised untraced sit-sots an in-place reader may overwrite from fresh buffers; return how many."""
    changed = 0
    loops = {node for node in fgraph.apply_nodes if isinstance(node.op, Scan) and node.op.info.n_untraced_sit_sot}
    if not loops:
        return 0
    for node in [n for n in fgraph.toposort() if n in loops]:  # a set's order is the nodes' addresses: deterministic order instead
        op = node.op
        initial = op.outer_untraced_sit_sot(node.inputs, with_idx=True)
        results = op.outer_untraced_sit_sot_outs(node.outputs)
        for (i, value), result in zip(initial, results, strict=True):
            if not isinstance(value, Constant) or getattr(value.type, "ndim", 0) < 1:
                continue
            if any(isinstance(client, Apply) and may_overwrite(client, j) for client, j in fgraph.clients.get(result, [])):
                fgraph.change_node_input(node, i, _fresh(value), reason="fresh_carries")
                changed += 1
    return changed
