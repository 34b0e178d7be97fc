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

import innergraph_pickle

from collections.abc import Callable, Sequence
from typing import Any

from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op

from innergraph.core import compat
from innergraph.core.build import Capture, Closure, inner_graph
from innergraph.core.errors import ArityError, BodyTypeError
from innergraph.core.fold import fold_function
from innergraph.core.graph import body_of, is_function, params
from innergraph.core.instantiate import body_output_shapes, fit_arguments, instantiate
from innergraph.protocol.runtime import body_value, compiled_function, linker_for, make_body_thunk
from innergraph.protocol.semantics import Once
from innergraph.protocol.slots import Form, Meaning, Slot, SlotKind, register_consumer

__all__ = ["Call", "call"]


class Call(Op):
    """Apply the function at input 0 to the arguments.

    Inputs are ``(function, [pullback_function], [pushforward_function], *args)``.
    The optional functions carry gradient overrides (a lifted `OpFromGraph`'s
    ``pullback``/``pushforward``): the pullback function maps
    ``(*args, *outputs, *cotangents)``, the pushforward function ``(*args, *tangents)``,
    to the results marked ``"c"`` (connected) in the pattern props; ``"d"`` results
    are disconnected and ``"n"`` undefined. The props are those static patterns (and
    an explicit connection pattern), never a graph.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> from innergraph import call
    >>> x = pt.dvector("x")
    >>> y = call(lambda v: (v ** 2).sum(), x)
    >>> float(y.eval({x: [1.0, 2.0]}))
    5.0
    """

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph

    __props__ = ("pullback_pattern", "pushforward_pattern", "connection")
    kind = "call"

    def __init__(
        self,
        pullback_pattern: tuple[str, ...] | None = None,
        pushforward_pattern: tuple[str, ...] | None = None,
        connection: tuple[tuple[bool, ...], ...] | None = None,
    ):
        self.pullback_pattern = pullback_pattern
        self.pushforward_pattern = pushforward_pattern
        self.connection = connection

    @property
    def n_functions(self) -> int:
        return 1 + (self.pullback_pattern is not None) + (self.pushforward_pattern is not None)

    def split(self, inputs: Sequence[Any]) -> tuple[Any, Any, Any, list[Any]]:
        """``(function, pullback_function | None, pushforward_function | None, args)``."""
        function, rest = inputs[0], list(inputs[1 : self.n_functions])
        pb = rest.pop(0) if self.pullback_pattern is not None else None
        pf = rest.pop(0) if self.pushforward_pattern is not None else None
        return function, pb, pf, list(inputs[self.n_functions :])

    def make_node(self, *inputs: Any) -> Apply:
        function, pb, pf, args = self.split(inputs)
        for pos, fn in enumerate(inputs[: self.n_functions]):
            if not isinstance(fn, Variable) or not is_function(fn):
                raise BodyTypeError(
                    f"Call: input {pos} ({fn!r}) must be a function variable; build one "
                    "with innergraph.inner_graph"
                )
        ftype = function.type
        fitted = fit_arguments(ftype.param_types, args, where=f"Call of {function}")
        n_out = len(ftype.output_types)
        if pb is not None and len(pb.type.param_types) != len(fitted) + 2 * n_out:
            raise ArityError(f"Call: the pullback function {pb} must take args, outputs and cotangents")
        if pf is not None and len(pf.type.param_types) != 2 * len(fitted):
            raise ArityError(f"Call: the pushforward function {pf} must take args and tangents")
        functions = list(inputs[: self.n_functions])
        return Apply(self, [*functions, *fitted], [t() for t in ftype.output_types])

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: Any) -> None:
        fn = compiled_function(body_value(node.inputs[0]), "py", trust_input=True)
        for cell, value in zip(output_storage, fn(*inputs[self.n_functions :]), strict=True):
            cell[0] = value

    def make_thunk(
        self,
        node: Apply,
        storage_map: Any,
        compute_map: Any,
        no_recycling: Any,
        impl: str | None = None,
    ) -> Any:
        fn = compiled_function(body_value(node.inputs[0]), linker_for(impl), trust_input=True)
        return make_body_thunk(node, storage_map, compute_map, lambda args: fn(*args))

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        n_out = len(node.outputs)
        rows = [[False] * n_out for _ in range(self.n_functions)]
        if self.connection is not None:
            return rows + [list(r) for r in self.connection]
        body = body_of(node.inputs[0])
        return rows + compat.param_connection_rows(body.param_types, lambda xs: instantiate(body, xs))

    def infer_shape(self, node: Apply, input_shapes: Sequence[Any]) -> list[Any]:
        n = self.n_functions
        return body_output_shapes(node.inputs[0], node.inputs[n:], input_shapes[n:])

    def pullback(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
    ) -> list[Variable]:
        from pytensor.gradient import disconnected_type

        function, pb, _, args = self.split(inputs)
        head = [disconnected_type() for _ in range(self.n_functions)]
        if pb is not None:
            return head + self._overridden_pullback(pb, args, outputs, cotangents)
        return head + _body_pullback(function, args, cotangents)

    def _overridden_pullback(
        self, pb: Variable, args: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
    ) -> list[Variable]:
        assert self.pullback_pattern is not None
        cot = [_zeros_if_missing(g, out) for g, out in zip(cotangents, outputs, strict=True)]
        results = _as_list(call(pb, *args, *outputs, *cot)) if "c" in self.pullback_pattern else []
        return _by_pattern(self, self.pullback_pattern, results, args)

    def pushforward(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]
    ) -> list[Variable]:
        function, _, pf, args = self.split(inputs)
        arg_tangents = list(tangents[self.n_functions :])
        if pf is None:
            return _body_pushforward(function, args, arg_tangents, len(outputs))
        return self._overridden_pushforward(pf, args, arg_tangents, outputs)

    def _overridden_pushforward(
        self, pf: Variable, args: Sequence[Variable], tangents: Sequence[Variable], outputs: Sequence[Variable]
    ) -> list[Variable]:
        assert self.pushforward_pattern is not None
        ts = [_zeros_if_missing(t, a) for t, a in zip(tangents, args, strict=True)]
        results = _as_list(call(pf, *args, *ts)) if "c" in self.pushforward_pattern else []
        return _by_pattern(self, self.pushforward_pattern, results, outputs)


