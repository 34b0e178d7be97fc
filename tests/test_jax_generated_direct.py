"""`innergraph.backends.jax_generated` called directly, fast (issue 47's mutation run).

The generator reads only a plan (`innergraph.protocol.plans`) and each body's JAX function,
so these tests hand `jax_loop`, `jax_branch` and `jax_once` plans written out literally and
bodies written as small ``jax.numpy`` functions, and run the result eagerly and under
``jax.jit`` (a traced count, bound or condition) against NumPy: counted loops of 0, 1 and
several steps, while loops with a pre-condition, a post-condition, a bound, each alone and
together (every bounded case also stops by its condition later, so that a fault ignoring
the bound changes a number rather than running forever), conditions at their boundary,
per-step outputs (rows no step writes, too few rows, an empty sequence, a number of rows
JAX cannot know when tracing), both branches of a conditional on a boolean and an integer
condition, a call, one result and several, the dtypes the results are cast to. Then
`jax_funcify_generated` on real nodes and on a loop planned with carries and per-step
outputs together, and `register_generated` and the dispatch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
import pytest
from pytensor.link.jax.dispatch import jax_funcify

from generated_registration import check_register_generated

import innergraph
import innergraph.backends.jax_generated as generated
from design.examples.map_rows import MapRows, map_rows
from innergraph.backends.jax_generated import jax_branch, jax_funcify_generated, jax_loop, jax_once, register_generated
from innergraph.core.graph import is_function
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.protocol.plans import BranchPlan, LoopPlan, OncePlan
from innergraph.protocol.slots import FORMS

Fn = Callable[..., Any]


def loop(**fields: Any) -> LoopPlan:
    """A loop plan: one body (0) reading the carry (input 1) and an invariant (input 2), no condition, no count, unless ``fields`` say otherwise."""
    base: dict[str, Any] = dict(
        n_inputs=3, functions=(0,), update=0, pre_condition=None, count=None, bound=None, sequences=(), carries=(1,),
        roles=((("carry", 0), ("input", 2)),), next_values=(0,), per_step=(), pre=None, post=None, results=(("carry", 0),),
    )
    return LoopPlan(**{**base, **fields})


def both(run: Fn, *inputs: Any, static: Sequence[int] = ()) -> Any:
    """``run(*inputs)`` eagerly and under ``jax.jit`` (``static``: the inputs that stay Python values): the eager result, once both agree."""
    eager = run(*inputs)
    jitted = jax.jit(run, static_argnums=tuple(static))(*inputs)
    for e, j in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted), strict=True):
        assert e.dtype == j.dtype and e.shape == j.shape
        np.testing.assert_array_equal(e, j)
    return eager


def a(value: Any, dtype: str = "float64") -> np.ndarray:
    return np.asarray(value, dtype=dtype)


# --- while loops: a pre-condition, a post-condition, a bound (bounded cases first) -------------

#: ``while_loop(lambda s: s < c, lambda s: s * 2.0, x, max_steps=limit)``: i0 the condition, i1 the
#: step, i2 the bound, i3 the carry, i4 ``c``; body 0 the pre-condition, body 1 the update
WHILE = LoopPlan(
    n_inputs=5, functions=(0, 1), update=1, pre_condition=0, count=None, bound=2, sequences=(), carries=(3,),
    roles=((("carry", 0), ("input", 4)), (("carry", 0), ("input", 4))), next_values=(0,), per_step=(), pre=0, post=1,
    results=(("carry", 0),),
)


def below(s: Any, c: Any) -> list[Any]:
    return [s < c]


def doubled(s: Any, c: Any) -> list[Any]:
    return [s * 2.0, s * 2.0 < c]


WHILE_FNS: dict[int, Fn] = {0: below, 1: doubled}


@pytest.mark.parametrize("x, c, limit, want", [
    (1.0, 100.0, 3, 8.0),  # the bound stops it (the condition would at 128)
    (1.0, 100.0, 1, 2.0),
    (1.0, 100.0, 0, 1.0),  # no step
    (1.0, 100.0, -1, 1.0),  # a negative bound: no step either (steps < bound, not steps != bound)
    (1.0, 5.0, 10, 8.0),  # the post-condition stops it
    (1.0, 8.0, 10, 8.0),  # 8 < 8 is false: the boundary stops it
    (5.0, 5.0, 10, 5.0),  # the pre-condition is false at the boundary: no step
])
def test_a_bounded_while_loop(x: float, c: float, limit: int, want: float) -> None:
    got = both(jax_loop(WHILE, WHILE_FNS, ["float64"]), None, None, a(limit, "int64"), a(x), a(c))
    assert float(got) == want and got.dtype == jnp.float64


def test_a_loop_with_a_pre_condition_only_runs_to_its_bound() -> None:
    plan = dataclasses.replace(WHILE, post=None)
    run = jax_loop(plan, {0: below, 1: lambda s, c: [s * 2.0]}, ["float64"])
    assert [float(both(run, None, None, a(n, "int64"), a(1.0), a(2.0))) for n in (0, 1, 3)] == [1.0, 2.0, 8.0]
    assert float(both(run, None, None, a(3, "int64"), a(2.0), a(2.0))) == 2.0  # read once, false: no step


def test_a_loop_with_a_bound_only_runs_its_bound() -> None:
    plan = loop(n_inputs=4, bound=3)
    run = jax_loop(plan, {0: lambda s, k: [s + k]}, ["float64"])
    assert [float(both(run, None, a(1.0), a(0.5), a(n, "int64"))) for n in (0, 1, 4)] == [1.0, 1.5, 3.0]


def test_a_counted_loop_with_conditions_stops_early_or_at_its_count() -> None:
    counted = dataclasses.replace(WHILE, count=2, bound=None)  # the number of steps where the bound was
    run = jax_loop(counted, WHILE_FNS, ["float64"])
    assert [float(both(run, None, None, a(n, "int64"), a(1.0), a(100.0))) for n in (0, 1, 3)] == [1.0, 2.0, 8.0]
    assert float(both(run, None, None, a(10, "int64"), a(1.0), a(5.0))) == 8.0
    assert float(both(run, None, None, a(10, "int64"), a(5.0), a(5.0))) == 5.0
    post = dataclasses.replace(counted, functions=(1,), update=0, pre_condition=None, pre=None, roles=(WHILE.roles[1],))
    run = jax_loop(post, {0: doubled}, ["float64"])
    assert [float(both(run, None, None, a(n, "int64"), a(6.0), a(5.0))) for n in (0, 1, 2)] == [6.0, 12.0, 12.0]
    pre = dataclasses.replace(counted, post=None)
    run = jax_loop(pre, {0: below, 1: lambda s, c: [s * 2.0]}, ["float64"])
    assert [float(both(run, None, None, a(n, "int64"), a(x), a(2.0))) for n, x in ((3, 1.0), (3, 2.0))] == [8.0, 2.0]


def test_a_while_loop_without_a_bound() -> None:
    run = jax_loop(dataclasses.replace(WHILE, bound=None), WHILE_FNS, ["float64"])
    assert float(both(run, None, None, None, a(0.75), a(100.0))) == 192.0
    assert float(both(run, None, None, None, a(100.0), a(100.0))) == 100.0


def test_a_do_while_loop_runs_its_first_step_whatever_its_condition() -> None:
    plan = dataclasses.replace(WHILE, functions=(1,), update=0, pre_condition=None, pre=None, bound=None, roles=(WHILE.roles[1],))
    run = jax_loop(plan, {0: doubled}, ["float64"])
    assert float(both(run, None, None, None, a(6.0), a(5.0))) == 12.0
    assert float(both(run, None, None, None, a(1.0), a(5.0))) == 8.0


# --- counted loops --------------------------------------------------------------------------


def test_a_counted_loop_without_conditions_casts_its_carries() -> None:
    plan = loop(n_inputs=4, count=1, carries=(2,), roles=((("carry", 0), ("input", 3)),))
    run = jax_loop(plan, {0: lambda s, k: [s * k + 1]}, ["float32"])
    for n, want in ((0, 0.5), (1, 2.0), (3, 11.0)):
        got = both(run, None, a(n, "int64"), a(0.5), a(2.0))
        assert got.dtype == jnp.float32 and float(got) == want


def test_several_carries_come_back_in_the_nodes_output_order() -> None:
    plan = loop(n_inputs=5, count=1, carries=(2, 3), roles=((("carry", 0), ("carry", 1), ("input", 4)),),
                next_values=(1, 0), results=(("carry", 1), ("carry", 0)))
    run = jax_loop(plan, {0: lambda p, q, k: [p + q, p * k]}, ["float64", "int64"])
    for n in range(4):
        wp, wq = 1.0, 2
        for _ in range(n):
            wp, wq = wp * 3.0, int(wp + wq)
        got = both(run, None, a(n, "int64"), a(1.0), a(2, "int64"), a(3.0))
        assert isinstance(got, tuple) and [float(g) for g in got] == [wq, wp] and got[0].dtype == jnp.int64


#: inputs: i0 the function, i1 the number of steps, i2 the sequence (rows of 2), i3 the carry,
#: i4 an invariant, i5 and i6 the per-step outputs' numbers of rows
COUNTED = LoopPlan(
    n_inputs=7, functions=(0,), update=0, pre_condition=None, count=1, bound=None, sequences=(2,), carries=(3,),
    roles=((("row", 0), ("carry", 0), ("input", 4)),), next_values=(0,), per_step=((1, 5), (2, 6)), pre=None, post=None,
    results=(("per_step", 0), ("carry", 0), ("per_step", 1)),
)


def counted_step(r: Any, x: Any, k: Any) -> list[Any]:
    """Next carry ``x + k * sum(r)``; rows ``[[r * k], [r - x]]`` (2 x 2) and how many entries of ``r`` are positive."""
    return [x + k * r.sum(), jnp.stack([r * k, r - x]), (r > 0).sum()]


def counted_reference(n: int, seq: np.ndarray, x: float, k: float, rows: tuple[int, int]) -> tuple[Any, ...]:
    first, second = np.zeros((rows[0], 2, 2)), np.zeros(rows[1], dtype="int32")
    for t in range(n):
        first[t] = np.stack([seq[t] * k, seq[t] - x])
        second[t] = (seq[t] > 0).sum()
        x = x + k * seq[t].sum()
    return first, x, second


SEQ = np.array([[0.5, -1.0], [2.0, 3.0], [-0.25, 0.125], [7.0, 7.0], [1.0, 1.0]])


def seq(n: int) -> Any:
    """The first ``n`` rows of `SEQ` as a JAX array, which JAX indexes by a traced step (made in the test: no JAX
    array at import, before the test process forks)."""
    return jnp.asarray(SEQ[:n])


@pytest.mark.parametrize("n, rows", [(0, (0, 0)), (0, (2, 3)), (1, (1, 1)), (3, (3, 3)), (3, (5, 4))])
def test_a_counted_loop_writes_its_per_step_outputs_row_by_row(n: int, rows: tuple[int, int]) -> None:
    run = jax_loop(COUNTED, {0: counted_step}, ["float64"], ["float32", "int32"])
    first, x, second = both(run, None, a(n, "int64"), seq(n), a(1.5), a(0.5), rows[0], rows[1], static=(5, 6))
    want = counted_reference(n, SEQ[:n], 1.5, 0.5, rows)
    assert first.shape == (rows[0], 2, 2) and first.dtype == jnp.float32 and second.dtype == jnp.int32
    np.testing.assert_allclose(first, want[0], rtol=1e-6)
    assert float(x) == want[1] and x.dtype == jnp.float64
    np.testing.assert_array_equal(second, want[2])


def test_per_step_outputs_with_fewer_rows_than_steps_or_rows_jax_cannot_know_are_value_errors() -> None:
    run = jax_loop(COUNTED, {0: counted_step}, ["float64"], ["float64", "int64"])
    with pytest.raises(ValueError, match=r"a per-step output has fewer rows \(2\) than the loop has steps \(3\)"):
        run(None, a(3, "int64"), seq(3), a(0.0), a(1.0), 2, 5)
    with pytest.raises(ValueError, match="JAX needs the number of rows of per-step output 1 known when the function is traced"):
        jax.jit(run, static_argnums=(5,))(None, a(3, "int64"), seq(3), a(0.0), a(1.0), 3, a(3, "int64"))


# --- conditionals and calls ----------------------------------------------------------------

#: ``ifelse(i0, (f(i3, i4), g(i3, i4)), (h(i5), k(i5)))``: then returns its outputs in order,
#: else swapped (its output 1 gives the node's output 0)
BRANCH = BranchPlan(n_inputs=6, functions=(1, 2), condition=0, roles=((3, 4), (5,)), outputs=((0, 1), (1, 0)))
BRANCH_FNS: list[Fn] = [lambda p, q: [p + q, p * q], lambda r: [r - 1.0, 10]]


@pytest.mark.parametrize("cond, want", [
    (a(True, "bool"), (5.0, 6)), (a(False, "bool"), (10.0, 6)),
    (a(2, "int64"), (5.0, 6)), (a(-1, "int64"), (5.0, 6)), (a(0, "int64"), (10.0, 6)),  # nonzero is true
])
def test_a_conditional_runs_one_branch_and_casts_its_outputs(cond: np.ndarray, want: tuple[float, int]) -> None:
    run = jax_branch(BRANCH, BRANCH_FNS, ["float64", "int32"])
    got = both(run, cond, None, None, a(2.0), a(3.0), a(7.0))
    assert isinstance(got, tuple) and (float(got[0]), int(got[1])) == want
    assert got[0].dtype == jnp.float64 and got[1].dtype == jnp.int32


def test_a_conditional_of_one_output_returns_it_bare() -> None:
    plan = BranchPlan(n_inputs=4, functions=(1, 2), condition=0, roles=((3,), (3,)), outputs=((0,), (1,)))
    run = jax_branch(plan, [lambda p: [p + 1.0], lambda p: [p, p - 1.0]], ["float64"])
    assert float(both(run, a(True, "bool"), None, None, a(2.0))) == 3.0
    assert float(both(run, a(False, "bool"), None, None, a(2.0))) == 1.0


def test_a_call_runs_its_body_once_and_casts_its_outputs() -> None:
    plan = OncePlan(n_inputs=4, function=0, roles=(2, 1), outputs=(1, 0))
    got = both(jax_once(plan, lambda p, q: [p - q, p / q], ["float32", "float64"]), None, a(4.0), a(2.0), None)
    assert isinstance(got, tuple) and [float(g) for g in got] == [0.5, -2.0] and got[0].dtype == jnp.float32
    one = OncePlan(n_inputs=2, function=0, roles=(1,), outputs=(0,))
    assert float(both(jax_once(one, lambda p: [p * 3], ["int64"]), None, a(2, "int64"))) == 6


# --- the conversion and the dispatch -----------------------------------------------------------

x, c = pt.dscalar("x"), pt.dscalar("c")
v = pt.dvector("v")
n = pt.lscalar("n")


def node_inputs(node: Any, givens: dict[Any, Any]) -> list[Any]:
    """The values of ``node``'s inputs for ``givens`` (the py linker's, as JAX arrays, as JAX's linker passes them), None for its functions."""
    data = [i for i in node.inputs if not is_function(i)]
    fn = pytensor.function(list(givens), data, mode=Mode(linker="py", optimizer="None"), on_unused_input="ignore")
    values = iter(fn(*givens.values()))
    return [None if is_function(i) else jnp.asarray(next(values)) for i in node.inputs]


