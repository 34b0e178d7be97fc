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
    ``OpFromGraph`` over some values in scope, its body a nested expression;
`Group`
    the Python loop of a grouped model: K ``pytensor.scan`` loops over one step body, one per
    column of a matrix (in a drawn order, with static or symbolic shapes), each with its own
    taps and ``n_steps``: what ``batch_loops`` batches when their layouts agree.

A value in scope is described by its *shape*: the static shape PyTensor's type carries
(``None`` when unknown) and the actual shape of the sample arrays. The program's cost is
the sum of the expression's value; it is differentiated ``order`` times
(``pytensor.grad`` of a scalar reduction, then grad again), and the compiled function
returns the value and every derivative. innergraph's compiled function is also pickled,
loaded and run again (`PICKLED`): the same numbers, its bodies encoded as before.

`check_against_vanilla` compiles a program twice per linker — with innergraph's
pipeline (``mode_for(linker)``) and as vanilla PyTensor (the same mode, the program
built, compiled and run with innergraph uninstalled) — and compares; `compare_with_vanilla`
returns the `Outcome` instead of raising.
"""

from __future__ import annotations

from collections.abc import Sequence
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import pickle

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.basic import Variable
from pytensor.conditional.op import ifelse
from pytensor.scan.utils import until as scan_until

from innergraph.core.canonical import encode
from innergraph.core.graph import body_of, is_function
from innergraph.patching import uninstalled
from innergraph.testing.recipes import HypothesisPicker, Param, Picker, Recipe, SeededPicker, build_outputs, draw_steps

__all__ = [
    "LINKERS",
    "FEATURES",
    "LOOP_FEATURES",
    "Cond",
    "Graph",
    "Group",
    "Leaf",
    "Loop",
    "Outcome",
    "Program",
    "PICKLED",
    "SMALL",
    "Sizes",
    "State",
    "build_program",
    "check_against_vanilla",
    "compare_with_vanilla",
    "draw_program",
    "features",
    "mode_for",
    "programs",
    "random_program",
    "sample_inputs",
    "shared_value",
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
    """A recurrent state: initial value ``init`` in scope; ``taps`` (-1,) is a sit-sot, else a mit-sot.

    A ``shared`` state (a sit-sot) is a ``pytensor.shared`` variable of ``init``'s type and
    a fixed value (`shared_value`) that the step updates through scan's updates: its only
    value after the loop is its last one.
    """

    init: int
    taps: tuple[int, ...]
    shared: bool = False


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


@dataclass(frozen=True)
class Group:
    """K ``pytensor.scan`` loops over one step, loop ``k`` over column ``columns[k]`` of the matrix ``scope[matrix]``.

    Loop ``k`` has one state with ``taps[k]`` (every loop as many taps, so one ``step``
    recipe serves them all): its initial rows are the column's first ``-min(taps[k])``
    rows (its first row for a sit-sot), its sequence the rows after them, its non-sequence
    the column's last entry; ``n_steps[k]`` is explicit or None (the sequence's length).
    ``step`` is a recipe over scalars: the sequence's row, the state's taps, the
    non-sequence; the state is damped towards tanh of its value. The group's value stacks
    each loop's last state (``last``) or the sum of its trace.

    ``through`` (one scale per loop, or empty): loop ``k``'s sequence, initial rows and
    non-sequence are outputs of an ``OpFromGraph`` of its own over the whole matrix (the
    sequence ``tanh(m[rows:, column]) * through[k]``) beside a dead ``m + 1``, which
    innergraph lifts into a call: K calls with equal Ops over different bodies and one
    argument, feeding K loops of one step that read no constant of their own and whose
    lengths are no constants (``n_steps`` all None; the matrix's rows symbolic in two of its
    three shapes), so that outlining takes the group (a group of column slices has constant
    column indices or step counts that differ, which it refuses, or equal ones, which it
    leaves to loop merging); outlining once took those calls for one computation.
    """

    matrix: int
    columns: tuple[int, ...]
    taps: tuple[tuple[int, ...], ...]
    n_steps: tuple[int | None, ...]
    step: Recipe
    last: bool
    through: tuple[float, ...] = ()


Expr = Leaf | Loop | Cond | Graph | Group


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
    if isinstance(expr, Group):
        return _build_group(expr, scope)
    return _build_loop(expr, scope)


def _build_group(group: Group, scope: list[Any]) -> Any:
    matrix = scope[group.matrix]

    def step(x: Any, *rest: Any) -> Any:
        *state_taps, c = rest
        value: Any = build_outputs(group.step, [x, *state_taps, c])[-1]
        before = state_taps[-1]
        return before.type.filter_variable(0.5 * before + 0.5 * pt.tanh(value.sum()))

    values = []
    for k, (column, taps, n_steps) in enumerate(zip(group.columns, group.taps, group.n_steps, strict=True)):
        rows = -min(taps)
        if group.through:
            m = matrix.type()
            outputs: Any = OpFromGraph(
                [m], [pt.tanh(m[rows:, column]) * group.through[k], m[0, column] if taps == (-1,) else m[:rows, column],
                      m[-1, column], m + 1.0],
            )(matrix)
            sequence, first, last = outputs[0], outputs[1], outputs[2]  # outputs[3], m + 1, is dead
        else:
            sequence, last = matrix[rows:, column], matrix[-1, column]
            first = matrix[0, column] if taps == (-1,) else matrix[:rows, column]
        initial = first if taps == (-1,) else {"initial": first, "taps": list(taps)}
        trace = pytensor.scan(step, sequences=[sequence], outputs_info=[initial],
                              non_sequences=[last], n_steps=n_steps, return_updates=False)
        values.append(trace[-1] if group.last else trace.sum())
    return pt.stack(values)


def shared_value(shape: tuple[int, ...], k: int) -> np.ndarray:
    """The value of a loop's ``k``-th shared state: fixed, so two builds of a program agree."""
    size = int(np.prod(shape, dtype=int))
    return np.cos(np.arange(size) + k).reshape(shape) * 0.5


