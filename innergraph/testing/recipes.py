"""Random closed bodies for property-based tests: recipes, builders and strategies.

A *recipe* describes a body as data: its params (dtype and static shape), a list of
steps (each an op applied to earlier values, a constant, or a nested body) and the
values it returns. The same recipe can be built any number of times — with fresh
variables, other names and a shuffled construction order — which is what
alpha-equivalence tests need; and it can be *mutated* in ways that change its
meaning. Strategies (`recipes`, `mutations`) need hypothesis.

Values are indexed: ``0 .. n_params-1`` are the params, then one value per step.
Each value has a static shape (what PyTensor's type says, ``None`` when unknown)
and an actual shape (what the sample arrays have), so every generated body is
well-typed and runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from innergraph.core.build import Closure, inner_graph
from innergraph.ops.call import call

__all__ = [
    "BINARY",
    "MUTATIONS",
    "HypothesisPicker",
    "UNARY",
    "Param",
    "Picker",
    "Recipe",
    "SeededPicker",
    "Step",
    "build_function",
    "build_outputs",
    "draw_steps",
    "mutate",
    "mutations",
    "recipes",
    "recipes_over",
    "sample_arguments",
]

UNARY = ("exp", "tanh", "neg", "sqr")
#: The dtypes of the constant a "mulc" step multiplies by (a float64 value times an int8 constant is float64).
MULC_DTYPES = ("int8", "int32", "int64", "float32", "float64")
BINARY = ("add", "mul", "sub", "maximum")
_UNARY_FN: dict[str, Callable[[Any], Any]] = {"exp": pt.exp, "tanh": pt.tanh, "neg": lambda x: -x, "sqr": pt.sqr}
_BINARY_FN: dict[str, Callable[[Any, Any], Any]] = {
    "add": pt.add,
    "mul": pt.mul,
    "sub": pt.sub,
    "maximum": pt.maximum,
}
#: Insertions that canonicalize away (for law 4).
IDENTITIES: dict[str, Callable[[Any], Any]] = {
    "add0": lambda x: x + 0,
    "mul1": lambda x: x * 1,
    "negneg": lambda x: -(-x),
    "log_exp": lambda x: pt.log(pt.exp(x)),
}


@dataclass(frozen=True)
class Param:
    dtype: str
    static: tuple[int | None, ...]
    actual: tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One value of a recipe: ``op`` applied to the values ``args``."""

    op: str
    args: tuple[int, ...] = ()
    value: float = 0.0  # for "const" and "mulc"
    nested: Recipe | None = None  # for "nested": a body called with ``args``
    identity: str | None = None  # wrap the result in an identity (law 4)
    dtype: str = "float64"  # for "mulc": the constant's dtype (integer and float32 constants in a float body)


