"""The type of a function variable, and the value such a variable holds at run time.

Terms
-----
signature
    The param types and the output types of a body, ``(t0, t1) -> (u0,)``.
function variable
    A variable of `InnerGraphType`. Before linking it is the output of an
    inner-graph node; when the graph is prepared for linking it is *folded* into a
    `Constant` whose data is a `Body`.
Body
    The run-time value of a function variable: its signature and its output
    variables, written over the params ``NominalVariable(i, param_types[i])``.
    A `Body` compares by identity, so two consumers share a compiled body exactly
    when they read the same function variable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Variable
from pytensor.graph.type import Type

__all__ = ["Body", "InnerGraphType"]


class InnerGraphType(Type["Body"]):
    """The type of a function: ``param_types -> output_types``.

    Parameters
    ----------
    param_types
        The types of the body's params, in id order.
    output_types
        The types of the body's outputs.
    """

    __props__ = ("param_types", "output_types")

    def __init__(self, param_types: Sequence[Type], output_types: Sequence[Type]):
        self.param_types = tuple(param_types)
        self.output_types = tuple(output_types)

    def filter(self, data: Any, strict: bool = False, allow_downcast: bool | None = None) -> Body:
        if isinstance(data, Body) and data.type == self:
            return data
        raise TypeError(f"{self} expects a Body of the same signature, got {data!r}")

    def is_super(self, otype: Type) -> bool | None:
        return self == otype

    def __str__(self) -> str:
        params = ", ".join(str(t) for t in self.param_types)
        outputs = ", ".join(str(t) for t in self.output_types)
        return f"({params}) -> ({outputs})"

    def __repr__(self) -> str:
        return f"InnerGraphType{self}"


class Body:
    """The run-time value of a function variable.

    Parameters
    ----------
    type
        The signature. Its output types may be broader than the outputs' own types
        when rewrites refined a body output (a more specific static shape).
    outputs
        The body's output variables, written over ``NominalVariable(i, t)`` params.

    Notes
    -----
    Consumers cache what they compile from a body on the `Body` itself (see
    `innergraph.ops.runtime`), so bodies that merged compile once. The caches are
    not pickled.
    """

    def __init__(self, type: InnerGraphType, outputs: Sequence[Variable]):
        self.type = type
        self.outputs = tuple(outputs)
        self.cache: dict[Any, Any] = {}

    @property
    def param_types(self) -> tuple[Type, ...]:
        return self.type.param_types

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle through the canonical encoding: deterministic bytes (PyTensor keys
        # its on-disk Numba cache with them), no names, tags or caches.
        from innergraph.canonical import decode, encode

        return (decode, (encode(self),))

    def __str__(self) -> str:
        n, m = len(self.type.param_types), len(self.type.output_types)
        return f"Body({n}->{m})"

    __repr__ = __str__
