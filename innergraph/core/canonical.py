"""A canonical, deterministic encoding of closed bodies.

A closed body is canonical up to the order of its nodes: its leaves are params
(identified by position), constants (identified by type and value) and nested
bodies (themselves closed). Encoding the nodes of one scope in a deterministic
topological order, each input as a reference — ``("p", i)`` a param,
``("c", signature)`` a constant (PyTensor's hashable ``(type, data)``), ``("n", k, j)`` output j of the k-th node,
``("f", encoding)`` a nested body — gives a value that

* is equal, and hashes equal, for alpha-equivalent bodies (names, auto-names and
  tags are left out) — `Body` equality is defined by it,
* pickles to the same bytes in every process, so it can key PyTensor's on-disk
  Numba cache, and
* can be decoded back into a `Body`: `Body` pickles through it.

Computing it is linear in the size of the body (nested bodies included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytensor.graph.basic import Apply, Constant, NominalVariable, Variable

from innergraph.core.graph import body_of, is_function, param, scope_toposort
from innergraph.core.types import Body, InnerGraphType, register_encoding

__all__ = ["Encoding", "decode", "encode", "template"]

Encoding = tuple[Any, ...]


def encode(body: Body) -> Encoding:
    """The canonical encoding of ``body`` (see the module docstring)."""
    return _encode(body, None)


def template(body: Body, hole_key: Callable[[Constant], Any]) -> tuple[Encoding, tuple[Constant, ...]]:
    """``body``'s encoding with holes at some constants, and the constant of each hole.

    ``hole_key(constant)`` is None for a constant that stays in the encoding, else
    a hashable key: constants with equal keys are one hole. Hole ``i`` (numbered
    in first-use order) is encoded as ``("k", i, type)``. Bodies with equal
    templates differ at most in their hole constants: they are the same function
    of their params and those constants. Constants of nested bodies are never holes.
    """
    holes: dict[Any, tuple[int, Constant]] = {}  # hole key -> (its number, the first constant with it)

    def hole(const: Constant) -> tuple[Any, ...] | None:
        key = hole_key(const)
        if key is None:
            return None
        number, _ = holes.setdefault(key, (len(holes), const))
        return ("k", number, const.type)

    return _encode(body, hole), tuple(const for _, const in holes.values())


def _encode(body: Body, hole: Callable[[Constant], tuple[Any, ...] | None] | None) -> Encoding:
    nodes = scope_toposort(body.outputs)
    where: dict[Variable, tuple[int, int]] = {
        out: (k, j) for k, node in enumerate(nodes) for j, out in enumerate(node.outputs)
    }

    def ref(var: Variable) -> tuple[Any, ...]:
        if var in where:
            return ("n", *where[var])
        if isinstance(var, NominalVariable):
            return ("p", var.id)
        if is_function(var):
            return ("f", encode(body_of(var)))
        if isinstance(var, Constant):
            return (hole and hole(var)) or ("c", var.signature())
        raise ValueError(f"{var} is not a leaf of a closed body")

    encoded_nodes = tuple(
        (node.op, tuple(ref(v) for v in node.inputs), tuple(o.type for o in node.outputs))
        for node in nodes
    )
    return (body.type, encoded_nodes, tuple(ref(o) for o in body.outputs))


def decode(encoding: Encoding) -> Body:
    """Rebuild a `Body` from its canonical encoding."""
    function_type, encoded_nodes, output_refs = encoding
    built: list[Apply] = []

    def var(ref: Sequence[Any]) -> Variable:
        tag = ref[0]
        if tag == "n":
            return built[ref[1]].outputs[ref[2]]
        if tag == "p":
            return param(ref[1], function_type.param_types[ref[1]])
        if tag == "f":
            nested = decode(ref[1])
            return Constant(nested.type, nested)
        signature = ref[1]  # "c": PyTensor's (type, data) signature of a constant
        return signature[0].make_constant(signature[1])

    for op, input_refs, output_types in encoded_nodes:
        built.append(Apply(op, [var(r) for r in input_refs], [t() for t in output_types]))
    assert isinstance(function_type, InnerGraphType)
    return Body(function_type, [var(r) for r in output_refs])


register_encoding(encode)
