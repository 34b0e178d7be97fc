"""`IfElse`: a lazy conditional whose branches are bodies.

Inputs are ``(condition, then_function, else_function, *then_args, *else_args)``.
The branches are built with leaf-only capture (design brief, invariant 5): work
only a branch needs lives in that branch's body and runs only when the branch is
taken — in every backend: the Python thunk calls one compiled branch, and the
Numba implementation jumps into one jitted branch. (PyTensor's own IfElse is lazy
only in the VM; PyTensor issue #501.)

The one prop, ``n_then_args``, splits the arguments; two conditionals with the same
condition, branches and arguments are equal and merge.
"""

from __future__ import annotations

import innergraph_pickle

from collections.abc import Sequence
from typing import Any

import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op

from innergraph.core import compat
from innergraph.core.build import inner_graph
from innergraph.core.errors import BodyTypeError
from innergraph.core.fold import fold_function
from innergraph.core.graph import body_of, is_function, params
from innergraph.core.instantiate import body_output_shapes, fit_arguments, instantiate
from innergraph.protocol.runtime import body_value, compiled_function, linker_for, make_body_thunk
from innergraph.protocol.semantics import Branch
from innergraph.protocol.slots import Capabilities, Form, Meaning, Slot, SlotKind, register_consumer

__all__ = ["IfElse", "ifelse"]


