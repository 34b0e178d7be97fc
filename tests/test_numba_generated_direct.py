"""`innergraph.backends.numba_generated` called directly, fast (issue 47's mutation run).

The generator's functions read only a plan (`innergraph.protocol.plans`) and each body's
code (anything with ``render(prefix, args)``), so most tests here hand them plans written
out literally and stand-in codes whose rendering is one call of a Python function, then
check the generated source line by line and run it as plain Python (it is NumPy code that
Numba compiles) against NumPy loops: counted loops of 0, 1 and several steps with a
sequence, per-step outputs (static row shapes, unknown dimensions, too few rows, a row of
another shape), while loops with a pre-condition, a post-condition, a bound, each alone and
together, conditions at their boundary, both branches of a conditional, a call, one result
and several. Then the module's other pieces on real nodes without compiling:
`_owned`, `_row_types`, `register_generated` and the dispatch, the fallback for a
consumer without semantics, and the in-memory key of a loop's conversion. Last, one Numba
function of every generated kind, compiled once for the module, against the py linker.

Numba's disk cache: a generated function's key is the hash of its source and of its bodies'
code keys (`innergraph.backends.numba.jitted`), so a mutant of this module that changes the
source gets a key of its own, and one that does not generates the same code; nothing here
is served code compiled for other source. `test_the_disk_cache_key_covers_the_generated_source`
keeps that premise checked.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

from generated_registration import check_register_generated

import innergraph
import innergraph.backends.numba_generated as generated
from design.examples.map_rows import MapRows, map_rows
from innergraph.backends.numba_code import Rendering
from innergraph.backends.numba_generated import (
    branch_source,
    generated_source,
    numba_funcify_generated,
    once_source,
    register_generated,
)
from innergraph.consumer import register_consumer
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.protocol.plans import BranchPlan, LoopPlan, OncePlan, loop_plan
from innergraph.protocol.runtime import body_value
from innergraph.protocol.slots import FORMS

# --- stand-ins: a body's code as one call of a Python function --------------------------------


@dataclass(frozen=True)
class Code:
    """A body's code rendered as ``<prefix>o0, ... = <prefix>f(args)``, ``<prefix>f`` being ``fn``."""

    n_params: int
    n_outputs: int
    fn: Callable[..., Any] | None = None

    def render(self, prefix: str, args: Sequence[str]) -> Rendering:
        assert len(args) == self.n_params, (prefix, args)
        outs = [f"{prefix}o{k}" for k in range(self.n_outputs)]
        return Rendering([f"{', '.join(outs)} = {prefix}f({', '.join(args)})"], outs, {f"{prefix}f": self.fn})


def python(source: tuple[list[str], list[str], dict[str, Any]]) -> Callable[..., Any]:
    """The generated function as plain Python (the source Numba would compile)."""
    params, lines, env = source
    text = f"def generated({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in lines)
    scope = dict(env)
    exec(text, scope)
    return scope["generated"]


def a(value: Any, dtype: str = "float64") -> np.ndarray:
    """A NumPy array as a node input arrives (0-d for a scalar)."""
    return np.asarray(value, dtype=dtype)


def loop(**fields: Any) -> LoopPlan:
    """A loop plan: one body (0), no condition, no count, unless ``fields`` say otherwise."""
    base: dict[str, Any] = dict(
        n_inputs=3, functions=(0,), update=0, pre_condition=None, count=None, bound=None, sequences=(), carries=(1,),
        roles=((("carry", 0), ("input", 2)),), next_values=(0,), per_step=(), pre=None, post=None, results=(("carry", 0),),
    )
    return LoopPlan(**{**base, **fields})


# --- a counted loop: a sequence, a carry, an invariant, two per-step outputs --------------------

