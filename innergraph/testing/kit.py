"""`check_inner_graph_op`: check a consumer against the alpha-equivalence laws and more.

A contributor describes how to build their consumer from Python callables (its
bodies) and argument variables, gives a vanilla-PyTensor reference for the same
computation and a sampler of argument values, and calls `check_inner_graph_op`.
It checks, raising `AssertionError` with a message naming the failed check:

law 1
    Built twice from the same callables, the two consumers merge into one node.
law 2
    Built from callables that mean something else, they do not merge.
law 4
    Built from callables equal up to canonicalization, full FAST_RUN leaves one body.
law 5
    Values and gradients equal the vanilla reference (innergraph's pipeline on).
pickling
    The compiled function pickles, unpickles and gives the same values.
infer_shape
    Output shapes computed symbolically equal the shapes of the values.
gradients
    `pytensor.gradient.verify_grad` on the differentiable arguments.

See ``design/testing.md`` for a complete example.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

__all__ = ["OpCase", "check_inner_graph_op"]

Build = Callable[[Sequence[Callable[..., Any]], Sequence[Variable]], Any]


@dataclass
class OpCase:
    """How to build and check one consumer.

    Attributes
    ----------
    build
        ``build(bodies, args)``: the consumer applied to ``args``, its bodies made from
        the Python callables ``bodies`` (with `innergraph.inner_graph` or the
        consumer's own builder). Returns a variable or a list of them.
    arg_types
        The argument types.
    bodies
        The callables for laws 1 and 5.
    rewritten
        The same functions, written with identities canonicalize removes (law 4).
    changed
        Callables with the same signature and another meaning (law 2).
    reference
        ``reference(args)``: the same computation in vanilla PyTensor.
    sample
        ``sample(rng)``: argument values.
    differentiable
        Positions of the arguments to differentiate with respect to.
    """

    build: Build
    arg_types: Sequence[Any]
    bodies: Sequence[Callable[..., Any]]
    rewritten: Sequence[Callable[..., Any]]
    changed: Sequence[Callable[..., Any]]
    reference: Callable[[Sequence[Variable]], Any]
    sample: Callable[[np.random.Generator], Sequence[Any]]
    differentiable: Sequence[int] = ()


def _as_list(value: Any) -> list[Variable]:
    return [value] if isinstance(value, Variable) else list(value)


def check_inner_graph_op(case: OpCase, *, seed: int = 0, mode: Any = None) -> None:
    """Run every check of the module docstring on ``case``."""
    rng = np.random.default_rng(seed)
    args = [t(name=f"arg{i}") for i, t in enumerate(case.arg_types)]
    values = list(case.sample(rng))
    _law1(case, args)
    _law2(case, args)
    fn = _law5(case, args, values, mode)
    _law4(case, args, mode)
    _pickling(fn, values)
    _infer_shape(case, args, values, mode)
    _gradients(case, values, rng)


def _merged(outputs: list[Variable], args: list[Variable]) -> list[Variable]:
    fg = FunctionGraph(args, outputs, clone=False)
    MergeOptimizer().rewrite(fg)
    return list(fg.outputs)


def _law1(case: OpCase, args: list[Variable]) -> None:
    first, second = _as_list(case.build(case.bodies, args)), _as_list(case.build(case.bodies, args))
    merged = _merged(first + second, args)
    n = len(first)
    if not all(a is b for a, b in zip(merged[:n], merged[n:], strict=True)):
        raise AssertionError("law 1: two consumers built from the same bodies did not merge")


def _law2(case: OpCase, args: list[Variable]) -> None:
    first, other = _as_list(case.build(case.bodies, args)), _as_list(case.build(case.changed, args))
    merged = _merged(first + other, args)
    n = len(first)
    if all(a is b for a, b in zip(merged[:n], merged[n:], strict=True)):
        raise AssertionError("law 2: consumers built from bodies of different meaning merged")


def _law4(case: OpCase, args: list[Variable], mode: Any) -> None:
    from innergraph.stats import graph_stats

    alone = pytensor.function(args, _as_list(case.build(case.bodies, args)), mode=mode, on_unused_input="ignore")
    both = _as_list(case.build(case.bodies, args)) + _as_list(case.build(case.rewritten, args))
    together = pytensor.function(args, both, mode=mode, on_unused_input="ignore")
    if graph_stats(together)["bodies"] != graph_stats(alone)["bodies"]:
        raise AssertionError(
            "law 4: bodies equal up to canonicalization did not become one body after FAST_RUN "
            f"({graph_stats(together)['bodies']} bodies, {graph_stats(alone)['bodies']} expected)"
        )


def _with_grads(outputs: list[Variable], args: list[Variable], positions: Sequence[int]) -> list[Variable]:
    if not positions:
        return outputs
    cost = pt.add(*[pt.cast(o, "float64").sum() for o in outputs])
    grads: Any = pytensor.grad(cost, [args[i] for i in positions], disconnected_inputs="ignore")
    return outputs + list(grads)


def _law5(case: OpCase, args: list[Variable], values: list[Any], mode: Any) -> Any:
    from pytensor.compile.mode import get_mode

    ours = _with_grads(_as_list(case.build(case.bodies, args)), args, case.differentiable)
    theirs = _with_grads(_as_list(case.reference(args)), args, case.differentiable)
    fn = pytensor.function(args, ours, mode=mode, on_unused_input="ignore")
    ref = pytensor.function(args, theirs, mode=get_mode(mode).excluding("innergraph"), on_unused_input="ignore")
    try:
        wanted = ref(*values)
    except Exception as error:  # the reference, not the consumer: say so
        raise AssertionError(
            f"law 5: the vanilla reference (case.reference) failed to run under {type(ref.maker.linker).__name__}; "
            f"give a reference this mode runs: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from error
    for k, (got, want) in enumerate(zip(fn(*values), wanted, strict=True)):
        if not np.allclose(got, want, rtol=1e-7, atol=1e-10):
            raise AssertionError(f"law 5: result {k} differs from the vanilla reference: {got} vs {want}")
    return fn


def _pickling(fn: Any, values: list[Any]) -> None:
    clone = pickle.loads(pickle.dumps(fn))
    for got, want in zip(clone(*values), fn(*values), strict=True):
        if not np.allclose(got, want):
            raise AssertionError("pickling: the unpickled function gives other results")


def _infer_shape(case: OpCase, args: list[Variable], values: list[Any], mode: Any) -> None:
    outputs: list[Any] = [o for o in _as_list(case.build(case.bodies, args)) if hasattr(o, "ndim")]
    shapes = pytensor.function(args, [o.shape for o in outputs], mode=mode, on_unused_input="ignore")(*values)
    actual = pytensor.function(args, outputs, mode=mode, on_unused_input="ignore")(*values)
    for k, (shape, value) in enumerate(zip(shapes, actual, strict=True)):
        if tuple(shape) != np.shape(value):
            raise AssertionError(f"infer_shape: output {k} has shape {np.shape(value)}, inferred {tuple(shape)}")


def _gradients(case: OpCase, values: list[Any], rng: np.random.Generator) -> None:
    if not case.differentiable:
        return

    def cost(*diff_args: Variable) -> Any:
        args: list[Any] = [pt.as_tensor(v) for v in values]  # the other arguments stay fixed
        for i, a in zip(case.differentiable, diff_args, strict=True):
            args[i] = a
        outputs: list[Any] = _as_list(case.build(case.bodies, args))
        return pt.add(*[o.sum() for o in outputs])

    point = [np.asarray(values[i], dtype="float64") for i in case.differentiable]
    pytensor.gradient.verify_grad(cost, point, rng=rng)
