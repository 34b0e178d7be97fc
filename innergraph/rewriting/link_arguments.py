"""Before fusion, under Numba: the float constants of a function's graph become link arguments.

Terms
-----
link argument
    `innergraph.ops.link_argument.LinkArgument` applied to a constant: a value the
    rewrites after it do not see, which the Numba linker passes to the compiled
    function as an argument (`innergraph.backends.numba_link`).

Why here
--------
PyTensor's fusion (``elemwise_fusion``, position 49) copies the numbers an
elementwise graph reads into the fused scalar code, so a prior's scale ends up in
``Composite{(-11.11 * sqr(i0))}`` and in Numba's cache key for it. At 48.95 every
rewrite that decides something from a constant's value has run (canonicalize,
stabilize, specialize: ``x ** 2`` is ``sqr(x)`` by now, ``x * 1`` is gone), so
hiding the values from what follows changes no decision; only the function's own
graph is rewritten (a loop's body keeps its numbers: its code is compiled as a
unit and does not change when a prior does).

Which constants: those `innergraph.backends.numba_link.outlinable` accepts (a
floating-point dtype, by type and never by value) that an elementwise node reads.
Integer and boolean constants (indices, shapes, axes) stay visible.

How: a single number (a tensor of static shape ``(1, ..., 1)`` or ``()``) becomes
``tensor_from_scalar(LinkArgument(scalar))``, dimshuffled to its shape, so that fusion and
PyTensor's scalarize pass (3.3) hand it to the fused loop as a native scalar argument,
which the Numba linker reads from its dtype's pool with one `PoolRead`. As a broadcast
array input of the fused loop instead, every number cost the loop an input (its
broadcasting checks, its strides) and the outer function three nodes (a slice, a
dimshuffle, a conversion): on the grouped model at K = 8 (42 numbers) the scalar form
saves about 5% of the cold start (design/benchmarks.md, "Scalar link arguments"). A
larger constant is wrapped as it is.

Which graphs: those with a loop (`has_loop`). Reading a number from an argument costs
a little on every call (about 1 us on a 12 us loop-free PyMC model, the eight schools);
a loop-free model recompiles in about a second when edited, a model with loops in 15-100
s. So a graph without a loop is compiled as vanilla compiles it, numbers in its code.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar.basic import ScalarConstant, ScalarType
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.basic import tensor_from_scalar
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorVariable

from innergraph.core.dispatch import compiling_for_numba
from innergraph.ops.link_argument import LinkArgument

__all__ = ["has_loop", "is_function_graph", "link_float_constants", "outlinable_dtype"]


def outlinable_dtype(dtype: str) -> bool:
    """Whether a constant of ``dtype`` is passed by value (floating-point and complex dtypes)."""
    return dtype.startswith(("float", "complex"))


def is_function_graph(fgraph: FunctionGraph) -> bool:
    """Whether ``fgraph`` is the graph of a function being compiled, not a loop's body (its ``update_mapping`` is set)."""
    return getattr(fgraph, "update_mapping", None) is not None


def has_loop(fgraph: FunctionGraph) -> bool:
    """Whether ``fgraph`` runs a loop: PyTensor's Scan, or a consumer of innergraph's that iterates."""
    return any(isinstance(n.op, NativeScan) or getattr(type(n.op), "kind", None) in _LOOP_KINDS for n in fgraph.apply_nodes)


_LOOP_KINDS = ("scan", "loop")


def _argument(use: int, constant: Constant) -> Variable:
    """The link argument standing for ``constant`` at its ``use``: for a single number, a scalar made a tensor (module docstring)."""
    ttype = constant.type
    if isinstance(ttype, TensorType) and all(ttype.broadcastable):
        number = ScalarConstant(ScalarType(ttype.dtype), np.asarray(constant.data).reshape(()))
        scalar = LinkArgument(use).make_node(number).outputs[0]
        tensor: TensorVariable = cast(TensorVariable, tensor_from_scalar(scalar))
        return tensor.dimshuffle(["x"] * ttype.ndim) if ttype.ndim else tensor
    return LinkArgument(use).make_node(constant).outputs[0]


def link_float_constants(fgraph: FunctionGraph) -> int:
    """Wrap each use of a float constant an elementwise node of ``fgraph`` reads in a `LinkArgument`; the number of uses.

    Only under the Numba linker, on a function's own graph, with a loop (module docstring).
    Every use of such a constant (by any node) gets its own `LinkArgument`, numbered in the
    graph's order: whether two numbers of a model are equal (and so one merged constant)
    must not change the compiled code.
    """
    if not is_function_graph(fgraph) or not compiling_for_numba(fgraph) or not has_loop(fgraph):
        return 0
    outputs = set(fgraph.outputs)
    order = fgraph.toposort()
    position = {node: k for k, node in enumerate(order)}
    found: list[Constant] = []
    for node in order:
        if not isinstance(node.op, Elemwise):
            continue
        for inp in node.inputs:
            if (
                isinstance(inp, Constant)
                and outlinable_dtype(getattr(inp.type, "dtype", ""))
                and inp not in outputs
                and not any(inp is f for f in found)
            ):
                found.append(inp)
    uses = sorted(
        ((position[node], i, constant) for constant in found for node, i in fgraph.clients[constant]
         if not isinstance(getattr(node, "op", None), LinkArgument)),
        key=lambda use: use[:2],
    )
    for use, (at, i, constant) in enumerate(uses):
        fgraph.change_node_input(order[at], i, _argument(use, constant), reason="innergraph_link_arguments")
    return len(uses)
