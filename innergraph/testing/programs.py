"""Random user programs, written with plain PyTensor, compared with vanilla under every linker.

A *program* is data describing what a user writes: float64 inputs and one expression
tree over them, whose nodes are

`Leaf`
    a random body from `innergraph.testing.recipes` applied to values in scope;
`Loop`
    ``pytensor.scan`` with sequences (with taps), sit-sot and mit-sot states (several
    taps), nit-sot outputs, explicit and captured non-sequences, ``n_steps`` and an
    optional ``until`` condition; every output is computed by a nested expression over
    the step's arguments;
`Cond`
    ``pytensor.ifelse.ifelse`` with a nested expression in each branch;
`Graph`
    ``OpFromGraph`` over some values in scope, its body a nested expression.

A value in scope is described by its *shape*: the static shape PyTensor's type carries
(``None`` when unknown) and the actual shape of the sample arrays. The program's cost is
the sum of the expression's value; it is differentiated ``order`` times
(``pytensor.grad`` of a scalar reduction, then grad again), and the compiled function
returns the value and every derivative.

`check_against_vanilla` compiles a program twice per linker — with innergraph's
pipeline (``mode_for(linker)``) and as vanilla PyTensor (``mode_for(linker).excluding
("innergraph")``, compiled and run with innergraph uninstalled) — and compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.basic import Variable
from pytensor.ifelse import ifelse
from pytensor.scan.utils import until as scan_until

from innergraph.patching import uninstalled
from innergraph.testing.recipes import Param, Recipe, build_outputs, recipes_over

__all__ = [
    "LINKERS",
    "Cond",
    "Graph",
    "Leaf",
    "Loop",
    "Outcome",
    "Program",
    "State",
    "build_program",
    "check_against_vanilla",
    "mode_for",
    "programs",
    "sample_inputs",
]

Shape = tuple[tuple[int | None, ...], tuple[int, ...]]

#: The linkers a program is compared under.
LINKERS = ("py", "cvm", "numba", "jax")


@dataclass(frozen=True)
class Leaf:
    """``recipe`` applied to the values ``args`` in scope; its last value."""

    recipe: Recipe
    args: tuple[int, ...]


@dataclass(frozen=True)
class State:
    """A recurrent state: initial value ``init`` in scope; ``taps`` (-1,) is a sit-sot, else a mit-sot."""

    init: int
    taps: tuple[int, ...]


@dataclass(frozen=True)
class Loop:
    """``pytensor.scan``: sequences ``(value, taps)``, states, nit-sots, non-sequences and bodies.

    ``non_sequences`` are ``(value, explicit)``: passed as ``non_sequences`` or captured by
    the step function. ``bodies`` compute the states' updates then the nit-sots, in the step's
    scope: sequence taps, state taps, explicit non-sequences, then captured values. ``stop``
    (a scope index) makes it a while loop: stop once that value's sum exceeds ``threshold``.
    """

    sequences: tuple[tuple[int, tuple[int, ...]], ...]
    states: tuple[State, ...]
    non_sequences: tuple[tuple[int, bool], ...]
    bodies: tuple[Any, ...]
    n_steps: int
    explicit_n_steps: bool
    stop: int | None
    threshold: float
    summed: tuple[bool, ...]  # per state: its body's value is summed (its shape differs)
    result: int  # which output the loop's value reads
    last: bool  # its last step (else its sum over steps)
    all_live: bool  # add the other outputs' sums, so no output is dead


@dataclass(frozen=True)
class Cond:
    """``ifelse(sum(scope[cond]) > 0, then, other)``; both branches summed when their shapes differ."""

    cond: int
    then: Any
    other: Any
    summed: bool


@dataclass(frozen=True)
class Graph:
    """``OpFromGraph`` over the values ``args``, computing ``body`` in its own scope."""

    args: tuple[int, ...]
    body: Any


Expr = Leaf | Loop | Cond | Graph


@dataclass(frozen=True)
class Program:
    """Float64 inputs, an expression over them and how many times to differentiate its cost."""

    inputs: tuple[Shape, ...]
    expr: Expr
    order: int


# -- building ------------------------------------------------------------------------------


def build_program(program: Program) -> tuple[list[Variable], list[Variable]]:
    """Fresh input variables and the outputs: the value, its cost's derivatives of order 1..``order``."""
    inputs: list[Variable] = [
        pt.tensor(dtype="float64", shape=static, name=f"x{i}") for i, (static, _) in enumerate(program.inputs)
    ]
    value = _build(program.expr, list(inputs))
    outputs: list[Variable] = [value]
    cost = value.sum()
    for _ in range(program.order):
        grads: Any = pytensor.grad(cost, inputs, disconnected_inputs="ignore", null_gradients="return")
        outputs.extend(grads)
        cost = pt.add(*[g.sum() for g in grads])
    return inputs, outputs