def _zeros_if_missing(value: Variable, like: Variable) -> Variable:
    """A disconnected or undefined (co)tangent as zeros: (co)tangent maps are linear."""
    import pytensor.tensor as pt
    from pytensor.gradient import DisconnectedType
    from pytensor.graph.null_type import NullType

    return pt.zeros_like(like) if isinstance(value.type, DisconnectedType | NullType) else value


def _by_pattern(op: Op, pattern: Sequence[str], results: Sequence[Variable], like: Sequence[Variable]) -> list[Variable]:
    from pytensor.gradient import disconnected_type, grad_undefined

    connected = iter(results)
    out: list[Variable] = []
    for i, (mark, var) in enumerate(zip(pattern, like, strict=True)):
        if mark == "c":
            out.append(next(connected))
        elif mark == "d":
            out.append(disconnected_type())
        else:
            out.append(grad_undefined(op, i, var, "the gradient override leaves it undefined"))
    return out


def _body_pullback(function: Variable, args: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
    from pytensor.gradient import DisconnectedType, disconnected_type
    from pytensor.graph.null_type import NullType

    body = body_of(function)
    live = [k for k, g in enumerate(cotangents) if not isinstance(g.type, DisconnectedType | NullType)]
    if not live:
        return [disconnected_type() for _ in args]
    xs = [t(name=f"x{i}") for i, t in enumerate(body.param_types)]
    gs = [cotangents[k].type(name=f"g{k}") for k in live]
    grads = compat.pullback([instantiate(body, xs)[k] for k in live], xs, gs)
    kept = [i for i, g in enumerate(grads) if not isinstance(g.type, DisconnectedType | NullType)]
    result = [g.type() if isinstance(g.type, NullType) else disconnected_type() for g in grads]
    if kept:
        closure = inner_graph([grads[i] for i in kept], [*xs, *gs])
        applied = call(closure, *args, *(cotangents[k] for k in live))
        for i, value in zip(kept, _as_list(applied), strict=True):
            result[i] = value
    return result


def _body_pushforward(
    function: Variable, args: Sequence[Variable], tangents: Sequence[Variable], n_out: int
) -> list[Variable]:
    from pytensor.gradient import DisconnectedType, disconnected_type

    body = body_of(function)
    active = [i for i, t in enumerate(tangents) if not isinstance(t.type, DisconnectedType)]
    if not active:
        return [disconnected_type() for _ in range(n_out)]
    xs = [t(name=f"x{i}") for i, t in enumerate(body.param_types)]
    ts = [tangents[i].type(name=f"t{i}") for i in active]
    jvps = compat.pushforward(instantiate(body, xs), [xs[i] for i in active], ts)
    closure = inner_graph(jvps, [*xs, *ts])
    return _as_list(call(closure, *args, *(tangents[i] for i in active)))


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
        closure = inner_graph(fn, args_v, capture=capture, where="call")
    else:
        raise TypeError(f"call: {fn!r} is neither a callable, a Closure nor a function variable")
    return Call()(fold_function(closure.function), *args_v, *closure.captured)


# --- declared as a consumer: one argument (invariant) and one output slot per param and output;
# the code of every backend but the thunk linkers' is generated from ``Once`` (innergraph.protocol.semantics)


def _call_slots(node: Apply) -> tuple[tuple[Variable, ...], list[Slot]]:
    """The call's runtime slots: its arguments and outputs; gradient-override functions are not slots."""
    op: Call = node.op
    function, _, _, args = op.split(node.inputs)
    body = body_of(function)
    slots = [Slot("arg", (a,), ((0, p),)) for a, p in zip(args, params(body.param_types), strict=True)]
    slots += [
        Slot("out", outputs=((0, o),), output_types=(t,), results=(r,))
        for o, t, r in zip(body.outputs, body.type.output_types, node.outputs, strict=True)
    ]
    return (), slots


def _split_call(node: Apply) -> tuple[tuple[Variable, ...], list[Slot]] | None:
    op: Call = node.op
    if op.n_functions != 1 or op.connection is not None:
        return None  # gradient overrides or an explicit connection pattern fix the signature
    return _call_slots(node)


def _make_call(op: Call, header: Any, functions: list[Variable], groups: dict[str, list[Slot]], args: list[Variable]) -> Apply:
    return Call().make_node(functions[0], *args)


CALL_FORM = register_consumer(
    Call,
    Form(
        1, ("arg",), ("out",), ("arg",), ("out",), _split_call, _make_call, lambda node: [node.inputs[0]],
        kinds=(SlotKind("arg", Meaning.INVARIANT), SlotKind("out", Meaning.OUTPUT)),
        semantics=Once(slots=_call_slots),  # Numba and JAX code generated from the declaration
    ),
)