def _shared(type_: Any, k: int) -> Any:
    """A shared variable of ``type_`` (a static shape: `draw_program` makes sure) holding `shared_value`."""
    value = shared_value(type_.shape, k)
    variable = pytensor.shared(value, name=f"shared{k}", **({"shape": type_.shape} if type_.ndim else {}))
    if variable.type != type_:
        raise AssertionError(f"shared state {k}: {variable.type} is not the state's type {type_}")
    return variable


def _step_positions(loop: Loop, scope: list[Any]) -> list[int]:
    """Where each state's previous value is in the step's scope (see `Loop`)."""
    position = sum(len(taps) for _, taps in loop.sequences)
    shared_at = position + sum(len(s.taps) for s in loop.states if not s.shared) + len(loop.non_sequences)
    positions = []
    for s in loop.states:
        if s.shared:
            positions.append(shared_at)
            shared_at += 1
        else:
            position += len(s.taps)
            positions.append(position - 1)
    return positions


def _build_loop(loop: Loop, scope: list[Any]) -> Any:
    shared = {k: _shared(scope[s.init].type, k) for k, s in enumerate(loop.states) if s.shared}
    captured = [scope[v] for v, explicit in loop.non_sequences if not explicit] + list(shared.values())
    n_states = len(loop.states)
    previous = _step_positions(loop, scope)

    def step(*args: Any) -> Any:
        inner = [*args, *captured]
        outs, updates = [], {}
        for k, body in enumerate(loop.bodies):
            value = _build(body, inner)
            if k < n_states:  # a state: damped towards tanh of the body, same type as the state
                before = inner[previous[k]]
                fitted = value.sum() if loop.summed[k] else value
                value = before.type.filter_variable(0.5 * before + 0.5 * pt.tanh(fitted))
                if k in shared:
                    updates[shared[k]] = value
                    continue
            outs.append(value)
        returned: list[Any] = [outs, updates] if shared else [outs]
        if loop.stop is not None:
            returned.append(scan_until(inner[loop.stop].sum() > loop.threshold))
        return returned[0] if len(returned) == 1 else tuple(returned)

    outputs_info: list[Any] = [
        scope[s.init] if s.taps == (-1,) else {"initial": scope[s.init][: -min(s.taps)], "taps": list(s.taps)}
        for s in loop.states if not s.shared
    ]
    outputs_info += [None] * (len(loop.bodies) - n_states)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Scan return signature will change", DeprecationWarning)
        built = pytensor.scan(
            step,
            sequences=[{"input": scope[v], "taps": list(taps)} for v, taps in loop.sequences],
            outputs_info=outputs_info,
            non_sequences=[scope[v] for v, explicit in loop.non_sequences if explicit],
            n_steps=loop.n_steps if loop.explicit_n_steps else None,
            return_updates=bool(shared),
        )
    outs, updates = built if shared else (built, {})
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    values: list[Any] = []  # per body: its whole trace, or a shared state's last value
    for k in range(len(loop.bodies)):
        values.append(updates[shared[k]] if k in shared else outs.pop(0))
    chosen = values[loop.result]
    value = chosen if loop.result in shared else (chosen[-1] if loop.last else chosen.sum(axis=0))
    if loop.all_live and len(values) > 1:
        value = value + 0.1 * pt.add(*[o.sum() for k, o in enumerate(values) if k != loop.result])
    return value


