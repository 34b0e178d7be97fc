"""Build a function variable from a Python callable or from explicit inputs/outputs.

Closure conversion
------------------
A user's step function may read variables of the enclosing graph. The builder
turns each such *free* variable into an extra param and returns it as a
*captured* argument, which the consumer passes explicitly. The result is a closed
body (design brief, invariant 1).

Two capture policies (invariant 5):

``"hoist"`` (eager consumers: loops, calls)
    Capture the largest free subexpressions. Work that does not depend on the
    inputs is computed once, outside; the outer MergeOptimizer can then share it
    with the rest of the graph. This is loop-invariant code motion at build time.
``"leaves"`` (lazy consumers: branches, guarded conditions)
    Capture only free *roots* (variables without an owner) and copy the free
    computations into the body, so work a branch needs is done only when the
    branch is taken.

Constant-only subexpressions are neither: they stay inside the body, where
constant folding reaches them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, NamedTuple

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.type import Type

from innergraph.core.errors import BodyTypeError, ParamError
from innergraph.core.graph import InnerGraph, is_function, param, scope_leaves, scope_toposort
from innergraph.core.instantiate import substitute
from innergraph.core.types import InnerGraphType

__all__ = ["Capture", "Closure", "inner_graph"]

Capture = Literal["hoist", "leaves"]


class Closure(NamedTuple):
    """A function variable and the outer variables its body captured.

    The function's params are the builder's inputs followed by one param per
    captured variable; a consumer applies it to ``(*args, *captured)``.
    """

    function: Variable
    captured: tuple[Variable, ...]

    @property
    def n_inputs(self) -> int:
        """How many params the caller supplies (the rest are captured)."""
        return len(self.function.type.param_types) - len(self.captured)


def inner_graph(
    fn: Callable[..., Variable | Sequence[Variable]] | Variable | Sequence[Variable],
    inputs: Sequence[Variable | Type],
    *,
    capture: Capture = "hoist",
    where: str = "inner_graph",
) -> Closure:
    """Make a closed body and its function variable.

    Parameters
    ----------
    fn
        Either a callable, called with one fresh variable per entry of ``inputs``
        and returning the body output(s); or the output variable(s) themselves,
        computed from ``inputs``.
    inputs
        With a callable: the param types, or variables whose types to use. With
        outputs: the variables the outputs are computed from (distinct).
    capture
        ``"hoist"`` captures the largest free subexpressions (eager consumers);
        ``"leaves"`` captures only free roots (lazy consumers). See the module
        docstring.
    where
        The builder (and argument) named in the errors about what ``fn`` returns or
        holds: ``"call"`` when `innergraph.call` builds the body.

    Returns
    -------
    Closure
        The function variable and the captured outer variables.

    Raises
    ------
    BodyTypeError
        When the body's outputs are not variables (a Python string, ``None``, an
        object PyTensor cannot turn into a tensor), or one of them is a function.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> from innergraph import inner_graph
    >>> a = pt.dscalar("a")
    >>> f = inner_graph(lambda x: x * a + 1, [pt.dscalar])
    >>> f.function.type
    InnerGraphType(Scalar(float64, shape=()), Scalar(float64, shape=())) -> (Scalar(float64, shape=()))
    >>> f.captured
    (a,)
    """
    if capture not in ("hoist", "leaves"):
        raise ValueError(f"capture must be 'hoist' or 'leaves', got {capture!r}")
    variables: list[Variable]
    if callable(fn) and not isinstance(fn, Variable):
        variables = [_fresh(t, i) for i, t in enumerate(inputs)]
        outputs = _as_outputs(fn(*variables), f"{where}: fn", "returns")
    else:
        outputs = _as_outputs(fn, f"{where}: fn" if where == "inner_graph" else where, "holds")
        variables = [_as_input(v) for v in inputs]
    _check_inputs(variables)
    captured = _free_variables(outputs, variables, capture)
    bound = [*variables, *captured]
    types = [v.type for v in bound]
    body = substitute(outputs, {v: param(i, t) for i, (v, t) in enumerate(zip(bound, types))})
    function_type = InnerGraphType(types, [o.type for o in body])
    function = InnerGraph(function_type).make_node(*body).outputs[0]
    return Closure(function, tuple(captured))


def _fresh(spec: Variable | Type, i: int) -> Variable:
    if isinstance(spec, Variable):
        return spec.type(name=spec.name or f"p{i}")
    if isinstance(spec, Type):
        return spec(name=f"p{i}")
    if callable(spec):  # e.g. `pt.dscalar`, a factory of variables
        made = spec(f"p{i}")
        if isinstance(made, Variable):
            return made.type(name=f"p{i}")
    raise TypeError(f"Input {i} ({spec!r}) is neither a Variable, a Type nor a variable factory")


def _as_input(spec: object) -> Variable:
    if not isinstance(spec, Variable):
        raise TypeError(f"With explicit outputs, every input must be a Variable; got {spec!r}")
    return spec


def _as_outputs(result: object, what: str, verb: str) -> list[Variable]:
    """The body's outputs as variables; a `BodyTypeError` saying what ``what`` ``verb`` instead."""
    expected = "expected a variable, or a list or tuple of variables (the body's outputs)"
    if isinstance(result, str | bytes):
        raise BodyTypeError(f"{what} {verb} the Python string {result!r}; {expected}")
    if result is None:
        raise BodyTypeError(f"{what} {verb} None (a missing `return`?); {expected}")
    outputs: list[Any]
    if isinstance(result, Variable):
        outputs = [result]
    elif isinstance(result, Iterable):
        outputs = list(result)
    else:
        outputs = [result]  # a number: converted below
    if not outputs:
        raise BodyTypeError(f"{what} {verb} no outputs: a body needs at least one")
    from pytensor.tensor import as_tensor_variable

    converted = []
    for k, out in enumerate(outputs):
        if isinstance(out, str | bytes):
            raise BodyTypeError(f"{what} {verb} the Python string {out!r} as output {k}; {expected}")
        if not isinstance(out, Variable):
            try:
                out = as_tensor_variable(out)
            except (TypeError, ValueError, NotImplementedError) as err:
                raise BodyTypeError(f"{what} {verb} {out!r} as output {k}, which is not a variable; {expected}") from err
        if is_function(out):
            raise BodyTypeError(f"{what} {verb} a function as output {k} ({out}): not supported")
        converted.append(out)
    return converted


