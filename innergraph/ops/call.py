"""`Call`: apply a function variable to arguments — an in-graph OpFromGraph.

Terms
-----
consumer
    An Op that takes function variables as inputs. `Call` takes one, at position
    0, followed by one argument per param.

`Call` has no props: two calls are equal, so MergeOptimizer merges two call nodes
exactly when they read the same function variable and the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytensor.graph.basic import Apply, NominalVariable, Variable
from pytensor.graph.op import Op

from innergraph import _compat
from innergraph.build import Capture, Closure, inner_graph
from innergraph.errors import BodyTypeError
from innergraph.fold import fold_function
from innergraph.graph import body_of, is_function, scope_leaves
from innergraph.instantiate import fit_arguments, instantiate, substitute
from innergraph.ops.runtime import body_value, compiled_function, linker_for, make_body_thunk

__all__ = ["Call", "call"]


@_compat.with_legacy_gradient_names
class Call(Op):
    """Apply the function at input 0 to the remaining inputs.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> from innergraph import call
    >>> x = pt.dvector("x")
    >>> y = call(lambda v: (v ** 2).sum(), x)
    >>> float(y.eval({x: [1.0, 2.0]}))
    5.0
    """

    __props__ = ()
    kind = "call"

    def make_node(self, *inputs: Any) -> Apply:
        function, *args = inputs
        if not isinstance(function, Variable) or not is_function(function):
            raise BodyTypeError(
                f"Call: input 0 ({function!r}) must be a function variable; build one "
                "with innergraph.inner_graph"
            )
        ftype = function.type
        fitted = fit_arguments(ftype.param_types, args, where=f"Call of {function}")
        return Apply(self, [function, *fitted], [t() for t in ftype.output_types])

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: Any) -> None:
        fn = compiled_function(body_value(node.inputs[0]), "py")
        for cell, value in zip(output_storage, fn(*inputs[1:]), strict=True):
            cell[0] = value

    def make_thunk(
        self,
        node: Apply,
        storage_map: Any,
        compute_map: Any,
        no_recycling: Any,
        impl: str | None = None,
    ) -> Any:
        fn = compiled_function(body_value(node.inputs[0]), linker_for(impl))
        return make_body_thunk(node, storage_map, compute_map, lambda args: fn(*args))

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        body = body_of(node.inputs[0])
        reads = [
            {v.id for v in scope_leaves([out]) if isinstance(v, NominalVariable)}
            for out in body.outputs
        ]
        rows = [[False] * len(body.outputs)]
        rows += [[i in r for r in reads] for i in range(len(body.param_types))]
        return rows

    def infer_shape(self, fgraph: Any, node: Apply, input_shapes: Sequence[Any]) -> list[Any]:
        body = body_of(node.inputs[0])
        dummies = [t() for t in body.param_types]
        shapes = _compat.infer_output_shapes(instantiate(body, dummies), dummies, input_shapes[1:])
        flat = [s for shape in shapes if shape is not None for s in shape]
        flat = substitute(flat, dict(zip(dummies, node.inputs[1:], strict=True)))
        result: list[tuple[Variable, ...] | None] = []
        used = 0
        for shape in shapes:
            if shape is None:
                result.append(None)
            else:
                result.append(tuple(flat[used : used + len(shape)]))
                used += len(shape)
        return result

    def pullback(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
    ) -> list[Variable]:
        from pytensor.gradient import DisconnectedType, disconnected_type
        from pytensor.graph.null_type import NullType

        function, *args = inputs
        body = body_of(function)
        live = [k for k, g in enumerate(cotangents) if not isinstance(g.type, DisconnectedType | NullType)]
        if not live:
            return [disconnected_type() for _ in inputs]
        xs = [t(name=f"x{i}") for i, t in enumerate(body.param_types)]
        gs = [cotangents[k].type(name=f"g{k}") for k in live]
        ys = instantiate(body, xs)
        grads = _compat.pullback([ys[k] for k in live], xs, gs)
        kept = [i for i, g in enumerate(grads) if not isinstance(g.type, DisconnectedType | NullType)]
        result: list[Variable] = [disconnected_type()]
        result += [g.type() if isinstance(g.type, NullType) else disconnected_type() for g in grads]
        if kept:
            closure = inner_graph([grads[i] for i in kept], [*xs, *gs])
            applied = call(closure, *args, *(cotangents[k] for k in live))
            for i, value in zip(kept, _as_list(applied), strict=True):
                result[1 + i] = value
        return result

    def pushforward(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]
    ) -> list[Variable]:
        from pytensor.gradient import DisconnectedType, disconnected_type

        function, *args = inputs
        body = body_of(function)
        active = [i for i, t in enumerate(tangents[1:]) if not isinstance(t.type, DisconnectedType)]
        if not active:
            return [disconnected_type() for _ in outputs]
        xs = [t(name=f"x{i}") for i, t in enumerate(body.param_types)]
        ts = [tangents[1 + i].type(name=f"t{i}") for i in active]
        jvps = _compat.pushforward(instantiate(body, xs), [xs[i] for i in active], ts)
        closure = inner_graph(jvps, [*xs, *ts])
        return _as_list(call(closure, *args, *(tangents[1 + i] for i in active)))


def _as_list(value: Variable | Sequence[Variable]) -> list[Variable]:
    return [value] if isinstance(value, Variable) else list(value)


def call(
    fn: Callable[..., Any] | Closure | Variable,
    *args: Any,
    capture: Capture = "hoist",
) -> Variable | list[Variable]:
    """Apply a function to arguments in the graph.

    Parameters
    ----------
    fn
        A Python callable (turned into a body with `inner_graph`, its params typed
        like ``args``), a `Closure` (its captured variables are appended to
        ``args``), or a function variable.
    *args
        The arguments, one per param the caller supplies.
    capture
        The capture policy when ``fn`` is a callable.

    Returns
    -------
    Variable or list of Variable
        The call's output, or its outputs when the body has several.

    Notes
    -----
    The call reads its function *folded* (a constant holding the body), so the
    graph is safe to hand to any PyTensor utility, `pytensor.scan` included. The
    rewrite pipeline unfolds it, so the outer rewriter still reaches the body.
    """
    from pytensor.tensor import as_tensor_variable

    args_v = [a if isinstance(a, Variable) else as_tensor_variable(a) for a in args]
    if isinstance(fn, Closure):
        closure = fn
    elif isinstance(fn, Variable):
        closure = Closure(fn, ())
    elif callable(fn):
        closure = inner_graph(fn, args_v, capture=capture)
    else:
        raise TypeError(f"call: {fn!r} is neither a callable, a Closure nor a function variable")
    return Call()(fold_function(closure.function), *args_v, *closure.captured)