class IfElse(Op):
    """``IfElse(n_then_args)(condition, then_fn, else_fn, *then_args, *else_args)``."""

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph

    __props__ = ("n_then_args",)
    kind = "ifelse"

    def __init__(self, n_then_args: int):
        self.n_then_args = n_then_args

    def split(self, inputs: Sequence[Any]) -> tuple[Any, Any, Any, list[Any], list[Any]]:
        """``(condition, then_fn, else_fn, then_args, else_args)``."""
        cond, then_fn, else_fn, *args = inputs
        return cond, then_fn, else_fn, args[: self.n_then_args], args[self.n_then_args :]

    def make_node(self, *inputs: Any) -> Apply:
        from pytensor.tensor import as_tensor_variable

        cond, then_fn, else_fn, then_args, else_args = self.split(inputs)
        for pos, fn in ((1, then_fn), (2, else_fn)):
            if not isinstance(fn, Variable) or not is_function(fn):
                raise BodyTypeError(f"{self}: input {pos} ({fn!r}) must be a function variable")
        cond = as_tensor_variable(cond)
        if cond.ndim != 0:
            raise BodyTypeError(f"{self}: the condition {cond} must be a scalar, got {cond.type}")
        then_args = fit_arguments(then_fn.type.param_types, then_args, where=f"{self} then branch")
        else_args = fit_arguments(else_fn.type.param_types, else_args, where=f"{self} else branch")
        outputs = [t() for t in _output_types(then_fn.type.output_types, else_fn.type.output_types, str(self))]
        return Apply(self, [cond, then_fn, else_fn, *then_args, *else_args], outputs)

    def _branches(self, node: Apply, linker: str) -> tuple[Any, Any]:
        _, then_fn, else_fn, _, _ = self.split(node.inputs)
        return compiled_function(body_value(then_fn), linker, trust_input=True), compiled_function(body_value(else_fn), linker, trust_input=True)

    def make_thunk(self, node: Apply, storage_map: Any, compute_map: Any, no_recycling: Any, impl: str | None = None) -> Any:
        then_fn, else_fn = self._branches(node, linker_for(impl))
        n = self.n_then_args

        def run(values: Sequence[Any]) -> Sequence[Any]:
            cond, *args = values
            return then_fn(*args[:n]) if cond else else_fn(*args[n:])

        return make_body_thunk(node, storage_map, compute_map, run)

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: Any) -> None:
        then_fn, else_fn = self._branches(node, "py")
        cond, _, _, then_args, else_args = self.split(inputs)
        results = then_fn(*then_args) if cond else else_fn(*else_args)
        for cell, value in zip(output_storage, results, strict=True):
            cell[0] = value

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        n_out = len(node.outputs)
        _, then_fn, else_fn, _, _ = self.split(node.inputs)
        rows = [[True] * n_out, [False] * n_out, [False] * n_out]
        for fn in (then_fn, else_fn):
            rows += _param_rows(fn)
        return rows

    def infer_shape(self, node: Apply, input_shapes: Sequence[Any]) -> list[Any]:
        cond, then_fn, else_fn, then_args, else_args = self.split(node.inputs)
        then_shapes = body_output_shapes(then_fn, then_args, input_shapes[3 : 3 + self.n_then_args])
        else_shapes = body_output_shapes(else_fn, else_args, input_shapes[3 + self.n_then_args :])
        result: list[Any] = []
        for t_shape, e_shape in zip(then_shapes, else_shapes, strict=True):
            if t_shape is None or e_shape is None:
                result.append(None)
                continue
            pairs = list(zip(t_shape, e_shape, strict=True))
            if all(a is b for a, b in pairs):
                result.append(tuple(t_shape))
                continue
            # Pick the taken branch's dimensions lazily: a conditional over shape bodies.
            # (dims as int64: a static dim is an int8 constant, a symbolic one int64)
            lazy = ifelse(cond, [pt.cast(d, "int64") for d in t_shape], [pt.cast(d, "int64") for d in e_shape])
            result.append(tuple(_as_list(lazy)))
        return result

    def pullback(self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
        from pytensor import config
        from pytensor.gradient import DisconnectedType, disconnected_type
        from pytensor.graph.null_type import NullType

        cond, then_fn, else_fn, then_args, else_args = self.split(inputs)
        live = [k for k, g in enumerate(cotangents) if not isinstance(g.type, DisconnectedType | NullType)]
        # As PyTensor's IfElse: the condition is connected, but condition + epsilon
        # takes the same branch, so its gradient is zero.
        cond_grad = cond.zeros_like(dtype=config.floatX)
        result: list[Variable] = [cond_grad, disconnected_type(), disconnected_type()]
        if not live:
            return result + [disconnected_type() for _ in (*then_args, *else_args)]
        gs = [cotangents[k] for k in live]
        result += _branch_grads(cond, then_fn, then_args, live, gs, taken=True)
        result += _branch_grads(cond, else_fn, else_args, live, gs, taken=False)
        return result

    def pushforward(self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
        from pytensor.gradient import DisconnectedType

        cond, then_fn, else_fn, then_args, else_args = self.split(inputs)
        n = self.n_then_args
        then_t, else_t = list(tangents[3 : 3 + n]), list(tangents[3 + n :])
        bodies = []
        for fn, args, ts in ((then_fn, then_args, then_t), (else_fn, else_args, else_t)):
            active = [i for i, t in enumerate(ts) if not isinstance(t.type, DisconnectedType)]
            xs = [t() for t in fn.type.param_types]
            dts = [ts[i].type() for i in active]
            outs = instantiate(fn, xs)
            jvps = compat.pushforward(outs, [xs[i] for i in active], dts) if active else [pt.zeros_like(o) for o in outs]
            bodies.append((inner_graph(jvps, [*xs, *dts], capture="leaves"), [*args, *(ts[i] for i in active)]))
        (then_c, then_in), (else_c, else_in) = bodies
        return _as_list(
            IfElse(len(then_in) + len(then_c.captured))(
                cond,
                fold_function(then_c.function),
                fold_function(else_c.function),
                *then_in,
                *then_c.captured,
                *else_in,
                *else_c.captured,
            )
        )

    def __str__(self) -> str:
        return "IfElse{in-graph, lazy}"


def _output_types(then_types: Sequence[Any], else_types: Sequence[Any], where: str) -> list[Any]:
    if len(then_types) != len(else_types):
        raise BodyTypeError(f"{where}: the then branch has {len(then_types)} outputs, the else branch {len(else_types)}")
    types = []
    for k, (a, b) in enumerate(zip(then_types, else_types, strict=True)):
        joined = _join(a, b)
        if joined is None:
            raise BodyTypeError(f"{where}: output {k} has type {a} in the then branch and {b} in the else branch")
        types.append(joined)
    return types


def _join(a: Any, b: Any) -> Any:
    """The output type of branches typed `a` and `b`, as PyTensor's IfElse makes it, or None.

    Tensors of one dtype and rank whose static shapes differ (``(2,)`` and ``(4,)``, a
    mixture of components of different lengths) give the shape known in both
    (``(None,)``), as ``pytensor.ifelse`` does.
    """
    if a.is_super(b):
        return a
    if b.is_super(a):
        return b
    if not isinstance(a, pt.TensorType) or type(a) is not type(b) or (a.dtype, a.ndim) != (b.dtype, b.ndim):
        return None
    joined = a.clone(shape=tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)))
    return joined if joined.is_super(a) and joined.is_super(b) else None


def _param_rows(fn: Variable) -> list[list[bool]]:
    body = body_of(fn)
    return compat.param_connection_rows(body.param_types, lambda xs: instantiate(body, xs))


def _branch_grads(
    cond: Variable, fn: Variable, args: Sequence[Variable], live: list[int], gs: list[Variable], taken: bool
) -> list[Variable]:
    """Gradients w.r.t. one branch's arguments: its vector-Jacobian product when taken, else zeros."""
    from pytensor.gradient import DisconnectedType, disconnected_type
    from pytensor.graph.null_type import NullType

    if not args:
        return []
    xs = [t(name=f"x{i}") for i, t in enumerate(fn.type.param_types)]
    g_dummies = [g.type(name=f"g{k}") for k, g in zip(live, gs, strict=True)]
    ys = instantiate(fn, xs)
    grads = compat.pullback([ys[k] for k in live], xs, g_dummies)
    kept = [i for i, g in enumerate(grads) if not isinstance(g.type, DisconnectedType | NullType)]
    result: list[Variable] = [g.type() if isinstance(g.type, NullType) else disconnected_type() for g in grads]
    if not kept:
        return result
    # a gradient has its argument's dtype (PyTensor's contract; a float32 argument of a float64 branch)
    kept_grads = [_cast_like(grads[i], xs[i]) for i in kept]
    vjp = inner_graph(kept_grads, [*xs, *g_dummies], capture="leaves")
    zero_grads = [pt.zeros_like(xs[i], dtype=getattr(g.type, "dtype", None)) for i, g in zip(kept, kept_grads, strict=True)]
    zeros = inner_graph(zero_grads, [*xs, *g_dummies], capture="leaves")
    taken_c, other_c = (vjp, zeros) if taken else (zeros, vjp)
    operands = [*args, *gs]
    applied = IfElse(len(operands) + len(taken_c.captured))(
        cond,
        fold_function(taken_c.function),
        fold_function(other_c.function),
        *operands,
        *taken_c.captured,
        *operands,
        *other_c.captured,
    )
    for i, value in zip(kept, _as_list(applied), strict=True):
        result[i] = value
    return result