@dataclass(frozen=True)
class Recipe:
    params: tuple[Param, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    shapes: tuple[tuple[tuple[int | None, ...], tuple[int, ...]], ...] = field(default=(), compare=False)

    def live(self) -> set[int]:
        """The values some output depends on."""
        n = len(self.params)
        needed: set[int] = set()
        stack = list(self.outputs)
        while stack:
            v = stack.pop()
            if v in needed:
                continue
            needed.add(v)
            if v >= n:
                stack.extend(self.steps[v - n].args)
        return needed

    def used_params(self) -> set[int]:
        """The params some output depends on."""
        return {v for v in self.live() if v < len(self.params)}


# -- building -------------------------------------------------------------------------------


def build_outputs(recipe: Recipe, inputs: Sequence[Variable], order_seed: int | None = None,
                  nested: str = "call") -> list[Variable]:
    """The recipe's outputs computed from ``inputs``, steps built in a shuffled valid order.

    ``nested``: a nested body is a function applied with innergraph's `call` (``"call"``), or
    its computation written out in place (``"inline"``: plain PyTensor, which vanilla
    PyTensor compiles with innergraph uninstalled; the same values).
    """
    n = len(recipe.params)
    values: dict[int, Variable] = dict(enumerate(inputs))
    for index in _construction_order(recipe, order_seed):
        step = recipe.steps[index - n]
        values[index] = _build_step(step, [values[a] for a in step.args], nested)
    return [values[o] for o in recipe.outputs]


def build_function(
    recipe: Recipe, prefix: str = "p", order_seed: int | None = None, types: Sequence[Any] | None = None
) -> Closure:
    """A fresh function variable for ``recipe`` (params named ``prefix0``, ``prefix1``...).

    ``types`` overrides the params' types (a nested body takes its arguments' types).
    """
    if types is None:
        types = [pt.TensorType(p.dtype, shape=p.static) for p in recipe.params]
    inputs = [t(name=f"{prefix}{i}") for i, t in enumerate(types)]
    return inner_graph(build_outputs(recipe, inputs, order_seed), inputs)


def _construction_order(recipe: Recipe, seed: int | None) -> list[int]:
    n = len(recipe.params)
    pending = {n + k: {a for a in step.args if a >= n} for k, step in enumerate(recipe.steps)}
    rng = random.Random(seed)
    order: list[int] = []
    while pending:
        ready = sorted(v for v, deps in pending.items() if not deps)
        pick = ready[rng.randrange(len(ready))] if seed is not None else ready[0]
        order.append(pick)
        del pending[pick]
        for deps in pending.values():
            deps.discard(pick)
    return order


def _build_step(step: Step, args: list[Any], nested: str = "call") -> Any:
    value = _apply(step, args, nested)
    return IDENTITIES[step.identity](value) if step.identity else value


def _apply(step: Step, args: list[Any], nested_as: str = "call") -> Any:
    op = step.op
    if op in _UNARY_FN:
        return _UNARY_FN[op](args[0])
    if op in _BINARY_FN:
        return _BINARY_FN[op](args[0], args[1])
    if op == "const":
        return pt.constant(step.value, dtype="float64")
    if op == "sum":
        return args[0].sum()
    if op == "sum0":
        return args[0].sum(axis=0)
    if op == "index0":
        return args[0][0]
    if op == "index_last":
        return args[0][-1]
    if op == "mulc":  # a constant of another dtype: the body holds an integer or float32 constant
        return args[0] * pt.constant(np.asarray(step.value, dtype=step.dtype))
    if op == "slice1":
        return args[0][1:]
    if op == "transpose":
        return args[0].T
    if op == "expand":
        return pt.expand_dims(args[0], 0)
    if op == "dot":
        return pt.dot(args[0], args[1])
    if op == "nested":
        assert step.nested is not None
        if nested_as == "inline":
            return build_outputs(step.nested, args, nested="inline")[0]
        nested = build_function(step.nested, prefix="q", types=[a.type for a in args])
        out = call(nested, *args)
        return out if isinstance(out, Variable) else out[0]
    raise ValueError(f"unknown recipe op {op!r}")


def sample_arguments(recipe: Recipe, rng: np.random.Generator) -> list[np.ndarray]:
    """Random argument values with the params' dtypes and actual shapes (in (-1, 1))."""
    return [rng.uniform(-1, 1, size=p.actual).astype(p.dtype) for p in recipe.params]


# -- strategies -----------------------------------------------------------------------------

_SHAPES: tuple[tuple[tuple[int | None, ...], tuple[int, ...]], ...] = (
    ((), ()),
    ((3,), (3,)),
    ((None,), (3,)),
    ((2, 3), (2, 3)),
    ((None, 3), (2, 3)),
)


def _applicable(op: str, shapes: Sequence[tuple[Any, tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """The argument tuples ``op`` accepts among the values so far (by actual shape)."""
    idx = range(len(shapes))
    actual = [s[1] for s in shapes]
    static = [s[0] for s in shapes]
    if op in UNARY or op == "sum":
        return [(i,) for i in idx]
    if op in BINARY:
        return [(i, j) for i in idx for j in idx if actual[i] == actual[j]]
    if op == "mulc":
        return [(i,) for i in idx]
    if op in ("sum0", "index0", "index_last"):
        return [(i,) for i in idx if len(actual[i]) >= 1]
    if op == "slice1":
        return [(i,) for i in idx if len(actual[i]) >= 1 and actual[i][0] >= 3 and static[i][0] != 1]
    if op == "transpose":
        return [(i,) for i in idx if len(actual[i]) == 2]
    if op == "expand":
        return [(i,) for i in idx if len(actual[i]) <= 1]
    if op == "dot":
        return [(i, j) for i in idx for j in idx if len(actual[i]) == 2 and len(actual[j]) == 1 and actual[i][1] == actual[j][0]]
    return []


def _result_shape(op: str, args: Sequence[tuple[Any, tuple[int, ...]]]) -> tuple[tuple[int | None, ...], tuple[int, ...]]:
    (s0, a0), *rest = args
    if op in UNARY or op == "mulc":
        return s0, a0
    if op in BINARY:
        s1 = rest[0][0]
        return tuple(x if x is not None else y for x, y in zip(s0, s1, strict=True)), a0
    if op == "sum":
        return (), ()
    if op in ("sum0", "index0", "index_last"):
        return s0[1:], a0[1:]
    if op == "slice1":
        return (None if s0[0] is None else s0[0] - 1, *s0[1:]), (a0[0] - 1, *a0[1:])
    if op == "transpose":
        return s0[::-1], a0[::-1]
    if op == "expand":
        return (1, *s0), (1, *a0)
    if op == "dot":
        return s0[:1], a0[:1]
    raise ValueError(op)


class Picker:
    """The random choices a generator makes, from hypothesis' ``draw`` or from a seeded `random.Random`.

    The recipe and program generators are written once against this interface: under
    hypothesis (`HypothesisPicker`) every choice is a draw, so examples shrink; from a
    seed (`SeededPicker`) the same code gives a reproducible program without hypothesis.
    """

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        raise NotImplementedError

    def choice(self, options: Sequence[Any]) -> Any:
        """One of ``options``."""
        raise NotImplementedError

    def boolean(self) -> bool:
        return bool(self.integer(0, 1))

    def sublist(self, options: Sequence[Any], min_size: int = 0, max_size: int | None = None, unique: bool = False) -> list[Any]:
        """A list of ``options`` (repeats allowed unless ``unique``), ``min_size`` to ``max_size`` long."""
        raise NotImplementedError

    def integer_list(self, low: int, high: int, min_size: int = 0, max_size: int | None = None) -> list[int]:
        """A list of integers in ``[low, high]``, ``min_size`` to ``max_size`` long."""
        return self.sublist(range(low, high + 1), min_size, max_size)


class HypothesisPicker(Picker):
    """Choices drawn by hypothesis (inside an ``st.composite``): they shrink."""

    def __init__(self, draw: Callable[[Any], Any]):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        from hypothesis import strategies as st

        return int(self.draw(st.integers(low, high)))

    def choice(self, options: Sequence[Any]) -> Any:
        from hypothesis import strategies as st

        return self.draw(st.sampled_from(list(options)))

    def boolean(self) -> bool:
        from hypothesis import strategies as st

        return bool(self.draw(st.booleans()))

    def sublist(self, options: Sequence[Any], min_size: int = 0, max_size: int | None = None, unique: bool = False) -> list[Any]:
        from hypothesis import strategies as st

        return list(self.draw(st.lists(st.sampled_from(list(options)), min_size=min_size, max_size=max_size, unique=unique)))

    def integer_list(self, low: int, high: int, min_size: int = 0, max_size: int | None = None) -> list[int]:
        from hypothesis import strategies as st

        return list(self.draw(st.lists(st.integers(low, high), min_size=min_size, max_size=max_size)))


class SeededPicker(Picker):
    """Choices from a `random.Random`: the same seed gives the same choices."""

    def __init__(self, seed: int | random.Random):
        self.rng = seed if isinstance(seed, random.Random) else random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def choice(self, options: Sequence[Any]) -> Any:
        return options[self.rng.randrange(len(options))]

    def sublist(self, options: Sequence[Any], min_size: int = 0, max_size: int | None = None, unique: bool = False) -> list[Any]:
        options = list(options)
        high = min_size + 3 if max_size is None else max_size
        if unique:
            high = min(high, len(options))
        size = self.rng.randint(min_size, max(min_size, high))
        if unique:
            return self.rng.sample(options, size)
        return [self.choice(options) for _ in range(size)]


def recipes(max_params: int = 3, max_steps: int = 6, nesting: int = 1) -> Any:
    """Hypothesis strategy of random closed-body recipes (nested bodies up to ``nesting``)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Any) -> Recipe:
        pick = HypothesisPicker(draw)
        n_params = pick.integer(1, max_params)
        params = []
        for _ in range(n_params):
            static, actual = pick.choice(_SHAPES)
            params.append(Param(pick.choice(["float64", "float32"]), static, actual))
        return draw_steps(pick, tuple(params), max_steps, nesting)

    return strategy()


def draw_steps(pick: Picker, params: tuple[Param, ...], max_steps: int, nesting: int) -> Recipe:
    """A recipe over ``params``: 1 to ``max_steps`` steps, nested bodies up to ``nesting`` deep."""
    shapes: list[tuple[Any, tuple[int, ...]]] = [(p.static, p.actual) for p in params]
    steps: list[Step] = []
    for _ in range(pick.integer(1, max_steps)):
        kinds = [op for op in (*UNARY, *BINARY, "sum", "sum0", "index0", "index_last", "slice1", "transpose", "expand",
                               "dot", "mulc") if _applicable(op, shapes)]
        kinds += ["const"] + (["nested"] if nesting > 0 else [])
        op = pick.choice(kinds)
        if op == "const":
            steps.append(Step("const", value=pick.choice([0.5, 2.0, -1.5, 3.0])))
            shapes.append(((), ()))
            continue
        if op == "mulc":
            (arg,) = pick.choice(_applicable(op, shapes))
            steps.append(Step("mulc", (arg,), value=pick.choice([2.0, 3.0, -1.0]), dtype=pick.choice(MULC_DTYPES)))
            shapes.append(shapes[arg])
            continue
        if op == "nested":
            k = pick.integer(1, min(2, len(shapes)))
            args = tuple(pick.integer_list(0, len(shapes) - 1, min_size=k, max_size=k))
            inner_params = tuple(_param_like(shapes[a]) for a in args)
            inner = draw_steps(pick, inner_params, max(1, max_steps // 2), nesting - 1)
            inner = replace(inner, outputs=inner.outputs[:1])
            steps.append(Step("nested", args, nested=inner))
            shapes.append(inner.shapes[inner.outputs[0]] if inner.shapes else shapes[args[0]])
            continue
        args = pick.choice(_applicable(op, shapes))
        steps.append(Step(op, args))
        shapes.append(_result_shape(op, [shapes[a] for a in args]))
    n_values = len(params) + len(steps)
    n_out = pick.integer(1, min(2, len(steps)))
    outputs = tuple(sorted({n_values - 1, *pick.integer_list(len(params), n_values - 1, max_size=n_out - 1)}))
    return Recipe(params, tuple(steps), outputs, tuple(shapes))


def _param_like(shape: tuple[Any, tuple[int, ...]]) -> Param:
    # Placeholder dtype: a nested body is built with its arguments' actual types.
    return Param("float64", shape[0], shape[1])


# -- mutations (law 2) ----------------------------------------------------------------------

MUTATIONS = ("op", "constant", "dtype", "static_shape", "position", "nesting")


def mutate(recipe: Recipe, kind: str, choice: int = 0) -> Recipe | None:
    """``recipe`` changed in meaning by ``kind`` (one of `MUTATIONS`), or None if not applicable."""
    return _MUTATORS[kind](recipe, choice)


def _mutate_op(recipe: Recipe, choice: int) -> Recipe | None:
    live = recipe.live()
    n = len(recipe.params)
    candidates = [k for k, s in enumerate(recipe.steps) if (s.op in UNARY or s.op in ("add", "mul")) and n + k in live]
    if not candidates:
        return None
    k = candidates[choice % len(candidates)]
    step = recipe.steps[k]
    family = UNARY if step.op in UNARY else ("add", "mul")
    new_op = family[(family.index(step.op) + 1) % len(family)]
    return replace(recipe, steps=_replaced(recipe.steps, k, replace(step, op=new_op)))


def _mutate_constant(recipe: Recipe, choice: int) -> Recipe | None:
    live = recipe.live()
    candidates = [k for k, s in enumerate(recipe.steps) if s.op == "const" and len(recipe.params) + k in live]
    if not candidates:
        return None
    k = candidates[choice % len(candidates)]
    step = recipe.steps[k]
    return replace(recipe, steps=_replaced(recipe.steps, k, replace(step, value=step.value + 1.25)))


def _mutate_dtype(recipe: Recipe, choice: int) -> Recipe:
    i = choice % len(recipe.params)
    p = recipe.params[i]
    flipped = replace(p, dtype="float32" if p.dtype == "float64" else "float64")
    return replace(recipe, params=_replaced(recipe.params, i, flipped))


def _mutate_static_shape(recipe: Recipe, choice: int) -> Recipe | None:
    candidates = [i for i, p in enumerate(recipe.params) if any(d is not None for d in p.static)]
    if not candidates:
        return None
    i = candidates[choice % len(candidates)]
    p = recipe.params[i]
    return replace(recipe, params=_replaced(recipe.params, i, replace(p, static=(None,) * len(p.static))))


def _mutate_position(recipe: Recipe, choice: int) -> Recipe | None:
    used = recipe.used_params()
    n = len(recipe.params)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if (i in used) != (j in used) or i in used]
    pairs = [(i, j) for i, j in pairs if recipe.params[i].actual == recipe.params[j].actual]
    if not pairs:
        return None
    i, j = pairs[choice % len(pairs)]
    swap = {i: j, j: i}
    params = list(recipe.params)
    params[i], params[j] = params[j], params[i]
    steps = tuple(replace(s, args=tuple(swap.get(a, a) for a in s.args)) for s in recipe.steps)
    return replace(recipe, params=tuple(params), steps=steps, outputs=tuple(swap.get(o, o) for o in recipe.outputs))


def _mutate_nesting(recipe: Recipe, choice: int) -> Recipe:
    """The same computation one level down: the body calls a nested body doing all the work."""
    n = len(recipe.params)
    steps = tuple(Step("nested", tuple(range(n)), nested=replace(recipe, outputs=(o,))) for o in recipe.outputs)
    return replace(recipe, steps=steps, outputs=tuple(range(n, n + len(steps))))


def _replaced(items: tuple[Any, ...], k: int, item: Any) -> tuple[Any, ...]:
    return (*items[:k], item, *items[k + 1 :])


_MUTATORS: dict[str, Callable[[Recipe, int], Recipe | None]] = {
    "op": _mutate_op,
    "constant": _mutate_constant,
    "dtype": _mutate_dtype,
    "static_shape": _mutate_static_shape,
    "position": _mutate_position,
    "nesting": _mutate_nesting,
}


def mutations() -> Any:
    """Hypothesis strategy of ``(kind, choice)`` pairs for `mutate`."""
    from hypothesis import strategies as st

    return st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 7))


def recipes_over(params: tuple[Param, ...], max_steps: int = 6, nesting: int = 0) -> Any:
    """Hypothesis strategy of recipes whose params are ``params`` (e.g. values already in scope)."""
    from hypothesis import strategies as st

    return st.composite(lambda draw: draw_steps(HypothesisPicker(draw), params, max_steps, nesting))()