#: inputs: i0 the function, i1 the number of steps, i2 the sequence (rows of 2), i3 the carry,
#: i4 an invariant, i5 per-step output 0's number of rows (per-step output 1 has i1 rows)
COUNTED = LoopPlan(
    n_inputs=6, functions=(0,), update=0, pre_condition=None, count=1, bound=None, sequences=(2,), carries=(3,),
    roles=((("row", 0), ("carry", 0), ("input", 4)),), next_values=(0,), per_step=((1, 5), (2, 1)), pre=None, post=None,
    results=(("per_step", 0), ("carry", 0), ("per_step", 1)),
)
COUNTED_ROWS = (("float64", (None, 2)), ("int32", ()))


def counted_step(r: np.ndarray, x: np.ndarray, k: np.ndarray) -> tuple[Any, ...]:
    """Next carry ``x + k * sum(r)``; rows ``[[r * k], [r - x]]`` (2 x 2) and how many entries of ``r`` are positive."""
    return x + k * r.sum(), np.stack([r * k, r - x]), np.asarray((r > 0).sum())


def test_a_counted_loop_with_per_step_outputs_is_generated_line_by_line() -> None:
    params, lines, env = generated_source(COUNTED, {0: Code(3, 3, counted_step)}, COUNTED_ROWS)
    assert params == ["i0", "i1", "i2", "i3", "i4", "i5"]
    assert lines == [
        "x0 = i3.copy()",
        "o0 = np.zeros((i5.item(), 0, 2, ), np.float64)",
        "if i1.item() > i5.item():",
        "    raise ValueError('innergraph: per-step output 0 has fewer rows than the loop has steps')",
        "o1 = np.zeros((i1.item(), ), np.int32)",
        "if i1.item() > i1.item():",
        "    raise ValueError('innergraph: per-step output 1 has fewer rows than the loop has steps')",
        "for t in range(i1.item()):",
        "    r0 = np.asarray(i2[t])",
        "    s_o0, s_o1, s_o2 = s_f(r0, x0, i4)",
        "    if t == 0:",
        "        o0 = np.zeros((i5.item(),) + np.shape(s_o1), np.float64)",
        "    elif np.shape(s_o1) != o0.shape[1:]:",
        "        raise ValueError('innergraph: per-step output 0: a step wrote a row of another shape than the first')",
        "    o0[t] = s_o1",
        "    if t == 0:",
        "        o1 = np.zeros((i1.item(),) + np.shape(s_o2), np.int32)",
        "    elif np.shape(s_o2) != o1.shape[1:]:",
        "        raise ValueError('innergraph: per-step output 1: a step wrote a row of another shape than the first')",
        "    o1[t] = s_o2.item()",
        "    x0 = s_o0",
        "return (o0, x0, o1,)",
    ]
    assert set(env) == {"np", "s_f"} and env["np"] is np and env["s_f"] is counted_step


def counted_reference(n: int, seq: np.ndarray, x: float, k: float, rows: int) -> tuple[np.ndarray, float, np.ndarray]:
    first, second = np.zeros((rows, 2, 2)), np.zeros(n, dtype="int32")
    for t in range(n):
        first[t] = np.stack([seq[t] * k, seq[t] - x])
        second[t] = (seq[t] > 0).sum()
        x = x + k * seq[t].sum()
    return first, x, second


@pytest.mark.parametrize("n, rows", [(0, 0), (0, 2), (1, 1), (3, 3), (3, 5)])
def test_a_counted_loop_runs_its_steps_and_zeros_the_rows_no_step_writes(n: int, rows: int) -> None:
    run = python(generated_source(COUNTED, {0: Code(3, 3, counted_step)}, COUNTED_ROWS))
    seq = np.array([[0.5, -1.0], [2.0, 3.0], [-0.25, 0.125], [7.0, 7.0], [1.0, 1.0]])[:n]
    x0 = a(1.5)
    first, x, second = run(None, a(n, "int64"), seq, x0, a(0.5), a(rows, "int64"))
    want = counted_reference(n, seq, 1.5, 0.5, rows)
    if n == 0:  # no row known: the static row shape, 0 where unknown
        assert first.shape == (rows, 0, 2) and first.dtype == np.float64
    else:
        np.testing.assert_array_equal(first, want[0])
    assert x == want[1] and x is not x0 and x0 == 1.5
    assert second.dtype == np.int32
    np.testing.assert_array_equal(second, want[2])


