"""Scope-aware instantiation: substitute a body's params by values.

Invariant 2 of the design: substituting params must stop at nested function
variables. A nested body's ``NominalVariable(0, t)`` is *its* param, even when it
is the very object the enclosing body uses for its own param 0 (PyTensor interns
params). Because nested bodies are closed, a nested function variable is simply
reused as it is in the instantiated graph.

Never use `pytensor.clone_replace` over a graph that contains nested bodies: it
would rewrite the nested params too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeGuard

import numpy as np
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.traversal import ancestors
from pytensor.tensor.variable import TensorConstant

from innergraph.core import compat
from innergraph.core.errors import ArityError, BodyTypeError
from innergraph.core.graph import body_of, params, scope_toposort
from innergraph.core.types import Body

__all__ = [
    "LARGE_CONSTANT",
    "NodeTable",
    "body_output_shapes",
    "carried_shapes",
    "copy_scope",
    "fit_arguments",
    "instantiate",
    "is_large_constant",
    "is_small_tensor_constant",
    "private_fgraph",
    "same_shape",
    "small_constant_key",
    "step_output_shapes",
    "substitute",
    "substitute_shapes",
]


def substitute(outputs: Sequence[Variable], replace: Mapping[Variable, Variable]) -> list[Variable]:
    """Rebuild ``outputs`` with ``replace`` applied within one scope.

    Nodes that read no replaced variable are kept as they are (not copied), so
    the result shares every untouched subgraph with the original; nothing the
    caller built is mutated.
    """
    memo: dict[Variable, Variable] = dict(replace)
    for node in scope_toposort(outputs, stop=replace.keys()):
        new_inputs = [memo.get(v, v) for v in node.inputs]
        if all(a is b for a, b in zip(new_inputs, node.inputs, strict=True)):
            continue
        new_node = node.clone_with_new_inputs(new_inputs, strict=True)
        memo.update(zip(node.outputs, new_node.outputs, strict=True))
    return [memo.get(o, o) for o in outputs]


#: Tensor constants with more elements than this are large: `NodeTable` never
#: compares them by value, and call and branch bodies receive them as arguments
#: rather than inlined (`innergraph.rewriting.args`): compiled bodies would hold
#: them as globals, which defeats Numba's disk cache.
LARGE_CONSTANT = 64


def is_large_constant(value: Any) -> TypeGuard[Constant]:
    """Whether ``value`` is a constant with more than `LARGE_CONSTANT` elements."""
    return isinstance(value, Constant) and np.size(value.data) > LARGE_CONSTANT


def is_small_tensor_constant(value: Any) -> TypeGuard[TensorConstant]:
    """Whether ``value`` is a tensor constant of at most `LARGE_CONSTANT` elements (compared by `small_constant_key`)."""
    return isinstance(value, TensorConstant) and not is_large_constant(value)


def small_constant_key(c: Constant) -> Any:
    """A small constant by its type and bytes.

    Cheaper than its signature, which sums the data through a masked array every
    time one is made. Equal values with different bytes (``0.0`` and ``-0.0``)
    count as different: they are never confused, at worst not shared.
    """
    data = np.asarray(c.data)
    return (c.type, data.dtype.str, data.shape, data.tobytes())


class NodeTable:
    """The nodes and small constants of a graph by what they compute, for `copy_scope` to reuse.

    Two nodes compute the same when their Ops are equal and they read the very same
    variables, which is when `MergeOptimizer` would merge them; two small tensor
    constants when their `small_constant_key` is equal. A copy made through a table
    therefore reuses what ``fgraph`` and earlier copies already hold instead of
    creating duplicates for a merge to remove after they were imported.

    Parameters
    ----------
    fgraph
        The graph whose nodes and constants may be reused, or None.
    """

    def __init__(self, fgraph: FunctionGraph | None = None):
        self._fgraph = fgraph
        self._nodes: dict[tuple[Any, ...], Apply] = {}
        self._constants: dict[Any, Constant] | None = None

    def constant(self, c: Constant) -> Constant:
        """The first constant seen equal to ``c`` (``c`` itself if it is the first, or not small)."""
        if not is_small_tensor_constant(c):
            return c
        if self._constants is None:
            self._constants = {}
            # in the order they entered the graph (``fgraph.variables`` is a set: its order follows ids)
            for v, uses in self._fgraph.clients.items() if self._fgraph is not None else ():
                if uses and is_small_tensor_constant(v):
                    self._constants.setdefault(small_constant_key(v), v)
        return self._constants.setdefault(small_constant_key(c), c)

    def node(
        self, op: Op, inputs: Sequence[Variable], make: Callable[[], Apply], output_types: Sequence[Any] | None = None
    ) -> Apply:
        """The node of the table or of the graph that applies ``op`` to exactly ``inputs``, else ``make()``, recorded.

        A found node counts only if its outputs have ``output_types`` (when given).
        """
        key = (op, *inputs)
        found = self._nodes.get(key)
        if found is None:
            found = self._in_graph(op, inputs)
        if found is None or (output_types is not None and [o.type for o in found.outputs] != list(output_types)):
            found = make()
        self._nodes.setdefault(key, found)
        return found

    def _in_graph(self, op: Op, inputs: Sequence[Variable]) -> Apply | None:
        if self._fgraph is None or not inputs:
            return None
        clients = self._fgraph.clients
        fewest = None
        for v in inputs:
            uses = clients.get(v)
            if uses is None:  # a new variable: no node of the graph reads it
                return None
            if fewest is None or len(uses) < len(fewest):
                fewest = uses
        for client, _ in fewest or ():
            if client.op == op and len(client.inputs) == len(inputs) and all(
                a is b for a, b in zip(client.inputs, inputs, strict=True)
            ):
                return client
        return None


def copy_scope(
    outputs: Sequence[Variable], leaves: Mapping[Variable, Variable] | None = None, table: NodeTable | None = None
) -> list[Variable]:
    """A private copy of one scope's nodes (leaves and nested functions shared).

    ``leaves`` maps leaves (params, say) to what the copy reads instead: unlike
    `substitute`, every node is copied, also those that read no replaced leaf.
    With a ``table``, a node is copied only when the table holds no node that
    computes the same (`NodeTable`), and small constants are shared with it.
    """
    memo: dict[Variable, Variable] = dict(leaves or {})
    for node in scope_toposort(outputs):
        inputs = [memo.get(v, v) for v in node.inputs]
        if table is None:
            new = node.clone_with_new_inputs(inputs, strict=True)
        else:
            inputs = [table.constant(v) if isinstance(v, Constant) else v for v in inputs]
            make = partial(node.clone_with_new_inputs, inputs, strict=True)
            new = table.node(node.op, inputs, make, [o.type for o in node.outputs])
        memo.update(zip(node.outputs, new.outputs, strict=True))
    return [memo.get(o, o) for o in outputs]


def private_fgraph(body: Body) -> FunctionGraph:
    """``body`` as a `FunctionGraph` over fresh inputs (one per param) and a private copy of every node.

    Rewriting the graph in place leaves the body as it is.
    """
    inputs = [t(name=f"p{i}") for i, t in enumerate(body.param_types)]
    return FunctionGraph(inputs, copy_scope(body.outputs, dict(zip(params(body.param_types), inputs))), clone=False)


def fit_arguments(function_type_params: Sequence, args: Sequence, *, where: str) -> list[Variable]:
    """Check arity and convert each argument to its param type.

    Raises
    ------
    ArityError
        Wrong number of arguments.
    BodyTypeError
        An argument cannot be converted to its param's type; the message names the
        argument and its position.
    """
    from pytensor.tensor import as_tensor_variable

    if len(args) != len(function_type_params):
        raise ArityError(
            f"{where}: the function takes {len(function_type_params)} arguments "
            f"({', '.join(map(str, function_type_params))}), got {len(args)}"
        )
    fitted = []
    for i, (arg, t) in enumerate(zip(args, function_type_params, strict=True)):
        if not isinstance(arg, Variable):
            arg = as_tensor_variable(arg)
        try:
            fitted.append(t.filter_variable(arg))
        except TypeError as err:
            raise BodyTypeError(
                f"{where}: argument {i} ({arg}) has type {arg.type}, but param {i} "
                f"has type {t}"
            ) from err
    return fitted


def instantiate(function: Variable | Body, args: Sequence[Variable]) -> list[Variable]:
    """The outputs of ``function`` applied to ``args``, as an ordinary graph.

    Parameters
    ----------
    function
        A function variable (unfolded or folded) or a `Body`.
    args
        One variable per param, of the param's type (or one that fits it).

    Returns
    -------
    list of Variable
        The body outputs with every param of this scope replaced by its argument.
    """
    body = body_of(function)
    fitted = fit_arguments(body.param_types, list(args), where="instantiate")
    return substitute(body.outputs, dict(zip(params(body.param_types), fitted, strict=True)))


def substitute_shapes(shapes: Sequence[Any], replace: Mapping[Variable, Variable]) -> list[Any]:
    """`substitute` over a list of shape tuples (``None`` for non-tensor outputs)."""
    flat = iter(substitute([s for shape in shapes if shape is not None for s in shape], replace))
    return [None if shape is None else tuple(next(flat) for _ in shape) for shape in shapes]


def body_output_shapes(function: Variable | Body, args: Sequence[Variable], arg_shapes: Sequence[Any]) -> list[Any]:
    """The shapes of ``function``'s outputs applied to ``args``, without running it.

    `step_output_shapes` with every param bound to an argument.
    """
    return step_output_shapes(function, args, arg_shapes)


def step_output_shapes(
    function: Variable | Body, args: Sequence[Variable | None], arg_shapes: Sequence[Any]
) -> list[tuple[Any, ...] | None]:
    """The shapes of ``function``'s outputs applied to ``args`` (for one step of a loop), without running it.

    Outputs whose type fixes every dimension get those numbers; the body's own shape
    graph is only built when some output has a dimension its type leaves open. A
    param may have no outer equivalent (``args[i]`` is ``None``: a sequence row or
    a state, whose value changes every step). A dimension computed from the
    *value* of such a param cannot be expressed outside the loop and comes back as
    ``None``; dimensions computed from its shape are expressed with ``arg_shapes``.
    Outputs that are not tensors are ``None``.
    """
    body = body_of(function)
    static = [_static_shape(t) for t in body.type.output_types]
    if all(shape is not None for shape in static):
        return list(static)
    dummies, template, replace = _shapes_over(body, arg_shapes)
    replace.update((d, a) for d, a in zip(dummies, args, strict=True) if a is not None)
    per_step = {d for d, a in zip(dummies, args, strict=True) if a is None}
    flat = [dim for shape in template if shape is not None for dim in shape]
    substituted = iter(substitute(flat, replace))
    shapes: list[tuple[Any, ...] | None] = []
    for known, shape in zip(static, template, strict=True):
        if shape is None:
            shapes.append(None)
            continue
        dims = [next(substituted) for _ in shape]
        if known is not None:
            shapes.append(known)
            continue
        shapes.append(tuple(None if per_step and per_step.intersection(ancestors([d])) else d for d in dims))
    return shapes


def carried_shapes(
    function: Variable | Body, args: Sequence[Variable | None], arg_shapes: Sequence[Any], carried: Sequence[int]
) -> list[tuple[Any, ...]]:
    """The shapes of a loop's carried values, for its ``infer_shape``, when its step provably keeps them.

    Output ``k`` of the step ``function`` is the next value of the carried param
    ``carried[k]``, whose argument is ``None`` (it changes every step) and whose shape
    in ``arg_shapes`` is the initial value's. When every such output has, dimension
    by dimension, the shape of its param (`step_output_shapes`, `same_shape`), each
    carried value keeps its initial shape through every step: those are the loop's
    result shapes, known without running it.

    Raises
    ------
    NotImplementedError
        When a step may change a carried value's shape. Raised from ``infer_shape``,
        it makes PyTensor read the shape from the computed result, which is right.
    """
    steps = step_output_shapes(function, args, arg_shapes)
    result = []
    for k, i in enumerate(carried):
        if not same_shape(arg_shapes[i], steps[k]):
            raise NotImplementedError(f"the step of {function} may change the shape of carried value {k}")
        result.append(tuple(arg_shapes[i]))
    return result


def same_shape(a: Sequence[Any] | None, b: Sequence[Any] | None) -> bool:
    """Whether two symbolic shapes are provably equal, dimension by dimension (None: unknown, never equal).

    A dimension is the same when it is the same variable, an equal computation or an
    equal constant.
    """
    if a is None or b is None or len(a) != len(b):
        return False
    return all(_same_dim(x, y) for x, y in zip(a, b, strict=True))


def _same_dim(a: Any, b: Any) -> bool:
    from pytensor.graph.basic import equal_computations
    from pytensor.tensor.basic import get_scalar_constant_value
    from pytensor.tensor.exceptions import NotScalarConstantError

    if a is b:
        return True
    try:
        return int(get_scalar_constant_value(a)) == int(get_scalar_constant_value(b))
    except (NotScalarConstantError, TypeError):
        pass
    return isinstance(a, Variable) and isinstance(b, Variable) and equal_computations([a], [b])


def _shapes_over(body: Body, arg_shapes: Sequence[Any]) -> tuple[list[Variable], list[Any], dict[Variable, Variable]]:
    """The body's output shapes over placeholder params, and the dimensions to substitute.

    Returns ``(dummies, shapes, replace)``: ``shapes`` read the placeholder params
    ``dummies`` and, when every argument's shape is known, placeholder dimensions
    that ``replace`` maps to ``arg_shapes``.
    """
    dummies, dims, template = _shape_template(body)
    if any(d is not None and s is None for d, s in zip(dims, arg_shapes, strict=True)):
        # an argument's shape is unknown: its placeholders would be left free, so infer directly
        return dummies, compat.infer_output_shapes(instantiate(body, dummies), dummies, list(arg_shapes)), {}
    replace: dict[Variable, Variable] = {}
    for param_dims, arg_shape in zip(dims, arg_shapes, strict=True):
        if param_dims is not None and arg_shape is not None:
            replace.update(zip(param_dims, map(_as_dim, arg_shape), strict=True))
    return dummies, template, replace


def _shape_template(body: Body) -> tuple[list[Variable], list[list[Variable] | None], list[Any]]:
    """The body's output shapes over placeholder params and placeholder dimensions.

    Built once per body (``body.cache``): a consumer's shapes are this template with
    its arguments and their dimensions substituted, so re-importing a consumer
    (every rebuild of a rewrite) costs a substitution, not a shape inference.
    """
    from pytensor.tensor import lscalar

    cached = body.cache.get("output shape template")
    if cached is None:
        dummies = [t() for t in body.param_types]
        dims = [
            [lscalar(f"d{i}_{k}") for k in range(t.ndim)] if hasattr(t, "ndim") else None
            for i, t in enumerate(body.param_types)
        ]
        shapes = compat.infer_output_shapes(instantiate(body, dummies), dummies, dims)
        cached = body.cache["output shape template"] = (dummies, dims, shapes)
    return cached


def _as_dim(dim: Any) -> Variable:
    from pytensor.tensor import as_tensor_variable

    return dim if isinstance(dim, Variable) else as_tensor_variable(dim, dtype="int64")


def _static_shape(output_type: Any) -> tuple[int, ...] | None:
    """``output_type``'s shape when the type fixes all of it, else ``None``."""
    shape = getattr(output_type, "shape", None)
    if shape is None or any(d is None for d in shape):
        return None
    return tuple(shape)