def sample_inputs(program: Program, seed: int) -> list[np.ndarray]:
    """Random float64 input values in (-1, 1) with the inputs' actual shapes."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=actual) for _, actual in program.inputs]


def _build(expr: Expr, scope: list[Any]) -> Any:
    if isinstance(expr, Leaf):
        return build_outputs(expr.recipe, [scope[a] for a in expr.args])[-1]
    if isinstance(expr, Cond):
        then, other = _build(expr.then, scope), _build(expr.other, scope)
        if expr.summed:
            then, other = then.sum(), other.sum()
        return ifelse(scope[expr.cond].sum() > 0, then, other)
    if isinstance(expr, Graph):
        inner = [scope[a].type() for a in expr.args]
        out = _build(expr.body, list(inner))
        return OpFromGraph(inner, [out], on_unused_input="ignore")(*[scope[a] for a in expr.args])
    return _build_loop(expr, scope)


def _build_loop(loop: Loop, scope: list[Any]) -> Any:
    captured = [scope[v] for v, explicit in loop.non_sequences if not explicit]
    n_states = len(loop.states)

    def step(*args: Any) -> Any:
        inner = [*args, *captured]
        outs = []
        position = sum(len(taps) for _, taps in loop.sequences)
        for k, body in enumerate(loop.bodies):
            value = _build(body, inner)
            if k < n_states:  # a state: damped towards tanh of the body, same type as the state
                position += len(loop.states[k].taps)
                previous = inner[position - 1]
                fitted = value.sum() if loop.summed[k] else value
                value = previous.type.filter_variable(0.5 * previous + 0.5 * pt.tanh(fitted))
            outs.append(value)
        if loop.stop is None:
            return outs
        return outs, scan_until(inner[loop.stop].sum() > loop.threshold)

    outputs_info: list[Any] = [
        scope[s.init] if s.taps == (-1,) else {"initial": scope[s.init][: -min(s.taps)], "taps": list(s.taps)}
        for s in loop.states
    ]
    outputs_info += [None] * (len(loop.bodies) - n_states)
    outs = pytensor.scan(
        step,
        sequences=[{"input": scope[v], "taps": list(taps)} for v, taps in loop.sequences],
        outputs_info=outputs_info,
        non_sequences=[scope[v] for v, explicit in loop.non_sequences if explicit],
        n_steps=loop.n_steps if loop.explicit_n_steps else None,
        return_updates=False,
    )
    outs = outs if isinstance(outs, list | tuple) else [outs]
    chosen = outs[loop.result]
    value = chosen[-1] if loop.last else chosen.sum(axis=0)
    if loop.all_live and len(outs) > 1:
        value = value + 0.1 * pt.add(*[o.sum() for k, o in enumerate(outs) if k != loop.result])
    return value


# -- strategies ----------------------------------------------------------------------------

_INPUT_SHAPES: tuple[Shape, ...] = (
    ((), ()),
    ((3,), (3,)),
    ((None,), (3,)),
    ((5,), (5,)),
    ((2, 3), (2, 3)),
    ((None, 3), (4, 3)),
)
_SEQUENCE_TAPS = ((0,), (-1,), (-1, 0), (0, 1), (-2, 0))
_MIT_SOT_TAPS = ((-2, -1), (-3, -1), (-2,), (-3, -2, -1))


def programs(depth: int = 2, orders: Sequence[int] = (0, 1, 2, 3), max_inputs: int = 3) -> Any:
    """Hypothesis strategy of `Program`s: a scan, ifelse or OpFromGraph at the top, nested up to ``depth``."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Any) -> Program:
        inputs = tuple(draw(st.lists(st.sampled_from(_INPUT_SHAPES), min_size=1, max_size=max_inputs)))
        expr, _ = draw(_exprs(list(inputs), depth, top=True))
        return Program(inputs, expr, draw(st.sampled_from(list(orders))))

    return strategy()