def _cast_like(grad: Variable, x: Variable) -> Variable:
    """``grad`` in ``x``'s dtype; an integer ``x``'s gradient stays a float (PyTensor refuses integer gradients)."""
    dtype = getattr(x.type, "dtype", None)
    if dtype is None or getattr(grad.type, "dtype", dtype) == dtype or dtype in pt.type.discrete_dtypes:
        return grad
    return pt.cast(grad, dtype)


def _as_list(value: Variable | Sequence[Variable]) -> list[Variable]:
    return [value] if isinstance(value, Variable) else list(value)


def _branch(name: str, value: Any) -> list[Variable]:
    """A branch's outputs as a list; a `BodyTypeError` for a Python string (whose characters ``list`` would give)."""
    if isinstance(value, str | bytes):
        raise BodyTypeError(f"ifelse: {name} is the Python string {value!r}; a branch is a variable or a list of variables")
    return _as_list(value)


def ifelse(
    condition: Any,
    then_branch: Variable | Sequence[Variable],
    else_branch: Variable | Sequence[Variable],
    name: str | None = None,
) -> Variable | list[Variable]:
    """`pytensor.ifelse.ifelse`, with lazy branch bodies (see the module docstring).

    Parameters
    ----------
    condition
        A scalar; the then branch is taken when it is true.
    then_branch, else_branch
        A variable or a list of variables each; the work they need that is not
        shared with the rest of the graph moves into the branch's body.
    name
        Accepted for signature compatibility.

    Returns
    -------
    Variable or list of Variable
        As `pytensor.ifelse.ifelse`: a single variable when the branches are.
    """
    single = isinstance(then_branch, Variable)
    then_list, else_list = _branch("then_branch", then_branch), _branch("else_branch", else_branch)
    if len(then_list) != len(else_list):
        raise BodyTypeError(f"ifelse: {len(then_list)} then outputs but {len(else_list)} else outputs")
    then_c = inner_graph(then_list, [], capture="leaves", where="ifelse: then_branch")
    else_c = inner_graph(else_list, [], capture="leaves", where="ifelse: else_branch")
    out = IfElse(len(then_c.captured))(
        condition, fold_function(then_c.function), fold_function(else_c.function), *then_c.captured, *else_c.captured
    )
    outs = _as_list(out)
    return outs[0] if single else outs


# --- declared as a consumer: arguments per branch (invariant), outputs from both branches


def _split_ifelse(node: Apply) -> tuple[tuple[Variable, ...], list[Slot]]:
    op: IfElse = node.op
    cond, then_fn, else_fn, then_args, else_args = op.split(node.inputs)
    then_body, else_body = body_of(then_fn), body_of(else_fn)
    slots = [Slot("then_arg", (a,), ((0, p),)) for a, p in zip(then_args, params(then_body.param_types), strict=True)]
    slots += [Slot("else_arg", (a,), ((1, p),)) for a, p in zip(else_args, params(else_body.param_types), strict=True)]
    for k, result in enumerate(node.outputs):
        outs = ((0, then_body.outputs[k]), (1, else_body.outputs[k]))
        types = (then_body.type.output_types[k], else_body.type.output_types[k])
        slots.append(Slot("out", outputs=outs, output_types=types, results=(result,)))
    return (cond,), slots


def _make_ifelse(op: IfElse, header: Any, functions: list[Variable], groups: dict[str, list[Slot]], args: list[Variable]) -> Apply:
    return IfElse(len(groups.get("then_arg", []))).make_node(header[0], *functions, *args)


IFELSE_FORM = register_consumer(
    IfElse,
    Form(
        2, ("then_arg", "else_arg"), ("out",), ("then_arg", "else_arg"), ("out",), _split_ifelse, _make_ifelse,
        lambda node: list(node.inputs[1:3]),
        kinds=(
            SlotKind("then_arg", Meaning.INVARIANT, (0,)),
            SlotKind("else_arg", Meaning.INVARIANT, (1,)),
            SlotKind("out", Meaning.OUTPUT, (0, 1)),
        ),
        capabilities=Capabilities(lazy=True),
        semantics=Branch(),  # Numba and JAX code generated from the declaration
    ),
)