# -- what a program covers ----------------------------------------------------------------

#: The features a program can have (`features`), which the differential test covers in every run.
LOOP_FEATURES = ("sit-sot", "mit-sot", "nit-sot", "untraced", "shared", "multi-tap sequence", "until")
FEATURES = (*LOOP_FEATURES, "ifelse", "opfromgraph", "nesting", "group", "group through calls")


def features(program: Program) -> frozenset[str]:
    """What ``program`` exercises: `FEATURES` its expression has, and ``"order k"`` for its order.

    ``"untraced"``: a loop's value is a (non-shared) state read at its last step only, a trace
    the pipeline can carry instead; ``"nesting"``: a loop, conditional or OpFromGraph inside another.
    """
    found = {f"order {program.order}"}
    _collect(program.expr, found, inside=False)
    return frozenset(found)


def _collect(expr: Expr, found: set[str], inside: bool) -> None:
    if isinstance(expr, Leaf):
        return
    if isinstance(expr, Group):
        found.add("group")
        if expr.through:
            found.add("group through calls")
        return
    if inside:
        found.add("nesting")
    if isinstance(expr, Cond):
        found.add("ifelse")
        children: tuple[Any, ...] = (expr.then, expr.other)
    elif isinstance(expr, Graph):
        found.add("opfromgraph")
        children = (expr.body,)
    else:
        found.update(_loop_features(expr))
        children = expr.bodies
    for child in children:
        _collect(child, found, inside=True)


def _loop_features(loop: Loop) -> set[str]:
    found = set()
    for k, state in enumerate(loop.states):
        if state.shared:
            found.add("shared")
            continue
        found.add("sit-sot" if state.taps == (-1,) else "mit-sot")
        if k == loop.result and loop.last:
            found.add("untraced")
    if len(loop.bodies) > len(loop.states):
        found.add("nit-sot")
    if any(len(taps) > 1 for _, taps in loop.sequences):
        found.add("multi-tap sequence")
    if loop.stop is not None:
        found.add("until")
    return found


# -- drawing programs ----------------------------------------------------------------------

_INPUT_SHAPES: tuple[Shape, ...] = (
    ((), ()),
    ((3,), (3,)),
    ((None,), (3,)),
    ((5,), (5,)),
    ((2, 3), (2, 3)),
    ((None, 3), (4, 3)),
)
_LONG_SHAPES = tuple(s for s in _INPUT_SHAPES if s[1] and s[1][0] >= 3)
#: A group's matrix (`Group`): K columns of 6 rows, static, symbolic rows, or wholly symbolic.
_GROUP_SHAPES: tuple[Shape, ...] = (((6, 4), (6, 4)), ((None, 4), (6, 4)), ((None, None), (6, 4)))
#: A group's taps, by how many (every loop of a group has as many): equal counts, other values.
_GROUP_TAPS = {1: ((-1,), (-2,)), 2: ((-2, -1), (-3, -1), (-3, -2))}
_SEQUENCE_TAPS = ((0,), (-1,), (-1, 0), (0, 1), (-2, 0))
_MIT_SOT_TAPS = ((-2, -1), (-3, -1), (-2,), (-3, -2, -1))
#: The scales of a group's sequences through calls (`Group.through`).
_THROUGH_SCALES = (0.5, 2.0, 3.0, -1.5)