def test_a_counted_loop_with_fewer_rows_than_steps_or_a_row_of_another_shape_is_a_value_error() -> None:
    run = python(generated_source(COUNTED, {0: Code(3, 3, counted_step)}, COUNTED_ROWS))
    seq = np.ones((3, 2))
    with pytest.raises(ValueError, match="per-step output 0 has fewer rows than the loop has steps"):
        run(None, a(3, "int64"), seq, a(0.0), a(1.0), a(2, "int64"))

    def growing(r: np.ndarray, x: np.ndarray, k: np.ndarray) -> tuple[Any, ...]:
        return x + 1.0, np.ones((int(x) + 1, 2)), np.asarray(0)

    run = python(generated_source(COUNTED, {0: Code(3, 3, growing)}, COUNTED_ROWS))
    with pytest.raises(ValueError, match="per-step output 0: a step wrote a row of another shape than the first"):
        run(None, a(2, "int64"), seq, a(0.0), a(1.0), a(2, "int64"))


def test_a_scalar_row_of_unknown_static_dimensions_starts_at_0_and_an_array_row_is_stored_whole() -> None:
    plan = loop(n_inputs=4, count=1, carries=(2,), roles=((("carry", 0), ("input", 3)),), per_step=((1, 1),),
                results=(("carry", 0), ("per_step", 0)))
    _, lines, _ = generated_source(plan, {0: Code(2, 2)}, (("float32", (None, None, 4)),))
    assert lines[1] == "o0 = np.zeros((i1.item(), 0, 0, 4, ), np.float32)"
    assert "    o0[t] = s_o1" in lines and lines[-1] == "return (x0, o0,)"
    _, lines, _ = generated_source(plan, {0: Code(2, 2)}, (("uint16", ()),))
    assert lines[1] == "o0 = np.zeros((i1.item(), ), np.uint16)"
    assert "    o0[t] = s_o1.item()" in lines


# --- while loops: a pre-condition, a post-condition, a bound ------------------------------------

#: ``while_loop(lambda s: s < c, lambda s: s * 2.0, x, max_steps=limit)``: i0 the condition, i1 the
#: step, i2 the bound, i3 the carry, i4 ``c``; body 0 the pre-condition, body 1 the update
WHILE = LoopPlan(
    n_inputs=5, functions=(0, 1), update=1, pre_condition=0, count=None, bound=2, sequences=(), carries=(3,),
    roles=((("carry", 0), ("input", 4)), (("carry", 0), ("input", 4))), next_values=(0,), per_step=(), pre=0, post=1,
    results=(("carry", 0),),
)


