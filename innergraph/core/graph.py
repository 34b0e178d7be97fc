"""Params, inner-graph nodes, and scope-aware walks over bodies.

Terms
-----
param
    ``NominalVariable(i, t)``: the i-th parameter of a body. PyTensor interns them,
    so the same ``(i, t)`` is the same object in every body; scope comes from the
    walk, never from the object.
body
    The ordinary Apply nodes that compute a function's outputs from its params.
inner-graph node
    An Apply node of `InnerGraph`: its inputs are the body outputs, its single
    output is the function variable (of `InnerGraphType`).
function variable
    A variable of `InnerGraphType`: an inner-graph node's output, or the `Constant`
    it is folded into before linking.
scope
    The nodes of one body: those reached from its outputs without entering a
    nested function variable. Nested bodies are closed, so a walk that stops at
    function variables sees exactly one scope (design brief, invariant 2).
"""

from __future__ import annotations

import innergraph_pickle

from collections.abc import Collection, Sequence
from typing import Any
from weakref import WeakKeyDictionary

from pytensor.graph.basic import Apply, Constant, NominalVariable, Variable
from pytensor.graph.op import Op
from pytensor.graph.type import Type
from pytensor.scalar.basic import Composite

from innergraph.core.errors import BodyTypeError, FreeVariableError, ParamError
from innergraph.core.types import Body, InnerGraphType

__all__ = [
    "InnerGraph",
    "body_nodes",
    "body_of",
    "body_ops",
    "is_function",
    "param",
    "params",
    "scope_leaves",
    "scope_toposort",
    "used_params",
]


def param(i: int, type: Type) -> NominalVariable:
    """The i-th param of a body, of the given type.

    Never pass a name: PyTensor interns params, so naming one renames it in every
    body that uses it.
    """
    return NominalVariable(i, type)


def params(types: Sequence[Type]) -> list[NominalVariable]:
    """The params ``0..n-1`` of a body with these param types."""
    return [param(i, t) for i, t in enumerate(types)]


def is_function(var: Variable) -> bool:
    """Whether ``var`` is a function variable (unfolded or folded)."""
    return isinstance(var.type, InnerGraphType)


def body_of(function: Variable | Body) -> Body:
    """The `Body` a function variable stands for, folded or not.

    For an unfolded variable the result is a view of the inner-graph node's current
    inputs. It is memoized per node while those inputs stay the same, so what
    consumers cache on the `Body` (a compiled or native form) survives until a
    rewrite changes the body — and, through folding, into the compiled function.
    """
    if isinstance(function, Body):
        return function
    if not is_function(function):
        raise TypeError(f"{function} of type {function.type} is not a function variable")
    if isinstance(function, Constant):
        return function.data
    node = function.owner
    if node is None or not isinstance(node.op, InnerGraph):
        raise TypeError(
            f"Function variable {function} is neither an inner-graph node's output nor a "
            "folded constant; functions cannot be free inputs of a graph"
        )
    body = _views.get(node)
    if body is None or len(body.outputs) != len(node.inputs) or any(
        a is not b for a, b in zip(body.outputs, node.inputs)
    ):
        body = _views[node] = Body(node.op.function_type, node.inputs)
    return body


_views: WeakKeyDictionary[Apply, Body] = WeakKeyDictionary()


def _children(var: Variable, stop: Collection[Variable]) -> Sequence[Variable]:
    node = var.owner
    if node is None or isinstance(node.op, InnerGraph) or var in stop:
        return ()
    return node.inputs


def scope_toposort(outputs: Sequence[Variable], stop: Collection[Variable] = ()) -> list[Apply]:
    """The nodes of one scope, inputs before users.

    The walk stops at leaves (variables without an owner), at function variables
    (a nested body belongs to its own scope) and at the variables in ``stop``.
    """
    order: list[Apply] = []
    seen: set[Any] = set()
    stack: list[tuple[Variable, bool]] = [(o, False) for o in reversed(outputs)]
    while stack:
        var, expanded = stack.pop()
        if expanded:
            node = var.owner
            assert node is not None
            if node not in seen:
                seen.add(node)
                order.append(node)
            continue
        if var in seen:
            continue
        seen.add(var)
        children = _children(var, stop)
        if children:
            stack.append((var, True))
            stack.extend((c, False) for c in reversed(children) if c not in seen)
    return order


def body_nodes(function: Variable | Body, *, nested: bool = False) -> list[Apply]:
    """The nodes of a body, inputs before users: for structural assertions in tests.

    Parameters
    ----------
    function
        A function variable (folded or not) or a `Body`.
    nested
        Also list the nodes of the bodies its nodes take as inputs (a scan or a
        conditional inside the body), each nested body's nodes before the node that
        takes it, recursively. By default only the body's own scope.
    """
    found: list[Apply] = []
    for node in scope_toposort(body_of(function).outputs):
        if nested:
            for inp in node.inputs:
                if is_function(inp):
                    found += body_nodes(inp, nested=True)
        found.append(node)
    return found