def _exprs(scope: list[Shape], depth: int, top: bool = False) -> Any:
    from hypothesis import strategies as st

    kinds = ["leaf"] if depth == 0 else (["loop", "loop", "cond", "graph"] if top else ["leaf", "leaf", "loop", "cond", "graph"])

    @st.composite
    def strategy(draw: Any) -> tuple[Expr, Shape]:
        kind = draw(st.sampled_from(kinds))
        if kind == "leaf":
            return draw(_leaves(scope))
        if kind == "cond":
            then, then_shape = draw(_exprs(scope, depth - 1))
            other, other_shape = draw(_exprs(scope, depth - 1))
            summed = then_shape != other_shape
            return Cond(draw(st.integers(0, len(scope) - 1)), then, other, summed), ((), ()) if summed else then_shape
        if kind == "graph":
            args = tuple(draw(st.lists(st.integers(0, len(scope) - 1), min_size=1, max_size=3)))
            body, shape = draw(_exprs([scope[a] for a in args], depth - 1))
            return Graph(args, body), shape
        return draw(_loops(scope, depth))

    return strategy()


def _leaves(scope: list[Shape]) -> Any:
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Any) -> tuple[Leaf, Shape]:
        args = tuple(draw(st.lists(st.integers(0, len(scope) - 1), min_size=1, max_size=min(3, len(scope)))))
        params = tuple(Param("float64", *scope[a]) for a in args)
        recipe = draw(recipes_over(params, max_steps=4))
        return Leaf(recipe, args), recipe.shapes[-1]

    return strategy()


def _loops(scope: list[Shape], depth: int) -> Any:
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Any) -> tuple[Loop, Shape]:
        idx = range(len(scope))
        vectors = [i for i in idx if len(scope[i][1]) >= 1 and scope[i][1][0] >= 3]
        chosen = draw(st.lists(st.sampled_from(vectors), max_size=2)) if vectors else []
        sequences = tuple((v, draw(st.sampled_from(_SEQUENCE_TAPS))) for v in chosen)
        max_steps = min([scope[v][1][0] - (max(t) - min(t)) for v, t in sequences], default=4)
        n_steps = draw(st.integers(1, min(max_steps, 4)))
        states = []
        for _ in range(draw(st.integers(0, 2))):
            taps = draw(st.sampled_from([(-1,), (-1,), *_MIT_SOT_TAPS]))
            if taps == (-1,):
                states.append(State(draw(st.sampled_from(list(idx))), taps))
                continue
            long_enough = [i for i in vectors if scope[i][1][0] >= -min(taps)]
            if long_enough:
                states.append(State(draw(st.sampled_from(long_enough)), taps))
        n_nit_sots = draw(st.integers(0 if states else 1, 2))
        at_least = 0 if sequences or states else 1  # the step must have something to compute from
        # (unique: pytensor.scan rejects a variable passed twice as a non-sequence)
        non_sequences = tuple((v, draw(st.booleans()))
                              for v in draw(st.lists(st.sampled_from(list(idx)), min_size=at_least, max_size=2, unique=True)))
        step_scope = [_row(scope[v]) for v, taps in sequences for _ in taps]
        for s in states:
            step_scope += [scope[s.init] if s.taps == (-1,) else _row(scope[s.init])] * len(s.taps)
        step_scope += [scope[v] for v, e in non_sequences if e] + [scope[v] for v, e in non_sequences if not e]
        bodies, shapes, summed = [], [], []
        for k in range(len(states) + n_nit_sots):
            body, shape = draw(_exprs(step_scope, depth - 1))
            bodies.append(body)
            if k < len(states):
                summed.append(shape[1] != _state_shape(scope, states[k])[1])
                shape = _state_shape(scope, states[k])
            shapes.append(shape)
        stop = draw(st.one_of(st.none(), st.integers(0, len(step_scope) - 1))) if draw(st.integers(0, 3)) == 0 else None
        result = draw(st.integers(0, len(bodies) - 1))
        last = draw(st.booleans())
        loop = Loop(sequences, tuple(states), non_sequences, tuple(bodies), n_steps,
                    draw(st.booleans()) or not sequences, stop, draw(st.sampled_from([0.0, 0.5, 2.0])),
                    tuple(summed), result, last, draw(st.booleans()))
        return loop, shapes[result]

    return strategy()


def _row(shape: Shape) -> Shape:
    return shape[0][1:], shape[1][1:]


def _state_shape(scope: list[Shape], state: State) -> Shape:
    return scope[state.init] if state.taps == (-1,) else _row(scope[state.init])


# -- comparing with vanilla ----------------------------------------------------------------


def mode_for(linker: str) -> Mode:
    """The FAST_RUN mode with ``linker``: ``"py"``, ``"cvm"``, ``"numba"`` or ``"jax"``."""
    if linker in ("py", "cvm"):
        return Mode(linker=linker, optimizer="fast_run")
    if linker in ("numba", "jax"):
        return get_mode(linker.upper())
    raise ValueError(f"mode_for: unknown linker {linker!r} (expected one of {LINKERS})")