@dataclass(frozen=True)
class Sizes:
    """How large a drawn program may be: steps per recipe, states, nit-sots, sequences and
    non-sequences per loop. Compilation time grows fast with them (third derivatives most)."""

    recipe_steps: int = 4
    states: int = 2
    nit_sots: int = 2
    sequences: int = 2
    non_sequences: int = 2
    loops: bool = True  # False: no loop anywhere (conditionals, OpFromGraphs and recipes only)


#: Sizes for the differential test's programs under CI's budget.
SMALL = Sizes(recipe_steps=3, states=1, nit_sots=1, sequences=1, non_sequences=1)


def programs(depth: int = 2, orders: Sequence[int] = (0, 1, 2, 3), max_inputs: int = 3) -> Any:
    """Hypothesis strategy of `Program`s: a scan, ifelse or OpFromGraph at the top, nested up to ``depth``."""
    from hypothesis import strategies as st

    return st.composite(lambda draw: draw_program(HypothesisPicker(draw), depth=depth, orders=orders,
                                                  max_inputs=max_inputs))()


def random_program(seed: int, want: Sequence[str] = (), order: int | None = None, depth: int = 2,
                   max_inputs: int = 3, sizes: Sizes = Sizes()) -> Program:
    """The program of ``seed`` (the same seed, the same program), with the `FEATURES` in ``want``.

    ``order`` fixes how many times it is differentiated (else drawn from 0..3).
    """
    program = draw_program(SeededPicker(seed), frozenset(want), depth=depth, order=order, max_inputs=max_inputs,
                           sizes=sizes)
    missing = set(want) - features(program)
    if missing:  # a generator defect: draw_program realises every feature it is asked for
        raise AssertionError(f"random_program({seed}, want={sorted(want)}) lacks {sorted(missing)}: {program!r}")
    return program


def draw_program(pick: Picker, want: frozenset[str] = frozenset(), depth: int = 2, orders: Sequence[int] = (0, 1, 2, 3),
                 order: int | None = None, max_inputs: int = 3, sizes: Sizes = Sizes()) -> Program:
    """A `Program` from ``pick``'s choices, with the `FEATURES` in ``want`` (see `random_program`)."""
    unknown = set(want) - set(FEATURES)
    if unknown:
        raise ValueError(f"draw_program: unknown features {sorted(unknown)} (known: {FEATURES})")
    inputs = pick.sublist(_INPUT_SHAPES, min_size=1, max_size=max_inputs)
    if want & {"mit-sot", "multi-tap sequence"} and not any(s in _LONG_SHAPES for s in inputs):
        inputs.append(pick.choice(_LONG_SHAPES))  # their states and sequences need a vector of 3 or more
    if "shared" in want and not any(None not in s[0] for s in inputs):
        inputs.append(pick.choice([s for s in _INPUT_SHAPES if None not in s[0]]))
    if want & {"group", "group through calls"}:
        inputs.append(pick.choice(_GROUP_SHAPES))
    expr, _ = _draw_expr(pick, sizes, list(inputs), depth, want, top=True)
    return Program(tuple(inputs), expr, pick.choice(list(orders)) if order is None else order)


