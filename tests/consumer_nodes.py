"""Consumer nodes built directly from explicit bodies, for the direct tests of the protocol and the rewrites.

`function` makes a body's function variable, `call_node` and `ifelse_node` the consumers of
one or two bodies; `K` is the conditional's condition; `evaluate` runs a graph as it stands (`PY`).
"""

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytensor

import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Variable

from innergraph.core.fold import fold_function
from innergraph.core.graph import InnerGraph
from innergraph.core.types import InnerGraphType
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse

#: The condition of `ifelse_node`'s conditionals.
K: Any = pt.lscalar("k")

#: The py linker without rewrites: a graph's values as it stands.
PY = Mode(linker="py", optimizer="None")


def evaluate(inputs: Sequence[Variable], outputs: Sequence[Variable], values: Sequence[Any]) -> list[np.ndarray]:
    """``outputs`` on ``values``, by the py linker without rewrites."""
    fn = pytensor.function(list(inputs), list(outputs), mode=PY, on_unused_input="ignore")
    return [np.asarray(v) for v in cast(list[Any], fn(*values))]


def function(outputs: Sequence[Any], types: Sequence[Any], fold: bool = True) -> Variable:
    """The function variable of a body of ``types`` computing ``outputs`` (folded unless not ``fold``)."""
    fn = InnerGraph(InnerGraphType(list(types), [o.type for o in outputs])).make_node(*outputs).outputs[0]
    return fold_function(fn) if fold else fn


def call_node(outputs: Sequence[Any], arguments: Sequence[Any], fold: bool = True) -> Any:
    """A call of the body computing ``outputs`` from params typed like ``arguments``."""
    return Call().make_node(function(outputs, [a.type for a in arguments], fold), *arguments)


def ifelse_node(then_outputs: Sequence[Any], then_args: Sequence[Any], else_outputs: Sequence[Any], else_args: Sequence[Any]) -> Apply:
    """A conditional on `K` of two bodies, each with its own arguments."""
    then_fn = function(then_outputs, [a.type for a in then_args])
    else_fn = function(else_outputs, [a.type for a in else_args])
    return IfElse(len(then_args)).make_node(K, then_fn, else_fn, *then_args, *else_args)