def below(s: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.asarray(s < c)


def doubled(s: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return s * 2.0, np.asarray(s * 2.0 < c)


WHILE_CODES = {0: Code(2, 1, below), 1: Code(2, 2, doubled)}


def test_a_bounded_while_loop_is_generated_line_by_line() -> None:
    params, lines, env = generated_source(WHILE, WHILE_CODES)
    assert params == ["i0", "i1", "i2", "i3", "i4"]
    assert lines == [
        "x0 = i3.copy()",
        "c_o0 = c_f(x0, i4)",
        "go = c_o0.item()",
        "steps = 0",
        "limit = i2.item()",
        "while go and steps < limit:",
        "    s_o0, s_o1 = s_f(x0, i4)",
        "    x0 = s_o0",
        "    go = s_o1.item()",
        "    steps += 1",
        "return x0",
    ]
    assert env == {"np": np, "c_f": below, "s_f": doubled}


@pytest.mark.parametrize("x, c, limit, want", [
    (1.0, 5.0, 10, 8.0),  # three steps, the post-condition stops it
    (1.0, 8.0, 10, 8.0),  # 8.0 < 8.0 is false: the boundary stops it
    (1.0, 5.0, 2, 4.0),  # the bound stops it
    (1.0, 5.0, 1, 2.0),
    (1.0, 5.0, 0, 1.0),  # no step
    (5.0, 5.0, 10, 5.0),  # the pre-condition is false at the boundary: no step
    (6.0, 5.0, 10, 6.0),
])
def test_a_bounded_while_loop_runs_against_python(x: float, c: float, limit: int, want: float) -> None:
    x0 = a(x)
    got = python(generated_source(WHILE, WHILE_CODES))(None, None, a(limit, "int64"), x0, a(c))
    assert got == want and got is not x0 and x0 == x  # the carry is a copy: its input is never returned or changed


def test_a_while_loop_without_a_bound_has_no_step_count() -> None:
    plan = dataclasses.replace(WHILE, bound=None)
    _, lines, _ = generated_source(plan, WHILE_CODES)
    assert lines == [
        "x0 = i3.copy()", "c_o0 = c_f(x0, i4)", "go = c_o0.item()", "while go:", "    s_o0, s_o1 = s_f(x0, i4)",
        "    x0 = s_o0", "    go = s_o1.item()", "return x0",
    ]
    run = python(generated_source(plan, WHILE_CODES))
    assert run(None, None, None, a(0.75), a(100.0)) == 192.0
    assert run(None, None, None, a(100.0), a(100.0)) == 100.0


def test_a_do_while_loop_has_a_post_condition_only() -> None:
    plan = dataclasses.replace(WHILE, functions=(1,), update=0, pre_condition=None, pre=None, bound=None,
                               roles=(WHILE.roles[1],))
    codes = {0: Code(2, 2, doubled)}
    _, lines, env = generated_source(plan, codes)
    assert lines == ["x0 = i3.copy()", "go = True", "while go:", "    s_o0, s_o1 = s_f(x0, i4)", "    x0 = s_o0",
                     "    go = s_o1.item()", "return x0"]
    assert set(env) == {"np", "s_f"}
    run = python(generated_source(plan, codes))
    assert run(None, None, None, a(6.0), a(5.0)) == 12.0  # one step although 6 < 5 is false
    assert run(None, None, None, a(1.0), a(5.0)) == 8.0


def test_a_while_loop_with_a_pre_condition_only_runs_to_its_bound() -> None:
    plan = dataclasses.replace(WHILE, post=None)
    _, lines, _ = generated_source(plan, {0: Code(2, 1, below), 1: Code(2, 1, lambda s, c: s * 2.0)})
    assert lines == ["x0 = i3.copy()", "c_o0 = c_f(x0, i4)", "go = c_o0.item()", "steps = 0", "limit = i2.item()",
                     "while go and steps < limit:", "    s_o0 = s_f(x0, i4)", "    x0 = s_o0", "    steps += 1", "return x0"]
    run = python(generated_source(plan, {0: Code(2, 1, below), 1: Code(2, 1, lambda s, c: s * 2.0)}))
    assert run(None, None, a(3, "int64"), a(1.0), a(2.0)) == 8.0  # the pre-condition is read once
    assert run(None, None, a(3, "int64"), a(2.0), a(2.0)) == 2.0


def test_a_loop_with_a_bound_only_runs_its_bound() -> None:
    plan = loop(n_inputs=4, bound=3)
    _, lines, _ = generated_source(plan, {0: Code(2, 1)})
    assert lines == ["x0 = i1.copy()", "steps = 0", "limit = i3.item()", "while steps < limit:", "    s_o0 = s_f(x0, i2)",
                     "    x0 = s_o0", "    steps += 1", "return x0"]
    run = python(generated_source(plan, {0: Code(2, 1, lambda s, k: s + k)}))
    assert [run(None, a(1.0), a(0.5), a(n, "int64")) for n in (0, 1, 4)] == [1.0, 1.5, 3.0]


def test_a_counted_loop_with_conditions_stops_early() -> None:
    both = dataclasses.replace(WHILE, count=2, bound=None)  # the number of steps where the bound was
    _, lines, _ = generated_source(both, WHILE_CODES)
    assert lines == [
        "x0 = i3.copy()", "c_o0 = c_f(x0, i4)", "go = c_o0.item()", "for t in range(i2.item()):", "    if not go:",
        "        break", "    s_o0, s_o1 = s_f(x0, i4)", "    x0 = s_o0", "    go = s_o1.item()", "return x0",
    ]
    run = python(generated_source(both, WHILE_CODES))
    assert [run(None, None, a(n, "int64"), a(1.0), a(5.0)) for n in (0, 1, 2, 10)] == [1.0, 2.0, 4.0, 8.0]
    assert run(None, None, a(10, "int64"), a(5.0), a(5.0)) == 5.0
    post = dataclasses.replace(both, functions=(1,), update=0, pre_condition=None, pre=None, roles=(WHILE.roles[1],))
    _, lines, _ = generated_source(post, {0: Code(2, 2, doubled)})
    assert lines[:3] == ["x0 = i3.copy()", "go = True", "for t in range(i2.item()):"]
    run = python(generated_source(post, {0: Code(2, 2, doubled)}))
    assert [run(None, None, a(n, "int64"), a(6.0), a(5.0)) for n in (0, 1, 2)] == [6.0, 12.0, 12.0]
    pre = dataclasses.replace(both, post=None)
    _, lines, _ = generated_source(pre, {0: Code(2, 1), 1: Code(2, 1)})
    assert lines[3:6] == ["for t in range(i2.item()):", "    if not go:", "        break"]


def test_several_carries_are_returned_as_a_tuple_in_the_nodes_output_order() -> None:
    plan = loop(n_inputs=5, count=1, carries=(2, 3), roles=((("carry", 0), ("carry", 1), ("input", 4)),),
                next_values=(1, 0), results=(("carry", 1), ("carry", 0)))
    _, lines, _ = generated_source(plan, {0: Code(3, 2)})
    assert lines == ["x0 = i2.copy()", "x1 = i3.copy()", "for t in range(i1.item()):", "    s_o0, s_o1 = s_f(x0, x1, i4)",
                     "    x0 = s_o1", "    x1 = s_o0", "return (x1, x0,)"]
    run = python(generated_source(plan, {0: Code(3, 2, lambda p, q, k: (p + q, p * k))}))
    p, q = a(1.0), a(2.0)
    for n in range(4):
        wp, wq = 1.0, 2.0
        for _ in range(n):
            wp, wq = wp * 3.0, wp + wq
        assert run(None, a(n, "int64"), p, q, a(3.0)) == (wq, wp)
    three = dataclasses.replace(plan, carries=(2, 3, 2), roles=((("carry", 0), ("carry", 1), ("carry", 2)),),
                                next_values=(0, 1, 0), results=(("carry", 2), ("carry", 0), ("carry", 1)))
    assert generated_source(three, {0: Code(3, 2)})[1][-1] == "return (x2, x0, x1,)"


# --- conditionals and calls ---------------------------------------------------------------------

#: ``ifelse(i0, (f(i3, i4), g(i3, i4)), (h(i5), k(i5)))``: then returns its outputs in order,
#: else swapped (its output 1 gives the node's output 0)
BRANCH = BranchPlan(n_inputs=6, functions=(1, 2), condition=0, roles=((3, 4), (5,)), outputs=((0, 1), (1, 0)))


def test_a_conditional_is_generated_line_by_line_and_runs_one_branch() -> None:
    codes = [Code(2, 2, lambda p, q: (p + q, p * q)), Code(1, 2, lambda r: (r - 1.0, r * 10.0))]
    params, lines, env = branch_source(BRANCH, codes)
    assert params == ["i0", "i1", "i2", "i3", "i4", "i5"]
    assert lines == [
        "if i0:", "    t_o0, t_o1 = t_f(i3, i4)", "    return (t_o0, t_o1,)",
        "else:", "    e_o0, e_o1 = e_f(i5)", "    return (e_o1, e_o0,)",
    ]
    assert set(env) == {"t_f", "e_f"}
    run = python((params, lines, env))
    assert run(a(True, "bool"), None, None, a(2.0), a(3.0), a(7.0)) == (5.0, 6.0)
    assert run(a(False, "bool"), None, None, a(2.0), a(3.0), a(7.0)) == (70.0, 6.0)


def test_a_conditional_of_one_output_returns_it_bare() -> None:
    plan = BranchPlan(n_inputs=4, functions=(1, 2), condition=0, roles=((3,), (3,)), outputs=((0,), (1,)))
    codes = [Code(1, 1, lambda p: p + 1.0), Code(1, 2, lambda p: (p, p - 1.0))]
    params, lines, env = branch_source(plan, codes)
    assert lines == ["if i0:", "    t_o0 = t_f(i3)", "    return t_o0", "else:", "    e_o0, e_o1 = e_f(i3)", "    return e_o1"]
    run = python((params, lines, env))
    assert run(a(True, "bool"), None, None, a(2.0)) == 3.0 and run(a(False, "bool"), None, None, a(2.0)) == 1.0
    three = BranchPlan(n_inputs=4, functions=(1, 2), condition=0, roles=((3,), (3,)), outputs=((0, 1, 2), (2, 1, 0)))
    assert branch_source(three, [Code(1, 3), Code(1, 3)])[1][2] == "    return (t_o0, t_o1, t_o2,)"


def test_a_call_is_generated_inline() -> None:
    plan = OncePlan(n_inputs=4, function=0, roles=(2, 1), outputs=(1, 0))
    code = Code(2, 2, lambda p, q: (p - q, p / q))
    params, lines, env = once_source(plan, code)
    assert params == ["i0", "i1", "i2", "i3"] and lines == ["b_o0, b_o1 = b_f(i2, i1)", "return (b_o1, b_o0,)"]
    assert set(env) == {"b_f"}
    assert python((params, lines, env))(None, a(4.0), a(2.0), None) == (0.5, -2.0)
    one = OncePlan(n_inputs=2, function=0, roles=(1,), outputs=(0,))
    assert once_source(one, Code(1, 1))[1] == ["b_o0 = b_f(i1)", "return b_o0"]
    three = OncePlan(n_inputs=2, function=0, roles=(1,), outputs=(2, 0, 1))
    assert once_source(three, Code(1, 3))[1][-1] == "return (b_o2, b_o0, b_o1,)"


# --- the module's other pieces ----------------------------------------------------------------


def test_the_update_body_may_overwrite_its_carries_and_no_other_body_may() -> None:
    roles = ((("carry", 0), ("input", 5)), (("row", 0), ("carry", 1), ("input", 4), ("carry", 0)))
    plan = dataclasses.replace(WHILE, roles=roles)  # update 1, pre-condition 0
    assert generated._owned(plan, 1) == frozenset({1, 3})
    assert generated._owned(plan, 0) == frozenset()
    swapped = dataclasses.replace(WHILE, functions=(1, 0), update=0, pre_condition=1, roles=roles[::-1])
    assert generated._owned(swapped, 0) == frozenset({1, 3})
    assert generated._owned(swapped, 1) == frozenset()


def test_row_types_are_the_per_step_results_dtypes_and_row_shapes() -> None:
    def out(dtype: str, shape: tuple[int | None, ...]) -> Any:
        return SimpleNamespace(type=SimpleNamespace(dtype=dtype, shape=shape))

    plan = dataclasses.replace(COUNTED, results=(("per_step", 0), ("carry", 0), ("per_step", 1)))
    node = SimpleNamespace(outputs=[out("float32", (None, 3, None)), out("int64", (7,)), out("bool", (5,))])
    assert generated._row_types(plan, node) == (("float32", (3, None)), ("bool", ()))
    reordered = dataclasses.replace(COUNTED, results=(("carry", 0), ("per_step", 1), ("per_step", 0)))
    assert generated._row_types(reordered, node) == (("bool", ()), ("int64", ()))


def test_register_generated_registers_a_form_with_semantics_only_and_keeps_a_class_own_conversion() -> None:
    check_register_generated(numba_funcify_and_cache_key, register_generated, numba_funcify_generated)


def test_the_consumers_registered_before_the_module_loaded_get_generated_code() -> None:
    for cls in (WhileLoop, ForiLoop, IfElse, Call, MapRows):
        assert numba_funcify_and_cache_key.registry.get(cls) is numba_funcify_generated, cls


x, c = pt.dscalar("x"), pt.dscalar("c")
v = pt.dvector("v")
n = pt.lscalar("n")


class _Unregistered(ForiLoop):
    """A subclass of a consumer with no form of its own: PyTensor's fallback."""


def test_a_consumer_without_semantics_gets_pytensors_fallback() -> None:
    node = innergraph.fori_loop(0, n, lambda i, s: s + 1.25, x).owner
    assert numba_funcify_generated(node.op, node)[1] is not None
    sub = _Unregistered(node.op.n_seqs, node.op.n_carry)
    fallback, key = numba_funcify_generated(sub, sub.make_node(*node.inputs))
    assert key is None and callable(fallback)

    class _NoSemantics(MapRows):
        pass

    rows = map_rows(lambda r: r * 1.75, pt.dmatrix("m")).owner
    assert numba_funcify_generated(rows.op, rows)[1] is not None
    register_consumer(_NoSemantics, dataclasses.replace(FORMS[MapRows], semantics=None))
    try:
        op = _NoSemantics(1)
        fallback, key = numba_funcify_generated(op, op.make_node(*rows.inputs))
        assert key is None and callable(fallback)
    finally:
        FORMS.pop(_NoSemantics)


def _while_nodes(limit: float) -> list[Any]:
    """Two bounded loops of one step function (``s * 1.5``) and the pre-conditions ``s < limit`` and ``s <= limit``."""
    first, other = (innergraph.loop(cond, lambda s: s * 1.5, None, x, max_steps=n).owner for cond in (lambda s: s < limit, lambda s: s <= limit))
    second = first.op.make_node(other.inputs[0], *first.inputs[1:])
    assert body_value(first.inputs[1]) is body_value(second.inputs[1]), "the test lost its subject: the step bodies differ"
    assert body_value(first.inputs[0]) != body_value(second.inputs[0])
    return [first, second]


def test_loops_over_one_update_body_and_other_conditions_are_converted_apart() -> None:
    first, second = _while_nodes(40.0)
    (fn1, key1), (fn2, key2) = (numba_funcify_generated(node.op, node) for node in (first, second))
    assert fn1 is not fn2 and None not in (key1, key2) and key1 != key2
    assert numba_funcify_generated(first.op, first) == (fn1, key1)  # and each is kept


def test_loops_whose_update_body_comes_first_are_converted_apart_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A form may name its update body 0 and its pre-condition 1: the same loop planned with its bodies swapped."""

    def swapped(op: Any, node: Any) -> LoopPlan:
        p = loop_plan(op, node)
        return dataclasses.replace(p, functions=p.functions[::-1], update=0, pre_condition=1, roles=p.roles[::-1])

    monkeypatch.setattr(generated, "loop_plan", swapped)
    first, second = _while_nodes(41.0)
    (fn1, key1), (fn2, key2) = (numba_funcify_generated(node.op, node) for node in (first, second))
    assert fn1 is not fn2 and None not in (key1, key2) and key1 != key2


def test_the_disk_cache_key_covers_the_generated_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise that makes Numba's disk cache safe for this module's mutants (module docstring)."""
    node = innergraph.fori_loop(0, n, lambda i, s: s * 0.875, x).owner
    body = body_value(node.inputs[0])

    def forget() -> None:  # the conversion is kept on the body: convert anew
        for k in [k for k in body.cache if isinstance(k, tuple) and k[:1] == ("numba_generated",)]:
            del body.cache[k]

    forget()
    _, key = numba_funcify_generated(node.op, node)
    original = generated.generated_source

    def one_more_line(*args: Any) -> tuple[list[str], list[str], dict[str, Any]]:
        params, lines, env = original(*args)
        return params, ["pass", *lines], env

    monkeypatch.setattr(generated, "generated_source", one_more_line)
    forget()
    try:
        _, other = numba_funcify_generated(node.op, node)
    finally:
        forget()
    assert None not in (key, other) and key != other


# --- one Numba function of every generated kind, compiled once ------------------------------------


@functools.cache
def compiled() -> tuple[Any, Any]:
    """Numba's function and the py linker's over a bounded while loop, a do-while, a fori loop, a map, a conditional and a call."""
    m = pt.dmatrix("m")
    mapped: Any = map_rows(lambda r: [r * c, r.sum()], m)
    branches: Any = innergraph.ifelse(x < c, [x * 2.0, v + x], [c - 1.0, v * c])
    called: Any = innergraph.call(lambda p, q: [p - q, (q * p).sum()], x, v)
    outs = [
        innergraph.while_loop(lambda s: s < c, lambda s: s * 2.0, x, max_steps=n),
        innergraph.do_while(lambda s: s * 2.0, lambda s: s < c, x),
        innergraph.fori_loop(0, n, lambda i, s: s + pt.cast(i, "float64") * c, x),
        *mapped,
        *branches,
        *called,
    ]
    inputs = [x, c, n, m, v]
    return (pytensor.function(inputs, outs, mode=Mode(linker="numba", optimizer="fast_run")),
            pytensor.function(inputs, outs, mode=Mode(linker="py", optimizer="fast_run")))


@pytest.mark.parametrize("xv, cv, nv", [
    (1.0, 5.0, 10),  # while: three steps; fori: ten
    (1.0, 8.0, 10),  # the condition at its boundary (8 < 8)
    (1.0, 5.0, 1),  # one step of each counted or bounded loop
    (1.0, 5.0, 0),  # none
    (5.0, 5.0, 3),  # no step of the while loop, one of the do-while; the else branch
    (0.25, 0.5, 2),  # one step of the while loop, to the boundary
])
def test_the_compiled_loops_conditional_and_call_give_the_py_linkers_numbers(xv: float, cv: float, nv: int) -> None:
    numba_fn, py_fn = compiled()
    mv = np.arange(1.0, 1.0 + 3 * min(nv, 4)).reshape(-1, 3)[:nv]  # rows of the map: as many as steps, up to 4
    vv = np.array([0.5, -1.5, 2.0])
    got, want = numba_fn(xv, cv, nv, mv, vv), py_fn(xv, cv, nv, mv, vv)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert np.asarray(g).shape == np.asarray(w).shape, i
        np.testing.assert_allclose(g, w, rtol=1e-14, err_msg=f"output {i}")


def test_the_compiled_function_against_literal_numbers() -> None:
    numba_fn, _ = compiled()
    got = numba_fn(1.0, 5.0, 2, np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]]), np.array([0.5, -1.5, 2.0]))
    want: list[Any] = [4.0, 8.0, 6.0, [[5.0, 10.0, 15.0], [-5.0, 2.5, 1.25]], [6.0, -0.25], 2.0, [1.5, -0.5, 3.0], [0.5, 2.5, -1.0], 1.0]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=1e-14, err_msg=f"output {i}")
    empty = numba_fn(6.0, 5.0, 0, np.zeros((0, 3)), np.zeros(3))
    assert [np.asarray(e).shape for e in empty[3:5]] == [(0, 0), (0,)]  # a map of no step: the static row shapes, 0 where unknown
    np.testing.assert_allclose(empty[:3], [6.0, 12.0, 6.0])
    np.testing.assert_allclose(empty[5], 4.0)  # c - 1: the else branch
