"""`check_inner_graph_op`: check a consumer against the alpha-equivalence laws and more.

A contributor describes how to build their consumer from Python callables (its
bodies) and argument variables, gives a vanilla-PyTensor reference for the same
computation and a sampler of argument values, and calls `check_inner_graph_op`.
It checks, in this order, raising `AssertionError` with a message naming the failed check:

law 1
    Built twice from the same callables, the two consumers merge into one node.
law 2
    Built from callables that mean something else, they do not merge.
infer_shape
    The output shapes are inferred without computing the outputs (the consumer, or the
    Ops around it, implement ``infer_shape``) and equal the shapes of the values.
law 5
    Values and gradients equal the vanilla reference, built, compiled and first called
    with innergraph uninstalled (`innergraph.uninstalled`): vanilla PyTensor, patches
    and all, not innergraph with its rewrites excluded. With ``against="isolated"`` the
    reference is the consumer itself treated as PyTensor treats a native Op's inner
    graph: each body rewritten on its own by the mode's rewriter
    (`innergraph.testing.isolated`), compiled with innergraph's rewrites excluded; for a
    consumer with no vanilla equivalent (``case.reference`` may then be None). It checks
    that rewriting bodies with the outer graph changes no value; whether the consumer
    computes what it should, only a reference can say.
law 4
    Built from callables equal up to canonicalization, the two consumers become one after
    full FAST_RUN: each output of the second is the very variable of the first in the
    compiled graph (one consumer, one body, nothing left to tell them apart).
pickling
    The compiled function pickles, unpickles and gives the same values, to 1e-12.
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
from pytensor.compile.mode import get_mode

from innergraph.patching import uninstalled
from innergraph.stats import consumer_kind
from innergraph.testing.isolated import rewrite_bodies_in_isolation

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
        ``reference(args)``: the same computation in vanilla PyTensor. It is called with
        innergraph uninstalled, so it uses PyTensor's own constructs (``pytensor.scan``,
        ``pytensor.ifelse.ifelse``, ``OpFromGraph``), never innergraph's builders.
        None when the check runs ``against="isolated"`` only.
    sample
        ``sample(rng)``: argument values.
    differentiable
        Positions of the arguments to differentiate with respect to.
    shapes_inferred
        Whether the output shapes are inferred without running the consumer (its
        ``infer_shape``). False only for a consumer known to lack one, while it does:
        the kit then only compares the shapes with the values'.
    """

    build: Build
    arg_types: Sequence[Any]
    bodies: Sequence[Callable[..., Any]]
    rewritten: Sequence[Callable[..., Any]]
    changed: Sequence[Callable[..., Any]]
    reference: Callable[[Sequence[Variable]], Any] | None
    sample: Callable[[np.random.Generator], Sequence[Any]]
    differentiable: Sequence[int] = ()
    shapes_inferred: bool = True


def _as_list(value: Any) -> list[Variable]:
    return [value] if isinstance(value, Variable) else list(value)


def check_inner_graph_op(case: OpCase, *, seed: int = 0, mode: Any = None, against: str = "vanilla") -> None:
    """Run every check of the module docstring on ``case``.

    Parameters
    ----------
    case
        How to build and check the consumer.
    seed
        Seeds the argument values and `verify_grad`'s points.
    mode
        The mode every function is compiled with (default: PyTensor's default mode).
    against
        Law 5's reference: ``"vanilla"`` (``case.reference`` with innergraph uninstalled)
        or ``"isolated"`` (the consumer with its bodies rewritten on their own, as
        PyTensor rewrites an ``OpFromGraph``'s inner graph: `rewrite_bodies_in_isolation`).
    """
    if against not in ("vanilla", "isolated"):
        raise ValueError(f"check_inner_graph_op: against must be 'vanilla' or 'isolated', got {against!r}")
    reference = case.reference
    if against == "vanilla" and reference is None:
        raise ValueError("check_inner_graph_op: case.reference is None; give a vanilla reference or pass against='isolated'")
    rng = np.random.default_rng(seed)
    args = [t(name=f"arg{i}") for i, t in enumerate(case.arg_types)]
    values = list(case.sample(rng))
    _law1(case, args)
    _law2(case, args)
    _infer_shape(case, args, values, mode)  # before law 5: a wrong shape can break the compiled gradient
    fn = _law5(case, reference, args, values, mode) if reference is not None and against == "vanilla" else _law5_isolated(case, args, values, mode)
    _law4(case, args, values, mode)
    _pickling(fn, values)
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


def _law4(case: OpCase, args: list[Variable], values: list[Any], mode: Any) -> None:
    original = _as_list(case.build(case.bodies, args))
    rewritten = _as_list(case.build(case.rewritten, args))
    together = pytensor.function(args, original + rewritten, mode=mode, on_unused_input="ignore")
    computed = [_unguarded(o) for o in together.maker.fgraph.outputs]
    n = len(original)
    apart = [k for k in range(n) if computed[k] is not computed[n + k]]
    if not apart:
        return
    k = apart[0]
    results = together(*values)
    # only chooses the message's wording (the check has failed already): "the same values" up to
    # the reassociation two unmerged copies of a float64 body may get from fusion
    differ = not np.allclose(results[k], results[n + k], rtol=1e-7, atol=1e-10)
    why = (f"they do not even compute the same values ({results[k]} vs {results[n + k]}): `rewritten` means something else"
           if differ else "they compute the same values, but the rewriter did not make them one")
    raise AssertionError(
        "law 4: consumers built from bodies equal up to canonicalization did not become one after FAST_RUN: "
        f"output {k} is computed by {_owner(computed[k])}, its rewritten twin by {_owner(computed[n + k])}; {why}"
    )