def _draw_expr(pick: Picker, sizes: Sizes, scope: list[Shape], depth: int, want: frozenset[str] = frozenset(),
               top: bool = False) -> tuple[Expr, Shape]:
    """An expression over ``scope``; ``want`` holds `FEATURES` and ``"compound"`` (not a leaf)."""
    kind = _kind(pick, depth, want, top, sizes.loops)
    if kind == "leaf":
        return _draw_leaf(pick, sizes, scope)
    if kind == "group":
        return _draw_group(pick, sizes, scope, want)
    if kind == "loop":
        return _draw_loop(pick, sizes, scope, depth, want, top)
    inner = want - {"ifelse" if kind == "cond" else "opfromgraph", "compound", "nesting"}
    inner |= {"compound"} if "nesting" in want else set()
    if kind == "cond":
        then, then_shape = _draw_expr(pick, sizes, scope, depth - 1, inner)
        other, other_shape = _draw_expr(pick, sizes, scope, depth - 1)
        summed = then_shape != other_shape
        return Cond(pick.integer(0, len(scope) - 1), then, other, summed), ((), ()) if summed else then_shape
    args = tuple(pick.integer_list(0, len(scope) - 1, min_size=1, max_size=3))
    body, shape = _draw_expr(pick, sizes, [scope[a] for a in args], depth - 1, inner)
    return Graph(args, body), shape


def _kind(pick: Picker, depth: int, want: frozenset[str], top: bool, loops: bool) -> str:
    if depth == 0:
        return "leaf"
    if want & {"group", "group through calls"}:
        if not loops:
            raise ValueError("draw_program: a group wanted from a program without loops")
        return "group"
    if want & set(LOOP_FEATURES):
        if not loops:
            raise ValueError(f"draw_program: {sorted(want & set(LOOP_FEATURES))} wanted from a program without loops")
        return "loop"
    nested = depth >= 2  # room for the wanted construct one level down
    loop = ["loop"] if loops else []
    if "ifelse" in want:
        return pick.choice(["cond", *loop, "graph"]) if nested else "cond"
    if "opfromgraph" in want:
        return pick.choice(["graph", *loop, "cond"]) if nested else "graph"
    if want & {"nesting", "compound"} or top:
        return pick.choice([*loop, *loop, "cond", "graph"])
    return pick.choice(["leaf", "leaf", *loop, "cond", "graph"])


def _draw_leaf(pick: Picker, sizes: Sizes, scope: list[Shape]) -> tuple[Leaf, Shape]:
    args = tuple(pick.integer_list(0, len(scope) - 1, min_size=1, max_size=min(3, len(scope))))
    params = tuple(Param("float64", *scope[a]) for a in args)
    recipe = draw_steps(pick, params, max_steps=sizes.recipe_steps, nesting=0)
    return Leaf(recipe, args), recipe.shapes[-1]


def _draw_group(pick: Picker, sizes: Sizes, scope: list[Shape], want: frozenset[str] = frozenset()) -> tuple[Group, Shape]:
    """A group over a matrix of `_GROUP_SHAPES` in scope: 2 to 4 of its columns in any order.

    Its sequences go through calls (`Group.through`) when ``want`` asks for it, else in one
    group of three: each loop's scale its own, or in one of three such groups every scale one
    (the bodies still differ by their columns).
    """
    matrix = pick.choice([i for i, s in enumerate(scope) if s in _GROUP_SHAPES])
    rows, n_columns = scope[matrix][1]
    # every column in some order half the time: the case where the K slices are the matrix itself
    every = pick.boolean()
    columns = tuple(pick.sublist(range(n_columns), min_size=n_columns if every else 2, max_size=n_columns, unique=True))
    options = _GROUP_TAPS[pick.choice(sorted(_GROUP_TAPS))]
    same = pick.boolean()  # one layout for all (batched), or each its own taps
    first = pick.choice(options)
    taps = tuple(first if same else pick.choice(options) for _ in columns)
    steps = pick.integer(1, rows - 3)  # every loop has at least rows - 3 rows after its initial ones
    n_steps = tuple(steps if pick.integer(0, 3) else (None if pick.boolean() else pick.integer(1, rows - 3))
                    for _ in columns)
    scalar = Param("float64", (), ())
    step = draw_steps(pick, (scalar,) * (len(first) + 2), max_steps=sizes.recipe_steps, nesting=0)
    through: tuple[float, ...] = ()
    if "group through calls" in want or pick.integer(0, 2) == 0:
        scales = pick.sublist(_THROUGH_SCALES, min_size=len(columns), max_size=len(columns), unique=True)
        through = tuple(scales) if pick.integer(0, 2) else (scales[0],) * len(columns)
        n_steps = (None,) * len(columns)  # each loop as long as its call's output: no constant to refuse or merge on
    group = Group(matrix, columns, taps, n_steps, step, pick.boolean(), through)
    return group, ((len(columns),), (len(columns),))


