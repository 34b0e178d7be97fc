"""The type of a function variable, and the value such a variable holds at run time.

Terms
-----
signature
    The param types and the output types of a body, ``(t0, t1) -> (u0,)``.
function variable
    A variable of `InnerGraphType`: the output of an inner-graph node (*unfolded*:
    its body is nodes of the graph, rewritable) or a `Constant` whose data is a
    `Body` (*folded*: opaque to every graph traversal).
Body
    The run-time value of a function variable: its signature and its output
    variables, written over the params ``NominalVariable(i, param_types[i])``.
    Two bodies are equal exactly when they are alpha-equivalent (their canonical
    encodings are equal), so folded functions built separately merge as constants.
    A `Body` is immutable once folded: nothing rewrites its nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.type import Type

import innergraph_pickle

__all__ = ["Body", "InnerGraphType", "is_folded", "is_rewritten", "mark_rewritten", "pickles", "register_encoding"]

_encoding: list[Callable[[Body], Any]] = []  # the canonical encoding, once registered


def register_encoding(encode: Callable[[Body], Any]) -> None:
    """Make ``encode`` the canonical encoding behind `Body.key` (and so `Body` equality).

    `innergraph.core.canonical` registers its `encode` when it loads (it reads bodies,
    so this module cannot import it); ``innergraph.core`` loads it before any body exists.
    """
    _encoding[:] = [encode]


class InnerGraphType(Type["Body"]):
    """The type of a function: ``param_types -> output_types``.

    Parameters
    ----------
    param_types
        The types of the body's params, in id order.
    output_types
        The types of the body's outputs.
    """

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph

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
    `innergraph.protocol.runtime`), so bodies that merged compile once. The caches are
    not pickled. Equality and hashing use `key`, computed once (linear in the size
    of the body); the hash is cached too.
    """

    def __init__(self, type: InnerGraphType, outputs: Sequence[Variable]):
        self.type = type
        self.outputs = tuple(outputs)
        self.cache: dict[Any, Any] = {}

    @property
    def param_types(self) -> tuple[Type, ...]:
        return self.type.param_types

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, once per body and ``key``: consumers of one body share what it made."""
        value = self.cache.get(key)
        if value is None:
            value = self.cache[key] = make()
        return value

    def key(self) -> Any:
        """The canonical encoding: equal exactly for alpha-equivalent bodies (cached)."""
        key = self.cache.get("canonical")
        if key is None:
            key = self.cache["canonical"] = _encoding[0](self)
        return key

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Body) and self.key() == other.key())

    def __hash__(self) -> int:
        value = self.cache.get("hash")
        if value is None:  # a tuple does not cache its hash, and the key holds constants' data
            value = self.cache["hash"] = hash(self.key())
        return value

    def __copy__(self) -> Body:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Body:
        # Immutable once folded, and it carries what was compiled from it: a copy
        # (DebugMode copies every input value it passes to a node) would compile anew.
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle through the canonical encoding: deterministic bytes (PyTensor keys
        # its on-disk Numba cache with them), no names, tags or caches; loaded
        # through innergraph_pickle, which does not install innergraph.
        return (innergraph_pickle.call, ("innergraph.core.canonical", "decode", self.key()))

    def __str__(self) -> str:
        n, m = len(self.type.param_types), len(self.type.output_types)
        return f"Body({n}->{m})"

    __repr__ = __str__


def pickles(op: Any) -> bool:
    """Whether ``op`` pickles: a folded body holding one that does not cannot be cached by Numba.

    PyTensor keys a constant of a Numba function by its pickle, and a folded `Body`
    is such a constant; an Op whose state holds a local function (an `OpFromGraph`
    gradient with an override, as pymc-extras' state-space models build) makes
    the whole function uncacheable, recompiled in every process (SARIMAX's NUTS
    function: first call 95x vanilla's). Vanilla PyTensor never pickles Ops, so
    such an Op keeps a graph out of a body rather than making it uncacheable.
    """
    import pickle

    try:
        pickle.dumps(op)
    except Exception:
        return False
    return True


def is_folded(var: Variable) -> TypeGuard[Constant]:
    """Whether ``var`` is a folded function: a constant whose data is a `Body`."""
    return isinstance(var, Constant) and isinstance(var.data, Body)


_REWRITTEN = "rewritten by the pipeline"  # a key of Body.cache


def mark_rewritten(body: Body) -> Body:
    """Record that the rewrite pipeline rewrote ``body`` with the outer graph."""
    body.cache[_REWRITTEN] = True
    return body


def is_rewritten(body: Body) -> bool:
    """Whether `mark_rewritten` was called on ``body``."""
    return bool(body.cache.get(_REWRITTEN, False))