def _unguarded(output: Variable) -> Variable:
    """The variable an output of a compiled graph copies (`DeepCopyOp`), or the output itself."""
    from pytensor.compile.ops import DeepCopyOp

    while output.owner is not None and isinstance(output.owner.op, DeepCopyOp):
        output = output.owner.inputs[0]
    return output


def _owner(variable: Variable) -> str:
    return "an input" if variable.owner is None else f"{variable.owner.op} (its output {variable.owner.outputs.index(variable)} of {len(variable.owner.outputs)})"


def _with_grads(outputs: list[Variable], args: list[Variable], positions: Sequence[int]) -> list[Variable]:
    if not positions:
        return outputs
    cost = pt.add(*[pt.cast(o, "float64").sum() for o in outputs])
    grads: Any = pytensor.grad(cost, [args[i] for i in positions], disconnected_inputs="ignore")
    return outputs + list(grads)


def _law5(case: OpCase, reference: Callable[[Sequence[Variable]], Any], args: list[Variable], values: list[Any], mode: Any) -> Any:
    ours = _with_grads(_as_list(case.build(case.bodies, args)), args, case.differentiable)
    fn = pytensor.function(args, ours, mode=mode, on_unused_input="ignore")
    with uninstalled():  # vanilla PyTensor: built, compiled and first called without innergraph
        theirs = _with_grads(_as_list(reference(args)), args, case.differentiable)
        ref = pytensor.function(args, theirs, mode=mode, on_unused_input="ignore")
        try:
            wanted = ref(*values)
        except Exception as error:  # the reference, not the consumer: say so
            raise AssertionError(
                f"law 5: the vanilla reference (case.reference) failed to run under {type(ref.maker.linker).__name__}; "
                f"give a reference this mode runs: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            ) from error
    _same_results("law 5", "the vanilla reference", fn(*values), wanted)
    return fn


def _law5_isolated(case: OpCase, args: list[Variable], values: list[Any], mode: Any) -> Any:
    ours = _with_grads(_as_list(case.build(case.bodies, args)), args, case.differentiable)
    fn = pytensor.function(args, ours, mode=mode, on_unused_input="ignore")
    theirs = rewrite_bodies_in_isolation(ours, mode)  # after differentiating: PyTensor rewrites inner graphs when it compiles
    ref = pytensor.function(args, theirs, mode=get_mode(mode).excluding("innergraph"), on_unused_input="ignore")
    _same_results("law 5 (against='isolated')", "the consumer with its bodies rewritten on their own", fn(*values), ref(*values))
    return fn


def _same_results(check: str, reference: str, results: Sequence[Any], wanted: Sequence[Any]) -> None:
    """`AssertionError` naming ``check`` and the first result that differs from ``reference``'s."""
    for k, (got, want) in enumerate(zip(results, wanted, strict=True)):
        # a consumer against a reference its author writes with other Ops (an unrolled loop for
        # a Repeat, PyTensor's Scan for a scan): other algorithms, other summation orders, and
        # float32 consumers go through it too; not the 1e-12 of one graph against itself
        if not np.allclose(got, want, rtol=1e-7, atol=1e-10):
            raise AssertionError(f"{check}: result {k} differs from {reference}: {got} vs {want}")


def _pickling(fn: Any, values: list[Any]) -> None:
    clone = pickle.loads(pickle.dumps(fn))
    for k, (got, want) in enumerate(zip(clone(*values), fn(*values), strict=True)):
        if not np.allclose(got, want, rtol=1e-12, atol=0.0):
            raise AssertionError(f"pickling: the unpickled function gives other results: output {k} {got} vs {want}")


def _infer_shape(case: OpCase, args: list[Variable], values: list[Any], mode: Any) -> None:
    outputs: list[Any] = [o for o in _as_list(case.build(case.bodies, args)) if hasattr(o, "ndim")]
    if case.shapes_inferred:
        _shapes_inferred(args, outputs)
    shapes = pytensor.function(args, [o.shape for o in outputs], mode=mode, on_unused_input="ignore")(*values)
    actual = pytensor.function(args, outputs, mode=mode, on_unused_input="ignore")(*values)
    for k, (shape, value) in enumerate(zip(shapes, actual, strict=True)):
        if tuple(int(d) for d in shape) != np.shape(value):
            raise AssertionError(f"infer_shape: output {k} has shape {np.shape(value)}, inferred {tuple(int(d) for d in shape)}")


def _shapes_inferred(args: list[Variable], outputs: list[Any]) -> None:
    """Fail when an output's shape can only be read from a computed consumer output.

    Without ``infer_shape`` (or when it raises ``NotImplementedError``), PyTensor's
    `ShapeFeature` falls back to ``Shape_i`` of the output itself: the shape is then right
    by construction, and asking for it runs the consumer.
    """
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.rewriting.shape import ShapeFeature


    feature = ShapeFeature()
    fgraph = FunctionGraph(args, outputs, features=[feature], clone=True)
    computed = {out: node for node in fgraph.apply_nodes if consumer_kind(node.op) for out in node.outputs}
    for k, output in enumerate(fgraph.outputs):
        read = [computed[v] for v in ancestors(list(feature.shape_tuple(output))) if v in computed]
        if read:
            raise AssertionError(
                f"infer_shape: output {k}'s shape is read from the computed output of {read[0].op} "
                "(no infer_shape, or it raised NotImplementedError): asking for the shape runs the consumer"
            )


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
    try:
        pytensor.gradient.verify_grad(cost, point, rng=rng)
    except pytensor.gradient.GradientError as error:
        raise AssertionError(f"verify_grad: the gradient of the consumer differs from finite differences: {error}") from error