def _draw_loop(pick: Picker, sizes: Sizes, scope: list[Shape], depth: int, want: frozenset[str],
               top: bool) -> tuple[Loop, Shape]:
    """A loop; only the program's top loop has shared states (an OpFromGraph or a step would have to pass them on)."""
    idx = range(len(scope))
    vectors = [i for i in idx if len(scope[i][1]) >= 1 and scope[i][1][0] >= 3]
    sequences = _draw_sequences(pick, sizes, vectors, "multi-tap sequence" in want)
    # scan reads a sequence over the span of its taps and 0 (taps (-1,): x[:-1], one row fewer)
    max_steps = min([scope[v][1][0] - (max(*t, 0) - min(*t, 0)) for v, t in sequences], default=4)
    n_steps = pick.integer(1, min(max_steps, 4))
    states = _draw_states(pick, sizes, scope, vectors, want, shared=top)
    n_nit_sots = pick.integer(1 if "nit-sot" in want or not states else 0, sizes.nit_sots)
    at_least = 0 if sequences or states else 1  # the step must have something to compute from
    # (unique: pytensor.scan rejects a variable passed twice as a non-sequence)
    # vanilla's scan cannot build a step that updates a shared variable and captures one
    # (MissingInputError from construct_nominal_fgraph): such a loop passes them explicitly
    explicit_only = any(s.shared for s in states)
    non_sequences = tuple((v, explicit_only or pick.boolean())
                          for v in pick.sublist(list(idx), min_size=at_least, max_size=sizes.non_sequences, unique=True))
    step_scope = [_row(scope[v]) for v, taps in sequences for _ in taps]
    for s in states:
        if not s.shared:
            step_scope += [scope[s.init] if s.taps == (-1,) else _row(scope[s.init])] * len(s.taps)
    step_scope += [scope[v] for v, e in non_sequences if e] + [scope[v] for v, e in non_sequences if not e]
    step_scope += [scope[s.init] for s in states if s.shared]
    inner = want - set(LOOP_FEATURES) - {"compound"}
    if "nesting" in inner:
        inner = (inner - {"nesting"}) | {"compound"}
    bodies, shapes, summed = [], [], []
    for k in range(len(states) + n_nit_sots):
        body, shape = _draw_expr(pick, sizes, step_scope, depth - 1, inner if k == 0 else frozenset())
        bodies.append(body)
        if k < len(states):
            summed.append(shape[1] != _state_shape(scope, states[k])[1])
            shape = _state_shape(scope, states[k])
        shapes.append(shape)
    until = "until" in want or (pick.integer(0, 3) == 0 and pick.boolean())
    stop = pick.integer(0, len(step_scope) - 1) if until else None
    result = pick.integer(0, len(bodies) - 1)
    last = pick.boolean()
    if "untraced" in want:
        result = pick.choice([k for k, s in enumerate(states) if not s.shared])
        last = True
    loop = Loop(sequences, tuple(states), non_sequences, tuple(bodies), n_steps,
                pick.boolean() or not sequences, stop, pick.choice([0.0, 0.5, 2.0]),
                tuple(summed), result, last or (result < len(states) and states[result].shared), pick.boolean())
    return loop, shapes[result]


def _draw_sequences(pick: Picker, sizes: Sizes, vectors: list[int], multi_tap: bool) -> tuple[tuple[int, tuple[int, ...]], ...]:
    chosen = pick.sublist(vectors, max_size=sizes.sequences) if vectors else []
    if multi_tap and not chosen:
        chosen = [pick.choice(vectors)]
    sequences = [(v, pick.choice(_SEQUENCE_TAPS)) for v in chosen]
    if multi_tap and not any(len(taps) > 1 for _, taps in sequences):
        sequences[0] = (sequences[0][0], pick.choice([t for t in _SEQUENCE_TAPS if len(t) > 1]))
    return tuple(sequences)


