"""`LinkArgument`: a constant whose value the linker passes to the compiled function instead of baking it in.

Terms
-----
link argument
    The output of ``LinkArgument()(c)`` for a floating-point constant ``c``: a view of
    ``c`` that PyTensor's rewrites after it treat as a value they do not know.
    Fusion therefore reads it as an input of the fused scalar graph instead of copying
    the number into the graph's code (``Composite{(-11.11 * i0)}``), and the Numba
    linker (`innergraph.backends.numba_link`) passes its value as an argument. So a
    compiled function's code, and Numba's cache key for it, do not depend on the value:
    a model whose prior changed reuses the compiled code of the one before.

It is a view of a constant (``view_map``), so no in-place rewrite may overwrite it, and
it is never folded back into a constant. Where the linker does not pass it (a loop body,
another linker) it runs as the identity: the value is the constant's.
"""

from __future__ import annotations

from typing import Any

import innergraph_pickle
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.op import Op
from pytensor.scalar.basic import ScalarType

__all__ = ["LinkArgument", "PoolRead"]


class LinkArgument(Op):
    """The identity on a constant, opaque to the rewrites that follow (module docstring)."""

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph
    __props__ = ("use",)
    view_map = {0: [0]}

    def __init__(self, use: int = 0):
        #: Which use of a constant this is, numbered in the graph's order: two uses of one constant
        #: are two arguments, never merged, so the compiled code does not depend on which numbers
        #: happen to be equal (an edited prior's scale that equalled another prior's shared its
        #: constant, and the function's code changed with the sharing).
        self.use = use

    def make_node(self, *inputs: Variable) -> Apply:
        (value,) = inputs
        if not isinstance(value, Constant):
            raise TypeError(f"LinkArgument takes a constant, not {value!r} of type {value.type}")
        return Apply(self, [value], [value.type()])

    def perform(self, node: Apply, inputs: Any, output_storage: Any) -> None:
        output_storage[0][0] = inputs[0]

    def do_constant_folding(self, fgraph: Any, node: Apply) -> bool:
        return False


class PoolRead(Op):
    """``pool[k]`` as a scalar: how the Numba linker reads one outlined number from its dtype's pool.

    Only in the linker's private clone of a graph (`innergraph.backends.numba_link`).
    ``k`` is an input, not a property: one compiled function reads every number of a
    pool, whichever its position.
    """

    __props__ = ()

    def make_node(self, *inputs: Variable) -> Apply:
        pool, k = inputs
        return Apply(self, [pool, k], [ScalarType(pool.type.dtype)()])

    def perform(self, node: Apply, inputs: Any, output_storage: Any) -> None:
        pool, k = inputs
        output_storage[0][0] = pool.dtype.type(pool[k])
