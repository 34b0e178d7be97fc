"""Whether moving a loop's row-wise work out pays: the work it saves per step against the reads it adds.

`innergraph.rewriting.push_out.push_out_sequence_work` turns row-wise work of a loop
that stays (a gradient loop, a filter) into new sequences: each step then reads the
pushed values instead of computing them. That saves the work and costs a read per
new sequence, and sequences the body no longer reads are reads saved. Measured under
Numba on the GARCH(1,1) gradients (issue 48): the loop's step is fused into one
``Composite`` per node, so a scalar operation moved out saves about a nanosecond,
while each sequence the step reads costs an indexing of the buffer and one more
input of the fused kernel, about as much as a call into libm. A generative GARCH whose gradient
loop went from 4 sequences to 15 took 1.15x the steady call of the loop left alone.

The rule, in element operations per step (one scalar operation on one element is 1):

* saved: for each row-wise node moved out, the cost of the scalar operations it
  performs (a ``Composite`` counts its inner nodes, a ``DimShuffle`` none) times its
  output's elements. Arithmetic, comparisons, casts and selections cost 1; any other
  scalar operation (``exp``, ``log``, ``sin``, ``pow``, ``sqrt``, special functions: a
  call into libm or a series) costs `CALL_COST`;
* added: for each new sequence, `READ_COST` plus its row's elements; less the same
  for each sequence the body no longer reads.

The push-out happens when ``saved >= added``. A row whose size is not static is taken
as large (the push-out goes ahead, as it did before the rule): its vectorised work
outside the loop is one pass over all rows. Replacing a loop entirely (every live
result is row-wise) is not subject to the rule: no loop is left to read anything.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from math import prod

import pytensor.scalar as ps
from pytensor.graph.basic import Variable
from pytensor.scalar import Composite
from pytensor.tensor.elemwise import Elemwise

from innergraph.core.graph import scope_toposort

__all__ = ["CALL_COST", "CHEAP", "READ_COST", "moved_work", "pays", "read_cost"]

#: The cost of one more sequence read per step, in element operations: about a libm call.
#: 16 and 32 both refuse the GARCH push-outs measured in issue 48 (11 reads added for 28
#: arithmetic operations saved); 16 keeps the push-out of one ``exp(x) * 2`` row, which
#: PyTensor's ``scan_push_out_seq`` makes (its tests expect it).
READ_COST = 16

#: The cost of a scalar operation that is not plain arithmetic (a libm call: about 10-20 ns against 1).
CALL_COST = 16

#: Scalar operations that cost 1: arithmetic, comparisons, casts, selections.
CHEAP = (
    ps.Add, ps.Sub, ps.Mul, ps.Neg, ps.Sqr, ps.Abs, ps.Identity, ps.Cast, ps.Maximum, ps.Minimum, ps.Switch,
    ps.LT, ps.GT, ps.LE, ps.GE, ps.EQ, ps.NEQ, ps.AND, ps.OR, ps.Second, ps.TrueDiv, ps.Sign,
)


def _scalar_cost(scalar_op: ps.ScalarOp) -> int:
    """The cost of one application of ``scalar_op`` to one element."""
    if isinstance(scalar_op, Composite):
        return sum(_scalar_cost(n.op) for n in scalar_op.fgraph.apply_nodes)
    return 1 if isinstance(scalar_op, CHEAP) else CALL_COST


def _elements(var: Variable) -> int | None:
    """The elements of ``var`` when its static shape is known, else None."""
    shape = getattr(var.type, "shape", None)
    if shape is None or any(d is None for d in shape):
        return None
    return prod(shape)


def moved_work(targets: Sequence[Variable], stop: Collection[Variable]) -> int | None:
    """The element operations per step of the row-wise nodes computing ``targets`` (walk stops at ``stop``); None if a size is unknown."""
    total = 0
    for node in scope_toposort(list(targets), stop=stop):
        if not isinstance(node.op, Elemwise):
            continue  # a DimShuffle is a view
        elements = _elements(node.outputs[0])
        if elements is None:
            return None
        total += _scalar_cost(node.op.scalar_op) * elements
    return total


def read_cost(rows: Sequence[Variable]) -> int | None:
    """The element operations per step of reading one row of each of ``rows`` (None if a size is unknown)."""
    total = 0
    for row in rows:
        elements = _elements(row)
        if elements is None:
            return None
        total += READ_COST + elements
    return total


def pays(targets: Sequence[Variable], stop: Collection[Variable], dropped: Sequence[Variable]) -> bool:
    """Whether making ``targets`` sequences (and no longer reading the rows ``dropped``) saves work per step."""
    saved, added, removed = moved_work(targets, stop), read_cost(targets), read_cost(dropped)
    if saved is None or added is None or removed is None:
        return True  # rows of unknown size: taken as large
    return saved + removed >= added