def body_ops(function: Variable | Body, *, nested: bool = False) -> list[Op]:
    """The Op of each of `body_nodes`, an ``Elemwise`` given as its scalar Op (``Cosh``, ``Add``).

    The form a structural assertion names: ``not any(isinstance(op, ps.Cosh) for op in
    body_ops(fn))`` says the body computes no ``cosh``. A fused ``Composite`` is given as
    the scalar Ops it computes, so the assertion holds whether or not fusion ran.
    """
    found: list[Op] = []
    for node in body_nodes(function, nested=nested):
        op = getattr(node.op, "scalar_op", node.op)
        found += [n.op for n in op.fgraph.toposort()] if isinstance(op, Composite) else [op]
    return found


def scope_leaves(outputs: Sequence[Variable], stop: Collection[Variable] = ()) -> list[Variable]:
    """The leaves of one scope: ownerless variables, nested function variables, ``stop``."""
    leaves: list[Variable] = []
    seen: set[Variable] = set()
    stack = list(reversed(outputs))
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        children = _children(var, stop)
        if children:
            stack.extend(reversed(children))
        else:
            leaves.append(var)
    return leaves


def used_params(body: Body) -> set[int]:
    """The ids of the params a body reads (nested bodies excluded: they are closed)."""
    return {v.id for v in scope_leaves(body.outputs) if isinstance(v, NominalVariable)}


def verify_closed(function_type: InnerGraphType, outputs: Sequence[Variable]) -> None:
    """Check that ``outputs`` form a closed body of ``function_type``.

    Raises
    ------
    FreeVariableError
        A leaf is neither a param, a constant nor a nested function variable.
    ParamError
        A param's id is out of range, or it is used with another type than the
        signature declares.
    BodyTypeError
        An output does not fit the declared output type, or is itself a function.
    """
    param_types = function_type.param_types
    for i, t in enumerate(param_types):
        if isinstance(t, InnerGraphType):
            raise BodyTypeError(f"Param {i} is a function ({t}): higher-order bodies are not supported")
    for k, (out, declared) in enumerate(zip(outputs, function_type.output_types, strict=True)):
        if not isinstance(out, Variable):
            raise BodyTypeError(f"Body output {k} is {out!r}, not a PyTensor Variable")
        if is_function(out):
            raise BodyTypeError(
                f"Body output {k} ({out}) is a function: higher-order bodies are not supported"
            )
        if not declared.is_super(out.type):
            raise BodyTypeError(
                f"Body output {k} ({out}) has type {out.type}, which does not fit the "
                f"declared output type {declared}"
            )
    for leaf in scope_leaves(outputs):
        _verify_leaf(leaf, param_types, outputs)


def _verify_leaf(leaf: Variable, param_types: tuple[Type, ...], outputs: Sequence[Variable]) -> None:
    if isinstance(leaf, NominalVariable):
        if not isinstance(leaf.id, int) or not 0 <= leaf.id < len(param_types):
            raise ParamError(
                f"Param {leaf!r} is out of range: the body declares {len(param_types)} "
                f"params (ids 0..{len(param_types) - 1})"
            )
        if leaf.type != param_types[leaf.id]:
            raise ParamError(
                f"Param {leaf.id} is used with type {leaf.type}, but the body declares "
                f"{param_types[leaf.id]} (id collision between two params?)"
            )
        return
    if isinstance(leaf, Constant) or is_function(leaf):
        return
    raise FreeVariableError(
        f"The body of outputs {list(outputs)} reads the free variable {leaf!r} "
        f"(type {leaf.type}); pass it as an argument, or build the body with "
        "innergraph.inner_graph, which captures it"
    )


class InnerGraph(Op):
    """Turn a body into a function variable.

    The node's inputs are the body outputs; its one output is a variable of
    `InnerGraphType`. The node never runs: before linking it is folded into a
    `Constant` holding a `Body` (see `innergraph.core.fold`).

    Parameters
    ----------
    function_type
        The signature the body implements.
    """

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph

    __props__ = ("function_type",)

    def __init__(self, function_type: InnerGraphType):
        self.function_type = function_type

    def make_node(self, *outputs: Any) -> Apply:
        if len(outputs) != len(self.function_type.output_types):
            raise BodyTypeError(
                f"{self} declares {len(self.function_type.output_types)} outputs, "
                f"got {len(outputs)}"
            )
        verify_closed(self.function_type, outputs)
        return Apply(self, list(outputs), [self.function_type()])

    def do_constant_folding(self, fgraph: Any, node: Apply) -> bool:
        return False

    def perform(self, node: Apply, inputs: Any, output_storage: Any) -> None:
        raise RuntimeError(
            f"{self} was scheduled for execution; inner-graph nodes are folded into "
            "constants before linking (is innergraph installed?)"
        )

    def __str__(self) -> str:
        return f"InnerGraph{self.function_type}"