def _check_inputs(inputs: Sequence[Variable]) -> None:
    seen: dict[Variable, int] = {}
    for i, v in enumerate(inputs):
        if isinstance(v, Constant):
            raise ParamError(f"Input {i} ({v}) is a constant; a param must be a variable")
        if v in seen:
            raise ParamError(f"Inputs {seen[v]} and {i} are the same variable {v}")
        seen[v] = i


def _free_variables(outputs: list[Variable], inputs: list[Variable], capture: Capture) -> list[Variable]:
    """The outer variables the body must capture, in first-use order."""
    bound = set(inputs)
    nodes = scope_toposort(outputs, stop=bound)
    leaves = scope_leaves(outputs, stop=bound)
    depends = {v: v in bound for v in leaves}
    static = {v: v not in bound and (isinstance(v, Constant) or is_function(v)) for v in leaves}
    for node in nodes:
        dep = any(depends[v] for v in node.inputs)
        stat = all(static[v] for v in node.inputs)
        for out in node.outputs:
            depends[out], static[out] = dep, stat

    def free(v: Variable) -> bool:
        return not depends[v] and not static[v]

    if capture == "leaves":
        return [v for v in leaves if free(v)]
    captured: dict[Variable, None] = {}
    for out in outputs:
        if free(out):
            captured[out] = None
    for node in nodes:
        if any(depends[o] for o in node.outputs):
            captured.update((v, None) for v in node.inputs if free(v))
    return list(captured)