def test_the_conversion_of_real_nodes() -> None:
    m = pt.dmatrix("m")
    givens = {x: 1.0, c: 5.0, n: 10, v: np.array([0.5, -1.5, 2.0]), m: np.array([[1.0, -2.0], [3.0, 4.0]])}
    called: Any = innergraph.call(lambda p, q: [p - q, (q * p).sum()], x, v)
    node = called[0].owner
    got = jax_funcify_generated(node.op, node)(*node_inputs(node, givens))
    assert [np.asarray(g).tolist() for g in got] == [[0.5, 2.5, -1.0], 1.0]
    for xv, want in ((1.0, 2.0), (5.0, 4.0)):
        branch: Any = innergraph.ifelse(x < c, x * 2.0, c - 1.0)
        node = branch.owner
        assert float(jax_funcify_generated(node.op, node)(*node_inputs(node, {**givens, x: xv}))) == want
    looped: Any = innergraph.while_loop(lambda s: s < c, lambda s: s * 2.0, x, max_steps=n)
    node = looped.owner
    assert float(jax_funcify_generated(node.op, node)(*node_inputs(node, givens))) == 8.0
    mapped: Any = map_rows(lambda r: [r * c, (r > 0).sum()], m)
    node = mapped[0].owner
    first, second = jax_funcify_generated(node.op, node)(*node_inputs(node, givens))
    np.testing.assert_array_equal(first, [[5.0, -10.0], [15.0, 20.0]])
    assert second.tolist() == [1, 2] and first.dtype == jnp.float64 and second.dtype == jnp.int64