def _draw_states(pick: Picker, sizes: Sizes, scope: list[Shape], vectors: list[int], want: frozenset[str],
                 shared: bool) -> list[State]:
    idx = list(range(len(scope)))
    static = [i for i in idx if None not in scope[i][0]] if shared else []  # a shared state's value needs its shape
    states = []
    for _ in range(pick.integer(0, sizes.states)):
        taps = pick.choice([(-1,), (-1,), *_MIT_SOT_TAPS])
        if taps == (-1,):
            shared = bool(static) and pick.integer(0, 5) == 0
            states.append(State(pick.choice(static if shared else idx), taps, shared))
            continue
        long_enough = [i for i in vectors if scope[i][1][0] >= -min(taps)]
        if long_enough:
            states.append(State(pick.choice(long_enough), taps))
    if ("sit-sot" in want or "untraced" in want) and not any(s.taps == (-1,) and not s.shared for s in states):
        states.append(State(pick.choice(idx), (-1,)))
    if "mit-sot" in want and not any(s.taps != (-1,) for s in states):
        taps = pick.choice(_MIT_SOT_TAPS)
        states.append(State(pick.choice([i for i in vectors if scope[i][1][0] >= -min(taps)]), taps))
    if "shared" in want and not any(s.shared for s in states):
        states.append(State(pick.choice(static), (-1,), shared=True))
    return states


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
        compare with;
    ``"innergraph_failed"``
        vanilla ran, innergraph raised ``our_error``;
    ``"different"``
        innergraph gave other numbers than vanilla (``error`` says which output, under
        which linker and both values).

    The last two are failures: `check_against_vanilla` raises on them.
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

    @property
    def failed(self) -> bool:
        """innergraph gave other numbers than vanilla, or failed where vanilla ran."""
        return self.kind in ("innergraph_failed", "different")


def _brief(error: BaseException) -> str:
    return f"{type(error).__name__}({str(error)[:120]!r})"


def _run(program: Program, linker: str, values: list[np.ndarray], vanilla: bool,
         pickles: dict[str, bool] | None = None) -> list[np.ndarray] | Exception:
    """The outputs' values, or the exception compiling or running raised (building must not raise).

    Vanilla is PyTensor with innergraph uninstalled (`innergraph.uninstalled`), for building,
    compiling and the first call (Numba and OpFromGraph compile then), with the linker's plain mode.
    ``pickles``: vanilla's run records there whether its function pickles; innergraph's is
    checked by `_check_pickled`, unless vanilla's did not pickle either (an OpFromGraph's
    gradient holds a local function: ``OpFromGraph._build_and_cache_lop_op.<locals>.wrapper``).
    """
    with uninstalled() if vanilla else nullcontext():
        inputs, outputs = build_program(program)
        try:
            fn = pytensor.function(inputs, outputs, mode=mode_for(linker), on_unused_input="ignore")
            got = [np.asarray(v) for v in fn(*values)]
        except Exception as error:  # noqa: BLE001 - a failure is an outcome to compare
            return error
        if not PICKLED:
            return got
        if vanilla:
            if pickles is not None:
                pickles["vanilla"] = _pickles(fn)
            return got
        if pickles is not None and not pickles.get("vanilla", True) and not _pickles(fn):
            return got  # neither pickles: PyTensor's own limit, not innergraph's
        try:
            _check_pickled(fn, values, got)
        except Exception as error:  # noqa: BLE001 - innergraph's function must pickle when it runs
            return error
        return got


#: Whether `compare_with_vanilla` pickles innergraph's compiled function, loads and runs it again.
PICKLED = True


def _pickles(fn: Any) -> bool:
    try:
        pickle.dumps(fn)
    except Exception:  # noqa: BLE001 - any failure to pickle
        return False
    return True