@dataclass(frozen=True)
class Outcome:
    """What happened under one linker.

    ``kind`` is one of

    ``"equal"``
        both ran and gave the same numbers;
    ``"both_failed"``
        vanilla raised ``error`` and innergraph raised ``our_error`` (the classes may
        differ: `same_failure`);
    ``"vanilla_failed"``
        vanilla raised ``error``; innergraph ran and gave the numbers vanilla gives under
        the linker ``reference``;
    ``"unchecked"``
        vanilla raised ``error`` under every linker tried, innergraph ran: nothing to
        compare with.
    """

    linker: str
    kind: str
    error: str = ""
    our_error: str = ""
    reference: str = ""

    @property
    def same_failure(self) -> bool:
        """Whether both failed with the same exception class."""
        return self.kind == "both_failed" and self.error.split("(")[0] == self.our_error.split("(")[0]


def _brief(error: BaseException) -> str:
    return f"{type(error).__name__}({str(error)[:120]!r})"


def _run(program: Program, linker: str, values: list[np.ndarray], vanilla: bool) -> list[np.ndarray] | Exception:
    """The outputs' values, or the exception compiling or running raised (building must not raise)."""
    with uninstalled() if vanilla else nullcontext():
        inputs, outputs = build_program(program)
        mode = mode_for(linker).excluding("innergraph") if vanilla else mode_for(linker)
        try:
            fn = pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")
            return [np.asarray(v) for v in fn(*values)]
        except Exception as error:  # noqa: BLE001 - a failure is an outcome to compare
            return error


def check_against_vanilla(
    program: Program,
    linkers: Sequence[str] = LINKERS,
    *,
    seed: int = 0,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    references: Sequence[str] = ("cvm", "py", "numba"),
) -> list[Outcome]:
    """Compile ``program`` with and without innergraph under each linker; fail on any difference.

    Parameters
    ----------
    program
        The program (see `programs`).
    linkers
        Linker names for `mode_for`.
    seed
        Seed of the input values (`sample_inputs`).
    rtol, atol
        Tolerances of `numpy.testing.assert_allclose` (float64 arithmetic, reordered).
    references
        When vanilla cannot compile or run the program under a linker but innergraph can,
        innergraph's numbers are compared with vanilla's under the first of these linkers
        where vanilla runs.

    Returns
    -------
    list of Outcome
        One per linker.

    Raises
    ------
    AssertionError
        When innergraph gives other numbers than vanilla or fails where vanilla runs; the
        message names the linker, the output and both values (or the error).
    """
    values = sample_inputs(program, seed)
    names = _output_names(program)
    outcomes = []
    for linker in linkers:
        theirs = _run(program, linker, values, vanilla=True)
        ours = _run(program, linker, values, vanilla=False)
        where = f"under the {linker!r} linker"
        if not isinstance(theirs, Exception):
            if isinstance(ours, Exception):
                raise AssertionError(f"{where}, vanilla ran but innergraph raised {ours!r}") from ours
            _compare(ours, theirs, names, where, rtol, atol)
            outcomes.append(Outcome(linker, "equal"))
        elif isinstance(ours, Exception):
            outcomes.append(Outcome(linker, "both_failed", _brief(theirs), _brief(ours)))
        else:
            outcomes.append(_against_references(program, linker, ours, theirs, values, references, names, rtol, atol))
    return outcomes


def _against_references(program: Program, linker: str, ours: list[np.ndarray], theirs: Exception,
                        values: list[np.ndarray], references: Sequence[str], names: list[str],
                        rtol: float, atol: float) -> Outcome:
    for reference in (r for r in references if r != linker):
        numbers = _run(program, reference, values, vanilla=True)
        if isinstance(numbers, Exception):
            continue
        where = f"under the {linker!r} linker (vanilla raised {theirs!r}; compared with vanilla under {reference!r})"
        _compare(ours, numbers, names, where, rtol, atol)
        return Outcome(linker, "vanilla_failed", _brief(theirs), reference=reference)
    return Outcome(linker, "unchecked", _brief(theirs))


def _output_names(program: Program) -> list[str]:
    """``value``, then ``derivative k wrt xi`` (the order of `build_program`'s outputs)."""
    n = len(program.inputs)
    return ["value"] + [f"derivative {k} wrt x{i}" for k in range(1, program.order + 1) for i in range(n)]


def _compare(ours: list[np.ndarray], theirs: list[np.ndarray], names: list[str], where: str, rtol: float, atol: float) -> None:
    for name, got, want in zip(names, ours, theirs, strict=True):
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        except AssertionError as error:
            raise AssertionError(f"{where}, {name}: innergraph {got!r} vs vanilla {want!r}\n{error}") from None