def test_a_loop_with_carries_and_per_step_outputs_gets_each_results_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion reads only the plan: a loop planned with a carry between two per-step outputs, on a stand-in node."""
    fori: Any = innergraph.fori_loop(0, n, lambda i, s: s + 1.0, x)  # a registered loop's Op

    def var(dtype: str) -> Any:
        return SimpleNamespace(type=SimpleNamespace(dtype=dtype))

    node = SimpleNamespace(inputs=[counted_step, *(var(d) for d in ("int64", "float64", "float64", "float64", "int64", "int64"))],
                           outputs=[var("float32"), var("float64"), var("int32")])
    monkeypatch.setattr(generated, "loop_plan", lambda op, nd: COUNTED)
    monkeypatch.setattr(generated, "body_value", lambda f: f)
    monkeypatch.setattr(generated, "jax_body", lambda f: f)
    first, carry, second = jax_funcify_generated(fori.owner.op, node)(None, a(3, "int64"), seq(3), a(1.5), a(0.5), 3, 3)
    assert (first.dtype, carry.dtype, second.dtype) == (jnp.float32, jnp.float64, jnp.int32)
    reordered = dataclasses.replace(COUNTED, results=(("carry", 0), ("per_step", 1), ("per_step", 0)))
    monkeypatch.setattr(generated, "loop_plan", lambda op, nd: reordered)
    carry, second, first = jax_funcify_generated(fori.owner.op, node)(None, a(3, "int64"), seq(3), a(1.5), a(0.5), 3, 3)
    assert (first.dtype, carry.dtype, second.dtype) == (jnp.int32, jnp.float64, jnp.float64)


def test_register_generated_registers_a_form_with_semantics_only_and_keeps_a_class_own_conversion() -> None:
    check_register_generated(jax_funcify, register_generated, jax_funcify_generated)


def test_the_consumers_registered_before_the_module_loaded_get_generated_code() -> None:
    for cls in (WhileLoop, ForiLoop, IfElse, Call, MapRows):
        assert jax_funcify.registry.get(cls) is jax_funcify_generated, cls