def _check_pickled(fn: Any, values: list[np.ndarray], got: list[np.ndarray]) -> None:
    """``fn`` pickled and loaded: its bodies encode as before (constants keep their types) and it gives ``got``.

    Bitwise: the loaded function runs the same rewritten graph with the same code.
    """
    def bodies(function: Any) -> list[Any]:
        nodes = function.maker.fgraph.toposort()
        return [encode(body_of(v)) for n in nodes for v in n.inputs if is_function(v)]

    loaded = pickle.loads(pickle.dumps(fn))
    if bodies(loaded) != bodies(fn):
        raise AssertionError("pickling: the loaded function's bodies encode otherwise (a constant's type changed?)")
    for k, (again, first) in enumerate(zip(loaded(*values), got, strict=True)):
        if not np.array_equal(np.asarray(again), first, equal_nan=True) or np.asarray(again).dtype != first.dtype:
            raise AssertionError(f"pickling: the loaded function's output {k} is {again!r}, not {first!r}")


def compare_with_vanilla(
    program: Program,
    linker: str,
    *,
    seed: int = 0,
    rtol: float = 1e-7,  # see `check_against_vanilla`
    atol: float = 1e-9,
    references: Sequence[str] = ("cvm", "py", "numba"),
) -> Outcome:
    """Compile and run ``program`` with and without innergraph under ``linker``: the `Outcome`, never raising.

    Parameters are those of `check_against_vanilla`.
    """
    values = sample_inputs(program, seed)
    names = _output_names(program)
    pickles: dict[str, bool] = {}
    theirs = _run(program, linker, values, vanilla=True, pickles=pickles)
    ours = _run(program, linker, values, vanilla=False, pickles=pickles)
    where = f"under the {linker!r} linker"
    if not isinstance(theirs, Exception):
        if isinstance(ours, Exception):
            return Outcome(linker, "innergraph_failed", our_error=_brief(ours))
        difference = _difference(ours, theirs, names, where, rtol, atol)
        return Outcome(linker, "different", difference) if difference else Outcome(linker, "equal")
    if isinstance(ours, Exception):
        return Outcome(linker, "both_failed", _brief(theirs), _brief(ours))
    for reference in (r for r in references if r != linker):
        numbers = _run(program, reference, values, vanilla=True)
        if isinstance(numbers, Exception):
            continue
        where += f" (vanilla raised {_brief(theirs)}; compared with vanilla under {reference!r})"
        difference = _difference(ours, numbers, names, where, rtol, atol)
        if difference:
            return Outcome(linker, "different", difference, reference=reference)
        return Outcome(linker, "vanilla_failed", _brief(theirs), reference=reference)
    return Outcome(linker, "unchecked", _brief(theirs))


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
        Tolerances of `numpy.testing.assert_allclose`. Not the suite's 1e-10 to 1e-12 for
        float64, because the two sides are different graphs of up to third derivatives: innergraph's
        pipeline pushes sums out of loops, batches loops, carries traces, and differentiates its
        own lowered loops, so PyTensor's gradient of a gradient is built from other graphs than
        vanilla's; through ``exp``, ``sqr`` and three derivatives of loops, reordered float64
        sums differ by more than 1e-10 relative (cancellation near zero: hence ``atol``). Not
        measured per program (design/testing.md, "Tolerances").
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
    outcomes = []
    for linker in linkers:
        outcome = compare_with_vanilla(program, linker, seed=seed, rtol=rtol, atol=atol, references=references)
        if outcome.kind == "innergraph_failed":
            raise AssertionError(f"under the {linker!r} linker, vanilla ran but innergraph raised {outcome.our_error}")
        if outcome.kind == "different":
            raise AssertionError(outcome.error)
        outcomes.append(outcome)
    return outcomes


def _output_names(program: Program) -> list[str]:
    """``value``, then ``derivative k wrt xi`` (the order of `build_program`'s outputs)."""
    n = len(program.inputs)
    return ["value"] + [f"derivative {k} wrt x{i}" for k in range(1, program.order + 1) for i in range(n)]


def _difference(ours: list[np.ndarray], theirs: list[np.ndarray], names: list[str], where: str, rtol: float,
                atol: float) -> str:
    """What differs between the two runs' outputs ("" when nothing does)."""
    for name, got, want in zip(names, ours, theirs, strict=True):
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        except AssertionError as error:
            return f"{where}, {name}: innergraph {got!r} vs vanilla {want!r}\n{error}"
    return ""
